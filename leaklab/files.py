"""Writing files so that nothing is lost: checked before a run starts, replaced atomically.

A results file is last week's baseline: a write that fails half-way (disk full, a file size
limit, an interrupt) must leave the old file as it was, never a truncated one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class UnwritablePath(ValueError):
    """An output path that cannot be written; raised before any work is done."""


def check_writable(path: str | os.PathLike[str], overwrite: bool = True) -> Path:
    """Fail now, with one line, if ``path`` could not be written later (its folder is missing and
    cannot be made, is not writable, or the path is a folder); with ``overwrite=False``, also if
    it exists already."""
    path = Path(path)
    if path.is_dir():
        raise UnwritablePath(f"{path} is a folder, not a file")
    if path.exists() and not overwrite:
        raise UnwritablePath(f"{path} exists already (refusing to overwrite it)")
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnwritablePath(f"cannot create the folder {folder}: {exc.strerror or exc}") from exc
    if path.exists() and not os.access(path, os.W_OK):
        raise UnwritablePath(f"{path} is not writable")
    why = _cannot_create_in(folder)
    if why:
        raise UnwritablePath(f"{path} is not writable: {why}")
    return path


def _cannot_create_in(folder: Path) -> str | None:
    """Why no file can be made in ``folder``, or None. Tried as :func:`atomic_write` will do it
    (a temporary file beside the target), not asked of os.access, which says yes to root in
    places where nothing can be created (/proc, a read-only mount)."""
    try:
        fd, temp = tempfile.mkstemp(prefix=".leaklab-check.", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.remove(temp)
    return None


def check_writable_dir(path: str | os.PathLike[str]) -> Path:
    """Fail now if files cannot be written into the folder ``path`` (made if missing)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnwritablePath(f"cannot create the folder {path}: {exc.strerror or exc}") from exc
    why = _cannot_create_in(path)
    if why:
        raise UnwritablePath(f"the folder {path} is not writable: {why}")
    return path


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, then rename it over
    ``path``: readers see the old file or the new one, never a part. On any failure the
    temporary file is removed and the old file is untouched; the error propagates."""
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(temp, path.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
