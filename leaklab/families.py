"""The family of a leak, decided from the evidence: what holds the growth (the holder chain,
:mod:`leaklab.holders`) and what it holds, else the resource it lives in.

One table, :data:`RULES`, read top to bottom; the first rule whose test says why decides. A rule
names one family, or two where the evidence cannot tell them apart (workers: a DataLoader's or
one's own processes); the closest entry is then picked within them (:mod:`leaklab.signature`).
Where no rule fits, the evidence names no family, and the check says that it resembles no
catalog entry closely rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from leaklab.chain import GRAPHS_ONLY, GROWN_IN_SIZE, MODULE_TABLES, OUTSIDE, PARAMETER, REWRAPPED, Chain, Link


@dataclass(frozen=True)
class Evidence:
    """What a report knows about a leak that can decide its family."""

    chain: Chain | None
    headline: str | None          # the resource the verdict is about
    growing: frozenset[str]       # every resource that grows
    garbage: bool = False         # cyclic garbage every step
    rates: Mapping[str, float] = field(default_factory=dict)   # resource -> log10 of its growth a step
    collector_off: bool = False   # the program turned the garbage collector off (read uncollected)
    flat: frozenset[str] = frozenset()   # watched resources that stayed bounded (not merely unwatched)
    # The containers the step reaches that gained items in most steps, as a census found them (path,
    # type of what it gains, its kind): what the walk from what grew may not pass through.
    gaining: tuple[tuple[str, str, str], ...] = ()

    @property
    def links(self) -> list[Link]:
        return self.chain.links if self.chain is not None and self.chain.found else []

    @property
    def root(self) -> str:
        return str(self.links[0]) if self.links else "?"

    @property
    def graph(self) -> Link | None:
        """The chain's autograd-graph link, where what grew is a graph that gets longer."""
        return next((link for link in self.links if link.kind == "graph"), None)

    @property
    def held(self) -> Link | None:
        """What grew: the last link of the chain (before an autograd graph's own link)."""
        links = [link for link in self.links if link.kind != "graph"]
        return links[-1] if links else None


@dataclass(frozen=True)
class Rule:
    families: tuple[str, ...]
    holder: str                                   # the holder's kind, as a signature keeps it
    test: Callable[[Evidence], str | None]       # why the rule applies, in a few words, or None
    # Where it names a holder specific enough that two leaks it decides are the same mistake
    # whatever else differs (one process or several ranks); most name a kind of holder (a
    # container, a resource) that many mistakes share.
    specific: bool = False
    kept: Callable[[Evidence], str | None] | None = None   # a registry's: what it keeps


_CONTAINERS = re.compile(r"^(list|dict|set|collections\.(deque|OrderedDict|defaultdict))\b")
# _CONFIGURE_HOOKS too, and an ExitStack's ._exit_callbacks
# multiprocessing.util's registries of after-fork callbacks and of finalizers are registries of
# callbacks too, whatever they are called.
_HOOKS = re.compile(r"(^|_)\w*hooks\w*$|^\.?handlers$|^\.?_?\w*callbacks$|^_(afterfork|finalizer)_registry$",
                    re.IGNORECASE)
# Registries of callbacks that the standard library and torch keep: what a handle or an entry there
# keeps stays alive as long as the callback is registered.
_CALLBACK_TYPES = ("weakref.finalize",)
_TORCH_HOOK_HANDLE = "torch.utils.hooks.RemovableHandle"
# Handles of asynchronous work that keep their result (or its inputs) until dropped.
_ASYNC_HANDLES = re.compile(r"(^|\.)(_?asyncio\.(Task|Future)|Future|Work)$")
_CACHE_KEYS = re.compile(r"^\[(torch\.Tensor|torch\.Size|tuple|torch\.nn\.parameter\.Parameter) key\]$")
# Names of caches ("memo", not "memory": a replay buffer named memory is a container, not a cache).
_CACHE_NAMES = re.compile(r"cache|memo(?!ry)", re.IGNORECASE)
# IPython's output history: ``Out``, ``_oh``, and the names it binds (``_``, ``__``, ``_12``).
_OUTPUT_HISTORY = re.compile(r"^\['(Out|_oh|_+|_\d+)'\]$|^\.?_oh$")


def _short(link: Link) -> str:
    """A link's type without its module or its note: ``Sequential`` for
    ``torch.nn.modules.container.Sequential (3 modules)``."""
    return link.type.split(" ")[0].rsplit(".", 1)[-1]


