"""Naming what grows: which containers the step can reach keep getting longer and with what,
which Python types pile up (as objgraph's ``show_growth`` does), which threads were started and
what they run, what the new descriptors point to, which files are mapped.

A :class:`Census` is taken before and after a few extra steps run after the measured series
(like attribution's, so that what it keeps never shows in the verdicts); :func:`growth` turns
the two into lines per kind, largest first, each rate per step. It stays cheap: the types are
counted among the objects made since the baseline (everything older is frozen, and the
collector does not list it), and containers are found by walking from the step, as attribution
names holders, never by searching every object's referrers.
"""

from __future__ import annotations

import collections
import gc
import math
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leaklab import resources as known
from leaklab.attribution import graph_sizes, reachable_tensors
from leaklab.chain import kind_of
from leaklab.measure import file_mappings
from leaklab.verdict import Filling, PlainData

_OWN = f"{__name__.split('.')[0]}."  # the types of the tool's own modules, as _type_name names them
# Lines kept per kind.
MAX_LINES = 3
# What gains in most of the steps between two censuses piles up: a cache keyed by a request's size
# gains an entry for every new size and none on a repeat (8 of 10 steps), and is still the leak.
MOST_STEPS = 0.5


def piles_up(gained: int, steps: int) -> bool:
    """Whether ``gained`` items over ``steps`` steps is a pile-up: more than :data:`MOST_STEPS` of them."""
    return gained > steps * MOST_STEPS


def kinds(resources: set[str]) -> set[str]:
    """What to take a census of, to name the growth of ``resources`` (each resource's
    :attr:`~leaklab.resources.Resource.census`: Python objects, their types and the containers
    that get longer, since a leak of tensors is a leak of Tensor objects kept somewhere; threads,
    descriptors, mappings)."""
    return {census for name in resources if (census := known.get(name).census)}


@dataclass
class Census:
    """What exists at one moment, for the resources that can be named."""

    types: collections.Counter[str] = field(default_factory=collections.Counter)   # objects made since the baseline
    sizes: dict[str, int] = field(default_factory=dict)                # container reachable from the step -> len
    containers: dict[str, Any] = field(default_factory=dict)           # path -> the container (second census only)
    ids: dict[str, int] = field(default_factory=dict)                  # path -> id() of the container
    bounds: dict[str, int] = field(default_factory=dict)               # path -> maxlen / maxsize, where bounded
    graphs: dict[str, int] = field(default_factory=dict)               # path -> autograd nodes of a reachable tensor
    tensor_bytes: dict[str, int] = field(default_factory=dict)         # path -> bytes of a reachable tensor's storage
    threads: dict[int, str] = field(default_factory=dict)             # ident -> "name running target"
    native_threads: collections.Counter[str] = field(default_factory=collections.Counter)
    fds: dict[int, str] = field(default_factory=dict)                 # fd -> what it points to
    mappings: dict[str, int] = field(default_factory=dict)            # path -> mappings


def _type_name(obj: Any) -> str:
    kind = type(obj)
    module = getattr(kind, "__module__", None)
    qualname = getattr(kind, "__qualname__", None)
    qualname = qualname if isinstance(qualname, str) else kind.__name__
    if not isinstance(module, str) or module == "builtins":  # a Cython metatype's is a descriptor
        return qualname
    # A script leaklab loaded is a module named leaklab_script_<stem>_<clock>: its stem says it.
    script = re.fullmatch(r"leaklab_script_(.+)_\d+", module)
    return f"{script.group(1) if script else module}.{qualname}"


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


def take(what: set[str], step: Callable[[], Any] | None = None, first: bool = True,
         collect: Callable[[], Any] = gc.collect) -> Census:
    """A census of ``what`` (see :func:`kinds`); only what it names is read. ``step``: the step
    whose reachable containers and autograd graphs are measured (for ``objects``), in one walk.
    The walk makes Python wrappers of autograd nodes, which must not count as the step's: the
    ``first`` census walks before counting the types, the second after. ``collect``: the garbage
    collection before the types are counted (a check's :meth:`leaklab.measure.Probe.collect`,
    which keeps what a program with its collector off would keep)."""
    census = Census()
    if "objects" in what:
        def walk() -> None:
            if step is not None:
                caches: dict[int, int | None] = {}
                reachable = reachable_tensors(step, containers=census.containers, bounds=caches)
                census.graphs = graph_sizes(reachable)
                census.tensor_bytes = {path: _storage_bytes(tensor) for path, tensor in reachable}
                del reachable
                census.sizes = {path: len(container) for path, container in census.containers.items()}
                census.ids = {path: id(container) for path, container in census.containers.items()}
                census.bounds = {path: bound for path, container in census.containers.items()
                                 if (bound := _bound(container, caches)) is not None}
                if first:
                    # The first census lives while the step runs on (through the confirmation
                    # pass): it must keep nothing alive, or it would hold what the step drops (a
                    # tuple holding a batch from a DataLoader's reorder buffer kept its shared
                    # memory, which then read as growth).
                    census.containers = {}

        if first:
            walk()
        collect()
        for obj in gc.get_objects():  # the frozen baseline is not listed: only what came since
            census.types[_type_name(obj)] += 1
        if not first:
            walk()
    if "threads" in what:
        census.threads = {t.ident: _thread_line(t) for t in threading.enumerate() if t.ident is not None}
        census.native_threads = _native_threads()
    if "descriptors" in what:
        census.fds = _fd_targets()
    if "mappings" in what:
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


