"""What forked worker processes make of their own, counted in blocks of Python's allocator.

A DataLoader worker's or a pool worker's own cache (memoized samples, kept results) grows inside
that process, where no census of this process can see it, and often slower than the workers'
unique memory creeps while they warm up (:data:`leaklab.resources.WORKER_MEMORY`'s floor): the check
called such leaks bounded. Counted in each worker, they stand out: a cache of a few objects a step
adds tens of blocks a step, a bounded worker none once warm (tools/worker_objects, results/worker-objects).

Every child that ``multiprocessing`` forks while a probe runs (DataLoader workers, ``Pool``,
``ProcessPoolExecutor``, a ``Manager``'s server) starts a daemon thread that, each time a reading
asks it (its number, down a named pipe of its own), writes how many blocks its Python allocator holds
beyond those it inherited (``sys.getallocatedblocks()``, as :data:`leaklab.resources.PYTHON_OBJECTS`
reads this process) into a file of its own; a reading sums the live children's answers. The step's code is not
touched: ``multiprocessing.util.register_after_fork`` runs the sampler in the child as it starts.
It never collects garbage in the child (that would hide a leak where the program turned the collector
off) and walks no object (that would copy the pages the child shares). Children started with spawn
or forkserver, and ``subprocess``, are not counted.
"""

from __future__ import annotations

import multiprocessing.util
import os
import shutil
import struct
import sys
import tempfile
import threading
import time

# A reading asks every child for its figure and waits this long at most for all of them; a child
# that did not answer in time (its interpreter busy in a long C call) counts with its last figure.
ANSWER_WITHIN = 0.05
_FIGURE = struct.Struct("<qq")  # the request answered, the blocks
_REQUEST = struct.Struct("<q")  # the request's number


class WorkerBlocks:
    """Installed for one probe: :meth:`start` before the factory forks anything, :meth:`read`
    after every step, :meth:`stop` when the probe ends (the folder and its files go)."""

    def __init__(self) -> None:
        self.folder: str | None = None
        self._asked = 0

    def start(self) -> None:
        self.folder = tempfile.mkdtemp(prefix=f"leaklab-workers-{os.getpid()}-")  # whose, should one be left
        # register_after_fork keeps its object by a weak reference: this one lives as long as the probe.
        multiprocessing.util.register_after_fork(self, _start_sampler)

    def read(self, pids: list[int]) -> int:
        """The blocks the live children ``pids`` made since they were forked, counted by each one
        when asked, now: a figure sampled on a timer lagged its worker by a step or more, and the
        lag made steady growth look stalled."""
        if self.folder is None:
            return 0
        self._asked += 1
        waiting = {pid for pid in pids if self._ask(pid)}
        figures: dict[int, int] = {}
        deadline = time.monotonic() + ANSWER_WITHIN
        while waiting and time.monotonic() <= deadline:
            for pid in list(waiting):
                figure = self._answer(pid)
                if figure is not None:
                    figures[pid] = figure
                    waiting.discard(pid)
            if waiting:
                time.sleep(0.0002)
        return sum(figures.values()) + sum(self._answer(pid, last=True) or 0 for pid in waiting)

    def _ask(self, pid: int) -> bool:
        try:
            fd = os.open(os.path.join(self.folder or "", f"{pid}.ask"), os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # not forked by multiprocessing while the probe ran, or not listening yet
            return False
        try:
            os.write(fd, _REQUEST.pack(self._asked))  # under PIPE_BUF: written whole or not at all
        except OSError:  # its pipe is full: it has not read the last requests (it is busy)
            pass
        finally:
            os.close(fd)
        return True

    def _answer(self, pid: int, last: bool = False) -> int | None:
        """The child's figure where it answered this request (or, ``last``, whatever it last
        answered); None where it has not. A figure may be negative: a child that dropped objects it
        inherited holds fewer blocks than it started with."""
        try:
            fd = os.open(os.path.join(self.folder or "", str(pid)), os.O_RDONLY)
        except OSError:
            return None
        try:
            data = os.pread(fd, _FIGURE.size, 0)
        finally:
            os.close(fd)
        if len(data) != _FIGURE.size:
            return None
        answered, blocks = _FIGURE.unpack(data)
        return blocks if last or answered >= self._asked else None

    def stop(self) -> None:
        folder, self.folder = self.folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _start_sampler(blocks: WorkerBlocks) -> None:
    """In the forked child: a daemon thread (it ends with the child) that counts its blocks each
    time the probe asks, through a named pipe of its own."""
    folder = blocks.folder
    if folder is None:
        return
    inherited = sys.getallocatedblocks()
    path, pipe = os.path.join(folder, str(os.getpid())), os.path.join(folder, f"{os.getpid()}.ask")
    try:
        os.mkfifo(pipe, 0o600)
        listening = os.open(pipe, os.O_RDWR)  # read-write: open returns at once, and reads wait for requests
    except OSError:
        return

    def answer() -> None:
        while True:
            try:
                requests = os.read(listening, 4096)  # all waiting: the last is the one to answer
                asked = _REQUEST.unpack(requests[len(requests) - _REQUEST.size:])[0]
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            except OSError:  # the probe ended and took the folder
                return
            try:
                os.pwrite(fd, _FIGURE.pack(asked, sys.getallocatedblocks() - inherited), 0)
            finally:
                os.close(fd)

    threading.Thread(target=answer, name="leaklab-worker-blocks", daemon=True).start()
