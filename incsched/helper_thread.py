"""One step run in a helper thread while the main thread waits, interruptible and on the clock.

Some steps cannot be stopped half-way from Python: importing torch, compiling a numba decoder,
loading a policy. Run in the main thread, a Ctrl-C lands inside them (where it can corrupt a
half-done import or compile) and the user's clock waits for them to finish. Run in a helper
thread, which never receives signals, they finish or fail on their own while the main thread
waits: a Ctrl-C raises KeyboardInterrupt in the waiting main thread, and ``should_stop`` (the
run's clock) ends the wait. An abandoned step finishes in the background, in a daemon thread, so
that a program that exits does not wait for it.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

__all__ = ["Abandoned", "Started", "run_in_helper", "start_in_helper"]

#: How often the waiting main thread asks ``should_stop``, in seconds.
POLL_SECONDS = 0.02


class Abandoned(Exception):
    """The wait ended (``should_stop`` said so) before the step finished."""


_HELPERS: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()  # every helper started, while referenced


def helpers_running() -> bool:
    """Whether an abandoned step still runs in a helper thread (e.g. the policy's torch import)."""
    return any(t.is_alive() for t in list(_HELPERS))


class Started:
    """A step running in a helper thread (`start_in_helper`): `wait` for its result."""

    def __init__(self, step: Callable[[], Any], name: str):
        self.name = name
        self._outcome: dict = {}

        def run() -> None:
            try:
                self._outcome["value"] = step()
            except BaseException as exc:  # handed to the waiting thread, as if raised there
                self._outcome["error"] = exc

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        _HELPERS.add(self._thread)
        self._thread.start()

    def wait(self, should_stop: Callable[[], Any] | None = None) -> Any:
        """The step's result, or its exception raised here; `Abandoned` when ``should_stop()``
        turns true first, KeyboardInterrupt on Ctrl-C (either way the step goes on)."""
        while self._thread.is_alive():
            self._thread.join(None if should_stop is None else POLL_SECONDS)  # a Ctrl-C raises here
            if should_stop is not None and self._thread.is_alive() and should_stop():
                raise Abandoned(self.name)
        if "error" in self._outcome:
            raise self._outcome["error"]
        return self._outcome["value"]


def start_in_helper(step: Callable[[], Any], name: str) -> Started:
    """Start ``step()`` in a helper thread now and return at once; `Started.wait` collects it."""
    return Started(step, name)


def run_in_helper(step: Callable[[], Any], name: str, should_stop: Callable[[], Any] | None = None) -> Any:
    """``step()``, run in a helper thread; its result, or its exception raised here.

    Raises `Abandoned` when ``should_stop()`` turns true first, and KeyboardInterrupt on Ctrl-C;
    either way the step goes on in the background.
    """
    return start_in_helper(step, name).wait(should_stop)
