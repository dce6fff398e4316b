"""While a step is released: stop the DataLoader workers that torch is already shutting down.

When the garbage collector frees a DataLoader iterator (one kept in a reference cycle, such as an
exception's traceback), it can run the finalizers of the iterator's index queues, which stop
their feeder threads, before the iterator's ``__del__`` sends its workers the stop signal. The
signal then never leaves the parent, and ``_shutdown_workers`` waits
``MP_STATUS_CHECK_INTERVAL`` (5 s) in ``join`` for each worker before its ``finally`` terminates
it. That is torch's own order of work, and the harness's release would wait it out for every
such iterator (over a minute for ``dataloader_exception_workers``).

So while the step is dropped, a thread watches the releasing thread: once it has been inside one
iterator's ``_shutdown_workers`` for :data:`PATIENCE` and the signal cannot reach the workers
(:func:`_signal_lost`), that iterator's live workers are terminated, as torch's ``finally`` would
do seconds later. Workers the signal reached are left to exit by themselves: a terminated one
leaves its multiprocessing temp directory (``pymp-*``) behind. Nothing else is stopped: a worker of a
loader that is not shutting down is never touched here (the children a step leaves running are
counted after the release, as before). torch's SIGCHLD handler does not report a worker ended
by SIGTERM (torch 2.14.1; a test holds it), and were it to, it would raise inside that
``__del__``, where Python reports and drops the error.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from leaklab.timelimit import main_thread_signals

PATIENCE = 0.2   # seconds inside one iterator's shutdown before workers its stop signal cannot reach
                 # are stopped
POLL = 0.05


@contextlib.contextmanager
def stuck_workers_stopped() -> Iterator[list[int]]:
    """Within the block, workers of a DataLoader iterator stuck in its shutdown are terminated;
    yields the list of their pids, filled in as they are stopped."""
    stopped: list[int] = []
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(threading.get_ident(), done, stopped),
                               name="leaklab-release", daemon=True)
    watcher.start()
    try:
        yield stopped
    finally:
        done.set()
        watcher.join()


def _watch(thread: int, done: threading.Event, stopped: list[int]) -> None:
    main_thread_signals()
    waiting: Any = None
    since = 0.0
    while not done.wait(POLL):
        iterator = _shutting_down(sys._current_frames().get(thread))
        if iterator is not waiting:
            waiting, since = iterator, time.monotonic()
            continue
        if iterator is not None and time.monotonic() - since >= PATIENCE and _signal_lost(iterator):
            for worker in getattr(iterator, "_workers", ()):
                with contextlib.suppress(Exception):
                    if worker.is_alive():
                        worker.terminate()
                        stopped.append(worker.pid)
            waiting = None


def _signal_lost(iterator: Any) -> bool:
    """Whether the stop signal can no longer reach the iterator's workers: an index queue whose
    feeder thread has already ended (its finalizer ran first) keeps what is put in it. Where the
    signal left, the workers are exiting by themselves, which takes longer than :data:`PATIENCE`
    for a worker with a large heap or a batch still in hand: they are left to it (torch's own
    join timeout bounds the wait), so that each exits as it would without the check."""
    try:
        threads = [queue._thread for queue in iterator._index_queues]
    except Exception:  # noqa: BLE001 - a half-collected iterator: its signal cannot be sent either
        return True
    return any(thread is not None and not thread.is_alive() for thread in threads)


def _shutting_down(frame: FrameType | None) -> Any:
    """The DataLoader iterator whose ``_shutdown_workers`` the frame's thread is in, if any."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_shutdown_workers" and code.co_filename.endswith("dataloader.py"):
            return frame.f_locals.get("self")
        frame = frame.f_back
    return None
