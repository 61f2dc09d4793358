"""`incsched batch --jobs 2` as a real process: its workers die with it on kill -9, and Ctrl-C
stops them, keeps what is written and exits 130; a worker killed under it is replaced and its
task run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batch_support import children, descendants, graph_folder, interrupt, kill_once, slow_graph_folder, slow_task, wait_gone
from incsched.batch import ProblemRecipe, SolveTask, solve_many

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the workers"),
    pytest.mark.slow,  # real worker processes, killed and interrupted
]

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def slow_batch(tmp_path):
    """A batch whose graphs each keep a worker busy for many seconds (ILP, 30 s limit)."""
    folder = slow_graph_folder(tmp_path / "graphs")
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "incsched.cli", "batch", str(folder), "-o", str(out), "--stages", "8", "--method", "ilp",
            "--time-limit", "30", "--jobs", "2"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and len(children(proc.pid)) < 2:
        time.sleep(0.1)
    workers = children(proc.pid)
    yield proc, workers, out
    if proc.poll() is None:
        proc.kill()
    for pid in workers:  # never leave a worker behind, whatever the test found
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_kill_9_takes_the_workers_with_it(slow_batch):
    proc, workers, out = slow_batch
    assert len(workers) == 2
    time.sleep(1.0)  # the workers are solving
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert wait_gone(workers, 5.0) == []
    assert not any(p.name.endswith(".result.json") for p in out.iterdir())  # nothing finished, nothing written


def test_ctrl_c_stops_the_workers_keeps_results_and_exits_130(slow_batch):
    proc, workers, out = slow_batch
    assert len(workers) == 2
    time.sleep(1.0)
    interrupt(proc, timeout=30)
    assert wait_gone(workers, 5.0) == []
    summary = json.loads((out / "batch.json").read_text())
    assert summary["interrupted"] is True and [it["outcome"] for it in summary["items"]] == ["interrupted"] * 3
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_local_worker_killed_mid_solve_is_retried_into_one_outcome(tmp_path):
    folder = graph_folder(tmp_path / "graphs", range(3), 12, 4)
    quick = [SolveTask(p.name, p.read_bytes(), p.name, ProblemRecipe("stage", n_stages=2), {"time_limit": 5}) for p in sorted(folder.iterdir())]
    tasks = [slow_task("big", 2.0), *quick]
    me = os.getpid()
    own = Path(f"/proc/{me}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    # the pool's workers are forks of this process: the same command line; whichever is killed
    # breaks the pool, and every task it held must still come back once, solved
    killer, killed = kill_once(lambda: [p for p, cmd in descendants(me).items() if cmd == own][:1], delay=1.0)
    got = list(solve_many(tasks, workers=2))
    killer.join()
    assert len(killed) == 1
    assert sorted(o.task.key for o in got) == sorted(t.key for t in tasks)
    assert [o.error for o in got] == [None] * len(tasks)