def _first(links: list[Link], test: Callable[[Link], bool]) -> Link | None:
    return next((link for link in links if test(link)), None)


def _graph(e: Evidence) -> str | None:
    link = e.graph
    return f"an autograd graph held by {e.root}, {link.type.removeprefix('graph ')}" if link else None


def _saved(e: Evidence) -> str | None:
    held = e.held
    if held is None or held.kind != "tensor":
        return None
    if "saved tensors" in held.what:
        return f"kept tensors whose graphs still hold saved activations, in {e.root}"
    if "autograd graph" in held.what and (e.headline == "host_heap" or _graphs_outweigh(e)):
        # The tensors themselves are small; what the heap gains is their graphs' nodes.
        return f"kept tensors whose autograd graphs grow the heap, in {e.root}"
    return None


_TENSORS = ("cpu_tensors", "device_allocated")
GRAPH_OUTWEIGHS = 0.5   # log10: the heap gains three times the kept tensors' own bytes a step, or more


def _graphs_outweigh(e: Evidence) -> bool:
    """Whether the kept tensors are the small part: the heap (their graphs' nodes) grows at least
    three times as fast as the tensors themselves (a loss kept as a tensor is 4 bytes and a graph;
    a batch of features kept with its graph is its own bytes, on the heap too on the CPU)."""
    tensors = next((e.rates[name] for name in _TENSORS if name in e.rates), None)
    return tensors is not None and e.rates.get("host_heap", float("-inf")) >= tensors + GRAPH_OUTWEIGHS


def _async_handles(e: Evidence) -> str | None:
    """A container of asynchronous handles (asyncio tasks, futures, collectives' Work) that keeps
    each one, and with it its result: a container of tensors behind one more link."""
    links = [link for link in e.links if link.kind != "graph"]
    box = _first(links[:-1], lambda link: link.kind == "container")
    handle = _first(links, lambda link: bool(_ASYNC_HANDLES.search(link.type.split(' ')[0])))
    if box is None or handle is None:
        return None
    return f"a {box.type.split(' ')[0]} ({box.name or e.root}) that keeps finished {handle.type.rsplit('.', 1)[-1]} handles with their results"


_MODULE_HOOKS = re.compile(r"^\._\w*hooks$")  # a module's hook dicts (._forward_hooks, ._backward_pre_hooks, ...)


def _gains_entries(links: list[Link], i: int) -> bool:
    """Whether the registry at ``links[i]`` is what gains an entry a step: a module's hook dict
    (whatever its hooks keep: each hook left registered is a leak of its own), one that holds
    callables, or one with no list, dict or set below it (a logger's handler list whose one
    MemoryHandler buffers every record is not a registry that grows: the buffer is)."""
    below = links[i + 1:]
    if below and below[0].name == ".data" and links[i].type.startswith("weakref."):
        below = below[1:]  # a weak dictionary's own table: the registry's entries are below it
    if _MODULE_HOOKS.match(links[i].name) or (below and below[0].kind == "callable"):
        return True
    return not any(link.kind == "container" and _CONTAINERS.match(link.type) for link in below)


_CALLBACK_LISTS = ("list", "collections.deque", "set")


def _callable_entry(links: list[Link], i: int) -> bool:
    """Whether ``links[i]`` is a callable, or a tuple whose next link is one (torch.cuda's queued
    calls keep (callback, stack) pairs), with what grows further down."""
    if i < len(links) - 1 and links[i].type.startswith("tuple"):
        i += 1
    return links[i].kind == "callable" and i < len(links) - 1


def _outside(e: Evidence) -> str | None:
    """The chain starts at a callback that nothing in Python holds: the interpreter or a C library
    keeps it (atexit, a signal handler, codecs, a fork handler, a C++ kernel registry), so it is
    registered and never removed, with what it refers to."""
    links = e.links
    if links and links[0].what == OUTSIDE:
        return f"a callback registered outside Python ({links[0].name.split(',')[0]}) that keeps what grows"
    return None


def _keyed(links: list[Link]) -> bool:
    """Whether the chain passes through a dict entry keyed by a tensor, a shape or a tuple: a
    cache by argument."""
    return any(_keyed_link(link) for link in links)


def _keyed_link(link: Link) -> bool:
    """A dict entry keyed by a tensor, a shape or a tuple, or by an object's address (``id()``),
    or a key that is itself what grows (a dict that gains keys: warnings' ``__warningregistry__``
    keys every message it saw)."""
    return bool(_CACHE_KEYS.match(link.name)) or "key" in (link.what, link.name) or _by_address(link)


