"""The measures against allocations whose size we know."""

import ctypes
import gc
import mmap
import os
import threading
import time

import pytest
import torch

from leaklab.measure import HOST_HEAP_SOURCE, LiveTensorBytes, Probe, host_heap_bytes, user_stack
from leaklab.resources import resolve


def test_counts_a_new_tensor_exactly_and_forgets_it_when_it_dies():
    with LiveTensorBytes() as tracker:
        base = tracker.live_bytes()
        x = torch.empty(1000, 250)  # 1,000,000 bytes of float32
        assert tracker.live_bytes() - base == 1_000_000
        view = x[10:20]
        assert tracker.live_bytes() - base == 1_000_000, "a view shares its base's storage"
        del x
        assert tracker.live_bytes() - base == 1_000_000, "the view still pins the whole storage"
        del view
        assert tracker.live_bytes() - base == 0


def test_counts_tensors_that_only_autograd_keeps():
    with LiveTensorBytes() as tracker:
        w = torch.randn(500, 500, requires_grad=True)      # 1,000,000 B
        base = tracker.live_bytes()
        x = torch.randn(500, 500)                           # 1,000,000 B
        y = (x @ w).relu()                                  # matmul out (freed) + relu out, saved
        loss = y.sum()
        del x, y                                            # only the graph keeps x and relu's output
        assert tracker.live_bytes() - base == 2_000_000 + 4  # x, relu output, the scalar loss
        loss.backward()                                     # frees the saved tensors, makes w.grad
        assert tracker.live_bytes() - base == 1_000_000 + 4
        del loss
        w.grad = None
        assert tracker.live_bytes() - base == 0


class _Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(x.transpose(1, 2)).transpose(1, 2)  # a view: what a dispatch mode broke


def test_a_step_that_traces_a_model_runs_under_the_counter_and_the_trace_is_restored_after():
    """torch.jit.trace fails under any TorchDispatchMode on a model with a view; a step that traces
    (tensorboard's add_graph) raised under the check only. The counter sets itself aside while a
    trace runs, counts what the traced module makes when it runs, and leaves torch.jit as it was."""
    import warnings

    import torch.jit._trace as tracing

    original = tracing._trace_impl
    model, x = _Encoder().eval(), torch.randn(2, 5, 8)
    with LiveTensorBytes() as counter, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace is deprecated
        traced = torch.jit.trace(model, (x,), check_trace=False)
        before = counter.live_bytes()
        out = traced(x)
        assert counter.live_bytes() - before >= out.untyped_storage().nbytes()
    assert tracing._trace_impl is original and torch.jit.trace_module is tracing.trace_module
    assert not hasattr(torch.jit._get_trace_graph, "__leaklab_original__")


def test_sees_storage_resized_in_place():
    with LiveTensorBytes() as tracker:
        base = tracker.live_bytes()
        x = torch.empty(10)
        x.resize_(1000)
        torch.add(x, 1, out=x)
        assert tracker.live_bytes() - base == 4000


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["coo", "csr", "csc"])
def test_counts_a_sparse_tensor_by_its_parts_and_forgets_them_when_it_dies(layout):
    # A sparse tensor has no storage of its own (a CSR one once stopped the check, exit 3): its
    # indices and values are counted, byte for byte.
    dense = torch.zeros(64, 64)
    dense[::2, ::4] = 1.0  # 512 non-zeros
    with LiveTensorBytes() as tracker:
        base = tracker.live_bytes()
        sparse = {"coo": dense.to_sparse, "csr": dense.to_sparse_csr, "csc": dense.to_sparse_csc}[layout]()
        counted = tracker.live_bytes() - base  # before the parts are asked for: asking makes views the counter sees
        parts = (sparse._indices(), sparse._values()) if layout == "coo" else (
            (sparse.crow_indices(), sparse.col_indices(), sparse.values()) if layout == "csr"
            else (sparse.ccol_indices(), sparse.row_indices(), sparse.values()))
        expected = sum(part.untyped_storage().nbytes() for part in parts)
        assert expected > 512 * 4
        assert counted == expected
        del sparse, parts
        gc.collect()
        assert tracker.live_bytes() == base


