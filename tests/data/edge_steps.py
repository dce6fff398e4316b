"""Steps at the edges of the verdicts, and hostile ones. Each function is a factory: (device) -> step.
A fresh module (leaklab loads scripts fresh) gives every factory its own state."""

import collections
import concurrent.futures
import functools
import gc
import mmap
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
import weakref

import torch

kept = []


def noop(device):
    return lambda: None


def sleeps_1ms(device):
    """A bounded step that takes 1 ms (what a check costs beyond the steps themselves)."""
    return lambda: time.sleep(0.001)


def bytes_512(device):
    return lambda: kept.append(bytes(512))  # 545 B: served by malloc, seen by host_heap (under its floor) and python_objects


def bytes_4k(device):
    return lambda: kept.append(bytes(4096))  # over the heap's 1 KiB/step floor


def c_heap_256(device):
    # A C extension that keeps 256 B of malloc'd memory per step: seen by host_heap only.
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    return lambda: libc.malloc(256) and None  # the pointer is dropped: no Python object is kept


def bytes_256(device):
    return lambda: kept.append(bytes(256))  # served by pymalloc: seen by python_objects only


def tensor_4b(device):
    return lambda: kept.append(torch.zeros(1, device=device))  # 4 B of storage per step


def block_512(device):
    return lambda: kept.append(torch.zeros(128, device=device))  # one 512 B CUDA allocator block


def every_third_1k(device):
    calls = [0]

    def step():
        calls[0] += 1
        if calls[0] % 3 == 0:
            kept.append(torch.zeros(256, device=device))

    return step


def starts_late(device):
    """Leaks 1 KiB of tensors per step from its 15th call on."""
    calls = [0]

    def step():
        calls[0] += 1
        if calls[0] >= 15:
            kept.append(torch.zeros(256, device=device))

    return step


def first_torch_call_late(device):
    """Leaks nothing; its first torch call comes after warm-up (torch's lazy initialisation)."""
    calls = [0]

    def step():
        calls[0] += 1
        if calls[0] >= 9:
            torch.ones(3, device=device).sum()

    return step


def lazy_init_late(device):
    """Leaks nothing; at its 9th call it sets up 25 MiB of state once (as a lazy initialisation does)."""
    calls = [0]
    state = []

    def step():
        calls[0] += 1
        if calls[0] == 9:
            state.append(bytearray(25 * 2**20))

    return step


