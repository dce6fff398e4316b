"""What holds what grows: the chain of references from a root a user can name to the objects
that grew between two censuses (:mod:`leaklab.growth`).

The walk follows objgraph's ``find_backref_chain`` (``_find_chain``: breadth first over
``gc.get_referrers``, a parent per object, its own lists ignored), with three changes: one
``gc.get_referrers`` call per level for the whole frontier instead of one per object (each call
scans every object the collector tracks), a budget of time and objects, and roots that a user
can name instead of a predicate: a module global, a closure cell, an ``lru_cache``, a class
attribute, a thread's frame, a signal handler, the step itself. Frames of the running stack (the
check's own, the test runner's) and the tool's own objects are never followed.

The collector's frozen objects (everything alive at the baseline, see
:meth:`leaklab.measure.Probe.freeze_existing`) are invisible to ``gc.get_referrers``, and the
holder is usually one of them: the walk unfreezes them, and leaves them so (freezing again
would freeze what grew too, and the step's cycles would outlive the run; what follows the
naming in a check is the release check, which collects everything anyway).
"""

from __future__ import annotations

import functools
import gc
import multiprocessing.process
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types
import weakref
from collections.abc import Iterable
from typing import Any

from leaklab import growth
from leaklab.attribution import _global_names, graph_shape, reachable_tensors
from leaklab.chain import (
    FILE_MAPS,
    GRAPH_SHAPES,
    GRAPHS_ONLY,
    GROWN_IN_SIZE,
    MODULE_TABLES,
    OUTSIDE,
    PARAMETER,
    REWRAPPED,
    Chain,
    Link,
    bound_of,
    cell_filled,
    describe_tensor,
    fields,
    is_own,
    kind_of,
    links_down,
    make_link,
    read_file_maps,
    script_name,
    type_name,
)
from leaklab.resources import format_bytes

SECONDS = 0.5          # the walk's time budget per growing run, in the walking thread's CPU time
# CPU time, not the clock: on a busy machine a walk of the same objects takes longer by the clock,
# and the holder named (or "not found in time") would depend on the machine's load (a flake gate
# beside busy processes once saw a thread's holder go unnamed).
_clock = time.thread_time


MAX_OBJECTS = 20_000   # objects visited at most


MAX_DEPTH = 24         # links at most


SAMPLES = 8            # grown objects the walk starts from
MAX_FRONTIER = 256     # objects per level of the walk up


_OWN = __name__.split(".")[0]
_OWN_FOLDER = os.path.dirname(os.path.abspath(__file__)) + os.sep   # this package's own files


@functools.lru_cache(maxsize=4096)
def _own_file(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_OWN_FOLDER)


def own_frame(frame: types.FrameType) -> bool:
    """Whether a frame runs the tool's own code: a file of this package, not any path with a
    folder named like it (a clone of this repository is a folder named ``leaklab``, and a user's
    project may be one too: their frames are roots, not the tool's)."""
    return _own_file(frame.f_code.co_filename)


class _Roots:
    """What the walk stops at, found once per walk: module namespaces, signal handlers, the
    frames of live threads, and what the caller names (the step)."""

    def __init__(self, named: dict[int, str]) -> None:
        self.named = dict(named)
        self.modules: dict[int, str] = {}
        for name, m in list(sys.modules.items()):
            if isinstance(m, types.ModuleType) and not name.startswith(_OWN + ".") and name != _OWN:
                self.modules.setdefault(id(vars(m)), script_name(name))  # __main__ before its alias __mp_main__
        own = [vars(m) for name, m in list(sys.modules.items())
               if isinstance(m, types.ModuleType) and (name == _OWN or name.startswith(_OWN + "."))]
        self.own_modules = {id(d) for d in own}
        for number in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGUSR1", None), getattr(signal, "SIGHUP", None)):
            if number is None:
                continue
            try:
                handler = signal.getsignal(number)
            except (ValueError, OSError):
                continue
            if callable(handler) and getattr(handler, "__module__", "") != "signal":
                self.named.setdefault(id(handler), f"signal handler {signal.Signals(number).name}")
        # The running stack: the tool's frames are never followed; a caller's (a loop under
        # leaklab.watch) is a root, its local variables named.
        self.stack: set[int] = set()
        own = set()
        frame = sys._getframe()
        while frame is not None:
            (own if own_frame(frame) else self.stack).add(id(frame))
            frame = frame.f_back
        self.own_frames = own
        me = threading.get_ident()
        threads = {t.ident: t.name for t in threading.enumerate()}
        # Other threads' frames only: a local bound to this frame would tie it into a cycle with
        # itself, and with it every caller's frame up to the check's, the step in their locals.
        others = {ident: top for ident, top in sys._current_frames().items() if ident != me}
        self.thread_frames: dict[int, str] = {}
        for ident, frame in others.items():
            while frame is not None:
                self.thread_frames[id(frame)] = f"thread {threads.get(ident, ident)!r}"
                frame = frame.f_back
        # A running frame's locals are not shown to the collector (the interpreter owns them,
        # not the frame object): they are roots by the id of what they hold.
        self.locals: dict[int, tuple[str, str]] = {}
        frame = sys._getframe()
        while frame is not None:
            if id(frame) in self.stack and frame.f_code.co_name != "<module>":  # a module's are its globals
                self._locals(frame, "local variable", f"{frame.f_code.co_name}(): ")
            frame = frame.f_back
        for ident, frame in others.items():
            while frame is not None:
                self._locals(frame, "thread frame", f"thread {threads.get(ident, ident)!r} in {frame.f_code.co_name}(): ")
                frame = frame.f_back

    def _locals(self, frame: types.FrameType, what: str, prefix: str) -> None:
        try:
            names = dict(frame.f_locals)
        except Exception:  # noqa: BLE001 - a frame whose locals cannot be read names nothing
            return
        for name, value in names.items():
            self.locals.setdefault(id(value), (what, prefix + name))