def test_records_the_user_line_that_allocated():
    with LiveTensorBytes(record_sites=True) as tracker:
        keep = torch.ones(100)  # the line to find
        entry = next(e for _, e in tracker.live_items() if e.nbytes == 400)
        filename, lineno, function = entry.site[0]
        assert filename == __file__ and function == "test_records_the_user_line_that_allocated"
        assert "the line to find" in open(__file__).read().splitlines()[lineno - 1]
        del keep


@pytest.mark.skipif(not HOST_HEAP_SOURCE.startswith("glibc"), reason="host heap is read from glibc's mallinfo2 here only")
def test_host_heap_sees_a_known_malloc_and_its_free():
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    before = host_heap_bytes()
    block = libc.malloc(8 * 1024 * 1024)
    grown = host_heap_bytes() - before
    libc.free(block)
    shrunk = host_heap_bytes() - before
    assert 8 * 1024 * 1024 <= grown < 8 * 1024 * 1024 + 64 * 1024
    assert abs(shrunk) < 64 * 1024


def test_probe_reads_every_cpu_resource():
    with Probe("cpu", resolve("cpu")) as probe:
        sample = probe.sample()
    assert set(sample) == {"cpu_tensors", "host_heap", "worker_memory", "worker_resident", "shared_memory", "children",
                           "open_fds", "threads", "mapped_files", "mapped_file_bytes", "python_objects"}
    assert all(isinstance(v, int) and v >= 0 for v in sample.values())


@pytest.mark.parametrize("counter", ["chosen", "listing"])
def test_open_fds_counts_each_descriptor_exactly(counter):
    from leaklab import resources

    count = resources.count_open_fds if counter == "chosen" else resources._count_fds_by_listing
    before = count()
    opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(7)]
    try:
        assert count() - before == 7
        assert count() == resources._count_fds_by_listing()
    finally:
        for fd in opened:
            os.close(fd)
    assert count() == before


def test_an_unknown_resource_is_refused():
    with pytest.raises(ValueError, match="unknown resource"):
        resolve("cpu", ("gpu_ram",))


def test_user_stack_skips_torch_frames():
    frames = user_stack()
    assert frames and frames[0][0] == __file__


def test_forked_dataloader_workers_do_not_track_tensors():
    # The tracker is inherited by forked workers; there it must pass operators straight through.
    import multiprocessing

    from leaklab import measure

    def child(queue):
        queue.put((measure._FORKED_CHILD, torch.ones(3).sum().item()))

    with LiveTensorBytes():
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        process = context.Process(target=child, args=(queue,))
        process.start()
        forked, value = queue.get(timeout=30)
        process.join(timeout=30)
    assert forked is True and value == 3.0
    assert measure._FORKED_CHILD is False


def test_shared_memory_sees_batches_in_flight_from_workers():
    from torch.utils.data import DataLoader, TensorDataset

    from leaklab.measure import shared_memory_bytes

    batch_bytes = 16 * 3 * 32 * 32 * 4
    loader = DataLoader(TensorDataset(torch.randn(512, 3, 32, 32)), batch_size=16, num_workers=2,
                        prefetch_factor=2, multiprocessing_context="fork")
    import os
    import time

    iterator = iter(loader)
    batch = next(iterator)
    pids = [os.getpid(), *(worker.pid for worker in iterator._workers)]  # not other tests' workers

    deadline = time.monotonic() + 20
    while shared_memory_bytes(pids) < 4 * batch_bytes and time.monotonic() < deadline:
        time.sleep(0.05)  # the workers refill the prefetch queue: 2 workers x 2 batches
    held = shared_memory_bytes(pids)
    del iterator, batch
    assert 4 * batch_bytes <= held <= 6 * batch_bytes


