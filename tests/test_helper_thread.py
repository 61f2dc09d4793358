"""incsched.helper_thread: a step started in a helper thread, collected later, abandoned by the clock."""

from __future__ import annotations

import threading
import time

import pytest

from incsched.helper_thread import Abandoned, run_in_helper, start_in_helper


def test_started_step_runs_while_the_caller_works_and_is_collected():
    began = threading.Event()
    release = threading.Event()

    def step():
        began.set()
        release.wait(5)
        return 42

    started = start_in_helper(step, "test step")
    assert began.wait(5)  # it runs before anyone waits for it
    release.set()
    assert started.wait() == 42


def test_errors_are_raised_in_the_waiting_thread():
    def step():
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        run_in_helper(step, "test step")


def test_the_clock_abandons_the_wait_and_the_step_goes_on():
    done = threading.Event()

    def step():
        time.sleep(0.3)
        done.set()
        return "late"

    t0 = time.perf_counter()
    with pytest.raises(Abandoned):
        start_in_helper(step, "test step").wait(should_stop=lambda: time.perf_counter() - t0 > 0.05)
    assert time.perf_counter() - t0 < 0.25
    assert done.wait(5)  # finished in the background