def _root_name(obj: Any, child: Any, roots: _Roots) -> tuple[str, str] | None:
    """(what, name) where ``obj`` is a root a user can name, else None."""
    if id(obj) in roots.named:
        return "the step", roots.named[id(obj)]
    if isinstance(obj, dict) and id(obj) in roots.modules:
        key = next((k for k, v in obj.items() if v is child), "?")
        return "module global", f"{roots.modules[id(obj)]}.{key}"
    if isinstance(obj, types.CellType):
        return "closure cell", _cell_name(obj)
    if isinstance(obj, functools._lru_cache_wrapper):
        module = script_name(getattr(obj, "__module__", "") or "")
        return "lru_cache" + bound_of(obj), f"{module}.{getattr(obj, '__qualname__', '?')}".lstrip(".")
    if isinstance(obj, type) and not is_own(obj):
        key = next((k for k, v in vars(obj).items() if v is child), "?")
        return "class attribute", f"{script_name(obj.__module__)}.{obj.__qualname__}.{key}"
    if isinstance(obj, types.FrameType) and id(obj) in roots.stack:
        local = next((k for k, v in obj.f_locals.items() if v is child), "?")
        return "local variable", f"{obj.f_code.co_name}(): {local}"
    if isinstance(obj, types.FrameType) and id(obj) in roots.thread_frames:
        local = next((k for k, v in obj.f_locals.items() if v is child), "?")
        return "thread frame", f"{roots.thread_frames[id(obj)]} in {obj.f_code.co_name}(): {local}"
    return None


def _cell_name(cell: types.CellType) -> str:
    """``make_step.<locals>.history``: the variable of the function that made the closure."""
    for holder in gc.get_referrers(cell):
        if not isinstance(holder, tuple):
            continue
        for fn in gc.get_referrers(holder):
            if isinstance(fn, types.FunctionType) and fn.__closure__ is holder:
                name = fn.__code__.co_freevars[next(i for i, c in enumerate(holder) if c is cell)]
                outer = fn.__qualname__.rpartition(".<locals>.")[0] or fn.__qualname__
                return f"{outer}.<locals>.{name}"
    return "a closure cell"


def holder_chain(grown: Iterable[Any], named: dict[int, str] | None = None, ignore: Iterable[Any] = (),
                 seconds: float = SECONDS, max_objects: int = MAX_OBJECTS, max_depth: int = MAX_DEPTH,
                 seeds: list[tuple[str, str, Any]] | None = None, avoid: Iterable[Any] = ()) -> Chain:
    """The shortest chain from a nameable root to any of ``grown``, found breadth first over
    referrers within ``seconds`` and ``max_objects``. ``named``: id -> name of objects that are
    roots to the caller (the step). ``ignore``: objects never followed (the caller's census,
    lists that hold ``grown``). ``seeds``: (what, name, object) roots to search down from first
    (:func:`step_seeds`): a walk down from the step's own roots sees only what the step reaches,
    where each level of a walk up scans every object the collector tracks (0.15 s among the
    320,000 objects of a process that imported torch, measured). ``avoid``: objects the walk down
    never enters (a library's own registry, named only where the walk up finds nothing else)."""
    deadline = _clock() + seconds
    samples = list(grown)
    if not samples:
        return Chain([], "not found: nothing grew that Python can see")
    if seeds:
        found = _walk_down(samples, seeds, _clock() + seconds / 2, max_objects, {id(obj) for obj in avoid})
        if found is not None:
            return found
    gc.unfreeze()
    return _walk(samples, named or {}, [*ignore, grown], deadline, max_objects, max_depth)