def test_a_shared_memory_file_held_by_parent_and_child_counts_once():
    import subprocess
    import sys
    import tempfile

    with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="leaklab-test-") as handle:
        handle.truncate(3 * 1024 * 1024)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], pass_fds=[handle.fileno()])
        try:
            with Probe("cpu", resolve("cpu", ("shared_memory",))) as probe:
                held = probe.sample()["shared_memory"]
        finally:
            child.kill()
            child.wait(timeout=30)
    assert held == 3 * 1024 * 1024, f"{held} B: the file both processes hold must count once"


RSS_SEES_WHAT_THE_HEAP_DOES_NOT = """
import ctypes
import os
from leaklab.measure import host_heap_bytes, resident_anonymous_bytes
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallopt(-1, 256 * 1024 * 1024)  # M_TRIM_THRESHOLD: freed heap top stays resident...
libc.mallopt(-3, 256 * 1024 * 1024)  # M_MMAP_THRESHOLD: ...and 32 MiB comes from the heap
rss, heap = resident_anonymous_bytes(), host_heap_bytes()
block = libc.malloc(32 * 1024 * 1024)
ctypes.memset(block, 1, 32 * 1024 * 1024)  # touch every page
libc.free(block)
print(host_heap_bytes() - heap, resident_anonymous_bytes() - rss)
"""


@pytest.mark.end_to_end  # a fresh interpreter with torch: run by .ci/run with -m end_to_end
@pytest.mark.skipif(not HOST_HEAP_SOURCE.startswith("glibc"), reason="needs glibc's mallinfo2 and /proc")
def test_host_rss_sees_freed_pages_malloc_keeps_where_the_heap_does_not():
    # In a child process: mallopt changes the allocator for the rest of the process.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", RSS_SEES_WHAT_THE_HEAP_DOES_NOT], capture_output=True, text=True,
                          timeout=120, check=True)
    heap, rss = map(int, done.stdout.split())
    assert abs(heap) < 1024 * 1024
    assert rss >= 24 * 1024 * 1024


@pytest.mark.parametrize("temporary_mib", [0, 4])
def test_cpu_tensors_peak_sees_memory_held_during_the_step_only(temporary_mib):
    from leaklab.runner import RunOptions, run_factory

    def factory(device):
        def step():
            held = torch.ones(temporary_mib * 1024 * 256)  # freed when the step returns
            return {"sum": float(held.sum())}

        return step

    report = run_factory(factory, "cpu", RunOptions(steps=5, warmup=1, resources=("cpu_tensors", "cpu_tensors_peak")))
    assert report.resources["cpu_tensors"].level_bytes == 0
    peak = report.resources["cpu_tensors_peak"]
    assert peak.level_bytes >= temporary_mib * 2**20 and peak.level_bytes < temporary_mib * 2**20 + 64 * 1024
    assert report.verdict == "bounded"  # a peak is shown, never judged


@pytest.mark.cuda
def test_device_peak_starts_from_this_run_not_from_what_ran_before():
    from leaklab.runner import RunOptions, run_factory

    def factory_of(mib):
        def factory(device):
            def step():
                held = torch.ones(mib * 1024 * 256, device=device)  # freed when the step returns
                return {"sum": float(held.sum())}

            return step

        return factory

    options = RunOptions(steps=4, warmup=1, resources=("device_allocated", "device_peak"))
    run_factory(factory_of(256), "cuda", options)  # leaves a 256 MiB peak in the allocator's stats
    peak = run_factory(factory_of(4), "cuda", options).resources["device_peak"]
    assert 4 * 2**20 <= peak.level_bytes < 8 * 2**20, peak.level_bytes


@pytest.mark.cuda
def test_the_probes_cuda_counters_are_the_allocators_own():
    from leaklab.measure import cuda_stats_reader

    held = torch.ones(3 * 2**20, device="cuda")  # 12 MiB
    with Probe("cuda", resolve("cuda", ("device_allocated", "device_reserved", "device_peak"))) as probe:
        sample = probe.sample()
        assert sample["device_allocated"] == torch.cuda.memory_allocated()
        assert sample["device_reserved"] == torch.cuda.memory_reserved()
        assert sample["device_peak"] >= sample["device_allocated"] >= held.nbytes
    fast, public = cuda_stats_reader("cuda")(), torch.cuda.memory_stats("cuda")
    for key in ("allocated_bytes", "reserved_bytes"):
        for kind in ("current", "peak"):
            assert fast[key]["all"][kind] == public[f"{key}.all.{kind}"], (key, kind)


