"""Attributing a leak to a line: where was the memory that stayed alive allocated, and what
holds it?

Attribution watches a few extra steps after the measured series (recording stacks costs
memory that must not show in the verdicts), then:

- CPU: :class:`~leaklab.measure.LiveTensorBytes` records the user frames that allocated each
  storage; storages allocated in those steps and still alive at the end are grouped by their
  innermost user frame.
- CUDA: the allocator's own history (``torch.cuda.memory._record_memory_history``) is recorded
  over those steps; blocks that carry a history (allocated in the window) and are still
  allocated at the end are grouped by their innermost user frame.
- Either way, the objects the step can reach are walked to name the container that holds the
  blocks (a list filled by a hook, an lru_cache, a kept exception's frames).
- Host-heap leaks are autograd graph history, not tensors: for those we report the objects the
  step can reach whose autograd graph got longer, and by how many nodes.
"""

from __future__ import annotations

import base64
import collections
import functools
import gc
import json
import linecache
import pickle
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from leaklab.files import UnwritablePath, atomic_write, check_writable
from leaklab.measure import Probe, dense_parts, is_user_file, storage_key
from leaklab.verdict import format_bytes

_MAX_NODES = 200_000


@dataclass
class Site:
    """A source line where memory that stayed alive was allocated."""

    filename: str
    lineno: int
    function: str
    bytes: int
    count: int
    stack: list[tuple[str, int, str]] = field(default_factory=list)
    code: str = ""
    held_by: str = ""   # the container that keeps the blocks alive, as a path from the step

    def __str__(self) -> str:
        held = f", held by {self.held_by}" if self.held_by else ""
        return f"{self.filename}:{self.lineno} in {self.function}: {format_bytes(self.bytes)} in {self.count} block(s){held}"


@dataclass
class Watcher:
    device: str
    baseline_keys: set[int] = field(default_factory=set)
    graphs_before: dict[str, int] = field(default_factory=dict)
    snapshot_path: str | None = None
    snapshot_overwrite: bool = False
    snapshot_html: bool = False


def start(probe: Probe, step: Callable[[], Any] | None = None, snapshot_path: str | None = None, *,
          snapshot_overwrite: bool = False, snapshot_html: bool = False) -> Watcher:
    watcher = Watcher(probe.kind, snapshot_path=snapshot_path, snapshot_overwrite=snapshot_overwrite,
                      snapshot_html=snapshot_html)
    if probe.kind == "cuda":
        # The documented way to record allocation stacks (pytorch.org/docs/stable/torch_cuda_memory.html),
        # underscored though public in torch's own guide; likewise _snapshot() below.
        torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    elif probe.tensors is not None:
        watcher.baseline_keys = probe.tensors.keys()
        probe.tensors.record_sites = True
    if step is not None:
        watcher.graphs_before = graph_sizes(reachable_tensors(step))
    return watcher


def finish(watcher: Watcher, probe: Probe, step: Callable[[], Any]) -> tuple[list[Site], str | None]:
    """The sites of memory allocated since :func:`start` and still alive, largest first, and a
    line on growing autograd history reachable from the step (or None)."""
    if watcher.device == "cuda":
        sites, keys = _cuda_sites(watcher)
    else:
        sites, keys = _cpu_sites(watcher, probe)
        if probe.tensors is not None:
            probe.tensors.record_sites = False
    gc.collect()
    reachable = reachable_tensors(step)
    name_holders(sites[:5], keys[:5], holder_paths(reachable + saved_by_autograd(reachable), watcher.device))
    return sites, autograd_history(graph_sizes(reachable), watcher.graphs_before)