def step_seeds(step: Any) -> list[tuple[str, str, Any]]:
    """The roots a step names: its closure's variables (``make_step.<locals>.model``), the
    globals its code names (``module.name``) and, for a bound method, its object."""
    seeds: list[tuple[str, str, Any]] = []
    owner = getattr(step, "__self__", None)
    fn = getattr(step, "__func__", step)
    code = getattr(fn, "__code__", None)
    if owner is not None:
        seeds.append(("the step", f"{_step_names(step)[id(owner)]}", owner))
    if code is None:
        return seeds
    outer = fn.__qualname__.rpartition(".<locals>.")[0] or fn.__qualname__
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        try:
            seeds.append(("closure cell", f"{outer}.<locals>.{name}", cell.cell_contents))
        except ValueError:
            continue
    module = script_name(getattr(fn, "__module__", "") or "")
    namespace = getattr(fn, "__globals__", {})
    names = _global_names(code)
    for name in names:
        value = namespace.get(name)
        if isinstance(value, types.ModuleType):  # logging.root, as the code reads it
            seeds += [("module global", f"{value.__name__}.{attr}", getattr(value, attr)) for attr in names
                      if attr != name and _plain(getattr(value, attr, None))]
        elif isinstance(value, type) and value.__module__ == fn.__module__:  # the script's own classes' methods
            seeds += [("module global", f"{module}.{value.__qualname__}.{attr}", method)
                      for attr, method in vars(value).items() if isinstance(method, types.FunctionType)]
        elif name in namespace and not isinstance(value, type):
            seeds.append(("module global", f"{module}.{name}", value))
    return seeds


def _plain(value: Any) -> bool:
    return value is not None and not isinstance(value, (types.ModuleType, type))


def _below(obj: Any) -> list[Any]:
    """What a walk down follows from ``obj``: what it refers to, but never into modules, classes
    or code, and from a function only its closure, defaults and the globals it names (a
    function's ``__globals__`` would lead into every library)."""
    if isinstance(obj, (types.ModuleType, type, types.CodeType)) or is_own(obj):
        return []
    if isinstance(obj, types.FunctionType):
        cells = [cell.cell_contents for cell in obj.__closure__ or () if cell_filled(cell)]
        namespace = obj.__globals__
        names = _global_names(obj.__code__)
        named = []
        for name in names:
            value = namespace.get(name)
            if isinstance(value, types.ModuleType):  # the module attributes the code reads
                named += [getattr(value, attr) for attr in names if attr != name and _plain(getattr(value, attr, None))]
            elif isinstance(value, type) and value.__module__ == obj.__module__:
                named += [v for v in vars(value).values() if isinstance(v, types.FunctionType)]  # its own classes' methods
            elif _plain(value):
                named.append(value)
        return [*cells, *(obj.__defaults__ or ()), *named]
    found = [x for x in gc.get_referents(obj) if not isinstance(x, (types.ModuleType, type, types.CodeType))]
    return found + _class_state(type(obj))


_SKIP_CLASS_STATE = (types.FunctionType, types.BuiltinFunctionType, classmethod, staticmethod, property,
                     str, bytes, int, float, bool, type(None), types.MemberDescriptorType, types.GetSetDescriptorType)


@functools.lru_cache(maxsize=1024)
def _class_state(kind: type) -> list[Any]:
    """What an instance reaches through its class: state kept on the class (``Logger.manager``,
    a class-level registry), not its methods. Cached per class."""
    if kind.__module__ == "builtins" or is_own(kind):
        return []
    found = []
    for klass in kind.__mro__:
        if klass.__module__ == "builtins":
            continue
        found += [value for name, value in vars(klass).items()
                  if not name.startswith("__") and not isinstance(value, _SKIP_CLASS_STATE + (type, types.ModuleType))]
    return found