def _mlp(device, leak_bytes=0):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64, device=device), torch.randint(0, 10, (32,), device=device)

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if leak_bytes:
            kept.append(torch.zeros(leak_bytes // 4, device=device))

    return step


def mlp(device):
    return _mlp(device)


def mlp_leak_512(device):
    return _mlp(device, 512)


def cache_fills(device):
    """A cache of 12 entries that fills over the first steps (past warm-up), then stops."""
    cache = collections.OrderedDict()
    calls = [0]

    def step():
        calls[0] += 1
        cache[calls[0] % 12] = torch.zeros(64 * 1024, device=device)

    return step


def periodic_spike(device):
    """Every 4th step allocates and frees a large buffer."""
    calls = [0]

    def step():
        calls[0] += 1
        if calls[0] % 4 == 0:
            torch.ones(4 * 2**20, device=device).sum()

    return step


def variable_batch(device):
    """Batch sizes from a seeded generator; the last output is kept (a level that moves, no trend)."""
    model = torch.nn.Linear(64, 64).to(device)
    sizes = torch.Generator().manual_seed(0)
    last = {}

    def step():
        batch = int(torch.randint(8, 256, (1,), generator=sizes))
        last["out"] = model(torch.randn(batch, 64, device=device)).detach()

    return step


def decreasing(device):
    held = [torch.zeros(1024, device=device) for _ in range(40)]

    def step():
        if held:
            held.pop()

    return step


def random_temporaries(device):
    sizes = torch.Generator().manual_seed(1)

    def step():
        n = int(torch.randint(1, 1 << 20, (1,), generator=sizes))
        torch.ones(n, device=device).sum()
        bytearray(n)

    return step


class Record:
    """A per-step record that points back to itself (a parent link): freed only by the collector."""

    def __init__(self, loss):
        self.me = self
        self.loss = loss
        self.scratch = bytearray(100_000)


def cyclic_garbage(device):
    model = torch.nn.Linear(64, 64).to(device)
    x = torch.randn(32, 64, device=device)
    recent = collections.deque(maxlen=4)  # bounded: only the last 4 records are kept

    def step():
        loss = model(x).sum()
        loss.backward()
        recent.append(Record(loss.item()))

    return step


def cyclic_garbage_kept(device):
    model = torch.nn.Linear(64, 64).to(device)
    x = torch.randn(32, 64, device=device)
    records = []  # unbounded: every record stays reachable

    def step():
        loss = model(x).sum()
        loss.backward()
        records.append(Record(loss.item()))

    return step


def collector_off_cycles(device):
    """The twin above with automatic collection turned off, as some trainers do for speed: each
    dropped record is a cycle the program never frees (run in a fresh process: it changes it)."""
    gc.disable()
    return cyclic_garbage(device)


def collector_off_no_cycles(device):
    """Collection turned off, and no cycle made: bounded (the interpreter's free lists, which a
    collection empties, fill over the first steps and must not read as growth)."""
    gc.disable()
    w = torch.randn(64, 64, device=device)

    def step():
        return (w @ w).sum().item()

    return step


def exits(device):
    return lambda: sys.exit(0)


def exits_1(device):
    return lambda: sys.exit(1)


def interrupted(device):
    def step():
        raise KeyboardInterrupt

    return step


def starts_children(device):
    return lambda: kept.append(subprocess.Popen(["sleep", "600"]))


def factory_starts_a_daemon(device):
    """A runtime's daemon started while building (as MPI_Init starts orted), living with the process."""
    kept.append(subprocess.Popen(["sleep", "602"]))
    return lambda: None


def _slow_reader(queue):
    while True:
        queue.get()
        time.sleep(1.0)


def queue_backlog_at_exit(device):
    """A queue fed faster than its reader process drains it: at exit, Python joins the queue's
    feeder thread, which still holds the backlog for a reader that is gone."""
    queue = multiprocessing.get_context("fork").Queue()
    multiprocessing.get_context("fork").Process(target=_slow_reader, args=(queue,), daemon=True).start()
    return lambda: queue.put(bytes(256 * 1024))


def hangs(device):
    return lambda: time.sleep(3600)


def opens_files(device):
    return lambda: kept.append(os.open(os.devnull, os.O_RDONLY))


def big_leak(device):
    return lambda: kept.append(torch.zeros(50 * 2**20 // 4, device=device))  # 50 MiB per step


def small_strings(device):
    return lambda: kept.append([str(i) + "x" for i in range(100_000)])


def closure_per_step(device):
    """One closure kept per step (an event handler appended every epoch)."""
    handlers = []

    def step():
        epoch = len(handlers)
        handlers.append(lambda event: (epoch, event))

    return step


def hook_partial_per_step(device):
    """One functools.partial per step, kept in a module's forward-hook dict (a hook registered in
    every forward, its handle dropped)."""
    model = torch.nn.Linear(4, 4).to(device)

    def log_output(name, module, inputs, output):
        return None

    return lambda: model.register_forward_hook(functools.partial(log_output, "linear"))


class _Explainer:
    """An explainer per request (tensorwatch's Grad-CAM): its hook keeps every output it sees."""

    def __init__(self, model):
        self.outputs = []
        model.register_forward_hook(lambda module, inputs, output: self.outputs.append(output.detach().clone()))


def explainer_hook_per_step(device):
    """A forward hook registered with a new explainer every step, never removed: every hook left
    keeps its explainer's list of outputs, which the walk from the outputs that grew reaches first."""
    model = torch.nn.Linear(4, 4).to(device)
    inputs = torch.randn(2, 4, device=device)

    def step():
        _Explainer(model)
        model(inputs)

    return step


def _scratch_file(pages):
    folder = tempfile.mkdtemp(prefix="leaklab_edge_")
    path = os.path.join(folder, "data.bin")
    with open(path, "wb") as handle:
        handle.write(bytes(range(256)) * (pages * 16))
    return path, folder


def _remove_later(owner, path, folder):
    def remove():
        for leftover in (path, folder):
            try:
                (os.rmdir if leftover == folder else os.remove)(leftover)
            except OSError:
                pass

    weakref.finalize(owner, remove)


def mapped_page_per_step(device):
    """One 4 KiB page of a mapped file touched and kept per step (a mapping per shard kept)."""
    path, folder = _scratch_file(pages=1)
    maps = []

    def step():
        with open(path, "rb") as handle:
            view = mmap.mmap(handle.fileno(), 4096, access=mmap.ACCESS_READ)
        view[0]  # touch its one page: resident
        maps.append(view)

    _remove_later(step, path, folder)
    return step


def mapping_read_every_step(device):
    """One mapping opened once and read every step: its pages are resident, nothing is added."""
    path, folder = _scratch_file(pages=64)
    with open(path, "rb") as handle:
        view = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)

    def step():
        sum(view[::4096])  # a byte of every page: all of them resident from the first step on

    _remove_later(step, path, folder)
    return step


def file_opened_and_closed(device):
    """A file opened, read and closed every step."""
    path, folder = _scratch_file(pages=1)

    def step():
        with open(path, "rb") as handle:
            handle.read()

    _remove_later(step, path, folder)
    return step


def thread_per_step(device):
    """One thread started per step that never ends (it waits for a stop that never comes)."""
    stop = threading.Event()

    def step():
        threading.Thread(target=stop.wait, name="waits-forever", daemon=True).start()

    weakref.finalize(step, stop.set)
    return step


def thread_pool_reused(device):
    """A thread pool made once and given work every step."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)

    def step():
        list(pool.map(abs, range(-4, 4)))

    weakref.finalize(step, pool.shutdown, wait=False)
    return step


def per_item_cache_fills(device):
    """Bounded: a dataset that makes one small object per new item, for its first 60 items, then
    none (a cache filled lazily over a first epoch)."""
    made = {}
    calls = [0]

    def step():
        calls[0] += 1
        if calls[0] <= 60:
            made[calls[0]] = [calls[0], "item"]  # a list: not a record of plain data, so the long pass decides

    return step


def factory_fails(device):
    raise RuntimeError("no data here")


def step_without_device():
    """A step named where its factory was meant (leaklab check file.py:step_without_device)."""
    return None


def _resnet18(device, leak_bytes=0):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = 64 if device.startswith("cuda") else 4
    size = 224 if device.startswith("cuda") else 64
    inputs = torch.randn(batch, 3, size, size, device=device)
    targets = torch.randint(0, 1000, (batch,), device=device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
        if leak_bytes:
            kept.append(torch.zeros(leak_bytes // 4, device=device))

    return step


def resnet18(device):
    return _resnet18(device)


def resnet18_leak_512(device):
    return _resnet18(device, 512)


def _recent_outputs(device, maxlen):
    model = torch.nn.Linear(16, 16).to(device)
    x = torch.randn(4, 16, device=device)
    recent = collections.deque(maxlen=maxlen)  # the last outputs, for a moving average

    def step():
        recent.append(model(x).detach())  # 256 B a step until the deque is full

    return step


def deque_fills(device):
    """A deque with maxlen=60 of each step's output: it grows for 60 steps, then stays full."""
    return _recent_outputs(device, 60)


def deque_unbounded(device):
    """The same deque with no maxlen: it grows for ever."""
    return _recent_outputs(device, None)


def _mask_cache(device, maxsize):
    @functools.lru_cache(maxsize=maxsize)
    def mask(length):
        return torch.ones(length % 61 + 4, 64, device=device).tril()

    lengths = iter(range(10**9))

    def step():
        mask(next(lengths))  # a new key every step: cached until maxsize entries are held

    return step


def lru_cache_fills(device):
    """An lru_cache with maxsize=60 that sees a new argument every step: full after 60 steps."""
    return _mask_cache(device, 60)


def lru_cache_unbounded(device):
    """The same cache with maxsize=None: every argument's tensor is kept."""
    return _mask_cache(device, None)


def closures_until_step_50(device):
    """One closure kept per step for its first 50 calls, then none (a handler list that was
    filled during the first epoch only): its long pass stops early, once it stalls."""
    handlers = []

    def step():
        if len(handlers) < 50:
            epoch = len(handlers)
            handlers.append(lambda event: (epoch, event))

    return step


class _CachingRows(torch.utils.data.Dataset):
    """Rows a worker keeps a copy of once made: 16 KiB of its own memory per row."""

    def __init__(self):
        self.cache = {}

    def __len__(self):
        return 10**6

    def __getitem__(self, index):
        self.cache[index] = bytearray(16 * 1024)  # a new row every time: the worker's own memory grows
        return torch.tensor(index % 7, dtype=torch.float32)


def worker_cache_128k(device):
    """A DataLoader's 2 forked workers keep 128 KiB a step of their own memory (8 rows of 16 KiB):
    under worker_memory's floor, above worker_resident's."""
    loader = torch.utils.data.DataLoader(_CachingRows(), batch_size=8, num_workers=2, multiprocessing_context="fork")
    batches = iter(loader)

    def step():
        next(batches).sum().item()

    return step


class _MappedRows(torch.utils.data.Dataset):
    """Rows read from a file the workers map: its pages are resident in a worker once it reads them."""

    def __init__(self, path, row_bytes):
        self.path, self.row_bytes, self.view = path, row_bytes, None

    def __len__(self):
        return os.path.getsize(self.path) // self.row_bytes

    def __getitem__(self, index):
        if self.view is None:  # mapped in the worker, once
            with open(self.path, "rb") as handle:
                self.view = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        row = self.view[index * self.row_bytes:(index + 1) * self.row_bytes]
        return torch.frombuffer(bytearray(row), dtype=torch.uint8).float().mean()


def worker_reads_mapped_file(device):
    """The bounded twin: 2 forked workers read 8 new 16 KiB rows a step of a 32 MiB mapped file
    (a memmapped dataset's first epoch). Each page read is resident in the worker, but it is the
    file's, not memory the worker made: nothing grows."""
    path, folder = _scratch_file(pages=8 * 1024)
    loader = torch.utils.data.DataLoader(_MappedRows(path, 16 * 1024), batch_size=8, num_workers=2,
                                         multiprocessing_context="fork")
    batches = iter(loader)

    def step():
        next(batches).sum().item()

    _remove_later(step, path, folder)
    return step
