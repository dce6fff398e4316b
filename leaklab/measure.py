"""Measuring: the readers behind :mod:`leaklab.resources`, and the :class:`Probe` that reads them.

Every figure comes from an allocator's own counters or the kernel's exact counts, never from
RSS: the CUDA caching allocator's stats, live CPU tensor storages counted by
:class:`LiveTensorBytes` (PyTorch has no ``memory_allocated`` for the CPU), glibc's
``mallinfo2`` for the C heap (where glibc is absent, the process's USS, coarser, as
:data:`HOST_HEAP_SOURCE` says), pymalloc's block count for small Python objects, PyTorch's host
caching allocator for pinned memory, and /proc for children, their memory, shared-memory files
and descriptors. :mod:`leaklab.resources` says what each resource is.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psutil
import torch

# No public API counts live CPU tensor memory: a dispatch mode (torch.utils._python_dispatch, the
# base class torch's own FakeTensor and debugging modes use) sees every operator's outputs, and a
# storage's weak reference (what torch.multiprocessing's StorageWeakRef wraps) follows its life.
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode_temporarily
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_dispatch_mode

from leaklab.worker_blocks import WorkerBlocks

# Frames from these packages are never a leak site: we want the user's line that called them.
_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(mod.__file__)) + os.sep
    for mod in (torch, sys.modules[__name__.split(".")[0]])
    if getattr(mod, "__file__", None)
)


def cuda_usable() -> bool:
    """True where a CUDA device can be used by this process."""
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


# --------------------------------------------------------------------------- host heap
class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]


def _load_mallinfo2() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _load_mallinfo2()
HOST_HEAP_SOURCE = "glibc mallinfo2 (uordblks + hblkhd)" if _MALLINFO2 else "psutil USS (no glibc mallinfo2 here)"


def _load_malloc_trim() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _load_malloc_trim()


def release_free_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere).
    A child forked later shares no free-but-resident heap page with this process then: a worker
    that reused one would copy it, its unique memory growing while its resident memory does not,
    which is what copy-on-write of the parent's objects looks like (results/worker-resident)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def host_heap_bytes() -> int:
    """Bytes the process's C heap has handed out and not taken back."""
    if _MALLINFO2 is not None:
        info = _MALLINFO2()
        return int(info.uordblks + info.hblkhd)
    return int(psutil.Process().memory_full_info().uss)