def test_a_reading_of_some_resources_keeps_the_tensor_counter_from_piling_up():
    # The long pass reads the heap alone; the tensor counter's dead storages are dropped when it
    # is read, and must be all the same, or they would be the heap growth that pass watches.
    with Probe("cpu", resolve("cpu", ("cpu_tensors", "host_heap"))) as probe:
        for _ in range(300):
            (torch.ones(64) * 2).sum()
            probe.sample(["host_heap"])
        kept = len(probe.tensors._storages)  # dead ones included: reading keys() would drop them
        assert kept < 10, f"{kept} storages kept: the dead ones piled up between readings"


def test_threads_count_every_thread_exactly_and_forget_it_when_joined():
    from leaklab.measure import _threads_by_listing, thread_count

    def listed() -> set[int]:
        return {int(tid) for tid in os.listdir("/proc/self/task")}

    # Compared with the listing of the same moment, not with a count from before: in a pytest-xdist
    # worker, threads of its own (execnet's) come and go while the test runs.
    stop = threading.Event()
    started = [threading.Thread(target=stop.wait, daemon=True) for _ in range(5)]
    for thread in started:
        thread.start()
    ours = {thread.native_id for thread in started}
    try:
        assert ours <= listed()
        assert thread_count(["self"]) == _threads_by_listing("self")
    finally:
        stop.set()
        for thread in started:
            thread.join()
    # join() returns once Python is done with a thread; the kernel drops it from the listing a
    # moment later (seen once under load): wait for that, briefly.
    deadline = time.monotonic() + 2.0
    while ours & listed() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not ours & listed()
    assert thread_count(["self"]) == _threads_by_listing("self")


def test_mapped_files_count_each_mapping_and_its_resident_pages(tmp_path):
    from leaklab.measure import MappedFiles, file_mappings, proc_statm, proc_status

    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)) * 16 * 8)  # 8 pages
    counter = MappedFiles()
    count, resident = counter.count(proc_statm()), counter.resident(proc_statm())
    with open(path, "rb") as handle:
        views = [mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) for _ in range(3)]
    for view in views:
        sum(view[::4096])  # every page resident
    try:
        assert counter.count(proc_statm()) - count == 3 == file_mappings()[str(path)]
        # Three mappings of one file share its 8 page-cache pages, each resident in the process.
        assert counter.resident(proc_statm()) - resident >= 8 * 4096
        assert counter.resident(proc_statm()) == proc_status()[b"RssFile"]
    finally:
        for view in views:
            view.close()
    assert counter.count(proc_statm()) == count


def test_mapping_count_is_listed_again_only_when_the_virtual_size_moves():
    from leaklab.measure import MappedFiles

    counter = MappedFiles()
    assert counter.count((1 << 30, 0)) == counter.count((1 << 30, 0)) > 0
    counter._count = -1  # a stale figure stands until the size moves
    assert counter.count((1 << 30, 0)) == -1
    assert counter.count(((1 << 30) + 4096, 0)) > 0