# A key that is an object's address: what ``id()`` gives in CPython, an aligned pointer of 12 or more
# digits (as an int or spelled as a string); a new argument object each call is a new key.
_ADDRESS_KEY = re.compile(r"^\[['\"]?(\d{12,20})['\"]?\]$")


def _by_address(link: Link) -> bool:
    found = _ADDRESS_KEY.match(link.name)
    address = int(found.group(1)) if found else 0
    return address >= 2**32 and address % 8 == 0


def _module_hooks(e: Evidence) -> str | None:
    """A torch module's own hook dict that gains an entry every step (or torch's hook handles
    kept): the catalog's hook entries are this mistake, and their fix (keep the handle, remove it)
    is torch's API. Where the chain names neither, a census that saw one gain entries decides
    (:func:`_hooks_gaining`). Other registries of callbacks are :func:`_hooks`'."""
    links = e.links
    link = next((link for i, link in enumerate(links[:-1]) if _MODULE_HOOKS.match(link.name) and _gains_entries(links, i)), None)
    if link is not None:
        return f"a hook or handler registry ({link.name.lstrip('.')}) that gains an entry every step"
    # A tensor's own hook dict (``register_hook``), which Python shows with no name.
    for tensor, box, hook in zip(links, links[1:], links[2:], strict=False):  # each window of three
        if tensor.kind == "tensor" and box.kind == "container" and hook.kind == "callable":
            return f"a {_short(box)} (of a {_short(tensor)}) that gains a {_short(hook)} every step"
    link = _first(links, lambda link: link.type.startswith(_TORCH_HOOK_HANDLE))
    if link is not None:
        return f"callbacks registered every step (RemovableHandle entries kept by {e.root})"
    return _hooks_gaining(e)


def _hooks_gaining(e: Evidence) -> str | None:
    """A census saw a module's hook dict gain a callable every step, or a container gain torch's
    hook handles: each hook left registered keeps what it closes over (the explainer, the
    activations) that the walk from what grew named instead."""
    for path, gains, kind in e.gaining:
        attribute = path.rsplit(".", 1)[-1] if "." in path else ""
        if kind == "callable" and _MODULE_HOOKS.match(f".{attribute}"):
            return f"a hook dict ({path}) that gains a {gains} every step"
        if gains == _TORCH_HOOK_HANDLE:
            return f"torch's hook handles kept every step ({path} gains one)"
    return None


def _rewrapped(e: Evidence) -> str | None:
    """A function wrapped again every step (a profiler's or a logging setup's patch applied on top
    of the last one): each wrapper keeps the one it replaced, a registry of callbacks with no handle."""
    held = e.held
    if held is None or held.what != REWRAPPED:
        return None
    return f"a function wrapped again every step ({held.name or e.root}): each wrapper keeps the one it replaced"


def _hooks(e: Evidence) -> str | None:
    # A registry that holds what grew (not the last link: an empty handler list of each new
    # logger is not a registry that gains entries).
    links = e.links
    link = next((link for i, link in enumerate(links[:-1])
                 if (_HOOKS.search(link.name.rsplit(".", 1)[-1] if link.name else "") and _gains_entries(links, i))
                 or link.what.startswith("signal handler")), None)
    if link is not None:
        return f"a hook or handler registry ({link.name.lstrip('.')}) that gains an entry every step"
    if _keyed(links):
        return None  # a callable in a cache's entry (a trace kept with its function) is the cache's
    link = next((link for i, link in enumerate(links[:-1])
                 if link.type.startswith(_CALLBACK_LISTS) and _callable_entry(links, i + 1)), None)
    if link is not None:
        # What grows hangs below a callable in a list: a bound method or a closure registered
        # there (a waiter, a subscriber) keeps it, whatever the list is called. Not in a dict: a
        # dict's values may be callables kept as data (a functools.partial per batch).
        return f"a {link.type.split(' ')[0]} of callbacks ({link.name.lstrip('.') or e.root}) that keeps what each one holds"
    held = e.held
    if (held is not None and held.kind == "callable" and len(links) > 1 and links[-2].kind == "container"
            and not links[-2].type.startswith("tuple")):  # a tuple gains nothing: what holds it gains the entries
        # A dict or list whose entries are what grows, each a function: callbacks registered every
        # step, wherever the registry lives (a tensor's own hook dict has no name Python shows).
        box = links[-2]
        where = box.name.lstrip(".") or (f"of a {_short(links[-3])}" if len(links) > 2 else e.root)
        return f"a {_short(box)} ({where}) that gains a {_short(held)} every step"
    link = _first(e.links, lambda link: link.type.startswith(_CALLBACK_TYPES))
    if link is not None:
        return f"callbacks registered every step ({_short(link)} entries kept by {e.root})"
    if e.links and e.links[0].what == "the step" and e.links[0].name.startswith("signal handler"):
        return f"a {e.links[0].name} that keeps what grows"
    return None


