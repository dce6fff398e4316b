"""A holder chain: the links from a root a user can name down to what grew, each with what it
is to the one above it, its name, its type and its kind (what the families' rules read, see
:mod:`leaklab.families`); how each link is named from the two objects it joins (after objgraph's
``_edge_label``); and what a kept tensor brings along. The walks that find a chain are in
:mod:`leaklab.holders`."""

from __future__ import annotations

import collections
import functools
import io
import mmap
import re
import socket
import sys
import threading
import types
from dataclasses import asdict, dataclass, field
from typing import Any

_OWN = __name__.split(".")[0]


@dataclass(frozen=True)
class Link:
    """One object of a chain: ``what`` it is to the one before it (a module global, a closure
    cell, an attribute, an item, ...), its ``name`` (``step.<locals>.history``, ``.state``,
    ``['loss']``) and its ``type``."""

    what: str
    name: str
    type: str
    kind: str = ""   # what kind_of says (tensor, module, container, value, ...); "graph" for an autograd graph

    def __str__(self) -> str:
        return f"{self.name} ({self.type})" if self.name else self.type


@dataclass
class Chain:
    """Root first, what grew last. ``missing``: why no nameable root was found (the walk ran out
    of time or objects, or every path ended where Python cannot see); None where one was."""

    links: list[Link] = field(default_factory=list)
    missing: str | None = None

    @property
    def found(self) -> bool:
        return self.missing is None and bool(self.links)

    def to_json(self) -> list[dict[str, str]]:
        return [asdict(link) for link in self.links]

    def short(self) -> str:
        """The root, and the container nearest what grew where that is not the root, as the
        one-line summary names them: ``make_step.<locals>.model (Net) -> ._forward_hooks (OrderedDict)``."""
        if not self.found:
            return f"holder {self.missing}"
        boxes = [link for link in self.links[1:-1] if link.kind == "container" and link.name]
        return f"{self.links[0]} -> {boxes[-1]}" if boxes else str(self.links[0])

    def __str__(self) -> str:
        text = " -> ".join(str(link) for link in self.links)
        return f"{text} ({self.missing})" if self.missing else text


# What a growing autograd graph is, read from its spine (leaklab.attribution.graph_shape), as the
# graph's link says it ("graph growing by 24 nodes/step, a running sum") and a signature keeps it.
GRAPH_SHAPES = {"sum": "a running sum", "average": "a moving average",
                "parameters": "a moving average of parameters alone"}


def graph_shape_of(link_type: str) -> str | None:
    """The shape a graph's link names (:data:`GRAPH_SHAPES`), or None where it names none."""
    return next((shape for shape, words in GRAPH_SHAPES.items() if link_type.endswith(f", {words}")), None)


def chain_from_json(links: list[dict[str, str]] | None, missing: str | None = None) -> Chain:
    return Chain([Link(**link) for link in links or []], missing)


def type_name(obj: Any) -> str:
    kind = type(obj)
    module = getattr(kind, "__module__", None)
    qualname = getattr(kind, "__qualname__", None) or kind.__name__
    if not isinstance(module, str) or module == "builtins":
        return qualname
    return f"{script_name(module)}.{qualname}"


def kind_of(obj: Any) -> str:
    """What an object is, as the families' rules read it (:mod:`leaklab.families`): tensor,
    module, optimizer, container, value, exception, thread, file, mapping, callable, object."""
    torch = sys.modules.get("torch")
    if torch is not None:
        if isinstance(obj, torch.Tensor):
            return "mapping" if _file_backed(obj) else "tensor"
        if isinstance(obj, torch.nn.Module):
            return "module"
        if isinstance(obj, torch.optim.Optimizer):
            return "optimizer"
    if isinstance(obj, (list, dict, set, frozenset, tuple, collections.deque)):
        return "container"
    if isinstance(obj, (str, bytes, bytearray, int, float, complex)):
        return "value"
    if isinstance(obj, (BaseException, types.TracebackType, types.FrameType)):
        return "exception"
    if isinstance(obj, threading.Thread):
        return "thread"
    if isinstance(obj, io.IOBase) or isinstance(obj, socket.socket):
        return "file"
    if isinstance(obj, mmap.mmap):
        return "mapping"
    if isinstance(obj, (types.FunctionType, types.MethodType, functools.partial, types.BuiltinFunctionType)):
        return "callable"
    return "object"


FILE_MAPS: list[list[tuple[int, int]]] = [[]]   # file-backed address ranges, read once per naming


def read_file_maps() -> list[tuple[int, int]]:
    ranges = []
    try:
        with open("/proc/self/maps") as handle:
            for line in handle:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/") and not parts[5].startswith("/dev/"):
                    start, end = parts[0].split("-")
                    ranges.append((int(start, 16), int(end, 16)))
    except OSError:
        pass
    return ranges