def _make_sites(groups: dict[tuple[str, int, str], list[Any]],
                steps: dict[tuple[str, int, str], set[int]] | None = None) -> tuple[list[Site], list[list[int]]]:
    """Sites and the storage identities of each site's blocks: first those whose live blocks
    come from the most attribution steps (``steps``: a leak keeps one from every step; the last
    step's gradients, alive but not leaked, come from one), then the largest."""
    made = []
    for (filename, lineno, function), entries in groups.items():
        total = sum(nbytes for nbytes, _, _ in entries)
        stack = list(entries[0][1])
        code = linecache.getline(filename, lineno).strip()
        kept_from = len(steps[filename, lineno, function]) if steps else 1
        made.append((kept_from, Site(filename, lineno, function, total, len(entries), stack, code),
                     [key for _, _, key in entries]))
    made.sort(key=lambda item: (item[0], item[1].bytes), reverse=True)
    return [site for _, site, _ in made], [keys for _, _, keys in made]


def _cpu_sites(watcher: Watcher, probe: Probe) -> tuple[list[Site], list[list[int]]]:
    if probe.tensors is None:
        return [], []
    groups: dict[tuple[str, int, str], list[Any]] = collections.defaultdict(list)
    steps: dict[tuple[str, int, str], set[int]] = collections.defaultdict(set)
    for key, entry in probe.tensors.live_items():
        if key in watcher.baseline_keys or not entry.site:
            continue
        groups[entry.site[0]].append((entry.nbytes, entry.site, key))
        steps[entry.site[0]].add(entry.step)
    probe.tensors.step = 0
    return _make_sites(groups, steps)


def _cuda_sites(watcher: Watcher) -> tuple[list[Site], list[list[int]]]:
    try:
        snapshot = torch.cuda.memory._snapshot()
        if watcher.snapshot_path:
            write_snapshot(snapshot, watcher.snapshot_path, overwrite=watcher.snapshot_overwrite,
                           html=watcher.snapshot_html)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    groups: dict[tuple[str, int, str], list[Any]] = collections.defaultdict(list)
    for segment in snapshot.get("segments", []):
        for block in segment.get("blocks", []):
            frames = block.get("frames") or []
            if block.get("state") != "active_allocated" or not frames:
                continue
            stack = tuple(
                (f["filename"], int(f["line"]), f["name"]) for f in frames if is_user_file(f.get("filename", ""))
            )
            if stack:
                groups[stack[0]].append((int(block.get("requested_size") or block["size"]), stack, int(block["address"])))
    return _make_sites(groups)


# --------------------------------------------------------------------------- snapshot files
# pytorch.org/memory_viz reads pickles up to protocol 4 (it rejects protocol 5, the default of
# Python 3.14); the HTML viewer embeds the same pickle.
SNAPSHOT_PROTOCOL = 4


def snapshot_paths(path: str | Path, html: bool = False) -> list[Path]:
    """The files ``--snapshot PATH`` writes: the pickle, and with ``html`` the viewer beside it."""
    path = Path(path)
    return [path] + ([path.with_suffix(".html")] if html else [])


def check_snapshot_paths(path: str | Path, overwrite: bool = False, html: bool = False) -> None:
    """Fail before a run (:class:`~leaklab.files.UnwritablePath`, one line) if the snapshot's
    files could not be written, or exist and ``overwrite`` was not given."""
    for target in snapshot_paths(path, html):
        try:
            check_writable(target, overwrite=overwrite)
        except UnwritablePath as exc:
            hint = "; pass --overwrite to replace it" if target.exists() and not overwrite else ""
            raise UnwritablePath(f"{exc}{hint}") from None


def snapshot_html(snapshot: dict[str, Any]) -> str | None:
    """memory_viz's page for a snapshot (``torch.cuda._memory_viz.trace_plot``: the snapshot is
    embedded, the viewer's script is loaded from a CDN when the page is opened), with the
    embedded pickle at protocol 4; None where this torch has no ``trace_plot``."""
    try:
        from torch.cuda._memory_viz import trace_plot  # private module: the only HTML writer torch has
    except ImportError:
        return None
    page = trace_plot(snapshot)
    # trace_plot pickles with Python's default protocol (5 from Python 3.14): embed ours instead,
    # padded to a multiple of 3 bytes as trace_plot does.
    buffer = pickle.dumps(snapshot, protocol=SNAPSHOT_PROTOCOL)
    buffer += b"\x00" * (3 - len(buffer) % 3)
    ours = json.dumps([{"name": "snapshot.pickle", "base64": base64.b64encode(buffer).decode()}])
    found = re.search(r'\[\{"name": "snapshot\.pickle", "base64": "[^"]*"\}\]', page)
    if found is None:  # a layout we do not know: keep torch's own page
        return page
    return page[:found.start()] + ours + page[found.end():]


