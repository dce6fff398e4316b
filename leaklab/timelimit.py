"""A time limit on one step: a step that hangs ends the check instead of the check hanging."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from leaklab.children import stop_children
from leaklab.measure import live_children


def main_thread_signals() -> None:
    """Called first in a thread of the check's: Ctrl-C and SIGTERM are never delivered to it, so
    they reach the main thread, where Python raises them (a signal the kernel hands to another
    thread does not wake the main thread from a sleep in the step)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


class StepTimeout(BaseException):
    """Raised inside a step that ran past its time limit (a BaseException, like KeyboardInterrupt,
    so that a step's own ``except Exception`` cannot swallow it)."""


class TimeLimit:
    """Ends a step that runs past ``seconds``: SIGALRM raises :class:`StepTimeout` in it (main
    thread only; elsewhere there is no limit). A step stuck in C code sees the signal only when
    it returns to Python; with ``hard``, a watchdog thread then ends the process after a grace
    period, with one line and exit 3, once it has stopped the step's children."""

    GRACE = 10.0

    def __init__(self, seconds: float | None, hard: bool = False) -> None:
        self.seconds = seconds if threading.current_thread() is threading.main_thread() else None
        self.hard = hard and self.seconds is not None
        self._previous: Any = None
        self._deadline: float | None = None
        self._children: set[int] = set()
        self._done = threading.Event()  # the watchdog ends with the check: no thread of ours outlives it

    def __enter__(self) -> TimeLimit:
        if self.seconds:
            self._previous = signal.signal(signal.SIGALRM, self._expired)
        if self.hard:
            self._children = {p.pid for p in live_children()}
            threading.Thread(target=self._watch, name="leaklab-watchdog", daemon=True).start()
        return self

    def _expired(self, signum: int, frame: Any) -> None:
        raise StepTimeout(f"the step ran past its time limit of {self.seconds:g} s")

    def _watch(self) -> None:
        main_thread_signals()
        while not self._done.wait(0.5):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                stop_children(self._children, wait=0.0)
                print(f"leaklab: the step ran past its time limit of {self.seconds:g} s and did not return to Python "
                      f"for {self.GRACE:g} s more: stopped", file=sys.stderr, flush=True)
                os._exit(3)

    def arm(self) -> None:
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            if self.hard:
                self._deadline = time.monotonic() + self.seconds + self.GRACE

    def disarm(self) -> None:
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._deadline = None

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self.seconds:
            self.disarm()
            signal.signal(signal.SIGALRM, self._previous)