def _file_backed(tensor: Any) -> bool:
    """Whether a CPU tensor's memory is a mapped file (``torch.load(mmap=True)``, ``from_file``):
    its storage's address lies in a file mapping of /proc/self/maps."""
    if tensor.device.type != "cpu" or not FILE_MAPS[0]:
        return False
    try:
        pointer = tensor.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - a tensor without storage (meta, sparse) maps nothing
        return False
    return any(start <= pointer < end for start, end in FILE_MAPS[0])


def script_name(module: str) -> str:
    """A script leaklab loaded is a module named leaklab_script_<stem>_<clock>: its stem says it."""
    found = re.fullmatch(r"leaklab_script_(.+)_\d+", module)
    return found.group(1) if found else module


def bound_of(obj: Any) -> str:
    """How a container is bounded by construction, where it is: ``maxlen=8``, ``maxsize=128``;
    and how long a DataLoader iterator's workers live, where they outlive its epoch
    (``persistent_workers=True``: what each worker accumulates stays)."""
    if type(obj).__name__ == "_MultiProcessingDataLoaderIter" and getattr(obj, "_persistent_workers", False) is True:
        return " (persistent_workers=True)"
    if isinstance(obj, collections.deque) and obj.maxlen is not None:
        return f" (maxlen={obj.maxlen})"
    if isinstance(obj, functools._lru_cache_wrapper):
        maxsize = obj.cache_parameters().get("maxsize")
        return f" (maxsize={maxsize})" if maxsize is not None else " (maxsize=None)"
    return ""


def is_own(obj: Any) -> bool:
    module = getattr(type(obj), "__module__", "") or ""
    return module == _OWN or module.startswith(_OWN + ".")


def _edge(source: Any, target: Any) -> tuple[str, str]:
    """How ``source`` refers to ``target`` (objgraph's ``_edge_label``): (what, name)."""
    if isinstance(source, dict):
        for key, value in source.items():
            if value is target:
                if isinstance(key, str):
                    return "item", f"[{key!r}]"
                return "item", "[*]" if isinstance(key, int) else f"[{type_name(key)} key]"
            if key is target:
                return "key", "key"
        return "item", ""
    if isinstance(source, (list, tuple, collections.deque, set, frozenset)):
        return "item", "[*]"
    if isinstance(source, types.FrameType):
        local = next((name for name, value in source.f_locals.items() if value is target), "")
        return "local", f"{source.f_code.co_name}(): {local}"
    if isinstance(source, types.FunctionType):
        for var, cell in zip(source.__code__.co_freevars, source.__closure__ or (), strict=False):
            if cell_filled(cell) and cell.cell_contents is target:
                return "closure cell", f"{source.__qualname__.rpartition('.<locals>.')[0] or source.__name__}.<locals>.{var}"
        for var in source.__code__.co_names:
            value = source.__globals__.get(var)
            if value is target:
                return "module global", f"{script_name(source.__module__ or '')}.{var}"
            if isinstance(value, types.ModuleType):
                attr = next((a for a in source.__code__.co_names if getattr(value, a, None) is target), None)
                if attr is not None:
                    return "module global", f"{value.__name__}.{attr}"
        # A mutable default argument (``def fit(self, callbacks=[])``) is named by its parameter.
        defaults = source.__defaults__ or ()
        parameters = source.__code__.co_varnames[:source.__code__.co_argcount][-len(defaults):] if defaults else ()
        for param, value in [*zip(parameters, defaults, strict=False), *(source.__kwdefaults__ or {}).items()]:
            if value is target:
                return "default argument", param
        for name in ("__defaults__", "__kwdefaults__", "__dict__", "__closure__"):
            if getattr(source, name, None) is target:
                return "attribute", f".{name}"
    if isinstance(source, types.MethodType) and source.__self__ is target:
        return "attribute", ".__self__"
    if isinstance(source, BaseException) and source.__traceback__ is target:
        return "attribute", ".__traceback__"
    if isinstance(source, types.TracebackType) and source.tb_frame is target:
        return "attribute", ".tb_frame"
    for klass in type(source).__mro__:
        for name, value in vars(klass).items():
            if value is target and not name.startswith("__"):
                return "class attribute", f".{name}"
    slots = getattr(type(source), "__slots__", ())
    for name in (slots,) if isinstance(slots, str) else slots:
        if getattr(source, name, None) is target:
            return "attribute", f".{name}"
    try:
        attrs = vars(source)
    except TypeError:
        attrs = {}
    for name, value in attrs.items():
        if value is target:
            return "attribute", f".{name}"
    return "referent", ""


def _instance_dict(owner: Any, obj: Any) -> bool:
    try:
        return isinstance(obj, dict) and not isinstance(owner, type) and object.__getattribute__(owner, "__dict__") is obj
    except (AttributeError, TypeError):
        return False