def write_snapshot(snapshot: dict[str, Any], path: str | Path, *, overwrite: bool = False,
                   html: bool = False) -> list[Path]:
    """Write an allocator snapshot as a protocol-4 pickle (atomically; refusing to replace an
    existing file unless ``overwrite``), and with ``html`` the viewer page beside it. Returns
    the files written."""
    check_snapshot_paths(path, overwrite, html)
    targets = snapshot_paths(path, html)
    atomic_write(targets[0], pickle.dumps(snapshot, protocol=SNAPSHOT_PROTOCOL))
    if html:
        page = snapshot_html(snapshot)
        if page is None:
            return targets[:1]
        atomic_write(targets[1], page)
    return targets


# --------------------------------------------------------------------------- graph history
def graph_nodes(tensor: torch.Tensor) -> list[Any]:
    """Autograd nodes reachable from a tensor's ``grad_fn`` (at most 200,000).

    The set holds the node objects themselves, not their ids: a node's Python wrapper can be made
    afresh on each access and freed once dropped (torch 2.11 does), so an id can come back for
    another node, and a walk keyed by ids stopped after two nodes there (measured).
    """
    root = tensor.grad_fn
    if root is None:
        return []
    seen, stack = {root}, [root]
    while stack and len(seen) < _MAX_NODES:
        node = stack.pop()
        for next_node, _ in getattr(node, "next_functions", ()):
            if next_node is not None and next_node not in seen:
                seen.add(next_node)
                stack.append(next_node)
    return list(seen)


def count_graph_nodes(tensor: torch.Tensor) -> int:
    """Autograd nodes reachable from a tensor's ``grad_fn`` (capped at 200,000)."""
    return len(graph_nodes(tensor))


# The nodes a recurrence adds to what it keeps each step: a running sum (``total += loss``), and a
# moving average, which also scales what it keeps (``ema = 0.9 * ema + 0.1 * x``, ``lerp_``).
_SUM_NODES = frozenset({"AddBackward0", "AddBackward1", "SubBackward0", "SubBackward1"})
_SCALE_NODES = frozenset({"MulBackward0", "MulBackward1", "DivBackward0", "DivBackward1", "LerpBackward0", "LerpBackward1"})
SPINE_NODES = 8              # the spine read: a few steps of a recurrence of one or two nodes a step
SHAPE_MAX_NODES = 50_000     # a larger graph's shape is not read (its depths cost more than naming may)


def graph_shape(tensor: torch.Tensor) -> str | None:
    """What a kept tensor's growing graph is (a key of :data:`leaklab.chain.GRAPH_SHAPES`), read
    from its spine: the path from its ``grad_fn`` down through the deepest input each time, which
    runs back through every step's value to the first. A spine of additions alone is a running sum
    (a loss total), of additions and scalings a moving average; an average whose graph holds no
    node but those and the parameters' own (``AccumulateGrad``) averages parameters, not anything
    computed from them (an EMA of the weights). None for any other spine (an RNN's state, in-place
    writes into a buffer) or a graph of more than :data:`SHAPE_MAX_NODES` nodes."""
    def inputs(node: Any) -> list[Any]:
        return [n for n, _ in getattr(node, "next_functions", ()) if n is not None]

    root = tensor.grad_fn
    if root is None:
        return None
    depth: dict[Any, int] = {}  # every node's longest path down, by one post-order walk (a long spine overflows recursion)
    stack = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in depth:
            continue
        if not expanded:
            stack.append((node, True))
            stack.extend((n, False) for n in inputs(node) if n not in depth)
            continue
        depth[node] = 1 + max((depth.get(n, 0) for n in inputs(node)), default=0)
        if len(depth) > SHAPE_MAX_NODES:
            return None
    spine, node = [], root
    while node is not None and len(spine) < SPINE_NODES:
        spine.append(type(node).__name__)
        node = max(inputs(node), key=lambda n: depth.get(n, 0), default=None)
    if len(spine) < SPINE_NODES or not set(spine) <= _SUM_NODES | _SCALE_NODES:
        return None
    if set(spine) <= _SUM_NODES:
        return "sum"
    alone = {type(n).__name__ for n in depth} <= _SUM_NODES | _SCALE_NODES | {"AccumulateGrad"}
    return "parameters" if alone else "average"