def _walk_down(grown: list[Any], seeds: list[tuple[str, str, Any]], deadline: float, max_objects: int,
               avoid: frozenset[int] | set[int] = frozenset()) -> Chain | None:
    """Breadth first from ``seeds`` down to any of ``grown``, never through ``avoid`` (ids); None
    where none is reached."""
    targets = {id(obj) for obj in grown}
    up: dict[int, Any] = {}       # id -> the object above it
    keep: dict[int, Any] = dict.fromkeys(avoid)  # what was met (the avoided count as met, so never entered)
    frontier: list[Any] = []
    for what, name, obj in seeds:
        if id(obj) not in keep:
            keep[id(obj)] = obj
            up[id(obj)] = None
            frontier.append(obj)
            if id(obj) in targets:
                return Chain([Link(what, name, type_name(obj) + bound_of(obj), kind_of(obj))])
    seed_of = {id(obj): (what, name) for what, name, obj in reversed(seeds)}
    while frontier and _clock() < deadline and len(keep) < max_objects:
        next_frontier = []
        for source in frontier:
            if _clock() > deadline:
                return None
            for child in _below(source):
                if id(child) in keep:
                    continue
                keep[id(child)] = child
                up[id(child)] = source
                if id(child) in targets:
                    path = [child]
                    while up[id(path[-1])] is not None:
                        path.append(up[id(path[-1])])
                    path.reverse()
                    down = {id(a): b for a, b in zip(path, path[1:], strict=False)}
                    links = links_down(None, path[0], seed_of[id(path[0])], down, namespace=True)
                    # Named from the last global or closure variable on the way (a function the
                    # step calls reads logging.root: the chain starts there).
                    start = max((i for i, link in enumerate(links) if link.what in ("module global", "closure cell")),
                                default=0)
                    return Chain(links[start:])
                if len(keep) < max_objects:  # what is met is still checked; only what is walked is bounded
                    next_frontier.append(child)
        frontier = next_frontier
    return None


def _walk(grown: list[Any], named: dict[int, str], ignore: list[Any], deadline: float,
          max_objects: int, max_depth: int) -> Chain:
    roots = _Roots(named)
    parent: dict[int, Any] = dict.fromkeys(map(id, grown))   # id -> the object it refers to, towards what grew
    keep: dict[int, Any] = {id(obj): obj for obj in grown}  # the ids stay valid while walked
    frontier = list(grown)
    skip = roots.own_frames | {id(x) for x in ignore} | roots.own_modules
    skip |= {id(grown), id(parent), id(keep), id(ignore), id(roots.named)}
    # A closure cell is a root only as a last resort: the function it belongs to may be held by
    # a registry (torch.cuda's queued calls, a list of callbacks), and that is what the user keeps.
    # Where nothing in Python holds the function (atexit, signal, codecs, a C++ kernel registry),
    # the chain starts at the function, held outside Python.
    closure: Chain | None = None
    outside: Chain | None = None
    for depth in range(max_depth):
        if not frontier:
            break
        if depth:  # what grew may be the last step's local too: its holders are what count
            held = next((obj for obj in frontier if id(obj) in roots.locals), None)
            if held is not None:
                if closure is not None and isinstance(held, types.FunctionType):
                    return closure  # the user's own function: its cell names the variable
                return Chain(links_down(None, held, roots.locals[id(held)], parent))
        if _clock() > deadline or len(parent) > max_objects:
            return outside or closure or Chain([], _budget(deadline, len(parent)))
        skip.add(id(frontier))
        referrers = gc.get_referrers(*frontier)
        skip.add(id(referrers))
        wanted = {id(obj) for obj in frontier}
        referred: set[int] = set()
        next_frontier: list[Any] = []
        for source in referrers:
            if id(source) in skip or is_own(source):
                continue
            if isinstance(source, types.FrameType) and own_frame(source):
                continue
            if _weak_table(source):  # a weak dictionary's or set's table keeps nothing alive
                continue
            below = [x for x in gc.get_referents(source) if id(x) in wanted]
            if not below:
                continue
            referred.update(map(id, below))
            if id(source) in parent:
                continue
            child = below[0]
            parent[id(source)] = child
            keep[id(source)] = source
            if isinstance(source, types.CellType):  # named once (two scans of every object): the first is kept
                closure = closure or Chain(links_down(source, child, ("closure cell", _cell_name(source)), parent))
            else:
                root = _root_name(source, child, roots)
                if root is not None and closure is not None and isinstance(child, types.FunctionType):
                    return closure  # a function the user names (a variable, the step): its cell names it better
                if root is not None:
                    return Chain(links_down(source, child, root, parent))
            next_frontier.append(source)
        if outside is None:
            # A loop, not a generator expression: one would put ``parent`` in a closure cell,
            # which the walk would then find holding everything it walked.
            for orphan in frontier:
                name = _held_outside(orphan, parent) if id(orphan) not in referred else None
                if name is not None:
                    outside = Chain(links_down(orphan, parent[id(orphan)], (OUTSIDE, name), parent))
                    break
        # One gc.get_referrers call compares every referent of every object with each object
        # of the frontier, and cannot be stopped: a level is kept to its first objects.
        frontier = next_frontier[:MAX_FRONTIER]
        skip.add(id(next_frontier))
    last_resort = outside or closure
    if last_resort:
        return last_resort
    if frontier:
        return Chain([], _budget(deadline, len(parent)))
    return _graphs_only(grown) or Chain([], "not found: every path ends where Python cannot see (C++, the autograd graph)")


