"""The resources leaklab watches: each one is one object, with every fact about it in one place.

A resource says what it is, where it can be read, how to read it (from a :class:`Reading`, one
per sample, so that costly reads such as the CUDA allocator's stats or the list of child
processes happen once however many resources need them), how its counter moves (``exact``
counters change only when something is allocated or freed, by at least ``quantum``; the others
move with allocator noise), the smallest cache worth calling a plateau, the budget past which a
run is stopped, how much may stay behind after the step is dropped, and its rank in the
headline (the most specific resource is named first: a CPU tensor leak also grows the heap).

It also owns what the rest of the tool needs to know of it: what a census reads to name its
growth (``census``), what holds a leak that lives in it (``holder``, for the resemblance), how
much of it there is to run out of (``capacity``), whether it needs the CPU tensor counter, and
how a pass treats it (``long_pass``, ``long_growth``). Adding a resource is one new object in
:data:`ALL` and its test.
"""

from __future__ import annotations

import os
import resource as rlimits
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

from leaklab.measure import (
    Reading,
    pinned_host_bytes,
    resident_anonymous_bytes,
    thread_count,
)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def format_bytes(value: float) -> str:
    """Human-readable bytes with a sign where it matters: 2.0 MiB, -512 B."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= size:
            return f"{sign}{value / size:.1f} {unit}"
    return f"{sign}{value:.0f} B"


@dataclass(frozen=True)
class Resource:
    name: str
    description: str
    source: str                       # what the reading comes from, for the README and --help
    devices: tuple[str, ...]          # device types where it is watched by default
    read: Callable[[Reading], int]
    exact: bool                       # changes only by allocation/free: decide on consistency, not size
    quantum: int                      # the smallest change the counter shows
    floor: float                      # slowest growth per step called a trend (noisy counters only)
    plateau_min: float                # a rise smaller than this that stops is warm-up, not a cache
    budget: int | None                # stop the run once the series passes this above its start
    release_tolerance: int | None     # may stay behind after the step is dropped (None: not checked)
    rank: int                         # headline order: lower is more specific
    holds_tensors: bool = False       # tensor storages live here (attribution can name a line)
    cache: bool = False               # a cache: a jump that stays is a cache filling, not a lazy initialisation
    unit: str = "B"
    judged: bool = True               # False: shown, never part of the verdict (a peak)
    resets: bool = False              # a figure per step, reset at every reading (a peak): its trend
                                      # starts at the first measured step and is never shifted
    optional: bool = False            # watched only when asked for (costly, or CPU tensors on CUDA)
    long_pass: bool = False           # a steady rise under the floor is watched through a long pass
                                      # (leaklab.verdict.creeps) rather than called bounded
    long_growth: bool = False         # growth in this counter alone is watched through that long pass too,
                                      # and must keep its rate through it (leaklab.verdict.confirm_creep)
    census: str | None = None         # what a census reads to name its growth (leaklab.growth): objects,
                                      # threads, descriptors, mappings; None: its growth is not named
    holder: str | None = None         # what holds a leak that lives here, whatever the naming says
                                      # (leaklab.signature): workers, threads, descriptors, mappings
    capacity: Callable[[str], float | None] | None = None  # how much there is to run out of, on a device
    tensor_counter: bool = False      # read from the CPU tensor counter (leaklab.measure.LiveTensorBytes)
    unavailable: Callable[[], str | None] | None = None    # why this torch or machine cannot read it, if so
    settles: bool = False             # the process's own threads free it after the step returns (NCCL's
                                      # watchdog): growth is read again after a pause (leaklab.verdict.settled)
    process: str = ""                 # the process whose memory it reads, where several are judged together
                                      # (a rank under torchrun): growth is "beside" it only in that process

    def format(self, value: float) -> str:
        """A figure in this resource's unit, as a person writes it, the same in every output: bytes
        as ever (2.0 MiB); a count whole where it is whole to a tenth or at least 10 (a rate of
        192.3 blocks a step is 192), to a tenth below that (0.5 threads a step: one every other
        step), and singular for one (``1 thread``, ``-1 process``)."""
        if self.unit == "B":
            return format_bytes(value)
        whole = round(value)
        if abs(value - whole) < 0.05 or abs(value) >= 10:
            figure, one = f"{whole:,}", abs(whole) == 1
        else:
            figure, one = f"{value:,.1f}", False
        return f"{figure} {_singular(self.unit) if one else self.unit}"


def _singular(unit: str) -> str:
    """``threads`` -> ``thread``, ``processes`` -> ``process``, ``fds`` -> ``fd``."""
    if unit.endswith("sses"):
        return unit[:-2]
    return unit[:-1] if unit.endswith("s") else unit


# --------------------------------------------------------------------------- readers
def _device_allocated(reading: Reading) -> int:
    return reading.cuda_stats()["allocated_bytes"]["all"]["current"]


def _device_reserved(reading: Reading) -> int:
    return reading.cuda_stats()["reserved_bytes"]["all"]["current"]


def _device_peak(reading: Reading) -> int:
    return reading.cuda_stats()["allocated_bytes"]["all"]["peak"]


def _cpu_tensors(reading: Reading) -> int:
    return reading.probe.tensors.live_bytes() if reading.probe.tensors is not None else 0


def _cpu_tensors_peak(reading: Reading) -> int:
    return reading.probe.tensors.take_peak() if reading.probe.tensors is not None else 0


def _host_heap(reading: Reading) -> int:
    return reading.heap()


def _python_objects(reading: Reading) -> int:
    # pymalloc serves every object of 512 bytes or less from its own arenas, which the C heap's
    # counters never see; this is its own count of blocks in use. The type attribute cache is
    # emptied first, as CPython's own leak hunter does (Lib/test/libregrtest/refleak.py): under a
    # dispatch mode torch looks up "__torch_dispatch__" by a fresh string per operator, and each
    # of the cache's 4096 slots keeps the last such string alive, a creep of ~1 block a step over
    # thousands of steps that would read as a leak.
    _CLEAR_TYPE_CACHE()
    return sys.getallocatedblocks()


# Python 3.13 deprecates _clear_type_cache for _clear_internal_caches, which clears it too.
_CLEAR_TYPE_CACHE = getattr(sys, "_clear_internal_caches", None) or sys._clear_type_cache


def _pinned_host(reading: Reading) -> int:
    return pinned_host_bytes(cuda_checked=True) or 0  # a CUDA-only resource: the probe checked CUDA


def _host_rss(reading: Reading) -> int:
    return resident_anonymous_bytes()


def _worker_memory(reading: Reading) -> int:
    return reading.workers()[0]


def _worker_objects(reading: Reading) -> int:
    return reading.worker_blocks()


def _worker_resident(reading: Reading) -> int:
    return reading.workers()[1]


def _shared_memory(reading: Reading) -> int:
    return reading.probe.shared_memory(reading.children())


def _children(reading: Reading) -> int:
    return len(reading.children())


def _threads(reading: Reading) -> int:
    return thread_count(["self", *reading.children()])


def _mapped_files(reading: Reading) -> int:
    return reading.probe.mapped_files.count(reading.statm())


def _mapped_file_bytes(reading: Reading) -> int:
    return reading.probe.mapped_files.resident(reading.statm())


def _count_fds_by_listing() -> int:
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the descriptor listdir itself holds
    except OSError:
        return 0


def _count_fds_by_stat() -> int:
    return os.stat("/proc/self/fd").st_size


def _fd_counter() -> Callable[[], int]:
    """Since Linux 6.2 the size of /proc/<pid>/fd is its number of open descriptors: one stat
    instead of listing one entry per descriptor (the listing was the costliest reading on the
    H200, measured by ``leaklab bench``). Chosen once, where both agree, so that one run never
    mixes the two."""
    try:
        if os.stat("/proc/self/fd").st_size == _count_fds_by_listing() > 0:
            return _count_fds_by_stat
    except OSError:
        pass
    return _count_fds_by_listing


count_open_fds = _fd_counter()


def _open_fds(reading: Reading) -> int:
    return count_open_fds()


# --------------------------------------------------------------------------- capacities
def _device_memory(device: str) -> float | None:
    return float(torch.cuda.get_device_properties(torch.device(device)).total_memory)


def _host_memory(device: str) -> float | None:
    return float(psutil.virtual_memory().total)


def _descriptor_limit(device: str) -> float | None:
    return float(rlimits.getrlimit(rlimits.RLIMIT_NOFILE)[0])


def _kernel_limit(path: str) -> Callable[[str], float | None]:
    def limit(device: str) -> float | None:
        try:
            return float(Path(path).read_text())
        except (OSError, ValueError):
            return None

    return limit


def _pinned_unavailable() -> str | None:
    return "pinned_host: this torch does not report pinned host memory" if pinned_host_bytes() is None else None


DEVICE_ALLOCATED = Resource(
    "device_allocated", "device memory held by live tensors (torch.cuda.memory_allocated)",
    "the CUDA caching allocator's allocated bytes (torch.cuda.memory_stats)", ("cuda",), _device_allocated,
    exact=True, quantum=512, floor=0, plateau_min=64 * KiB, budget=512 * MiB, release_tolerance=64 * KiB, rank=0,
    holds_tensors=True, census="objects", capacity=_device_memory)
CPU_TENSORS = Resource(
    "cpu_tensors", "bytes of live CPU tensor storages, autograd-saved ones included",
    "exact live CPU storage bytes, counted by a TorchDispatchMode through weak references (set aside while torch.jit traces: "
    "what a trace makes goes uncounted)", ("cpu",), _cpu_tensors,
    exact=True, quantum=1, floor=0, plateau_min=64 * KiB, budget=512 * MiB, release_tolerance=64 * KiB, rank=1,
    holds_tensors=True, census="objects", capacity=_host_memory, tensor_counter=True)
PINNED_HOST = Resource(
    "pinned_host", "pinned host memory held by PyTorch's host caching allocator",
    "torch.cuda.host_memory_stats()", ("cuda",), _pinned_host,
    exact=True, quantum=1, floor=0, plateau_min=1 * MiB, budget=1 * GiB, release_tolerance=None, rank=2, cache=True, capacity=_host_memory, unavailable=_pinned_unavailable)
SHARED_MEMORY = Resource(
    "shared_memory", "shared-memory files (/dev/shm) held open by this process and its children, e.g. "
    "batches in flight from DataLoader workers",
    "/dev/shm files held open by the process and its children", ("cpu", "cuda"), _shared_memory,
    exact=False, quantum=4 * KiB, floor=0, plateau_min=1 * MiB, budget=2 * GiB, release_tolerance=0, rank=3, holder="workers", capacity=_host_memory)
WORKER_MEMORY = Resource(
    "worker_memory", "unique memory (USS) of child processes such as DataLoader workers",
    "USS of child processes (psutil): copy-on-write growth in DataLoader workers", ("cpu", "cuda"), _worker_memory,
    # Workers' memory creeps while they warm up (allocator arenas, first touches of pages): ~100-170
    # KiB per step over their first dozens of steps with nothing leaking, measured on the CI machine.
    # On a busy machine they rose by 2.4 MiB within a bounded case's measured steps (flake gate):
    # a smaller rise that stops is their warm-up, not a cache.
    # No long pass under the floor: a worker's copy-on-write touches of its dataset rise steadily
    # through a whole epoch (num_workers_gpu_memory's fix grew through a long pass, tried).
    exact=False, quantum=4 * KiB, floor=256 * KiB, plateau_min=4 * MiB, budget=1 * GiB, release_tolerance=0, rank=4, holder="workers", capacity=_host_memory)
# Opt-in: counted in each forked worker itself, where its unique memory cannot tell a cache of a few
# objects a step from its warm-up (tools/worker_objects: over 400 steps, held-out worker caches and
# pool workers that keep results gained tens of blocks a step per worker, bounded workers a few while
# warming up and none after). Judged as python_objects is: its growth alone is watched through the
# long pass and must keep its rate there. Not a default yet: a bounded DataLoader's workers gain
# blocks steadily for a whole epoch at a falling rate, and some held-out worker leaks' rates fall as
# much in their first steps, so within a check's steps the long pass does not yet tell them apart
# (results/worker-objects/check-*.json). Ranked with worker_memory: where both grow, the bytes come first.
WORKER_OBJECTS = Resource(
    "worker_objects", "blocks of Python's object allocator that forked worker processes (DataLoader workers, "
    "multiprocessing pools) made since they started",
    "sys.getallocatedblocks() in each forked multiprocessing child, less what it inherited (leaklab.worker_blocks)",
    ("cpu", "cuda"), _worker_objects,
    exact=False, quantum=1, floor=4, plateau_min=4096, budget=50_000_000, release_tolerance=None, rank=4,
    long_growth=True, optional=True, unit="blocks", holder="workers")
# Shown, never judged: what it says is how workers' memory grows. A worker that writes to pages it
# shares with this process (the reference counts of a dataset's Python objects) copies them: its
# unique memory grows and its resident memory does not, the pages were resident already. A worker
# that makes memory of its own (a cache) grows both, unless it reuses free heap pages it inherited
# resident (then it copies them too): the check gives the heap's free pages back before the factory
# forks anything (leaklab.measure.release_free_heap). results/worker-resident has both readings.
# Anonymous memory only: a memmapped file's pages a worker reads are resident as it touches them.
# Judged with a 64 KiB/step floor (555b04f), it caught worker caches under worker_memory's floor, but
# beside two busy processes num_workers_gpu_memory's four workers warmed up by 72-100 KiB/step in
# its bounded runs (results/flake-gate/gate-n2-busy-2runs-53092c5.json): shown only again. The pair to
# judge it on next: tests/data/edge_steps.py's worker_cache_128k and its twin worker_reads_mapped_file (the
# cache reads bounded when idle, and grows beside two busy processes as the workers' warm-up adds to it).
WORKER_RESIDENT = Resource(
    "worker_resident", "resident anonymous memory (RssAnon) of child processes: what they make of their own, "
    "not the pages they copy from this process",
    "RssAnon of child processes (/proc/<pid>/status), read with worker_memory", ("cpu", "cuda"), _worker_resident,
    exact=False, quantum=4 * KiB, floor=64 * KiB, plateau_min=4 * MiB, budget=None, release_tolerance=None, rank=15,
    judged=False, holder="workers", capacity=_host_memory)
CHILDREN = Resource(
    "children", "child processes of this process that are running (multiprocessing's own helpers left out)",
    "/proc/<pid>/task/<pid>/children and multiprocessing.active_children()", ("cpu", "cuda"), _children,
    # No release check here: the run stops the step's children itself and reports them (children_left).
    exact=True, quantum=1, floor=0, plateau_min=1, budget=64, release_tolerance=None, rank=5, unit="processes", holder="workers")
THREADS = Resource(
    "threads", "threads of this process and of its child processes (Python's and native ones)",
    "the entries of /proc/<pid>/task of the process and its children", ("cpu", "cuda"), _threads,
    # A thread that was just joined may still be counted for a moment (seen: 1 reading in 50),
    # a blip that a slope through the series does not follow.
    exact=True, quantum=1, floor=0, plateau_min=8, budget=1024, release_tolerance=None, rank=6, unit="threads", census="threads", holder="threads", capacity=_kernel_limit("/proc/sys/kernel/threads-max"))
MAPPED_FILES = Resource(
    "mapped_files", "file-backed memory mappings of this process (mmap, torch.load(mmap=True), from_file)",
    "the file-backed lines of /proc/self/maps (/dev/shm's left to shared_memory), listed again only when "
    "the virtual size in /proc/self/statm changed", ("cpu", "cuda"),
    _mapped_files,
    # Loading a library maps it in several pieces: a lazily imported extension is a jump, not a trend.
    exact=True, quantum=1, floor=0, plateau_min=16, budget=16384, release_tolerance=None, rank=7, unit="mappings", census="mappings", holder="mappings", capacity=_kernel_limit("/proc/sys/vm/max_map_count"))
MAPPED_FILE_BYTES = Resource(
    "mapped_file_bytes", "resident pages of file-backed mappings (touched pages of mapped files and libraries)",
    "RssFile: in /proc/self/status, read again only when statm's shared pages changed", ("cpu", "cuda"),
    _mapped_file_bytes,
    # Code pages of libraries are faulted in when a code path first runs: one-off jumps of a few
    # pages, which a slope through the series does not follow.
    exact=True, quantum=4 * KiB, floor=0, plateau_min=1 * MiB, budget=1 * GiB, release_tolerance=None, rank=8, census="mappings", holder="mappings", capacity=_host_memory)
OPEN_FDS = Resource(
    "open_fds", "file descriptors this process holds open (files, sockets, pipes)",
    "/proc/self/fd", ("cpu", "cuda"), _open_fds,
    exact=True, quantum=1, floor=0, plateau_min=8, budget=4096, release_tolerance=None, rank=9, unit="fds", census="descriptors", holder="descriptors", capacity=_descriptor_limit)
DEVICE_RESERVED = Resource(
    "device_reserved", "device memory reserved by the caching allocator (torch.cuda.memory_reserved)",
    "the CUDA caching allocator's reserved bytes (same stats read)", ("cuda",), _device_reserved,
    # No budget: reserved memory is a cache that one resnet18 step at batch 64 fills past 2 GiB on
    # the H200 (measured); a leak of tensors is stopped by device_allocated's budget.
    exact=False, quantum=2 * MiB, floor=0, plateau_min=2 * MiB, budget=None, release_tolerance=None, rank=10, cache=True, capacity=_device_memory)
# One reading walks every pymalloc pool: ~60-90 µs in a process running torch (measured), the
# costliest reading, and watched by default all the same: a leak of small Python objects (hooks,
# handlers, closures kept per step) is seen by nothing else.
# Counted exactly, but judged as a noisy counter with a floor of half a block a step: the
# interpreter moves it by a block now and then with nothing kept (a heap int passing 256, a
# reference cycle frozen with the baseline and dying after it, which only a full collection
# could free), and those blips, a few in a run, made a slope of 0.1-0.2 blocks/step through a
# bounded series; one object kept per step is at least one block a step.
PYTHON_OBJECTS = Resource(
    "python_objects", "blocks of Python's object allocator: every Python object (a small one is one block of "
    "pymalloc's pools, a larger one one malloc'd block)",
    "sys.getallocatedblocks(), after emptying the type attribute cache", ("cpu", "cuda"),
    # Where it alone grows, a long pass decides: objects a dataset makes lazily per item (pathlib's
    # cached strings, torch's cache of shared storages between its clean-ups) rise by blocks a step
    # for a whole epoch, then stop or fall back; a leak keeps its rate.
    _python_objects, exact=False, quantum=1, floor=0.5, plateau_min=4096, budget=50_000_000, release_tolerance=None,
    long_growth=True,
    # After the heap in the headline: a C library's cache keyed by a Python object (oneDNN's per
    # shape) grows both, by kilobytes of heap and a block of objects; a leak of Python objects
    # alone leaves the heap under its floor, and its naming line says what the objects are.
    rank=12, unit="blocks", census="objects")
# The heap drifts upward by a few hundred bytes per step for dozens of steps in real steps with
# nothing leaking (DataLoaders, pinned-memory loops on the H200: 185-477 B/step; and while cpu_tensors
# is counted, a TorchDispatchMode on every operator, ~0.9 KiB/step on fixes/lru_cache_unbounded.py,
# flat without it). A floor of 1 KiB/step keeps those from reading as leaks within the run's steps.
# A rise under it that is steady (no noise: a C extension's 256 B kept per step in a no-op step) is
# watched through a long pass: a DataLoader's heap falls back within it (a saw-tooth), a leak does not.
# It settles: NCCL's watchdog thread frees each finished collective's record (~1.6 KiB) at its
# next poll, so a rank's heap read right after its steps rises by that much a step and gives it
# back after a pause (tools/h200_nccl_heap.py on the H200: 1.66 KiB per collective, 176 B paused).
HOST_HEAP = Resource(
    "host_heap", "bytes in use in the process's C heap (glibc mallinfo2)",
    "glibc mallinfo2() bytes in use (RSS would hide freed-but-resident pages)", ("cpu", "cuda"), _host_heap,
    exact=False, quantum=16, floor=1 * KiB, plateau_min=1 * MiB, budget=1 * GiB, release_tolerance=None, rank=11,
    long_pass=True, census="objects", capacity=_host_memory, settles=True)
def _peak(name: str, description: str, source: str, device: str, read: Callable[[Reading], int], quantum: int,
          **facts: object) -> Resource:
    """A peak: the most a tensor counter held during each step, reset at every reading; shown,
    never judged, and watched only when asked for (see each one's reason below)."""
    return Resource(name, description, source, (device,), read, exact=True, quantum=quantum, floor=0,
                    plateau_min=64 * KiB, budget=None, release_tolerance=None, rank=13, judged=False, resets=True,
                    optional=True, **facts)


# Opt-in: resetting the peak after every reading changes what the step's own
# torch.cuda.max_memory_allocated() returns (fragmentation's reserved/peak metric did).
DEVICE_PEAK = _peak(
    "device_peak", "the most device memory live tensors held at any moment of the step (reset every step)",
    "the CUDA caching allocator's peak allocated bytes, reset after each reading", "cuda", _device_peak, 512, capacity=_device_memory)
# Opt-in: keeping the peak walks the live storages at every allocation (a step with many small
# tensors slows down).
CPU_TENSORS_PEAK = _peak(
    "cpu_tensors_peak", "the most bytes of CPU tensor storages alive at any moment of the step (reset every step)",
    "cpu_tensors' counter, read after every new storage", "cpu", _cpu_tensors_peak, 1, capacity=_host_memory, tensor_counter=True)
# Opt-in: resident memory moves with first touches of pages, thread stacks and the allocator
# giving pages back, so a default watch would call noise growth; where the heap's bytes in use
# are flat while the process's memory climbs (malloc arenas fragmented by many threads), this is
# the reading that shows it.
HOST_RSS = Resource(
    "host_rss", "resident anonymous memory of the process: what the OS charges it, free-but-held heap included",
    "RssAnon in /proc/self/status", ("cpu", "cuda"), _host_rss,
    exact=False, quantum=4 * KiB, floor=64 * KiB, plateau_min=4 * MiB, budget=2 * GiB, release_tolerance=None, rank=14,
    optional=True, capacity=_host_memory)

ALL: tuple[Resource, ...] = (DEVICE_ALLOCATED, CPU_TENSORS, PINNED_HOST, SHARED_MEMORY, WORKER_MEMORY, WORKER_OBJECTS, WORKER_RESIDENT, CHILDREN,
                             THREADS, MAPPED_FILES, MAPPED_FILE_BYTES, OPEN_FDS, DEVICE_RESERVED, PYTHON_OBJECTS, HOST_HEAP, DEVICE_PEAK, CPU_TENSORS_PEAK, HOST_RSS)
BY_NAME: dict[str, Resource] = {resource.name: resource for resource in ALL}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def get(name: str) -> Resource:
    """The resource called ``name``; a ValueError that lists the known ones otherwise."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown resource {name!r}; known: {', '.join(NAMES)}") from None


def device_type(device: str) -> str:
    """'cuda' for 'cuda' and 'cuda:N', 'cpu' for 'cpu'."""
    return device.split(":", 1)[0]


def defaults(device: str) -> tuple[Resource, ...]:
    """What a run on ``device`` watches unless told otherwise."""
    kind = device_type(device)
    return tuple(r for r in ALL if kind in r.devices and not r.optional and not (r.unavailable and r.unavailable()))


def resolve(device: str, names: tuple[str, ...] = ()) -> tuple[Resource, ...]:
    """The resources a run on ``device`` watches: those ``names`` (a ValueError for an unknown
    one), or the defaults."""
    return tuple(get(name) for name in names) if names else defaults(device)


def readable(resource: Resource, device: str) -> str | None:
    """Why ``resource`` cannot be read for a run on ``device``, or None when it can."""
    kind = device_type(device)
    if kind not in resource.devices and resource.devices == ("cuda",):
        return f"{resource.name} is a CUDA counter: it needs --device cuda"
    return resource.unavailable() if resource.unavailable else None
