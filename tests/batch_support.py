"""What the batch tests share: folders of generated graphs, and the processes below a pid
(read from /proc, Linux only), to find a batch's workers and check that none is left."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from incsched import save_graph
from incsched.batch import ProblemRecipe, SolveTask
from incsched.formats import graph_to_dict
from incsched.generators import layered_dag
from incsched.jsonio import json_bytes


def graph_folder(folder: Path, seeds, n_nodes: int, n_layers: int, param_bytes=(0, 1000), out_bytes=(1, 50)) -> Path:
    """``folder/g<seed>.json`` for each seed: layered DAGs named ``g<seed>``."""
    for seed in seeds:
        graph = layered_dag(n_nodes, n_layers=n_layers, param_bytes=param_bytes, out_bytes=out_bytes, seed=seed, name=f"g{seed}")
        save_graph(graph, folder / f"g{seed}.json")
    return folder


def slow_graph_folder(folder: Path, count: int = 3) -> Path:
    """Graphs that keep a worker busy for many seconds with the cold ILP (400 nodes, 8 stages)."""
    return graph_folder(folder, range(count), 400, 20, param_bytes=(0, 100_000), out_bytes=(1, 5000))


def slow_task(key: str, seconds: float) -> SolveTask:
    """A solve that keeps its worker busy for about ``seconds`` (the cold ILP on 400 nodes, 8 stages)."""
    graph = layered_dag(400, n_layers=20, param_bytes=(0, 100_000), out_bytes=(1, 5000), seed=0, name="big")
    return SolveTask(key, json_bytes(graph_to_dict(graph)), "big.json", ProblemRecipe("stage", n_stages=8),
                     {"method": "ilp", "time_limit": seconds})


def kill_once(find: Callable[[], Iterable[int]], delay: float) -> tuple[threading.Thread, list[int]]:
    """A started thread that SIGKILLs what ``find()`` names, once, ``delay`` seconds after it first
    names something (within a minute); join it, then read the pids it killed."""
    killed: list[int] = []

    def watch():
        deadline = time.time() + 60
        while time.time() < deadline and not killed:
            if list(find()):
                time.sleep(delay)
                for pid in find():
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.05)

    thread = threading.Thread(target=watch, name="kill-once")
    thread.start()
    return thread, killed


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def running(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def children(pid: int) -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and (_stat(int(d.name)) or ["", ""])[1] == str(pid)]


def descendants(pid: int) -> dict[int, str]:
    """pid -> command line of every live process below ``pid``."""
    found, frontier = {}, [pid]
    while frontier:
        for child in children(frontier.pop()):
            if child not in found and running(child):
                try:
                    found[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    continue
                frontier.append(child)
    return found


def wait_gone(pids, seconds: float) -> list[int]:
    """The pids still running after up to ``seconds``."""
    deadline = time.time() + seconds
    while time.time() < deadline and any(running(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if running(p)]


def interrupt(proc: subprocess.Popen, timeout: float) -> str:
    """Ctrl-C as a terminal sends it (to the whole process group) to a batch of 3 graphs none of
    which is done; checks that it says so and exits 130 without a traceback. Its stdout."""
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    assert "3 not done (interrupted)" in stdout
    return stdout