def _graphs_only(grown: list[Any]) -> Chain | None:
    """Where every path up from what grew ends in C++ and most of it is tensors that carry autograd
    graphs, the graphs are what keeps them (a cycle through a graph): the chain says so, with the
    tensor that grew. Tensors without a graph, or other objects, stay unexplained (a C registry)."""
    graphed = [obj for obj in grown if type_name(obj) in _TENSORS and obj.grad_fn is not None]
    if 2 * len(graphed) <= len(grown):
        return None
    return Chain([Link(GRAPHS_ONLY, "", "autograd graphs (C++): no Python root reaches what grew", "cycle"),
                  make_link(describe_tensor(graphed[0]), "", graphed[0])])


def _callback(obj: Any, parent: dict[int, Any]) -> bool:
    """Whether ``obj`` is a function that grew or was reached through its closure, or a bound
    method reached through its object: a callback whose holder, where Python shows none, is
    outside Python."""
    below = parent.get(id(obj))
    if isinstance(obj, types.FunctionType):
        return below is None or below is obj.__closure__
    return isinstance(obj, types.MethodType) and below is obj.__self__


def _held_outside(orphan: Any, parent: dict[int, Any]) -> str | None:
    """The name of a root outside Python, where ``orphan`` (nothing in Python refers to it) is one:
    a callback (:func:`_callback`), or a list holding the callable the walk came up through (the
    interpreter's own lists of registered functions, ``os.register_at_fork``'s and
    ``codecs.register``'s, are plain lists that only C refers to, of callables only). None otherwise:
    a list of classes, their dicts and tuples as well as functions is no registry (with the collector
    off, a list left in the step's garbage, which no root holds either)."""
    if _callback(orphan, parent):
        return _callable_name(orphan)
    if (type(orphan) is list and isinstance(parent.get(id(orphan)), (types.FunctionType, types.MethodType))
            and all(callable(item) and not isinstance(item, type) for item in orphan)):
        return (f"a list of {len(orphan)} callables held outside Python (os.register_at_fork, codecs.register, "
                "a C library's callbacks)")
    return None


def _callable_name(obj: Any) -> str:
    fn = getattr(obj, "__func__", obj)
    name = f"{script_name(getattr(fn, '__module__', '') or '')}.{getattr(fn, '__qualname__', '?')}".lstrip(".")
    return f"{name}, a callback held outside Python (atexit, signal, codecs, a C++ registry)"


def _weak_table(source: Any) -> bool:
    """Whether ``source`` is the table inside a ``WeakValueDictionary`` (weak values),
    ``WeakKeyDictionary`` (weak keys) or ``WeakSet``: its entries live only as long as what they
    point to, so it holds nothing that grows (multiprocessing's after-fork registry is one)."""
    try:
        if isinstance(source, dict) and source:
            key, value = next(iter(source.items()))
            return isinstance(value, weakref.ref) or isinstance(key, weakref.ref)
        if isinstance(source, set) and source:
            return isinstance(next(iter(source)), weakref.ref)
    except RuntimeError:  # changed size while looked at
        return False
    return False


def _budget(deadline: float, visited: int) -> str:
    if _clock() > deadline:
        return f"not found in time ({visited:,} objects walked)"
    return f"not found within {visited:,} objects"


_TENSORS = ("torch.Tensor", PARAMETER)


_PRIORITY = {kind: rank for rank, kind in enumerate(("tensor", "module", "optimizer", "thread", "file", "mapping",
                                                     "exception", "object", "callable"))}


def name_holder(before: Any, after: Any, steps: int, step: Any = None, ignore: Iterable[Any] = (),
                seconds: float = SECONDS) -> Chain | None:
    """:func:`find_holder`, which never fails a run: a user object that cannot be walked (a
    ``__getattr__`` that raises, a comparison that does) leaves the holder unnamed, and says why."""
    try:
        return find_holder(before, after, steps, step, ignore, seconds)
    except Exception as exc:  # noqa: BLE001 - the naming is ours, not asked for
        return Chain([], f"not found: the walk failed ({type(exc).__name__}: {str(exc)[:80]})")


