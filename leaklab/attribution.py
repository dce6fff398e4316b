"""Attributing a leak to a line: where was the memory that stayed alive allocated?

- CPU: :class:`~leaklab.measure.LiveTensorBytes` records the user frames that allocated each
  storage; storages allocated during the measured steps and still alive at the end are grouped
  by their innermost user frame.
- CUDA: the allocator's own history (``torch.cuda.memory._record_memory_history``) is recorded
  over the measured steps; blocks that carry a history (allocated in the window) and are still
  allocated at the end are grouped by their innermost frame outside torch.
- Host-heap leaks are autograd graph history, not tensors: for those we report the objects the
  step can reach whose autograd graph got longer, and by how many nodes.
"""

from __future__ import annotations

import gc
import linecache
import os
import types
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from leaklab.measure import _LIBRARY_DIRS, Probe
from leaklab.report import Site

_MAX_NODES = 200_000


@dataclass
class Watcher:
    device: str
    baseline_keys: set[int] = field(default_factory=set)
    graphs_before: dict[str, int] = field(default_factory=dict)
    snapshot_path: str | None = None


def start(probe: Probe, step: Callable[[], Any] | None = None, snapshot_path: str | None = None) -> Watcher:
    watcher = Watcher(probe.device, snapshot_path=snapshot_path)
    if probe.device == "cuda":
        torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    elif probe.tensors is not None:
        watcher.baseline_keys = probe.tensors.keys()
    if step is not None:
        watcher.graphs_before = _graph_holders(step)
    return watcher


def finish(watcher: Watcher, probe: Probe, step: Callable[[], Any]) -> tuple[list[Site], str | None]:
    """The sites of memory allocated since :func:`start` and still alive, largest first, and a
    line on growing autograd history reachable from the step (or None)."""
    if watcher.device == "cuda":
        sites = _cuda_sites(watcher)
    else:
        sites = _cpu_sites(watcher, probe)
    return sites, autograd_history(step, watcher.graphs_before)


def _is_user_file(filename: str) -> bool:
    return (
        not filename.startswith(_LIBRARY_DIRS)
        and not filename.startswith("<")
        and os.sep + "site-packages" + os.sep not in filename
        and os.sep + "lib" + os.sep + "python" not in filename
    )


def _make_sites(groups: dict[tuple[str, int, str], list[Any]]) -> list[Site]:
    sites = []
    for (filename, lineno, function), entries in groups.items():
        total = sum(nbytes for nbytes, _ in entries)
        stack = list(entries[0][1])
        code = linecache.getline(filename, lineno).strip()
        sites.append(Site(filename, lineno, function, total, len(entries), stack, code))
    sites.sort(key=lambda site: site.bytes, reverse=True)
    return sites


def _cpu_sites(watcher: Watcher, probe: Probe) -> list[Site]:
    if probe.tensors is None:
        return []
    groups: dict[tuple[str, int, str], list[Any]] = defaultdict(list)
    for key, entry in list(probe.tensors._storages.items()):
        if key in watcher.baseline_keys or entry.ref.expired() or not entry.site:
            continue
        groups[entry.site[0]].append((entry.nbytes, entry.site))
    return _make_sites(groups)


def _cuda_sites(watcher: Watcher) -> list[Site]:
    try:
        snapshot = torch.cuda.memory._snapshot()
        if watcher.snapshot_path:
            with open(watcher.snapshot_path, "wb") as handle:
                import pickle

                pickle.dump(snapshot, handle)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    groups: dict[tuple[str, int, str], list[Any]] = defaultdict(list)
    for segment in snapshot.get("segments", []):
        for block in segment.get("blocks", []):
            frames = block.get("frames") or []
            if block.get("state") != "active_allocated" or not frames:
                continue
            stack = tuple(
                (f["filename"], int(f["line"]), f["name"]) for f in frames if _is_user_file(f.get("filename", ""))
            )
            if stack:
                groups[stack[0]].append((int(block.get("requested_size") or block["size"]), stack))
    return _make_sites(groups)


# --------------------------------------------------------------------------- graph history
def count_graph_nodes(tensor: torch.Tensor) -> int:
    """Autograd nodes reachable from a tensor's ``grad_fn`` (capped at 200,000)."""
    root = tensor.grad_fn
    if root is None:
        return 0
    seen = {id(root)}
    stack = [root]
    while stack and len(seen) < _MAX_NODES:
        node = stack.pop()
        for next_node, _ in getattr(node, "next_functions", ()):
            if next_node is not None and id(next_node) not in seen:
                seen.add(id(next_node))
                stack.append(next_node)
    return len(seen)


def _graph_holders(step: Callable[[], Any], depth: int = 4, limit: int = 20_000) -> dict[str, int]:
    """Tensors with a graph that the step can reach, by a readable path, with their node count."""
    roots: list[tuple[str, Any]] = []
    code = getattr(step, "__code__", None)
    if code is not None and getattr(step, "__closure__", None):
        roots += [(name, cell.cell_contents) for name, cell in zip(code.co_freevars, step.__closure__, strict=False)
                  if _cell_filled(cell)]
    if code is not None:
        module_globals = getattr(step, "__globals__", {})
        roots += [(name, module_globals[name]) for name in code.co_names if name in module_globals]
    owner = getattr(step, "__self__", None)
    if owner is not None:
        roots.append(("self", owner))
    found: dict[str, int] = {}
    seen: set[int] = set()
    frontier = [(name, obj) for name, obj in roots]
    for _ in range(depth):
        next_frontier = []
        for path, obj in frontier:
            if id(obj) in seen or len(seen) > limit or isinstance(obj, (type, types.ModuleType)):
                continue
            seen.add(id(obj))
            if isinstance(obj, torch.Tensor):
                if obj.grad_fn is not None:
                    found[path] = count_graph_nodes(obj)
                continue
            if isinstance(obj, dict):
                children = [(f"{path}[{key!r}]", value) for key, value in list(obj.items())[:1000]]
            elif isinstance(obj, (list, tuple)):
                children = [(f"{path}[{i}]", value) for i, value in enumerate(obj[:1000])]
            elif hasattr(obj, "__dict__") and not isinstance(obj, torch.nn.Module) and not callable(obj):
                children = [(f"{path}.{key}", value) for key, value in vars(obj).items()]
            else:
                children = []
            next_frontier += children
        frontier = next_frontier
    return found


def _cell_filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def autograd_history(step: Callable[[], Any], before: dict[str, int] | None = None) -> str | None:
    """A line naming what the step keeps that holds a growing autograd graph, or None."""
    gc.collect()
    before = before or {}
    growth = {path: nodes - before.get(path, 0) for path, nodes in _graph_holders(step).items()}
    growing = {path: delta for path, delta in growth.items() if delta > 0}
    if not growing:
        return None
    path, delta = max(growing.items(), key=lambda item: item[1])
    more = f" (and {len(growing) - 1} more)" if len(growing) > 1 else ""
    return f"autograd history: {path} holds a graph that grew by {delta:,} nodes during the measured steps{more}"