def _roots(fn: Any) -> list[tuple[str, Any]]:
    """What a function can reach: its closure variables and the module globals it names."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    roots = [(name, cell.cell_contents) for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False)
             if _cell_filled(cell)]
    module_globals = getattr(fn, "__globals__", {})
    return roots + [(name, module_globals[name]) for name in _global_names(code) if name in module_globals]


def _global_names(code: types.CodeType) -> list[str]:
    """Names a code object uses, its comprehensions' and nested functions' included."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += [name for name in _global_names(const) if name not in names]
    return names


def _children(path: str, obj: Any) -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        items = list(obj.items())[:2000]
        # keys can hold tensors too (a memoising cache keyed by its tensor arguments)
        keys = [(f"{path}.keys()", key) for key, _ in items if not isinstance(key, (str, int, float, bytes))]
        return [(f"{path}[{key!r}]" if isinstance(key, (str, int)) else f"{path}[...]", value) for key, value in items] + keys
    if isinstance(obj, (list, tuple, collections.deque)):
        return [(f"{path}[{i}]", value) for i, value in enumerate(list(obj)[:2000])]
    if isinstance(obj, types.FunctionType):
        # a hook or callback: what it keeps is named from the function, not from where we found it
        return [(f"{obj.__name__}.{name}", value) for name, value in _roots(obj)]
    if isinstance(obj, functools._lru_cache_wrapper):
        # the C lru_cache exposes its cache only to the garbage collector
        caches = [ref for ref in gc.get_referents(obj) if isinstance(ref, dict) and ref is not getattr(obj, "__dict__", None)]
        return [(f"{obj.__name__}.cache", cache) for cache in caches] + [(f"{path}.__wrapped__", obj.__wrapped__)]
    if isinstance(obj, types.MethodType):
        return [(f"{path}.__self__", obj.__self__)]
    if isinstance(obj, BaseException):
        found, tb = [], obj.__traceback__
        while tb is not None:  # an exception kept alive keeps every frame of its traceback
            frame = tb.tb_frame
            found += [(f"{path}.__traceback__[{frame.f_code.co_name}].{name}", value) for name, value in frame.f_locals.items()]
            tb = tb.tb_next
        return found + [(f"{path}.{key}", value) for key, value in vars(obj).items()]
    # An instance's attributes, a callable one's too (a service or a metric with ``__call__``):
    # functions, methods and classes are walked above or not at all.
    if hasattr(obj, "__dict__") and isinstance(getattr(obj, "__dict__", None), dict):
        return [(f"{path}.{key}", value) for key, value in vars(obj).items()]
    return []


# A tensor's own hook dicts (a hook registered on a parameter lives there, not in a module).
_TENSOR_HOOKS = ("_backward_hooks", "_post_accumulate_grad_hooks")