def find_holder(before: Any, after: Any, steps: int, step: Any = None, ignore: Iterable[Any] = (),
                seconds: float = SECONDS) -> Chain | None:
    """The chain that holds what grew between two censuses of objects
    (:class:`leaklab.growth.Census`, the collector frozen since the baseline so that it lists
    only what came since): an autograd graph that got longer, held by a tensor the step reaches,
    first; else the types that piled up, tensors first, a few objects of each. None where
    nothing grew."""
    deadline = _clock() + seconds
    FILE_MAPS[0] = read_file_maps() if "mapping" in _census_kinds(before, after) else []
    named = _step_names(step)
    seeds = step_seeds(step) if step is not None else _caller_seeds()
    censuses = [*ignore, before, after]  # never walked: the census's own objects
    graph = _growing_graph(before, after, steps)
    if graph is not None and step is not None:
        path, per_step = graph
        tensor = _reachable_at(step, path)
        if tensor is not None:
            found = holder_chain([tensor], named, censuses, seconds=deadline - _clock(), seeds=seeds)
            shape = graph_shape(tensor)
            tail = Link("autograd graph", ".grad_fn", f"graph growing by {per_step:,.0f} nodes/step"
                        + (f", {GRAPH_SHAPES[shape]}" if shape else ""), "graph")
            return Chain([*found.links, tail] if found.found else [make_link("the step's reach", path, tensor), tail])
    # What a user keeps (tensors, models, threads, files) before what comes with it, then the
    # most; threads, descriptors or mappings first where those are what grew (a thread an
    # epoch is fewer than one a step, and still the leak).
    first = [kind for kind, grown in (("thread", set(after.threads) - set(before.threads)),
                                      ("file", set(after.fds) - set(before.fds)),
                                      ("mapping", sum(after.mappings.values()) > sum(before.mappings.values())))
             if grown]
    more = {name: n for name, n in (after.types - before.types).items() if not name.startswith(_OWN + ".")}
    objects = gc.get_objects()  # frozen since the baseline: only what came since is listed
    by_type: dict[str, list[Any]] = {name: [] for name in more}
    for obj in objects:
        name = type_name(obj)
        if name in by_type:
            by_type[name].append(obj)
    del objects
    grew = {name: n for name, n in more.items() if by_type[name]
            and (growth.piles_up(n, steps) or kind_of(by_type[name][-1]) in first)}
    if not grew:
        by_type.clear()
        return (_longer_container(before, after, steps, named, censuses, deadline, seeds)
                or _larger_tensor(before, after, steps, step, named, censuses, deadline, seeds))
    # A function wrapped again every step (each wrapper a closure over the one it replaced) piles up
    # cells and functions that only the newest wrapper reaches: named from the newest, where nothing
    # a user keeps (tensors, models, threads, files, mappings) grew beside it.
    wrapper = _rewrapped(by_type["function"]) if "function" in grew else None
    if wrapper is not None and not any(kind_of(by_type[name][-1]) in _KEPT for name in grew):
        chain = holder_chain([wrapper], named, [*censuses, by_type, *by_type.values()],
                             seconds=max(deadline - _clock(), 0.05), seeds=seeds)
        if chain.found:
            last = chain.links[-1]
            return Chain([*chain.links[:-1], Link(REWRAPPED, last.name, last.type, last.kind)])
    order = {kind: rank for rank, kind in enumerate(dict.fromkeys([*first, *_PRIORITY]))}
    # Among tensors, parameters first: where they pile up, models do, and a kept model is what the
    # user keeps (its optimizer's state, more tensors, comes with it and is nearer a registry's root).
    # A weak reference grows only because what it points to does, and keeps nothing: named last.
    ranked = sorted(grew, key=lambda name: (isinstance(by_type[name][-1], weakref.ref),
                                           order.get(kind_of(by_type[name][-1]), len(order)), name != PARAMETER,
                                           -grew[name]))[:3]
    chain = Chain([], "not found: nothing grew that Python can see")
    graphs_only: Chain | None = None
    current: Chain | None = None
    unboxed: Chain | None = None
    for name in ranked:
        found = by_type.pop(name)
        # A kept tensor with an autograd graph keeps more than itself (its graph's nodes): where
        # such tensors pile up, their holder is named (a logger's losses, not its accuracies).
        # Where a few carry one, they are the step's current state, not what grows (a pruned
        # layer's weight, recomputed every step from its mask, nearer the step's roots than the
        # masks piling up behind it): the walk starts from the others.
        if name == "torch.Tensor":
            piled = growth.piles_up(sum(getattr(obj, "grad_fn", None) is not None for obj in found), steps)
            found[:] = [obj for obj in found if (getattr(obj, "grad_fn", None) is not None) == piled] or found
        samples = found[-1:-SAMPLES * 4:-4] or found[-SAMPLES:]  # the newest, spread over the last steps
        found.clear()
        left = deadline - _clock()
        if left <= 0:
            break
        # by_type's lists of the other types that grew are the census's, not holders: never walked
        chain = holder_chain(samples, named, [*censuses, by_type, found, *by_type.values()], seconds=left,
                             seeds=seeds)
        if chain.found and chain.links[0].what == GRAPHS_ONLY:
            graphs_only = graphs_only or chain  # a last resort: another type's walk may name a root
        elif chain.found and name == PARAMETER and _structure_only(chain):
            current = current or chain  # a module's current parameters, not what piles up: the next type first
        elif chain.found and _unboxed(chain):
            # No container between a root and what grew: the step's current state (this step's
            # tensor in a closure cell, a generator's frame), which one object at a time cannot
            # explain piling up. A container the census saw gain that type every step does.
            boxed = _longer_container(before, after, steps, named, censuses, deadline, seeds, gains=name)
            if boxed is not None and boxed.found:
                return boxed
            unboxed = unboxed or chain
        elif chain.found:
            return chain
    return (_longer_container(before, after, steps, named, censuses, deadline, seeds) or graphs_only or current
            or unboxed or _larger_tensor(before, after, steps, step, named, censuses, deadline, seeds) or chain)


