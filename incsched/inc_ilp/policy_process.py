"""The learned policy decoded in a child process, for a run whose clock is too short to load it here.

Loading the policy in this process means reading its weights and compiling (or loading from
numba's cache) its decoder, and importing torch where the shipped ``.npz`` weights are missing: seconds
that cannot be cut short. A run whose clock is too short for the load (the rule's
`Tuning.policy_min_seconds`) would leave it behind in a helper thread, and a process that exits
while torch is still importing aborts ("terminate called without an active exception", exit 134,
seen with inc-ilp at time_limit=4). A child process loads on its own: a child still loading when
the run ends is simply killed.

    parent: problem ──JSON file──> child: load policy, decode ──answer JSON on stdout──> parent

Run as ``python -m incsched.inc_ilp.policy_process KIND PROBLEM.json SEED``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

from ..helper_thread import Abandoned
from ..problems import Placement

__all__ = ["PolicyProcess"]

#: How often a waiting run asks its clock, in seconds.
POLL_SECONDS = 0.02


class PolicyProcess:
    """The policy's answer to ``problem``, computed by a child process started now.

    `done` says whether it has finished; `wait` returns the answer (an int array of stages, or a
    `Placement`), raising `Abandoned` when ``should_stop`` turns true first; `cancel` kills it.
    """

    def __init__(self, kind: str, problem, seed: int):
        self.kind = kind
        fd, self._path = tempfile.mkstemp(prefix="incsched-policy-", suffix=".json")
        os.close(fd)
        problem.save(self._path)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "incsched.inc_ilp.policy_process", kind, self._path, str(int(seed))],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    @property
    def done(self) -> bool:
        return self._proc.poll() is not None

    def wait(self, should_stop: Callable[[], Any] | None = None):
        while self._proc.poll() is None:
            if should_stop is not None and should_stop():
                self.cancel()
                raise Abandoned(f"{self.kind} policy process")
            time.sleep(POLL_SECONDS)
        out, err = self._proc.communicate()
        self._cleanup()
        if self._proc.returncode != 0:
            last = (err.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"the {self.kind} policy process failed (exit {self._proc.returncode}): {last}")
        data = json.loads(out.strip().splitlines()[-1])
        if self.kind == "stage":
            return np.asarray(data["stages"], dtype=np.int64)
        return Placement.from_json(data["placement"], source="policy process")

    def cancel(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.communicate()
        self._cleanup()

    def _cleanup(self) -> None:
        try:
            os.unlink(self._path)
        except FileNotFoundError:
            pass


def main(argv: list[str] | None = None) -> int:
    """The child: read the problem, decode it with the shipped policy, print the answer as JSON."""
    kind, path, seed = argv or sys.argv[1:]
    if kind == "stage":
        from ..policy.stage_decoder import preschedule
        from ..problems import StageProblem

        stages = preschedule(StageProblem.load(path), int(seed))
        print(json.dumps({"stages": [int(s) for s in stages]}))
    else:
        from ..policy.placement_decoder import preschedule
        from ..problems import PlacementProblem

        print(json.dumps({"placement": preschedule(PlacementProblem.load(path), int(seed)).to_json()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