# Kernel resources: where one of them grows, a cache the walk passed on its way names the wrong
# holder (an lru_cache of the connections' module is not what keeps every connection open).
_KERNEL = ("open_fds", "threads", "mapped_files", "mapped_file_bytes")


def _lru(e: Evidence) -> str | None:
    if e.headline in _KERNEL:
        return None
    # Named as the cache it is where the walk came through the wrapper, or by its type where the
    # wrapper is itself the root (a module global decorated with lru_cache).
    link = _first(e.links, lambda link: link.what.startswith("lru_cache") or link.type.startswith("functools._lru_cache_wrapper"))
    return f"a dict inside functools.lru_cache {link.name}" if link else None


def _output_history(e: Evidence) -> str | None:
    link = _first(e.links, lambda link: bool(_OUTPUT_HISTORY.search(link.name)))
    return f"IPython's output history ({link.name.strip('[]').strip(chr(39))}) keeps every displayed result" if link else None


def _cache(e: Evidence) -> str | None:
    if e.headline in _KERNEL:
        return None
    keyed = _first(e.links, _keyed_link)
    if keyed is not None:
        if _by_address(keyed):
            return "a dict keyed by the addresses of the objects it was given (a cache by argument)"
        by = keyed.type if "key" in (keyed.what, keyed.name) else keyed.name.strip("[]").removesuffix(" key")
        return f"a dict keyed by {by.split(' ')[0]} (a cache by argument)"
    named = _first(e.links, lambda link: bool(_CACHE_NAMES.search(_own_name(link.name))))
    if named is None:
        return None
    # A list below the named cache, on the way to what grew, is what gains: one entry of the cache
    # (a decorator's cache of every call's output, keyed by the function) is a list that keeps
    # every step's tensors, the mistake of a container, not of a cache keyed by new arguments.
    below = e.links[e.links.index(named) + 1:-1]
    if any(link.type in ("list", "collections.deque") for link in below):
        return None
    return f"a cache ({named.name.lstrip('.')}) that gains an entry every step"


def _optimizer_state(e: Evidence) -> str | None:
    """An optimizer's own state, keyed by the parameters it was given: it gains an entry for each
    new parameter (parameters replaced in the model, the optimizer kept), never a cache's."""
    links = e.links
    for i, (optimizer, state) in enumerate(zip(links, links[1:], strict=False)):
        if optimizer.kind == "optimizer" and state.name == ".state":
            if any(_CONTAINERS.match(link.type) for link in links[:i]):
                return None  # a registry keeps the optimizer (a dict of runs): the registry is the holder
            return f"the {_short(optimizer)}'s state keeps an entry for every parameter it was given ({optimizer.name or e.root})"
    return None


def _own_name(name: str) -> str:
    """A link's own name: a closure cell's variable, not the function that made it (a step named
    ``train_with_cache`` does not make every variable of it a cache)."""
    return name.rpartition(".<locals>.")[2]


def _registry(e: Evidence, kinds: tuple[str, ...]) -> tuple[Link | None, Link] | None:
    """The container (None where the holder itself is kept) and the first object of ``kinds``
    below it: a registry that keeps whole objects, or None."""
    links = [link for link in e.links if link.kind != "graph"]
    for i, above in enumerate(links[:-1]):
        if not (above.kind == "container" or _CONTAINERS.match(above.type)):
            continue
        if MODULE_TABLES.match(above.name) and not _modules_added(links, i):
            continue
        kept = next((j for j in range(i + 1, len(links)) if links[j].kind in kinds), None)
        if kept is not None and not (links[kept].kind == "object" and _box_below(links, kept)):
            return above, links[kept]
    held = e.held
    return (None, held) if held is not None and held.kind in kinds and held.kind != "object" else None


def _box_below(links: list[Link], i: int) -> bool:
    """Whether a list, dict, set or deque below ``links[i]`` holds what grows: that container gains
    the entries (a logger's handler list is not a registry of handlers because one handler's
    buffer keeps every record)."""
    return any(link.kind == "container" and _CONTAINERS.match(link.type) and not MODULE_TABLES.match(link.name)
               for link in links[i + 1:-1])