def growth(before: Census, after: Census, steps: int, what: set[str]) -> dict[str, list[str]]:
    """Per kind of census (``objects``, ``threads``, ``descriptors``, ``mappings``), what grew
    between the two, per step, largest first."""
    found: dict[str, list[str]] = {}
    if "objects" in what:
        found["objects"] = _object_growth(before, after, steps)
    if "threads" in what:
        new = [line for ident, line in after.threads.items() if ident not in before.threads]
        lines = _grouped(new, steps, "thread(s)")
        if not new:  # threads Python did not start (a C library's pool): their names in /proc
            grew = after.native_threads - before.native_threads
            lines = [f"+{_per_step(n, steps)} native thread(s)/step named {name!r}" for name, n in grew.most_common(MAX_LINES)]
        found["threads"] = lines
    if "descriptors" in what:
        new = [_fd_kind(target) for fd, target in after.fds.items() if before.fds.get(fd) != target]
        found["descriptors"] = _grouped(new, steps, "fd(s)")
    if "mappings" in what:
        grew = collections.Counter(after.mappings) - collections.Counter(before.mappings)
        by_place: collections.Counter[str] = collections.Counter()
        for path, n in grew.items():
            by_place[os.path.dirname(path) + os.sep + "*" if os.sep in path else path] += n
        found["mappings"] = [f"+{_per_step(n, steps)} mapping(s)/step of {place}" for place, n in by_place.most_common(MAX_LINES)]
    return {kind: lines for kind, lines in found.items() if lines}


def _bound(container: Any, caches: dict[int, int | None]) -> int | None:
    """How many items ``container`` can hold by construction: a deque's ``maxlen``, an
    ``lru_cache``'s ``maxsize`` for its cache dict; None where it has no bound."""
    if isinstance(container, collections.deque):
        return container.maxlen
    return caches.get(id(container))