def _unboxed(chain: Chain) -> bool:
    """Whether the chain reaches what grew with no container on the way, from a root in Python
    (not a callback only C holds, nor an lru_cache named by its wrapper)."""
    return (chain.links[0].what != OUTSIDE and not chain.links[0].type.startswith("functools._lru_cache_wrapper")
            and not any(link.kind in ("container", "graph") for link in chain.links))


_KEPT = ("tensor", "module", "optimizer", "thread", "file", "mapping")


def _rewrapped(functions: list[Any]) -> Any | None:
    """The outermost of a chain of wrappers among ``functions``: closures over an older function of
    their own code (``old = f; f = wrap(old)`` every step), the one that no other wraps (where the
    chain is installed), or None."""
    def wrapped(function: Any) -> list[Any]:
        cells = getattr(function, "__closure__", None) or ()
        return [inner for cell in cells if cell_filled(cell) and isinstance(inner := cell.cell_contents, types.FunctionType)
                and inner.__code__ is function.__code__]
    code = next((f.__code__ for f in reversed(functions[-SAMPLES * 4:]) if wrapped(f)), None)
    if code is None:
        return None
    chain = [f for f in functions if getattr(f, "__code__", None) is code]
    inner = {id(g) for f in chain for g in wrapped(f)}
    return next((f for f in reversed(chain) if id(f) not in inner), None)


def _structure_only(chain: Chain) -> bool:
    """Whether the chain reaches what grew through modules' own tables alone (a model's
    ``._parameters``, ``._modules``): the parameters a model holds now, where parameters replaced
    every step pile up elsewhere (an optimizer's state keyed by the old ones)."""
    return not any(link.kind == "container" and not MODULE_TABLES.match(link.name) for link in chain.links[1:-1])


def process_owners(pids: Iterable[int]) -> list[Any]:
    """The objects that own the child processes ``pids``: multiprocessing's ``Process`` objects (a
    DataLoader's workers, a Pool's, a Manager's server) and ``subprocess.Popen``. They were
    usually made before the baseline, and frozen since: the collector is unfrozen first."""
    wanted = set(pids)
    gc.unfreeze()
    # type(), not isinstance(): an object's __class__ may be a property that warns (torch's reduce_op)
    return [obj for obj in gc.get_objects()
            if issubclass(type(obj), (multiprocessing.process.BaseProcess, subprocess.Popen)) and obj.pid in wanted]


def children_holder(pids: Iterable[int], step: Any = None, seconds: float = SECONDS) -> Chain:
    """What holds the child processes where the memory that grows is theirs: the chain from a
    root a user can name to the objects that own them (a DataLoader's iterator and its workers,
    a Manager, a Pool), found as :func:`holder_chain` finds what grew."""
    owners = process_owners(pids)
    if not owners:
        return Chain([], "not found: no Python object owns the child processes")
    seeds = step_seeds(step) if step is not None else _caller_seeds()
    # Walked down from the step's roots first, never through multiprocessing's own set of the
    # children it started (a step that calls multiprocessing.active_children() names it in two
    # links, where its DataLoader's iterator keeps the workers in three); where only that set
    # reaches them, the walk up names it as the root (started, never joined).
    return holder_chain(owners[:SAMPLES], _step_names(step), [owners], seconds=seconds, seeds=seeds,
                        avoid=[multiprocessing.process._children])


