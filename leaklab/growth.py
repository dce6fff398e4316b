"""Naming what grows, for the resources that are not tensor memory: which Python types pile up
and what holds them (as objgraph's ``show_growth`` and ``find_backref_chain`` do), which threads
were started and what they run, what the new descriptors point to, which files are mapped.

A :class:`Census` is taken before and after a few extra steps run after the measured series
(like attribution's, so that what it keeps never shows in the verdicts); :func:`growth` turns
the two into lines per resource, largest first, each rate per step.
"""

from __future__ import annotations

import collections
import gc
import os
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any

from leaklab.measure import file_mappings

# The resources a census can name.
NAMEABLE = frozenset({"python_objects", "threads", "open_fds", "mapped_files", "mapped_file_bytes"})
# Lines kept per resource, and how far a holder chain is followed back.
MAX_LINES = 3
CHAIN_DEPTH = 6
_CONTAINERS = (list, dict, set, collections.deque, collections.OrderedDict, collections.defaultdict)


@dataclass
class Census:
    """What exists at one moment, for the resources that can be named."""

    types: collections.Counter[str] = field(default_factory=collections.Counter)
    ids: set[int] = field(default_factory=set)                        # every object the collector tracks
    sizes: dict[int, int] = field(default_factory=dict)               # container id -> len
    pinned: list[Any] = field(default_factory=list)                   # the containers, kept so ids stay theirs
    threads: dict[int, str] = field(default_factory=dict)             # ident -> "name running target"
    native_threads: collections.Counter[str] = field(default_factory=collections.Counter)
    fds: dict[int, str] = field(default_factory=dict)                 # fd -> what it points to
    mappings: dict[str, int] = field(default_factory=dict)            # path -> mappings


def _type_name(obj: Any) -> str:
    kind = type(obj)
    module = kind.__module__
    return kind.__qualname__ if module in ("builtins", None) else f"{module}.{kind.__qualname__}"


def _thread_line(thread: threading.Thread) -> str:
    target = getattr(thread, "_target", None)
    if target is None:
        return f"{thread.name!r}"
    name = getattr(target, "__qualname__", None) or _type_name(target)
    return f"{thread.name!r} running {name}"


def _native_threads() -> collections.Counter[str]:
    names: collections.Counter[str] = collections.Counter()
    try:
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/comm") as handle:
                    names[handle.read().strip()] += 1
            except OSError:
                continue
    except OSError:
        pass
    return names