def test_the_tensor_counter_leaves_no_reference_cycles():
    """Counting CPU tensors must not make the garbage it reports as the step's own (torch's pytree
    and StorageWeakRef each left cycles: 287 objects a step of hook_caching, none of them the step's)."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    with LiveTensorBytes():
        model(x).sum().backward()
        gc.collect()
        model(x).sum().backward()
        assert gc.collect() == 0


def test_python_objects_do_not_creep_under_the_tensor_counter():
    """Under a dispatch mode torch looks up attributes by a fresh string per operator, and the
    type attribute cache kept the last of each: ~1 block a step over thousands of steps. The
    reading empties that cache first (a training step under the counter then reads flat)."""
    from array import array

    from leaklab.resources import PYTHON_OBJECTS

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    readings = array("q", bytes(8 * 80))  # no object of ours per reading
    gc.collect()
    gc.freeze()  # as the probe does: each collection scans only what came since (the test session is large)
    try:
        with LiveTensorBytes() as counter:
            for i in range(80):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
                gc.collect()
                counter.live_bytes()
                readings[i] = PYTHON_OBJECTS.read(None)
    finally:
        gc.unfreeze()
    assert readings[-1] - readings[30] <= 10, list(readings[30::10])


def test_every_resource_owns_its_facts():
    """What the runner, the census and the resemblance need of a resource is on the resource:
    a capacity where one is known, the census that names its growth, its holder."""
    from leaklab import growth, resources

    for resource in resources.defaults("cpu"):
        total = resource.capacity("cpu") if resource.capacity else None
        assert total is None or total > 0, resource.name
    assert resources.OPEN_FDS.capacity("cpu") > 0 and resources.THREADS.capacity("cpu") > 0
    assert growth.kinds({"threads", "open_fds", "cpu_tensors", "children"}) == {"threads", "descriptors", "objects"}
    assert resources.WORKER_MEMORY.holder == "workers" and resources.HOST_HEAP.holder is None


def test_the_tensor_counter_is_off_only_while_no_series_it_feeds_is_read():
    """A long pass that reads python_objects alone runs without the dispatch mode (it slowed the
    steps of a small model several times); one that reads cpu_tensors keeps it; what was counted
    before stays counted, and counting resumes after."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    with Probe("cpu", resolve("cpu", ())) as probe:
        kept = torch.ones(1024)
        counted = probe.tensors.live_bytes()
        with probe.tensors_paused(["python_objects"]):
            assert _get_current_dispatch_mode() is None
            unseen = torch.ones(2048)
        assert probe.tensors.live_bytes() == counted
        with probe.tensors_paused(["python_objects", "cpu_tensors"]):
            assert _get_current_dispatch_mode() is probe.tensors
            seen = torch.ones(4096)
        assert probe.tensors.live_bytes() == counted + seen.nbytes
        again = torch.ones(512)
        assert probe.tensors.live_bytes() == counted + seen.nbytes + again.nbytes
    del kept, unseen


COUNTER_WITHOUT_THE_COMPILER = """
import sys
import torch
from leaklab import RunOptions, run_factory


def make_step(device):
    kept = []
    return lambda: kept.append(torch.zeros(64))


report = run_factory(make_step, "cpu", RunOptions(steps=6, warmup=1, resources=["cpu_tensors"]))
print(report.verdict, "torch._dynamo" in sys.modules)
"""


@pytest.mark.end_to_end  # a fresh interpreter with torch: run by .ci/run with -m end_to_end
def test_the_tensor_counter_does_not_import_the_compiler():
    """A check of a step that never compiles does not import torch._dynamo (0.9 s a process),
    which torch's own wrapping of a dispatch mode does at its first operator."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", COUNTER_WITHOUT_THE_COMPILER], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["grows", "False"], done.stderr[-2000:]


def test_a_step_compiled_by_its_factory_never_traces_the_counter():
    """Once torch._dynamo is imported, the counter is kept out of its tracing as torch keeps any
    dispatch mode out (a reading between the factory and the first step is enough): no graph
    break of the compiler's counts comes from the counter's frames."""
    from torch._dynamo.utils import counters

    model, x = torch.nn.Linear(8, 8), torch.randn(4, 8)
    counters.clear()
    with LiveTensorBytes() as counter:
        compiled = torch.compile(model)
        before = counter.live_bytes()
        for _ in range(3):
            compiled(x).sum().backward()
        assert counter.live_bytes() - before >= 8 * 8 * 4 + 8 * 4  # the gradients, counted
    assert not counters["graph_break"], dict(counters["graph_break"])


def test_the_counter_is_kept_out_of_the_compiler_once():
    """Looking again after the compiler was seen wraps nothing more (each wrapper costs every
    operator a call: the cost bench's repeated looks once made the check 11x the bare steps)."""
    import torch._dynamo  # noqa: F401 - seen by the counter

    from leaklab import measure

    measure._keep_out_of_compiler()
    hook = LiveTensorBytes.__torch_dispatch__
    measure._keep_out_of_compiler()
    assert LiveTensorBytes.__torch_dispatch__ is hook


def test_the_heaps_free_pages_go_back_before_a_factory_forks_workers(tmp_path):
    """Free heap pages left resident are shared with a worker forked after them; a worker that
    reuses one copies it, which reads as copy-on-write (results/worker-resident): the check gives
    them back first. Measured in a fresh interpreter, so no other test's heap is in the figures."""
    import subprocess
    import sys

    script = tmp_path / "trim.py"
    script.write_text(
        "from leaklab.measure import release_free_heap, resident_anonymous_bytes\n"
        "blocks = [bytearray(1000) for _ in range(100_000)]  # ~100 MB of small blocks, in the heap's arena\n"
        "keep = bytearray(1000)  # a block above them: the freed ones are not at the heap's top\n"
        "del blocks\n"
        "before = resident_anonymous_bytes()\n"
        "release_free_heap()\n"
        "print(before - resident_anonymous_bytes())\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    given_back = int(subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True, cwd=root,
                                    env={**os.environ, "PYTHONPATH": root}).stdout)
    assert given_back > 50 * 1024 * 1024, given_back