def _modules_added(links: list[Link], i: int) -> bool:
    """Whether ``links[i]`` is a module's table of submodules whose entry holds what grew through
    module tables only (the entry's own parameters, or its children's): what grows is whole
    modules added to the model, not a tensor some module keeps. The last such table is named."""
    def structure(link: Link) -> bool:
        return link.kind == "module" or bool(MODULE_TABLES.match(link.name))
    return (links[i].name == "._modules" and links[i + 1].kind == "module" and all(structure(link) for link in links[i + 1:-1])
            and links[-1].kind == "tensor" and not any(link.name == "._modules" for link in links[i + 1:-1]))


def _registry_of(kinds: tuple[str, ...]) -> Callable[[Evidence], str | None]:
    """A container that keeps whole objects of ``kinds`` (models, optimizers, a user's records)
    which hold what grows: a registry, not a list of tensors."""
    def test(e: Evidence) -> str | None:
        found = _registry(e, kinds)
        if found is None:
            return None
        above, kept = found
        if above is None:
            return f"{kept.kind}s kept by {e.root}"
        if above.name == "._modules":
            links = e.links
            owner = links[max(i for i, link in enumerate(links) if link is above) - 1]
            return f"{kept.type.rsplit('.', 1)[-1]} modules added to a {_short(owner)} ({owner.name.lstrip('.') or e.root}) every step"
        return f"a {above.type.split(' ')[0]} ({above.name or e.root}) that keeps {kept.type.rsplit('.', 1)[-1]} objects"
    return test


def _kept_by(kinds: tuple[str, ...]) -> Callable[[Evidence], str | None]:
    """What the registry of :func:`_registry_of` keeps: "module", "optimizer", else the type's
    name. A registry of loggers and one of models are different mistakes with different fixes."""
    def kept(e: Evidence) -> str | None:
        found = _registry(e, kinds)
        if found is None:
            return None
        link = found[1]
        if link.kind == "optimizer" and e.held is not None and e.held.type == PARAMETER:
            # What grew is parameters, reached through their optimizer: models pile up, each kept
            # with its optimizer (the holder walk starts from parameters where they grow).
            return "module"
        if link.kind != "object":
            return link.kind
        # A Python module (sys.modules, importlib) is not a model: its type is named "module" too.
        return "python module" if _short(link) == "module" else _short(link)
    return kept


def _class_per_call(e: Evidence) -> str | None:
    """The chain starts at a class defined inside a function (``f.<locals>.Wrapper``) that holds
    what grows: the function makes a new class on every call (torch.jit.trace does, one per
    trace), and each is kept, with what it holds, by whatever registers classes (its base's
    subclass list, a library's type registry)."""
    links = e.links
    if links and links[0].what == "class attribute" and ".<locals>." in links[0].name:
        return f"a class made on every call ({links[0].name.rpartition('.')[0]}) and kept with what it holds"
    return None


_CHILDREN = ("shared_memory", "worker_memory", "worker_objects", "children")


def _own_processes(e: Evidence) -> str | None:
    """Growth in child processes whose holder chain names multiprocessing's own objects (a Pool,
    a Process, a Manager) and no DataLoader: the step's own processes, not a loader's workers."""
    if e.headline not in _CHILDREN or any("torch.utils.data" in link.type for link in e.links):
        return None
    link = _first(e.links, lambda link: link.type.startswith(("multiprocessing.", "concurrent.futures.", "subprocess.")))
    return f"child processes of a {link.type.split(' ')[0]} kept by {e.root}" if link else None


def _queued_for_process(e: Evidence) -> str | None:
    """What grows waits in a multiprocessing queue's own buffer (its feeder thread has not sent it,
    or the pipe is full): the process at the other end does not take what it is sent."""
    link = _first(e.links, lambda link: link.type.startswith(("multiprocessing.queues.", "torch.multiprocessing.queue.")))
    return f"a {link.type.split(' ')[0]} ({link.name or e.root}) whose items another process never takes" if link else None


def _copy_on_write(e: Evidence) -> str | None:
    """Growth in a DataLoader's workers' unique memory while their resident memory stays flat: they
    make nothing new, they copy the pages they share with this process as they write to them (the
    reference counts of a dataset's Python objects), persistent workers or not. Where their resident
    memory grows too, or was not watched, a worker makes memory of its own (a cache)."""
    if e.headline != "worker_memory" or "worker_resident" not in e.flat:
        return None
    link = _first(e.links, lambda link: "torch.utils.data" in link.type)
    return ("a DataLoader's workers copy the pages they share with this process as they touch them (copy-on-write): "
            "their unique memory grows, their resident memory does not") if link else None