# A root: a callback that nothing in Python holds, only the interpreter or a C library (atexit,
# signal, codecs, os.register_at_fork, a C++ registry such as torch.library's).
OUTSIDE = "held outside Python"
# A module's own tables of its submodules, parameters and buffers: its structure, not a registry.
MODULE_TABLES = re.compile(r"^\.?_(modules|parameters|buffers)$")
# A root: tensors that carry autograd graphs and that no Python root reaches, only graphs (C++)
# do: a reference cycle through a graph (backward(create_graph=True) into .grad, a custom
# Function that keeps its own output), which neither reference counting nor the collector frees.
GRAPHS_ONLY = "held only through autograd graphs"
PARAMETER = "torch.nn.parameter.Parameter"  # the type name a link gives a module's parameter
# What a kept tensor is when it is what grew: each step's values joined onto it (``torch.cat``).
GROWN_IN_SIZE = "grown in size"
# What a function is when it is what grew: wrapped again every step, each wrapper keeping the one before.
REWRAPPED = "wrapped again every step"

# Roots that are namespaces: the link names the value they hold, with its type.
_NAMESPACES = ("module global", "closure cell", "class attribute", "thread frame", "local variable")


def cell_filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def links_down(root: Any, child: Any, found: tuple[str, str], parent: dict[int, Any],
           namespace: bool | None = None) -> list[Link]:
    """The chain from ``root`` down to what grew. A namespace root (a module global, a cell) is
    one link with its value's type; an instance's ``__dict__`` is folded into the attribute."""
    what, name = found
    if namespace if namespace is not None else what in _NAMESPACES:
        links, source, obj = [make_link(what, name, child)], child, parent.get(id(child))
    else:
        links, source, obj = [make_link(what, name, root)], root, child
    while obj is not None:
        if isinstance(source, types.FunctionType) and obj is source.__closure__:
            # function -> its closure tuple -> a cell -> the value: one link, the closure variable
            cell = parent.get(id(obj))
            obj = parent.get(id(cell), obj) if cell is not None else obj
        below = parent.get(id(obj))
        if below is not None and _instance_dict(source, obj):
            _, key = _edge(obj, below)
            source, obj = obj, below
            links.append(make_link("attribute", "." + key[2:-2] if key.startswith("['") else key, obj))
            source, obj = obj, parent.get(id(obj))
            continue
        edge, label = _edge(source, obj)
        links.append(make_link(edge if below is not None else _grown(obj), label, obj))
        source, obj = obj, below
    return links


def _grown(obj: Any) -> str:
    torch = sys.modules.get("torch")
    return describe_tensor(obj) if torch is not None and isinstance(obj, torch.Tensor) else "grown"


def make_link(what: str, name: str, obj: Any) -> Link:
    return Link(what, name, type_name(obj) + bound_of(obj), kind_of(obj))


def describe_tensor(tensor: Any) -> str:
    """What a kept tensor brings along: its autograd graph, and whether that graph keeps saved
    tensors computed in its own step (activations, which a backward would have freed). A saved
    leaf (the input batch, a weight) is not one: every step's graph shares it."""
    if getattr(tensor, "grad_fn", None) is None:
        return "grown, a view of a larger storage" if _view_of_more(tensor) else "grown"
    from leaklab.attribution import saved_by_autograd

    try:
        saved = [t for _, t in saved_by_autograd([("t", tensor)]) if t.grad_fn is not None]
    except Exception:  # noqa: BLE001 - a graph that cannot be read says only that it is there
        saved = []
    return "grown, with a graph that keeps saved tensors" if saved else "grown, with an autograd graph"


def _view_of_more(tensor: Any) -> bool:
    """Whether a kept tensor is a view that keeps at least twice its own bytes alive (a row of a
    batch keeps the whole batch's storage)."""
    try:
        own = tensor.numel() * tensor.element_size()
        return tensor._base is not None and tensor.untyped_storage().nbytes() >= 2 * max(own, 1)
    except Exception:  # noqa: BLE001 - a tensor subclass or a meta tensor without storage: not a view we can weigh
        return False


def fields(chain: Chain | None) -> tuple[list[dict[str, str]] | None, str | None]:
    """A report's ``holder`` and ``holder_missing`` (:class:`leaklab.report.Report`)."""
    if chain is None:
        return None, "not found: nothing grew that Python can see"
    return (chain.to_json() if chain.links else None), chain.missing


__all__ = ["FILE_MAPS", "GRAPHS_ONLY", "GROWN_IN_SIZE", "MODULE_TABLES", "OUTSIDE", "PARAMETER", "REWRAPPED", "Chain", "Link", "bound_of", "cell_filled", "chain_from_json", "describe_tensor", "fields", "is_own",
           "kind_of", "links_down", "make_link", "read_file_maps", "script_name", "type_name"]