def resident_anonymous_bytes() -> int:
    """The process's resident anonymous memory (RssAnon in /proc/self/status): what the OS
    charges it, free-but-held heap pages and fragmentation included; 0 where there is no /proc."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def proc_status(pid: int | str = "self") -> dict[bytes, int]:
    """The numeric fields of /proc/<pid>/status that the readers use (RssAnon, RssFile, RssShmem, in
    bytes); empty where there is no such file. ~12 µs in a process running torch."""
    try:
        text = _read_proc_file(f"/proc/{pid}/status")
    except OSError:
        return {}
    fields = {}
    for line in text.split(b"\n"):
        key, _, value = line.partition(b":")
        if key in _STATUS_FIELDS:
            fields[key] = int(value.split()[0]) * 1024
    return fields


_STATUS_FIELDS = {b"RssAnon", b"RssFile", b"RssShmem"}
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def proc_statm() -> tuple[int, int] | None:
    """(virtual size, resident shared pages) of this process in bytes, from /proc/self/statm
    (~5 µs); None where there is none. Shared pages are those of file-backed mappings,
    shared memory included."""
    try:
        fields = _read_proc_file("/proc/self/statm").split()
    except OSError:
        return None
    return int(fields[0]) * PAGE_SIZE, int(fields[2]) * PAGE_SIZE


def file_mappings(pid: int | str = "self") -> dict[str, int]:
    """path -> number of mappings of that file in /proc/<pid>/maps (file-backed mappings only:
    [heap], [stack] and anonymous ones left out, and /dev/shm's, which shared_memory counts)."""
    try:
        text = _read_proc_file(f"/proc/{pid}/maps")
    except OSError:
        return {}
    found: dict[str, int] = {}
    for line in text.split(b"\n"):
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith(b"/") and not parts[5].startswith(b"/dev/shm/"):
            path = parts[5].decode(errors="replace")
            found[path] = found.get(path, 0) + 1
    return found


class MappedFiles:
    """The number of file-backed mappings and their resident bytes, exactly, at the cost of one
    read of /proc/self/statm a sample. Listing /proc/self/maps costs ~250 µs in a process that
    loaded torch (hundreds of mappings), and /proc/self/status ~12 µs, so each is read again only
    when statm shows that what it reports may have changed: a mapping cannot be added or removed
    without changing the virtual size (unless one of the same size replaced another between two
    readings), nor a file page become resident or leave without changing the shared pages
    (unless a shared-memory page moved the other way at once)."""

    def __init__(self) -> None:
        self._size: int | None = None
        self._shared: int | None = None
        self._count = 0
        self._resident = 0

    def count(self, statm: tuple[int, int] | None) -> int:
        size = statm[0] if statm else None
        if size is None or size != self._size:
            self._count = sum(file_mappings().values())
            self._size = size
        return self._count

    def resident(self, statm: tuple[int, int] | None) -> int:
        shared = statm[1] if statm else None
        if shared is None or shared != self._shared:
            self._resident = proc_status().get(b"RssFile", 0)
            self._shared = shared
        return self._resident


def _threads_by_links(pid: int | str) -> int:
    # /proc/<pid>/task holds a directory per thread: its link count is that number plus 2.
    return os.stat(f"/proc/{pid}/task").st_nlink - 2


def _threads_by_listing(pid: int | str) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _thread_counter() -> Callable[[int | str], int]:
    """One stat (~1 µs) where the task directory's link count agrees with its listing, else the
    listing; chosen once, as the descriptor counter is."""
    try:
        if _threads_by_links("self") == _threads_by_listing("self") > 0:
            return _threads_by_links
    except OSError:
        pass
    return _threads_by_listing


_count_threads = _thread_counter()


def thread_count(pids: list[int | str]) -> int:
    """Threads of the processes ``pids`` (those that exited are left out)."""
    total = 0
    for pid in pids:
        try:
            total += _count_threads(pid)
        except OSError:
            continue
    return total


# --------------------------------------------------------------------------- cpu tensors
class StorageRef:
    """A weak reference to a tensor storage, as torch.multiprocessing's ``StorageWeakRef`` keeps
    one (the storage's own weak-reference handle), without its cost to the count: building a
    ``StorageWeakRef`` leaves reference cycles behind (12 garbage objects a call on torch 2.14,
    through its ``torch.Storage`` lookup), which every collection then reported as the step's
    cyclic garbage."""

    __slots__ = ("cdata",)
    _expired = staticmethod(torch.UntypedStorage._expired)
    _free = staticmethod(torch.UntypedStorage._free_weak_ref)

    def __init__(self, storage: torch.UntypedStorage) -> None:
        self.cdata = storage._weak_ref()

    def expired(self) -> bool:
        return self._expired(self.cdata)

    def __del__(self) -> None:
        self._free(self.cdata)


def _tensors(out: Any) -> list[torch.Tensor]:
    """The tensors an operator returned: a tensor, or a tuple or list of them (possibly nested).
    Not torch's pytree: its ``tree_flatten`` leaves a reference cycle per call (a nested helper
    closure), ~7 garbage objects per operator, reported as the step's own cyclic garbage."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(item)]
    return []


# A sparse or compressed tensor has no storage of its own: its memory is in the dense tensors it
# is made of (COO: indices and values; CSR/CSC/BSR/BSC: compressed and plain indices and values),
# so those are what is counted. A nested tensor is strided (its one buffer is counted); an mkldnn
# tensor has no storage torch shows, and is not counted (it shows in host_heap).
_PARTS = {
    torch.sparse_coo: lambda t: (t._indices(), t._values()),
    torch.sparse_csr: lambda t: (t.crow_indices(), t.col_indices(), t.values()),
    torch.sparse_bsr: lambda t: (t.crow_indices(), t.col_indices(), t.values()),
    torch.sparse_csc: lambda t: (t.ccol_indices(), t.row_indices(), t.values()),
    torch.sparse_bsc: lambda t: (t.ccol_indices(), t.row_indices(), t.values()),
}


def dense_parts(tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tensors that hold ``tensor``'s memory: itself when strided, its parts when sparse."""
    if tensor.layout == torch.strided:
        return (tensor,)
    parts = _PARTS.get(tensor.layout)
    return parts(tensor) if parts is not None else ()


@dataclass
class _Storage:
    ref: StorageRef
    nbytes: int
    site: tuple[tuple[str, int, str], ...] | None
    step: int = 0   # the attribution step that allocated it (0: before attribution)


def is_user_file(filename: str) -> bool:
    """A frame of the user's own code: not torch, not leaklab, not an installed package, not
    the standard library, not generated code."""
    return (
        not filename.startswith(_LIBRARY_DIRS)
        and not filename.startswith("<")
        and os.sep + "site-packages" + os.sep not in filename
        and os.sep + "lib" + os.sep + "python" not in filename
    )


def user_stack(limit: int = 8) -> tuple[tuple[str, int, str], ...]:
    """The calling frames of the user's own code, innermost first: (file, line, function)."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None and len(frames) < limit:
        if is_user_file(frame.f_code.co_filename):
            frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return tuple(frames)


_FORKED_CHILD = False


def _mark_forked_child() -> None:
    global _FORKED_CHILD
    _FORKED_CHILD = True


# A forked child (a DataLoader worker) inherits the dispatch mode; it must not count there: the
# child's tensors are not the parent's, and tracking them would slow the worker and grow its heap.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked_child)


# torch.jit.trace cannot run under any TorchDispatchMode: the trace of a model with a view
# (a transpose) fails with "Cannot insert a Tensor that requires grad as a constant", so a step that
# traces (tensorboard's add_graph does, every epoch in espnet's trainer) raised under the check and
# nowhere else. While the counter is on, a trace runs with it set aside: what the trace makes (its
# example run's tensors, freed with it) goes uncounted; what the traced module keeps is counted
# when it runs. The entry points are looked up by torch at call time (torch.jit.trace calls
# _trace_impl, which calls trace_module; torch.onnx calls torch.jit._get_trace_graph).
_TRACE_ENTRY_POINTS = ("_trace_impl", "trace_module", "_get_trace_graph")


def _set_aside_while_tracing(trace: Any) -> Any:
    @functools.wraps(trace)
    def traced(*args: Any, **kwargs: Any) -> Any:
        if not isinstance(_current_dispatch_mode(), LiveTensorBytes):
            return trace(*args, **kwargs)  # set aside already (a trace within a trace), or not on top
        with _pop_mode_temporarily():
            return trace(*args, **kwargs)
    traced.__leaklab_original__ = trace
    return traced


class _TracesSetAside:
    """The patch of torch.jit's tracing entry points, on while any counter is entered."""

    entered = 0

    @classmethod
    def enter(cls) -> None:
        cls.entered += 1
        if cls.entered == 1:
            for namespace, name, found in _trace_entry_points():
                if not hasattr(found, "__leaklab_original__"):
                    setattr(namespace, name, _set_aside_while_tracing(found))

    @classmethod
    def exit(cls) -> None:
        cls.entered = max(cls.entered - 1, 0)
        if cls.entered == 0:
            for namespace, name, found in _trace_entry_points():
                if hasattr(found, "__leaklab_original__"):
                    setattr(namespace, name, found.__leaklab_original__)


def _trace_entry_points() -> list[tuple[Any, str, Any]]:
    """(namespace, name, what is there now) for each tracing entry point torch has."""
    import torch.jit._trace as tracing
    return [(namespace, name, getattr(namespace, name)) for name in _TRACE_ENTRY_POINTS
            for namespace in (tracing, torch.jit) if getattr(namespace, name, None) is not None]


class LiveTensorBytes(TorchDispatchMode):
    """Counts the bytes of CPU tensor storages that are alive, exactly.

    Every tensor an operator returns passes through ``__torch_dispatch__``; we keep a weak
    reference to its storage (keyed by the storage's address, so views are counted once) and
    sum the storages that have not died. Tensors saved for backward are outputs of operators
    too, so memory that only autograd keeps alive is counted, and stops being counted when the
    graph is freed. Tensors that existed before the mode was entered are not seen: take the
    baseline inside the mode. With ``record_sites`` each storage remembers the user frames that
    allocated it (see :func:`user_stack`), for attributing a leak to a line.
    """

    def __init__(self, record_sites: bool = False, track_peak: bool = False) -> None:
        super().__init__()
        self.record_sites = record_sites
        self._storages: dict[int, _Storage] = {}
        # The peak: live bytes just after each new storage, the only moments it can rise. That
        # needs the dead storages pruned at each of them (a walk of the live ones), so it is
        # kept only when asked for (the cpu_tensors_peak resource).
        self.track_peak = track_peak
        self._peak = 0
        self.step = 0  # set by attribution to the step it runs, recorded with each new storage

    def __enter__(self) -> LiveTensorBytes:
        _TracesSetAside.enter()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            _TracesSetAside.exit()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._dynamo.disable, and that imports
        # torch._dynamo at the first operator: 0.9 s of every check of a step that never compiles
        # (measured, torch 2.14, 2-core machine). :func:`_keep_out_of_compiler` wraps it the same
        # way once torch._dynamo is imported, before a compiled step could trace the counter.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if _COMPILER_UNSEEN:
            _keep_out_of_compiler()
        out = func(*args, **(kwargs or {}))
        if _FORKED_CHILD:
            return out
        for item in _tensors(out):
            if item.is_cpu:
                for part in dense_parts(item):
                    self._track(part)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        known = self._storages.get(storage._cdata)  # the storage's address, as its weak reference's
        if known is not None and not known.ref.expired():
            known.nbytes = storage.nbytes()  # resize_ and out= ops change a storage's size
            return
        ref = StorageRef(storage)
        site = user_stack() if self.record_sites else None
        self._storages[ref.cdata] = _Storage(ref, storage.nbytes(), site, self.step)
        if self.track_peak:
            self._peak = max(self._peak, self.live_bytes())

    def _prune(self) -> None:
        dead = [key for key, entry in self._storages.items() if entry.ref.expired()]
        for key in dead:
            del self._storages[key]

    def live_bytes(self) -> int:
        if _COMPILER_UNSEEN:  # read between steps: a step compiled by its factory is covered before it runs
            _keep_out_of_compiler()
        self._prune()
        return sum(entry.nbytes for entry in self._storages.values())

    def take_peak(self) -> int:
        """The most live bytes at any moment since the last call (or since tracking began); the
        next period starts from what is live now."""
        live = self.live_bytes()
        peak, self._peak = max(self._peak, live), live
        return peak

    def live_items(self) -> list[tuple[int, _Storage]]:
        """(storage key, entry) for every live storage."""
        self._prune()
        return list(self._storages.items())

    def keys(self) -> set[int]:
        self._prune()
        return set(self._storages)


_COMPILER_UNSEEN = True


def _keep_out_of_compiler() -> None:
    """Once torch._dynamo is imported (torch.compile may run), the compiler is told to skip the
    counter's operator hook and every frame it calls: a compiled step then never traces the
    counter's own frames. Marking the code costs nothing per operator, where the wrapper torch
    puts around every dispatch mode's hook (``torch._disable_dynamo``, the fallback where the
    marking is missing) is one more Python call per operator; torch.optim imports torch._dynamo,
    so nearly every training step paid it."""
    global _COMPILER_UNSEEN
    if not _COMPILER_UNSEEN or getattr(sys.modules.get("torch._dynamo"), "disable", None) is None:
        return  # marked already; or not imported, or still being imported: looked at again at the next operator
    _COMPILER_UNSEEN = False
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:
        LiveTensorBytes.__torch_dispatch__ = torch._disable_dynamo(LiveTensorBytes.__torch_dispatch__, recursive=True)
        return
    set_code_exec_strategy(LiveTensorBytes.__torch_dispatch__.__code__,
                           FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))