def _persistent_workers(e: Evidence) -> str | None:
    """Growth in the workers of a DataLoader with persistent workers (its iterator says so, or the
    DataLoader keeps one, ``._iterator``, which it does only with ``persistent_workers=True``):
    the same processes serve every epoch, and whatever each one accumulates stays."""
    if e.headline not in _CHILDREN:
        return None
    link = _first(e.links, lambda link: "_MultiProcessingDataLoaderIter" in link.type
                  and (link.name == "._iterator" or "(persistent_workers=True)" in link.type))
    return "a DataLoader with persistent workers keeps the same worker processes from epoch to epoch" if link else None


def _loader_workers(e: Evidence) -> str | None:
    """Growth in child processes that a DataLoader owns (its iterator's workers)."""
    if e.headline not in _CHILDREN:
        return None
    link = _first(e.links, lambda link: "torch.utils.data" in link.type)
    return f"what grows lives in the worker processes of a {_short(link)} kept by {e.root}" if link else None


def _workers_iterator(e: Evidence) -> str | None:
    link = _first(e.links, lambda link: "_MultiProcessingDataLoaderIter" in link.type)
    return f"a DataLoader iterator with worker processes, kept by {e.root}" if link else None


def _records_with_cycles(e: Evidence) -> str | None:
    held = e.held
    if e.garbage and held is not None and held.kind == "object":
        return f"records ({held.type.rsplit('.', 1)[-1]}) that make reference cycles every step, kept by {e.root}"
    return None


def _collector_keeps(e: Evidence) -> str | None:
    """The collector's own list of what it found unreachable (``gc.garbage``): kept there under
    ``gc.set_debug(gc.DEBUG_SAVEALL)``, or, before Python 3.4, cycles with a ``__del__``."""
    return "the garbage collector's own list (gc.garbage) keeps every cycle it finds" if e.links and e.links[0].name == "gc.garbage" else None


# What reference cycles hold: Python's objects, and the tensors and heap behind them.
_CYCLES_HOLD = frozenset({"python_objects", "host_heap", "cpu_tensors", "device_allocated", "device_reserved"})


def _holds_tensors(name: str | None) -> bool:
    from leaklab.resources import BY_NAME  # imports torch: only where a rule needs it
    return name in BY_NAME and BY_NAME[name].holds_tensors


def _collector_off(e: Evidence) -> str | None:
    """Growth with the program's garbage collector off and no holder a walk from it can find
    (what grew is reachable from no root: reference cycles only a collection would free)."""
    # A chain to numbers or strings holds no tensor: it does not explain tensors that grow (a list
    # of each fold's loss, beside models that only their cycles keep).
    values_only = e.held is not None and e.held.kind == "value" and _holds_tensors(e.headline)
    unreached = not e.links or e.links[0].what == GRAPHS_ONLY or values_only
    if e.collector_off and unreached and e.headline in _CYCLES_HOLD:
        return "the program turned the garbage collector off, and no holder was found: reference cycles it never frees"
    return None


def _graph_cycle(e: Evidence) -> str | None:
    """Tensors with autograd graphs that no Python root reaches: only graphs keep them, a reference
    cycle through a graph that neither reference counting nor the collector frees."""
    links = e.links
    if links and links[0].what == GRAPHS_ONLY:
        return ("tensors that only autograd graphs keep (no Python root reaches them): a reference cycle through "
                "a graph, as backward(create_graph=True) into .grad or a Function that saves its own output makes")
    return None


def _exception(e: Evidence) -> str | None:
    link = _first(e.links, lambda link: link.kind == "exception")
    return f"kept exceptions whose frames hold what grows, in {e.root}" if link else None


def _parameters_kept(e: Evidence) -> str | None:
    """New parameters that pile up in a container with no module between: a parameter is made only
    where a layer or a model is built (ops on one return plain tensors), so a list that gains
    parameters every step keeps every model built (a graph that collects each model's variables)."""
    links = [link for link in e.links if link.kind != "graph"]  # what grew is the last of these (Evidence.held)
    if len(links) < 2 or links[-1].type != PARAMETER:
        return None
    box = links[-2]
    if box.kind != "container" or MODULE_TABLES.match(box.name) or not _CONTAINERS.match(box.type):
        return None
    return f"a {box.type.split(' ')[0]} ({box.name.lstrip('.') or e.root}) that gains the parameters of a model built every step"


