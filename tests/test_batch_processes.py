"""`incsched batch --jobs 2` as a real process: its workers die with it on kill -9, and Ctrl-C
stops them, keeps what is written and exits 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batch_support import children, interrupt, slow_graph_folder, wait_gone

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