# --------------------------------------------------------------------------- device / pinned
def cuda_stats_reader(device: str = "cuda") -> Callable[[], dict[str, Any]]:
    """The cheapest call that returns the CUDA caching allocator's counters as a nested dict
    (``stats["allocated_bytes"]["all"]["current"]``), all of them in one call.

    torch.accelerator's own C++ reader (torch >= 2.8; underscored, and what the public
    ``torch.accelerator.memory_stats()`` calls before flattening) returns the device counters
    without the CUDA-only extras, at about half the cost of
    ``torch.cuda.memory_stats_as_nested_dict()`` on the H200 (measured), which in turn costs a
    fraction of ``memory_allocated()`` plus ``memory_reserved()``: each flattens the whole dict.
    Chosen once, and only where it reads the same device and the same counters.
    """
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    fallback = functools.partial(torch.cuda.memory_stats_as_nested_dict, device)
    fast = getattr(torch._C, "_accelerator_getDeviceStats", None)
    accelerator = getattr(torch, "accelerator", None)
    try:
        if fast is None or accelerator is None or accelerator.current_accelerator().type != "cuda":
            return fallback
        stats, reference = fast(index), fallback()
        for key in ("allocated_bytes", "reserved_bytes"):
            if not isinstance(stats[key]["all"]["current"], int) or (
                    stats[key]["all"]["current"] != reference[key]["all"]["current"]):
                return fallback
    except Exception:  # noqa: BLE001 - any surprise from a private call: use the public one
        return fallback
    return functools.partial(fast, index)