def reachable_tensors(step: Callable[[], Any], depth: int = 12, limit: int = 50_000,
                      containers: dict[str, Any] | None = None,
                      bounds: dict[int, int | None] | None = None) -> list[tuple[str, torch.Tensor]]:
    """Tensors the step can reach (through closures, globals, containers, modules and their hooks,
    kept exceptions' frames), each with a readable path, breadth first; the containers met on the
    way (lists, dicts, deques, sets) are put in ``containers`` by path, where given, and the bound
    of each ``lru_cache``'s cache dict (its ``maxsize``) in ``bounds`` by the dict's id."""
    found: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    frontier = _roots(step)
    owner = getattr(step, "__self__", None)
    if owner is not None:
        frontier.append(("self", owner))
    for _ in range(depth):
        next_frontier = []
        for path, obj in frontier:
            if id(obj) in seen or len(seen) > limit or isinstance(obj, (type, types.ModuleType)):
                continue
            seen.add(id(obj))
            if isinstance(obj, torch.Tensor):
                found.append((path, obj))
                next_frontier += [(f"{path}.{name}", hooks) for name in _TENSOR_HOOKS
                                  if isinstance(hooks := getattr(obj, name, None), dict)]
                continue
            if containers is not None and isinstance(obj, (list, dict, set, collections.deque)):
                containers[path] = obj
            children = _children(path, obj)
            if bounds is not None and isinstance(obj, functools._lru_cache_wrapper):
                bounds.update((id(cache), obj.cache_parameters().get("maxsize")) for _, cache in children[:-1])
            next_frontier += children
        frontier = next_frontier
    return found


def saved_by_autograd(reachable: list[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
    """Tensors that the autograd graphs of ``reachable`` tensors keep for backward (a node's
    ``_saved_*`` attributes), each named after the tensor whose graph holds it: a running total
    that was never detached holds every step's activations this way."""
    found: list[tuple[str, torch.Tensor]] = []
    for path, tensor in reachable:
        for node in graph_nodes(tensor):
            for name in dir(node):
                if not name.startswith("_saved_"):
                    continue
                try:
                    value = getattr(node, name)
                except Exception:  # noqa: BLE001 - freed by an earlier backward(), or not a tensor slot
                    continue
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(item, torch.Tensor):
                        found.append((f"{path}.grad_fn (saved for backward)", item))
    return found


def graph_sizes(reachable: list[tuple[str, torch.Tensor]]) -> dict[str, int]:
    """Node counts of the reachable tensors that carry an autograd graph, by path."""
    return {path: count_graph_nodes(tensor) for path, tensor in reachable if tensor.grad_fn is not None}


def _container(path: str) -> str:
    """``hook.activations['hidden'][17]`` -> ``hook.activations['hidden'][*]``."""
    return re.sub(r"\[\d+\]", "[*]", path)


def holder_paths(reachable: list[tuple[str, torch.Tensor]], device: str) -> dict[int, list[str]]:
    """Storage identity (CPU: the storage's address key; CUDA: its data pointer) -> paths to it."""
    holders: dict[int, list[str]] = collections.defaultdict(list)
    for path, tensor in reachable:
        if tensor.device.type == "cpu" and device == "cpu":
            holders[storage_key(tensor)].append(path)
        elif tensor.device.type == "cuda" and device == "cuda" and (parts := dense_parts(tensor)):
            holders[parts[-1].untyped_storage().data_ptr()].append(path)  # sparse: its values
    return holders


def name_holders(sites: list[Site], keys_per_site: list[list[int]], holders: dict[int, list[str]]) -> None:
    """Fill each site's ``held_by`` with the container that keeps most of its blocks alive."""
    for site, keys in zip(sites, keys_per_site, strict=True):
        containers = collections.Counter(_container(path) for key in keys for path in holders.get(key, [])[:1])
        if containers:
            site.held_by = containers.most_common(1)[0][0]


def _cell_filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def autograd_history(sizes: dict[str, int], before: dict[str, int], steps: int = 0) -> str | None:
    """A line naming what the step keeps that holds a growing autograd graph, or None; with
    ``steps``, the growth is given per step, and only graphs that were there before count (a new
    tensor kept with its own graph is a container's growth, not a longer history)."""
    growth = {path: nodes - before.get(path, 0) for path, nodes in sizes.items() if not steps or path in before}
    growing = {path: delta for path, delta in growth.items() if delta > 0}
    if not growing:
        return None
    path, delta = max(growing.items(), key=lambda item: item[1])
    more = f" (and {len(growing) - 1} more)" if len(growing) > 1 else ""
    rate = f"by {delta / steps:,.0f} nodes/step" if steps else f"by {delta:,} nodes over the attribution steps"
    return f"autograd history: {path} holds a graph that grew {rate}{more}"
