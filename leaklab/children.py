"""The child processes a step started: stopped when it is done with them. Those its factory
started and that outlive the step are the process's (a runtime's daemon: OpenMPI's ``orted``, which
``MPI_Init`` starts for a process that was not launched by ``mpirun``, and whose death ends that
process later with exit 195): they are named, and stopped when the interpreter exits. The folders
stopped children leave (multiprocessing's ``pymp-*``) go with them."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import time

import psutil

from leaklab.measure import live_children

_AT_EXIT: list[psutil.Process] = []


def _stop_at_exit() -> None:
    """Registered when leaklab is imported, before the libraries a factory imports: handlers run in
    the reverse order, so theirs (``MPI_Finalize``, which ends ``orted`` itself) run first."""
    alive = [child for child in _AT_EXIT if child.is_running()]
    for child in alive:
        try:
            child.terminate()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=2.0)


atexit.register(_stop_at_exit)


def describe(child: psutil.Process) -> str:
    """One child in a line: its pid and command (raises psutil.Error for one that is gone)."""
    return f"pid {child.pid}: {' '.join(child.cmdline())[:80] or child.name()}"


def leave_to_process(pids: set[int]) -> list[str]:
    """Children the factory started that still run after the step was released: left running until
    the interpreter exits, then stopped. Returns one line for each."""
    described = []
    for child in live_children():
        if child.pid in pids:
            try:
                described.append(describe(child))
            except psutil.Error:
                continue
            _AT_EXIT.append(child)
    return described


def stop_children(existing: set[int], wait: float = 10.0, grace: float = 2.0, quiet: float = 2.0) -> list[str]:
    """Give child processes the step started up to ``wait`` seconds to exit by themselves (the
    wait ends early once ``quiet`` seconds pass with none exiting: a shut-down worker exits in
    milliseconds, a ``sleep 600`` never); terminate those still running (then kill them after
    ``grace`` seconds). Returns one line for each child that had to be stopped."""
    deadline = time.monotonic() + wait
    quiet_until = time.monotonic() + quiet
    running = None
    while True:
        left = [p for p in live_children() if p.pid not in existing]
        if running is not None and len(left) < running:
            quiet_until = time.monotonic() + quiet
        running = len(left)
        now = time.monotonic()
        if not left or now > deadline or now > quiet_until:
            break
        time.sleep(0.05)
    described = []
    for child in left:
        try:
            described.append(describe(child))
            child.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(left, timeout=grace)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return described


def temp_folders() -> set[str]:
    """multiprocessing's temporary folders (``pymp-*``, one per process that needed one) now."""
    try:
        with os.scandir(tempfile.gettempdir()) as found:
            return {entry.path for entry in found if entry.name.startswith("pymp-") and entry.is_dir(follow_symlinks=False)}
    except OSError:
        return set()


def remove_left_folders(before: set[str]) -> list[str]:
    """Remove the ``pymp-*`` folders made since ``before`` that only a stopped process used: a
    DataLoader worker that passed a descriptor (multiprocessing's resource sharer listens on a socket
    in a folder of the worker's own) removes its folder when it exits by itself, not when the check
    stops it: one stopped check of a step that kept a loader per run left 35. A folder is removed
    only where every file in it is a socket that no live process is bound to (the folder is listed
    before the kernel's sockets are read, so one bound meanwhile is not in the list): an empty one,
    or one another process (another pytest worker's check) is still using, stays. Returns those removed."""
    left = {}
    for folder in sorted(temp_folders() - before):
        try:
            with os.scandir(folder) as found:
                files = [entry.path for entry in found]
            if files and all(stat.S_ISSOCK(os.lstat(path).st_mode) for path in files):
                left[folder] = files
        except OSError:
            continue
    bound = _bound_sockets() if left else set()  # read once, after every folder was listed
    if bound is None:  # no /proc/net/unix (not Linux): whose a socket is cannot be told, so nothing goes
        return []
    removed = [folder for folder, files in left.items() if not set(files) & bound]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def _bound_sockets() -> set[str] | None:
    """The paths of the Unix sockets bound now, by any process (/proc/net/unix); None where that
    table cannot be read."""
    try:
        with open("/proc/net/unix") as table:
            return {fields[7] for fields in (line.split() for line in table.readlines()[1:]) if len(fields) > 7}
    except OSError:
        return None