def _container(e: Evidence) -> str | None:
    held = e.held
    # A module's own tables keep its parameters and buffers, not one more every step: where the walk
    # ends there, the growth is held elsewhere (in C++: autocast's cache, a hook), not by this table.
    box = _first(e.links, lambda link: link.kind == "container" and not MODULE_TABLES.match(link.name))
    if held is None or box is None or held.kind not in ("tensor", "container", "value"):
        return None
    return f"a {box.type.split(' ')[0]} ({box.name or e.root}) that keeps every step's {held.type.rsplit('.', 1)[-1]}"


def _grown_tensor(e: Evidence) -> str | None:
    """One kept tensor that gets larger every step (each step's values joined onto it): a
    container of every step's values in one tensor, whatever the object keeping it is called."""
    held = e.held
    if held is None or held.kind != "tensor" or not held.what.startswith(GROWN_IN_SIZE):
        return None
    if len(e.links) == 1:
        return f"a tensor ({e.root}) that each step's values are joined onto"
    return f"a tensor ({held.name}) that each step's values are joined onto, kept by {e.root}"


def _tensors_kept(e: Evidence) -> str | None:
    """Descriptors that grow with kept tensors: each tensor a worker sent keeps the
    shared-memory file its storage lives in."""
    return _container(e) if e.headline == "open_fds" and e.held is not None and e.held.kind == "tensor" else None


def _kind(kind: str, what: str) -> Callable[[Evidence], str | None]:
    def test(e: Evidence) -> str | None:
        held = e.held
        return f"{what} kept by {e.root}" if held is not None and held.kind == kind else None
    return test


def _finished_threads(e: Evidence) -> str | None:
    """Thread objects kept while no thread grows: their threads have exited (or never started), so
    joining fixes nothing; a container keeps the objects, and what each one's target referred to."""
    held = e.held
    box = _first(e.links, lambda link: link.kind == "container")
    if held is None or held.kind != "thread" or "threads" in e.growing or box is None:
        return None
    return f"a {box.type.split(' ')[0]} ({box.name or e.root}) that keeps finished Thread objects"


def _resource(names: tuple[str, ...], why: str) -> Callable[[Evidence], str | None]:
    def test(e: Evidence) -> str | None:
        return why if e.headline in names else None
    return test


def _allocator(e: Evidence) -> str | None:
    if e.headline == "device_reserved" and "device_allocated" not in e.growing:
        return "the allocator's reserve grows while allocated memory does not"
    return None


def _heap(e: Evidence) -> str | None:
    # Not where Python's objects grow too: their holder was not found, which is not a native cache.
    if e.headline == "host_heap" and not e.links and "python_objects" not in e.growing:
        return "the host heap grows with no Python object or tensor to hold it (a native cache or arena)"
    return None