def _fd_targets() -> dict[int, str]:
    found = {}
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            found[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    return found


def take(resources: set[str]) -> Census:
    """A census of what the named ``resources`` are made of (only what they need is read)."""
    census = Census()
    if "python_objects" in resources:
        gc.collect()
        own = {id(census.types), id(census.ids), id(census.sizes), id(census.pinned)}
        for obj in gc.get_objects():
            if id(obj) in own:
                continue
            census.types[_type_name(obj)] += 1
            census.ids.add(id(obj))
            if issubclass(type(obj), _CONTAINERS):  # not isinstance: a lazy module attribute warns on __class__
                census.sizes[id(obj)] = len(obj)
                census.pinned.append(obj)
    if "threads" in resources:
        census.threads = {t.ident: _thread_line(t) for t in threading.enumerate() if t.ident is not None}
        census.native_threads = _native_threads()
    if "open_fds" in resources:
        census.fds = _fd_targets()
    if "mapped_files" in resources or "mapped_file_bytes" in resources:
        census.mappings = file_mappings()
    return census


def _per_step(count: float, steps: int) -> str:
    rate = count / steps
    return f"{rate:,.0f}" if rate >= 10 or rate == int(rate) else f"{rate:,.1f}"


def _fd_kind(target: str) -> str:
    if target.startswith("socket:"):
        return "socket"
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("anon_inode:"):
        return target
    return os.path.dirname(target) + os.sep + "*" if os.sep in target else target


def _grouped(items: list[str], steps: int, unit: str) -> list[str]:
    counts = collections.Counter(items)
    return [f"+{_per_step(n, steps)} {unit}/step: {what}" for what, n in counts.most_common(MAX_LINES)]


def growth(before: Census, after: Census, steps: int, resources: set[str]) -> dict[str, list[str]]:
    """Per resource, what grew between the two censuses, per step, largest first."""
    found: dict[str, list[str]] = {}
    if "python_objects" in resources:
        found["python_objects"] = _object_growth(before, after, steps)
    if "threads" in resources:
        new = [line for ident, line in after.threads.items() if ident not in before.threads]
        lines = _grouped(new, steps, "thread(s)")
        if not new:  # threads Python did not start (a C library's pool): their names in /proc
            grew = after.native_threads - before.native_threads
            lines = [f"+{_per_step(n, steps)} native thread(s)/step named {name!r}" for name, n in grew.most_common(MAX_LINES)]
        found["threads"] = lines
    if "open_fds" in resources:
        new = [_fd_kind(target) for fd, target in after.fds.items() if before.fds.get(fd) != target]
        found["open_fds"] = _grouped(new, steps, "fd(s)")
    if "mapped_files" in resources or "mapped_file_bytes" in resources:
        grew = collections.Counter(after.mappings) - collections.Counter(before.mappings)
        by_place = collections.Counter()
        for path, n in grew.items():
            by_place[os.path.dirname(path) + os.sep + "*" if os.sep in path else path] += n
        lines = [f"+{_per_step(n, steps)} mapping(s)/step of {place}" for place, n in by_place.most_common(MAX_LINES)]
        for name in ("mapped_files", "mapped_file_bytes"):
            if name in resources:
                found[name] = lines
    return {name: lines for name, lines in found.items() if lines}


def _object_growth(before: Census, after: Census, steps: int) -> list[str]:
    ignore = {id(before.pinned), id(after.pinned)}
    lines = []
    grew = collections.Counter({name: n for name, n in (after.types - before.types).items() if n >= steps})
    for name, count in grew.most_common(MAX_LINES):
        sample = _new_object(name, before)
        held = describe_holders(sample, ignore) if sample is not None else ""
        lines.append(f"+{_per_step(count, steps)} {name}/step" + (f", held by {held}" if held else ""))
    # Objects the collector does not track (bytes, str, int, float) show only as containers that
    # keep getting longer (both censuses pin their containers, so an id is one container's).
    longer = []
    for container in after.pinned:
        old = before.sizes.get(id(container))
        if old is not None and len(container) - old >= steps:
            longer.append((len(container) - old, container))
    longer.sort(key=lambda item: -item[0])
    for added, container in longer[:MAX_LINES]:
        element = _last_element(container)
        what = _type_name(element) if element is not None else "item"
        if any(line.startswith(f"+{_per_step(added, steps)} {what}/") for line in lines):
            continue
        lines.append(f"+{_per_step(added, steps)} {what}/step in {describe_holders(container, ignore, include_self=True)}")
    return lines[:MAX_LINES]


def _last_element(container: Any) -> Any:
    try:
        if isinstance(container, dict):
            return next(reversed(container.values())) if container else None
        if isinstance(container, set):
            return next(iter(container)) if container else None
        return container[-1] if len(container) else None
    except (TypeError, IndexError, StopIteration, RuntimeError):
        return None


def _new_object(name: str, before: Census) -> Any:
    """An object of type ``name`` that did not exist at the first census."""
    for obj in reversed(gc.get_objects()):
        if id(obj) not in before.ids and _type_name(obj) == name:
            return obj
    return None


def _describe(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        # A script leaklab loaded is a module with a made-up name: its file says more.
        script = getattr(obj, "__file__", None) if obj.__name__.startswith("leaklab_script_") else None
        return f"module {obj.__name__}" if script is None else f"{os.path.basename(script)}"
    if isinstance(obj, types.FunctionType):
        return f"function {obj.__qualname__}"
    if isinstance(obj, _CONTAINERS):
        return f"a {type(obj).__name__} of {len(obj):,}"
    return f"a {_type_name(obj)}"


def _owner_attribute(container: Any, ignore: set[int]) -> tuple[Any, str] | None:
    """(owner, attribute) where ``container`` is an attribute of an object, a module's global or
    a closure's cell contents."""
    for referrer in gc.get_referrers(container):
        if id(referrer) in ignore:
            continue
        if isinstance(referrer, dict):
            key = next((k for k, v in referrer.items() if v is container), None)
            if key is None:
                continue
            for owner in gc.get_referrers(referrer):
                if id(owner) not in ignore and getattr(owner, "__dict__", None) is referrer:
                    return owner, str(key)
        if type(referrer).__name__ == "cell":
            for owner in gc.get_referrers(referrer):
                if isinstance(owner, tuple):
                    for function in gc.get_referrers(owner):
                        if isinstance(function, types.FunctionType) and function.__closure__ is owner:
                            return function, "<closure>"
    return None


def describe_holders(obj: Any, ignore: set[int] | None = None, include_self: bool = False) -> str:
    """A chain of what holds ``obj``, nearest first (``a list ← module m: .kept``), followed back
    through containers and attributes to a module, a function's closure or a named attribute;
    objects whose ids are in ``ignore`` (the censuses' own lists) are passed over."""
    ignore = {*(ignore or ()), id(sys._getframe())}
    chain = [_describe(obj)] if include_self else []
    current = obj
    for _ in range(CHAIN_DEPTH):
        named = _owner_attribute(current, ignore)
        if named is not None:
            owner, attribute = named
            where = (f"{_describe(owner)} ({attribute})" if attribute == "<closure>"
                     else f"{_describe(owner)}: .{attribute}")
            chain.append(where)
            if isinstance(owner, (types.ModuleType, types.FunctionType)):
                break
            current = owner
            continue
        holders = [r for r in gc.get_referrers(current)
                   if id(r) not in ignore and not isinstance(r, types.FrameType) and isinstance(r, (*_CONTAINERS, tuple))]
        if not holders:
            break
        current = holders[0]
        chain.append(_describe(current))
    return " ← ".join(chain)


__all__ = ["NAMEABLE", "Census", "describe_holders", "growth", "take"]