def device_counters(device: str = "cuda") -> dict[str, int]:
    """The CUDA caching allocator's counters that the suite reports."""
    stats = torch.cuda.memory_stats(device)
    keys = (
        "allocated_bytes.all.current", "reserved_bytes.all.current", "allocated_bytes.all.peak",
        "inactive_split_bytes.all.current", "num_device_alloc", "num_device_free",
        "num_sync_all_streams", "num_alloc_retries", "num_ooms",
    )
    return {key: int(stats.get(key, 0)) for key in keys}


def _nested_current(stats: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        entry = stats.get(key)
        if isinstance(entry, dict) and "current" in entry:
            return int(entry["current"])
    return None


_HOST_STATS = getattr(torch.cuda, "host_memory_stats_as_nested_dict", None) or getattr(torch.cuda, "host_memory_stats", None)


def pinned_host_bytes(cuda_checked: bool = False) -> int | None:
    """Pinned host bytes owned by PyTorch's host caching allocator (in use and cached), or None
    where the torch version does not report them. ``cuda_checked``: the caller knows CUDA is
    usable (a CUDA probe, after every step), so the check is not paid again."""
    if _HOST_STATS is None or not (cuda_checked or cuda_usable()):
        return None
    stats = _HOST_STATS()
    if "allocated_bytes" not in stats and "allocated_bytes.current" in stats:  # the flat form
        return int(stats["allocated_bytes.current"])
    value = _nested_current(stats, "allocated_bytes", "reserved_bytes", "active_bytes")
    return 0 if value is None else value


# multiprocessing's resource tracker and forkserver live as long as the parent by design; they
# are not something a step left running, and their memory is not the step's.
_INFRASTRUCTURE = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
_is_infrastructure: dict[int, bool] = {}


def _infrastructure(pid: int) -> bool:
    if pid not in _is_infrastructure:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().decode(errors="replace")
        except OSError:
            return False
        _is_infrastructure[pid] = any(marker in cmdline for marker in _INFRASTRUCTURE)
    return _is_infrastructure[pid]


def _read_proc_file(path: str) -> bytes:
    """A /proc file's whole content through raw descriptor calls: a third of what a Python file
    object costs to open and read (measured), and this runs after every measured step."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 65536)]
        while chunks[-1]:
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks)


def child_pids(pid: int | None = None) -> list[int]:
    """Pids of the descendants of ``pid`` (default: this process).

    Reads ``/proc/<pid>/task/<pid>/children``, the children the main thread started, plus the
    processes ``multiprocessing`` started from any thread (DataLoader workers among them): a
    few µs, where every thread's ``children`` file costs ~250 µs in a CUDA process with its
    many threads and psutil's ``children()`` scans all of ``/proc`` (~1 ms). This runs after
    every measured step. A plain ``subprocess`` started from another thread is not seen.
    """
    pid = os.getpid() if pid is None else pid
    try:
        found = [int(child) for child in _read_proc_file(f"/proc/{pid}/task/{pid}/children").split()]
    except FileNotFoundError:  # no such file (not Linux, or the process is gone): ask psutil
        try:
            return [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []
    except OSError:
        found = []
    if pid == os.getpid():
        found += [p.pid for p in multiprocessing.active_children() if p.pid not in found and p.pid is not None]
    found = [child for child in found if not _infrastructure(child)]
    return found + [grandchild for child in found for grandchild in child_pids(child)]


def worker_memory_bytes(pids: list[int] | None = None) -> tuple[int, int]:
    """Sums of the unique (USS) and the resident anonymous (RssAnon) memory of this process's live
    descendants (or of ``pids``), from one read of each one's memory maps and status. Anonymous
    only: pages of a file a worker maps and reads (a memmapped dataset) are resident as it touches
    them, though it makes nothing; where /proc has no RssAnon, the whole RSS (psutil)."""
    unique = resident = 0
    for pid in child_pids() if pids is None else pids:
        try:
            info = psutil.Process(pid).memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        unique += info.uss
        resident += proc_status(pid).get(b"RssAnon", info.rss)
    return unique, resident


try:
    _SHM_DEVICE: int | None = os.stat("/dev/shm").st_dev
except OSError:  # no /dev/shm (not Linux): nothing to count
    _SHM_DEVICE = None


def shared_memory_bytes(pids: list[int] | None = None) -> int:
    """Bytes of distinct /dev/shm files held open by this process and its descendants (Linux),
    or by ``pids`` only; a file several of them hold counts once."""
    return sum(shared_memory_files([os.getpid(), *child_pids()] if pids is None else pids).values())


def shared_memory_files(pids: list[int]) -> dict[tuple[int, int], int]:
    """(device, inode) -> size of every /dev/shm file the processes ``pids`` hold open."""
    seen: dict[tuple[int, int], int] = {}
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                info = os.stat(f"{fd_dir}/{fd}")  # one syscall: the file's device tells /dev/shm apart
            except OSError:
                continue
            if info.st_dev == _SHM_DEVICE:
                seen[(info.st_dev, info.st_ino)] = info.st_size
    return seen


def live_children() -> list[psutil.Process]:
    """Descendants of this process that are still running (zombies excluded; multiprocessing's
    process-lifetime helpers are not in :func:`child_pids`)."""
    alive = []
    for pid in child_pids():
        try:
            child = psutil.Process(pid)
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.Error:
            continue
    return alive


# --------------------------------------------------------------------------- the probe
def warm_up_cuda(device: str = "cuda") -> None:
    """Create the CUDA context and cuBLAS/cuDNN handles before any baseline is taken.

    PyTorch's own CudaMemoryLeakCheck does the same: the first matmul allocates a cuBLAS
    workspace that would otherwise look like a leak of the first measured step.
    """
    a = torch.ones(64, 64, device=device)
    (a @ a).sum().item()
    conv = torch.nn.functional.conv2d(torch.ones(1, 3, 8, 8, device=device), torch.ones(4, 3, 3, 3, device=device))
    conv.sum().item()
    torch.cuda.synchronize(device)


class Reading:
    """One sample's shared reads, made at most once however many resources need them."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self._children: list[int] | None = None
        self._cuda: dict[str, Any] | None = None
        self._statm: tuple[int, int] | None = None
        self._workers: tuple[int, int] | None = None

    def children(self) -> list[int]:
        if self._children is None:
            self._children = child_pids()
        return self._children

    def workers(self) -> tuple[int, int]:
        """The children's unique and resident memory (see :func:`worker_memory_bytes`), read once."""
        if self._workers is None:
            self._workers = worker_memory_bytes(self.children())
        return self._workers

    def worker_blocks(self) -> int:
        """The blocks of Python's allocator the children made since they were forked (see
        :mod:`leaklab.worker_blocks`); 0 where the probe does not sample them."""
        sampler = self.probe.worker_blocks
        return sampler.read(self.children()) if sampler is not None else 0

    def cuda_stats(self) -> dict[str, Any]:
        if self._cuda is None:
            self._cuda = self.probe.read_cuda_stats()
        return self._cuda

    def heap(self) -> int:
        """The host heap as the collection before this reading left it."""
        return self.probe.heap_after_collect

    def statm(self) -> tuple[int, int] | None:
        """This process's virtual size and resident shared pages (see :func:`proc_statm`), read once."""
        if self._statm is None:
            self._statm = proc_statm()
        return self._statm


@dataclass
class Garbage:
    """What the garbage collector freed before one reading: objects reachable only through
    reference cycles, and the C-heap bytes their freeing gave back."""

    objects: int = 0
    bytes: int = 0


class Probe:
    """Reads every watched resource; a context manager because the CPU tensor count needs one.

    Before every reading the garbage collector runs, as PyTorch's CudaMemoryLeakCheck collects
    before it compares: objects in reference cycles are freed only by the collector, and in a
    process holding torch's many objects a full collection may be thousands of steps away, so
    without it a step that makes cyclic garbage would read as a leak. Objects that exist before
    the measured steps are frozen, so each collection scans only what the step made since.

    Except where the program turned the collector off (``gc.disable()``, as some trainers and
    simulators do for speed): there its reference cycles are never freed, and a collection of ours
    would hide what the program keeps. The collection still runs (a full one empties the
    interpreter's free lists, which would otherwise fill for dozens of steps and read as growth),
    but what it finds unreachable is kept, in :attr:`uncollected`, as the program would keep it
    (never freed), and :attr:`collector_off` says so.
    """

    def __init__(self, device: str, watched: tuple[Any, ...], track_tensors: bool = False) -> None:
        """``watched``: the resources to read (:class:`leaklab.resources.Resource`, resolved by the
        caller: :func:`leaklab.resources.resolve`)."""
        self.device = device
        self.kind = device.split(":", 1)[0]
        self.watched = tuple(watched)
        self.resources = tuple(r.name for r in self.watched)
        self.track_tensors = track_tensors  # count CPU tensors even when not watched (attribution needs them)
        self.tensors: LiveTensorBytes | None = None
        self.garbage = Garbage()
        self.collector_off = False  # a reading found the program's garbage collector turned off
        self.uncollected: list[Any] = []  # ... and what its collections found unreachable, kept
        self._own_shared = True  # scan our own descriptors until a scan finds none
        # Peaks reset at every reading: the CUDA allocator's own (the CPU tensor counter's resets as it is read).
        self._resets_peak = any(r.resets and not r.tensor_counter for r in self.watched)
        self._counts_tensors = any(r.tensor_counter for r in self.watched)
        self._tracks_tensor_peak = any(r.tensor_counter and r.resets for r in self.watched)
        self.heap_after_collect = 0
        self._garbage_seen = False  # whether a collection has found reference cycles yet
        self._cuda_reader: Callable[[], dict[str, Any]] | None = None
        self.mapped_files = MappedFiles()
        # What forked workers make of their own: sampled in each one from its start (leaklab.worker_blocks).
        self.worker_blocks = WorkerBlocks() if any(r.name == "worker_objects" for r in self.watched) else None

    def read_cuda_stats(self) -> dict[str, Any]:
        """The CUDA caching allocator's counters, nested (see :func:`cuda_stats_reader`)."""
        if self._cuda_reader is None:
            self._cuda_reader = cuda_stats_reader(self.device)
        return self._cuda_reader()

    def __enter__(self) -> Probe:
        gc.freeze()
        if self.worker_blocks is not None:
            self.worker_blocks.start()
        if self.kind == "cuda":
            warm_up_cuda(self.device)
        if self._counts_tensors or (self.track_tensors and self.kind == "cpu"):
            # Sites are recorded only once attribution starts (after the measured steps).
            self.tensors = LiveTensorBytes(track_peak=self._tracks_tensor_peak)
            self.tensors.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tensors is not None:
            self.tensors.__exit__(None, None, None)
        self.uncollected.clear()  # garbage again, as the program left it
        gc.unfreeze()
        if self.worker_blocks is not None:
            self.worker_blocks.stop()

    def kept_garbage(self) -> list[Any]:
        """What a holder walk must never follow: the garbage kept for a program whose collector is
        off (held by nothing of the program's), and the list that keeps it."""
        return [self.uncollected, *self.uncollected]

    def collect(self) -> Garbage:
        """Run the garbage collector and say what it freed; the heap after it is kept for the
        reading that follows.

        A heap read costs several µs in a CUDA process (glibc walks every arena), so the heap
        before the collection, which only says how many bytes the garbage held, is read once a
        collection has found garbage: a step that makes reference cycles makes them every step,
        and the one sample that found them first records its objects without their bytes.
        """
        if not gc.isenabled():
            self.collector_off = True
            saved, flags = len(gc.garbage), gc.get_debug()
            gc.set_debug(flags | gc.DEBUG_SAVEALL)  # found unreachable, appended to gc.garbage, not freed
            try:
                gc.collect()
            finally:
                gc.set_debug(flags)
            self.uncollected.extend(gc.garbage[saved:])
            del gc.garbage[saved:]
            self.heap_after_collect = host_heap_bytes()
            self.garbage = Garbage()
            return self.garbage
        heap = host_heap_bytes() if self._garbage_seen else None
        objects = gc.collect()
        self.heap_after_collect = host_heap_bytes()
        self._garbage_seen = self._garbage_seen or objects > 0
        freed = max(0, heap - self.heap_after_collect) if objects and heap is not None else 0
        self.garbage = Garbage(objects, freed)
        return self.garbage

    def sample(self, only: list[str] | None = None) -> dict[str, int]:
        """One reading of every watched resource (or ``only`` these), after collecting garbage."""
        self.collect()
        reading = Reading(self)
        read = [resource for resource in self.watched if only is None or resource.name in only]
        readings = {resource.name: int(resource.read(reading)) for resource in read}
        if only is not None and not any(resource.tensor_counter for resource in read):
            self.prune()
        if self._resets_peak:
            torch.cuda.reset_peak_memory_stats(self.device)
        return readings

    @contextlib.contextmanager
    def tensors_paused(self, only: Sequence[str]) -> Iterator[bool]:
        """The CPU tensor counter off while only ``only`` are read, where none of them is a tensor
        counter: its dispatch mode sees every operator (a step of small operators runs several times
        slower under it), and a long pass reads one or two series for up to hundreds of steps. What
        it counted stays counted; storages made while it is off are not (none of the series read
        then counts them, and the series that did were decided before). Yields whether it is off."""
        counted = {r.name for r in self.watched if r.tensor_counter}
        if self.tensors is None or counted & set(only):
            yield False
            return
        self.prune()
        self.tensors.__exit__(None, None, None)
        try:
            yield True
        finally:
            self.tensors.__enter__()

    def prune(self) -> None:
        """Drop the tensor counter's dead storages where it is not read: unread, they would pile
        up on the heap and in Python's objects (a DataLoader fix grew by KiBs a step through a long
        pass without this)."""
        if self.tensors is not None:
            self.tensors.live_bytes()

    def shared_memory(self, children: list[int]) -> int:
        """Bytes of /dev/shm files held by this process and ``children``, each file once."""
        # Our own descriptors (~100 in a CUDA process, ~120 µs to stat) can only gain a
        # shared-memory file from a child or from a scan that already found one: skip them
        # while there are neither.
        own = shared_memory_files([os.getpid()]) if self._own_shared or children else {}
        self._own_shared = bool(own)
        return sum({**own, **shared_memory_files(children)}.values())

    def unfreeze(self) -> None:
        """Let the collector see everything again (one full, slower collection follows)."""
        gc.unfreeze()

    def freeze_existing(self) -> None:
        """Collect, then freeze everything alive: later collections scan only what came after."""
        gc.collect()
        gc.freeze()

    def settle(self, clear_workspaces: bool = False) -> None:
        """Collect garbage (cycles included) and wait for the device, before a reference reading.

        ``clear_workspaces`` drops cuBLAS/cuBLASLt workspaces, which the first matmul of a shape
        family allocates and keeps for the process, and empties the caching allocator; PyTorch's
        CudaMemoryLeakCheck does the same around its before/after comparison. Not before the
        baseline: the next step would allocate them again and look like growth.
        """
        gc.collect()
        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)
            if clear_workspaces and hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
                torch._C._cuda_clearCublasWorkspaces()  # no public API clears them
            if clear_workspaces:
                # Each run starts from an empty cache, so its reserved memory does not depend on
                # what earlier runs in the process left cached.
                torch.cuda.empty_cache()
        # A reference reading follows: peaks start here, not with what ran before (earlier runs
        # in the process, the workspaces just cleared).
        if self._resets_peak:
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.tensors is not None and self.tensors.track_peak:
            self.tensors.take_peak()


def storage_key(tensor: torch.Tensor) -> int:
    """The identity of a tensor's storage, as :class:`LiveTensorBytes` keys it (a sparse tensor:
    its values' storage)."""
    parts = dense_parts(tensor)
    return StorageRef(parts[-1].untyped_storage()).cdata if parts else id(tensor)


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


__all__ = [
    "Garbage", "HOST_HEAP_SOURCE", "LiveTensorBytes", "Probe", "Reading", "cuda_usable", "dense_parts", "device_counters",
    "host_heap_bytes", "is_user_file", "release_free_heap", "live_children", "pinned_host_bytes", "storage_key", "user_stack",
    "warm_up_cuda", "worker_memory_bytes",
]
