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

__all__ = ["Abandoned", "run_in_helper"]

#: How often the waiting main thread asks ``should_stop``, in seconds.
POLL_SECONDS = 0.02


class Abandoned(Exception):
    """The wait ended (``should_stop`` said so) before the step finished."""


_HELPERS: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()  # every helper started, while referenced


def helpers_running() -> bool:
    """Whether an abandoned step still runs in a helper thread (e.g. the policy's torch import)."""
    return any(t.is_alive() for t in list(_HELPERS))


def run_in_helper(step: Callable[[], Any], name: str, should_stop: Callable[[], Any] | None = None) -> Any:
    """``step()``, run in a helper thread; its result, or its exception raised here.

    Raises `Abandoned` when ``should_stop()`` turns true first, and KeyboardInterrupt on Ctrl-C;
    either way the step goes on in the background.
    """
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = step()
        except BaseException as exc:  # handed to the waiting thread, as if raised there
            outcome["error"] = exc

    helper = threading.Thread(target=run, name=name, daemon=True)
    _HELPERS.add(helper)
    helper.start()
    while helper.is_alive():
        helper.join(None if should_stop is None else POLL_SECONDS)  # a Ctrl-C raises here
        if should_stop is not None and helper.is_alive() and should_stop():
            raise Abandoned(name)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