_KEPT_IN_WORKER: list = []  # a pool worker's own cache: lives in the worker, never in the test's process


def _work_in_pool(index: int, keep: bool) -> int:
    records = [{"index": index, "part": part} for part in range(20)]
    if keep:
        _KEPT_IN_WORKER.append(records)  # each task's records stay in the worker
    return len(records)


@pytest.mark.parametrize(("keep", "verdict"), [(True, "grows"), (False, "bounded")])
def test_worker_objects_counts_what_a_pool_worker_keeps_in_that_worker(keep, verdict):
    import glob
    import itertools
    import multiprocessing
    import tempfile

    from leaklab.runner import RunOptions, run_factory

    pools = []

    def factory(device):
        pool = multiprocessing.get_context("fork").Pool(1)
        pools.append(pool)
        counter = itertools.count()

        def step():
            return {"records": pool.apply(_work_in_pool, (next(counter), keep))}

        return step

    try:
        report = run_factory(factory, "cpu", RunOptions(steps=20, warmup=5, resources=("worker_objects",)))
    finally:
        for pool in pools:
            pool.terminate()
            pool.join()
    assert report.verdict == verdict, report.summary()
    if keep:  # 20 dicts a task, each a block or more, counted in the worker
        assert report.resources["worker_objects"].per_step_bytes >= 20, report.summary()
    assert not glob.glob(f"{tempfile.gettempdir()}/leaklab-workers-{os.getpid()}-*")  # the probe took its folder with it


_INHERITED: list = []  # made before the fork: a child that drops it holds fewer blocks than it started with


def _drop_inherited(dropped) -> None:
    _INHERITED.clear()
    dropped.set()
    time.sleep(60)  # terminated by the test


def test_worker_blocks_counts_a_child_that_freed_what_it_inherited_as_an_answer(monkeypatch):
    import multiprocessing

    from leaklab import worker_blocks

    monkeypatch.setattr(worker_blocks, "ANSWER_WITHIN", 30.0)  # time enough to answer on a busy machine
    _INHERITED[:] = [[index] for index in range(10_000)]
    blocks = worker_blocks.WorkerBlocks()
    blocks.start()
    fallbacks = []
    answer = blocks._answer
    monkeypatch.setattr(blocks, "_answer", lambda pid, last=False: fallbacks.append(pid) if last else answer(pid))
    context = multiprocessing.get_context("fork")
    dropped = context.Event()
    child = context.Process(target=_drop_inherited, args=(dropped,), daemon=True)
    try:
        child.start()
        assert dropped.wait(60)
        figure = blocks.read([child.pid])
        assert figure <= -10_000  # the lists it dropped, one block each
        assert not fallbacks  # its answer to this reading, a negative figure too, not a late one waited out
    finally:
        child.terminate()
        child.join()
        blocks.stop()
        _INHERITED.clear()