def _storage_bytes(tensor: Any) -> int:
    try:
        return int(tensor.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested or meta tensors have no one storage
        return 0


def larger_tensor(before: Census, after: Census, steps: int) -> tuple[str, float] | None:
    """The path of the reachable tensor whose storage got larger most between two censuses (a
    tensor each step's values are joined onto, replaced under the same name), with the bytes it
    gained a step; None where none gained a byte a step."""
    grew = {path: size - before.tensor_bytes[path] for path, size in after.tensor_bytes.items()
            if path in before.tensor_bytes}
    path, gained = max(grew.items(), key=lambda item: item[1], default=(None, 0))
    return (path, gained / steps) if path is not None and gained >= steps else None


def longer(before: Census, after: Census, steps: int) -> list[tuple[int, str]]:
    """The containers the step reaches that gained items in most steps between two censuses
    (:func:`piles_up`; the same container in both), as (items gained, path), most first."""
    return sorted(((after.sizes[path] - before.sizes[path], path) for path in after.sizes
                   if path in before.sizes and after.ids[path] == before.ids[path]
                   and piles_up(after.sizes[path] - before.sizes[path], steps)), reverse=True)


def gaining(before: Census, after: Census, steps: int) -> list[dict[str, Any]]:
    """The containers the step reaches that got longer, as data, most first: the path, the type
    and kind (:func:`leaklab.chain.kind_of`) of what each gains, and the items it gains a step.
    The families' rules read it (a module's hook dict gaining a function a step is a hook left
    registered, whatever the walk from what grew named)."""
    found = []
    for added, path in longer(before, after, steps)[:MAX_LINES]:
        element = _last_element(after.containers[path])
        found.append({"path": path, "gains": _type_name(element) if element is not None else "item",
                      "kind": kind_of(element) if element is not None else "object", "per_step": round(added / steps, 2)})
    return found


def _object_growth(before: Census, after: Census, steps: int) -> list[str]:
    """Containers the step reaches that got longer (with the type of what they gain), then the
    types that pile up that no such container explains."""
    lines, explained = [], set()
    for gain in gaining(before, after, steps):
        explained.add(gain["gains"])
        lines.append(f"+{_per_step(gain['per_step'] * steps, steps)} {gain['gains']}/step in {gain['path']} "
                     f"({_describe(after.containers[gain['path']])})")
    # The check's own objects (the tensor counter's entries, a census's) are not the step's growth.
    grew = collections.Counter({name: n for name, n in (after.types - before.types).items()
                                if piles_up(n, steps) and not name.startswith(_OWN)})
    for name, count in grew.most_common(MAX_LINES):
        if name not in explained:
            lines.append(f"+{_per_step(count, steps)} {name}/step")
    return lines[:MAX_LINES]


SHORT_TEXT = 256      # characters: a longer string is a payload, not a record
SMALL_RECORD = 16     # items: a tuple or dict of more is a payload, not a record


def is_plain(obj: Any, depth: int = 0) -> bool:
    """Plain data, what a training loop records: a number, a short string, or a small tuple or
    dict of them. Never a tensor, a callable, a module, a graph, bytes or a container of them."""
    kind = type(obj)
    if kind in (int, float, bool, complex, type(None)):
        return True
    if kind is str:
        return len(obj) <= SHORT_TEXT
    if kind in (tuple, dict) and depth < 2 and len(obj) <= SMALL_RECORD:
        items = [*obj.keys(), *obj.values()] if kind is dict else list(obj)
        return all(is_plain(item, depth + 1) for item in items)
    return False


def _plain_objects(obj: Any) -> int:
    """How many objects one record is (each a block of Python's object allocator, at most)."""
    inner = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else list(obj) if isinstance(obj, tuple) else []
    return 1 + sum(_plain_objects(item) for item in inner)


def _plain_bytes(obj: Any) -> int:
    """An estimate of what one record costs: the object, what it holds, and its slot (8 B)."""
    inner = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else list(obj) if isinstance(obj, tuple) else []
    return sys.getsizeof(obj) + sum(_plain_bytes(item) for item in inner) + 8


def plain_growth(before: Census, after: Census, steps: int) -> PlainData | None:
    """Where the Python objects that grew are all records of plain data added to containers the
    step reaches (a loss history of floats), what they are and their bytes per step; None where
    anything else grew (a type that piles up outside those containers, a container gaining
    anything but plain data), or nothing was seen."""
    lines, longer_ones = _object_growth(before, after, steps), longer(before, after, steps)
    if not longer_ones or len(lines) != len(longer_ones):
        return None  # nothing seen, or a line that no longer container explains: a type piling up
    cost = objects = 0.0
    for added, path in longer_ones:
        element = _last_element(after.containers[path])
        if element is None or not is_plain(element):
            return None
        cost += added / steps * _plain_bytes(element)
        objects += added / steps * _plain_objects(element)
    return PlainData("; ".join(lines), cost, objects)


def filling(before: Census, after: Census, steps: int) -> Filling | None:
    """Where every container that got longer is bounded by construction (a ``deque`` with
    ``maxlen``, an ``lru_cache`` with ``maxsize``), the slowest of them to fill and the steps until
    it is full at the rate it gained items; None where one is not, or none got longer. This only
    buys steps: the verdict comes from the series once they are full, so what grows elsewhere
    (a tensor's storage, an object no container the step reaches holds) still shows there."""
    longer_ones = longer(before, after, steps)
    if not longer_ones or any(path not in after.bounds for _, path in longer_ones):
        return None
    left, path = max((math.ceil((after.bounds[path] - after.sizes[path]) * steps / added), path)
                     for added, path in longer_ones)
    kind = "deque, maxlen" if isinstance(after.containers[path], collections.deque) else "lru_cache, maxsize"
    return Filling(f"{path} ({kind}={after.bounds[path]:,}, {after.sizes[path]:,} held)", max(left, 0))


def _last_element(container: Any) -> Any:
    try:
        if isinstance(container, dict):
            return next(reversed(container.values())) if container else None
        if isinstance(container, set):
            return next(iter(container)) if container else None
        return container[-1] if len(container) else None
    except (TypeError, IndexError, StopIteration, RuntimeError):
        return None


def _describe(obj: Any) -> str:
    if isinstance(obj, (list, dict, set, collections.deque)):
        return f"a {type(obj).__name__} of {len(obj):,}"
    return f"a {_type_name(obj)}"


__all__ = ["Census", "filling", "gaining", "growth", "is_plain", "kinds", "longer", "plain_growth", "take"]