# No rule names cyclic garbage from the cycles alone: the check collects garbage before every
# reading, so what grows survived the collector, and that a step also makes cycles does not say
# what holds it (it named three registries and a native cache wrongly, never a cyclic leak).
# First match decides. Memory that grows in child processes is theirs, whatever this process
# keeps to reach them; otherwise evidence from the objects (the chain) comes before evidence
# from the resource: a hook dict is a hook dict whatever memory it fills.
RULES: tuple[Rule, ...] = (
    Rule(("processes",), "workers", _own_processes, specific=True),
    Rule(("dataloader_workers",), "workers", _copy_on_write, specific=True),
    Rule(("dataloader_workers",), "workers", _persistent_workers, specific=True),
    Rule(("dataloader_workers",), "workers", _loader_workers),
    Rule(("dataloader_workers", "processes"), "workers", _resource(_CHILDREN, "what grows lives in child processes")),
    Rule(("cyclic_garbage",), "garbage", _collector_keeps, specific=True),
    Rule(("cyclic_garbage",), "garbage", _collector_off, specific=True),
    Rule(("cyclic_garbage",), "garbage", _graph_cycle),
    Rule(("autograd_history",), "autograd_history", _graph),
    Rule(("registered_callbacks",), "hook_dict", _module_hooks, specific=True),
    Rule(("registered_callbacks",), "hook_dict", _rewrapped, specific=True),
    Rule(("registered_callbacks",), "hook_dict", _hooks, specific=True),
    Rule(("registered_callbacks",), "hook_dict", _outside, specific=True),
    Rule(("dataloader_workers",), "workers", _workers_iterator, specific=True),
    Rule(("processes",), "workers", _queued_for_process),
    # A kept exception holds its frames whatever keeps it (a dict of errors by key too): its fix is
    # the exception's (drop the traceback), not the container's.
    Rule(("container_keeps_tensors",), "container", _exception, specific=True),
    Rule(("registry_keeps_objects",), "container", _class_per_call, specific=True, kept=lambda e: "type"),
    # Before the caches: a tensor joined onto every step is a container's growth, in a "cache" too
    # (a key/value cache that a generation loop extends in place).
    Rule(("container_keeps_tensors",), "container", _grown_tensor),
    Rule(("registry_keeps_objects",), "container", _optimizer_state, specific=True, kept=lambda e: "optimizer"),
    # An lru_cache is the holder whatever it keeps (models as arguments too): its fix is the cache's.
    Rule(("cache_by_argument",), "cache", _lru, specific=True),
    Rule(("registry_keeps_objects",), "container", _registry_of(("module", "optimizer")),
         kept=_kept_by(("module", "optimizer"))),
    Rule(("cache_by_argument",), "cache", _output_history, specific=True),
    Rule(("cache_by_argument",), "cache", _cache),
    Rule(("autograd_history",), "autograd_history", _saved),
    Rule(("cyclic_garbage",), "garbage", _records_with_cycles, specific=True),
    # What is held, where it is a thread, a file or a mapping, before the objects that hold it; a
    # thread only while threads grow (a list of finished Thread objects is a registry's mistake).
    Rule(("registry_keeps_objects",), "container", _finished_threads, kept=lambda e: "Thread"),
    Rule(("threads_not_joined",), "threads", _kind("thread", "threads")),
    Rule(("descriptors_not_closed",), "descriptors", _kind("file", "open files")),
    Rule(("mapped_files_kept",), "mappings", _kind("mapping", "memory maps")),
    Rule(("container_keeps_tensors",), "container", _async_handles, specific=True),
    Rule(("container_keeps_tensors",), "container", _tensors_kept),
    Rule(("descriptors_not_closed",), "descriptors", _resource(("open_fds",), "open descriptors grow")),
    Rule(("registry_keeps_objects",), "container", _registry_of(("module", "optimizer", "object")),
         kept=_kept_by(("module", "optimizer", "object"))),
    Rule(("registry_keeps_objects",), "container", _parameters_kept, kept=lambda e: "module"),
    Rule(("container_keeps_tensors",), "container", _container),
    Rule(("threads_not_joined",), "threads", _resource(("threads",), "threads grow")),
    Rule(("mapped_files_kept",), "mappings", _resource(("mapped_files", "mapped_file_bytes"), "file mappings grow")),
    Rule(("allocator_caching",), "allocator", _allocator),
    Rule(("allocator_caching", "cache_by_argument"), "allocator",
         _resource(("pinned_host",), "pinned host memory grows (the pinned cache, or blocks kept per size)")),
    Rule(("allocator_caching", "cache_by_argument"), "allocator", _heap),
)


@dataclass(frozen=True)
class Decision:
    families: tuple[str, ...]    # () where the evidence names none
    holder: str | None
    why: str
    bounded: str | None = None   # the holder is bounded by construction: a plateau, not a leak
    kept: str | None = None      # a registry's: what it keeps ("module", "optimizer", else the type's name)
    rule: str | None = None      # the rule that decided, where it is specific (Rule.specific)


def decide(evidence: Evidence) -> Decision:
    """The family (or two) the evidence names, and why; ``()`` where it names none."""
    bounded = _bounded(evidence.links)
    for rule in RULES:
        why = rule.test(evidence)
        if why:
            kept = rule.kept(evidence) if rule.kept is not None else None
            return Decision(rule.families, rule.holder, why, bounded, kept, rule.test.__name__ if rule.specific else None)
    chain = evidence.chain
    why = (f"held by {chain}" if chain is not None and chain.found
           else chain.missing if chain is not None and chain.missing else "nothing names what holds it")
    return Decision((), None, why or "", bounded)


def _bounded(links: list[Link]) -> str | None:
    link = _first(links, lambda link: bool(re.search(r"\((maxlen|maxsize)=\d+\)", link.type + link.what)))
    if link is None:
        return None
    size = re.search(r"(maxlen|maxsize)=\d+", link.type + link.what)
    return f"{link.name or link.type.split(' ')[0]} is bounded by construction ({size.group(0)}): a plateau, not a leak"


__all__ = ["Decision", "Evidence", "RULES", "Rule", "decide"]
