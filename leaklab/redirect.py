"""Pointing a file descriptor elsewhere for a while: what Python, C code and child processes write
to it goes there, not only what goes through ``sys.stdout`` or ``sys.stderr``."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


def _flush(fd: int) -> None:
    """Python's own buffer for ``fd`` goes out to it now, before the descriptor changes."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            if stream is not None and stream.fileno() == fd:
                stream.flush()


@contextlib.contextmanager
def fd_pointed_at(fd: int, target: int) -> Iterator[None]:
    """Inside the block, file descriptor ``fd`` points at ``target`` (another descriptor, an open
    file's); restored on the way out, whatever happens. Python's buffers for ``fd`` are flushed on
    both sides, so text printed before the block goes where it went, and text printed in it goes
    to ``target``."""
    _flush(fd)
    saved = os.dup(fd)
    os.dup2(target, fd)
    try:
        yield
    finally:
        _flush(fd)
        os.dup2(saved, fd)
        os.close(saved)