def _longer_container(before: Any, after: Any, steps: int, named: dict[int, str], ignore: list[Any],
                      deadline: float, seeds: list[tuple[str, str, Any]], gains: str | None = None) -> Chain | None:
    """The chain to the step's container that got longest (what it gains need not be tracked by
    the collector: bytes, numbers), with a link for what it gains; ``gains``: the longest of
    those that gain objects of that type."""
    longer_ones = [(added, path) for added, path in growth.longer(before, after, steps)
                   if gains is None or type_name(_last(after.containers[path])) == gains]
    if not longer_ones:
        return None
    _, path = longer_ones[0]
    container = after.containers[path]
    chain = holder_chain([container], named, [*ignore, after.containers], seconds=max(deadline - _clock(), 0.05),
                         seeds=seeds)
    if not chain.found:
        return chain
    element = _last(container)
    what = describe_tensor(element) if kind_of(element) == "tensor" else "grown"
    return Chain([*chain.links, make_link(what, "[*]", element)])


def _larger_tensor(before: Any, after: Any, steps: int, step: Any, named: dict[int, str], ignore: list[Any],
                   deadline: float, seeds: list[tuple[str, str, Any]]) -> Chain | None:
    """The chain to the step's tensor that got larger (no new object piles up: each step's values
    are joined onto one tensor kept under the same name), with a link that says by how much."""
    found = growth.larger_tensor(before, after, steps) if step is not None else None
    if found is None:
        return None
    path, per_step = found
    tensor = _reachable_at(step, path)
    if tensor is None:
        return None
    chain = holder_chain([tensor], named, ignore, seconds=max(deadline - _clock(), 0.05), seeds=seeds)
    grown = f"{GROWN_IN_SIZE} by {format_bytes(per_step)}/step"
    if not chain.found:  # the step's own reach names it: its path from the step's roots
        return Chain([Link(grown, path, type_name(tensor), "tensor")])
    last = re.search(r"(\.\w+|\[[^\[\]]*\])$", path)  # its own index (``[0]``), where the walk says ``[*]``
    return Chain([*chain.links[:-1], Link(grown, last.group(1) if last else chain.links[-1].name, chain.links[-1].type,
                                           "tensor")])


def _reachable_at(step: Any, path: str) -> Any:
    """The tensor the step reaches at ``path`` (a census's name for it), or None."""
    return next((tensor for found, tensor in reachable_tensors(step) if found == path), None)


def _last(container: Any) -> Any:
    try:
        if isinstance(container, dict):
            return next(reversed(container.values()))
        if isinstance(container, (set, frozenset)):
            return next(iter(container))
        return container[-1]
    except (TypeError, IndexError, StopIteration, RuntimeError, KeyError):
        return None


def _census_kinds(before: Any, after: Any) -> set[str]:
    return {"mapping"} if sum(after.mappings.values()) > sum(before.mappings.values()) else set()


def _caller_seeds() -> list[tuple[str, str, Any]]:
    """A watched loop's roots: the locals of the frames that run it (not the tool's)."""
    seeds: list[tuple[str, str, Any]] = []
    frame = sys._getframe()
    while frame is not None:
        if not own_frame(frame) and frame.f_code.co_name != "<module>":
            seeds += [("local variable", f"{frame.f_code.co_name}(): {name}", value)
                      for name, value in frame.f_locals.items()]
        frame = frame.f_back
    return seeds


def _step_names(step: Any) -> dict[int, str]:
    if step is None:
        return {}
    named = {id(step): getattr(step, "__qualname__", None) or type_name(step)}
    owner = getattr(step, "__self__", None)
    if owner is not None:
        named[id(owner)] = f"{getattr(step, '__qualname__', 'step').rpartition('.')[0] or type_name(owner)} (the step's self)"
    return named


def _growing_graph(before: Any, after: Any, steps: int) -> tuple[str, float] | None:
    """The path of the reachable tensor whose autograd graph grew most, and by how many nodes a
    step (graphs that were there before only: a new tensor kept with its own graph is a
    container's growth)."""
    grew = {path: nodes - before.graphs[path] for path, nodes in after.graphs.items() if path in before.graphs}
    path, delta = max(grew.items(), key=lambda item: item[1], default=(None, 0))
    return (path, delta / max(steps, 1)) if path is not None and delta >= steps else None


__all__ = ["fields", "find_holder", "holder_chain", "name_holder", "step_seeds"]
