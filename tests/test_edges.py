"""The check at its edges, on the CPU: the smallest leaks each counter can see are caught, steps
that are bounded but tricky are never called growing, and hostile steps get the documented exit
code, a one-line answer and leave nothing behind. Every leak here has its bounded twin."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from leaklab.cli import main
from leaklab.runner import RunOptions
from leaklab.scripts import run_script

EDGES = str(Path(__file__).parent / "data" / "edge_steps.py")


def verdicts(name, **options):
    report = run_script(EDGES, name, "cpu", RunOptions(**options))
    assert report.error is None, report.error
    return report


@pytest.mark.parametrize(("leak", "twin", "resource", "options"), [
    ("tensor_4b", "noop", "cpu_tensors", {}),
    ("mlp_leak_512", "mlp", "cpu_tensors", {}),
    ("every_third_1k", "noop", "cpu_tensors", {}),
    ("bytes_4k", "noop", "host_heap", {"resources": ("host_heap",)}),
    ("bytes_512", "noop", "python_objects", {}),
    ("c_heap_256", "noop", "host_heap", {}),
    ("bytes_256", "noop", "python_objects", {}),
    ("closure_per_step", "noop", "python_objects", {}),
    ("hook_partial_per_step", "noop", "python_objects", {}),
    ("thread_per_step", "thread_pool_reused", "threads", {}),
    ("mapped_page_per_step", "mapping_read_every_step", "mapped_files", {}),
    ("mapped_page_per_step", "file_opened_and_closed", "mapped_files", {}),
    ("opens_files", "noop", "open_fds", {}),
    ("small_strings", "noop", "host_heap", {}),
    ("cyclic_garbage_kept", "cyclic_garbage", "host_heap", {}),
])
def test_the_smallest_leak_grows_where_it_lives_and_its_twin_is_bounded(leak, twin, resource, options):
    report = verdicts(leak, **options)
    assert report.verdict == "grows" and report.resource == resource, report.summary()
    bounded = verdicts(twin, **options)
    assert bounded.verdict == "bounded", bounded.summary()


def test_a_workers_own_memory_is_told_from_the_pages_of_a_file_it_reads():
    """worker_resident, shown and not judged (its flake gate: leaklab/resources.py), reads what the
    workers make of their own: a cache under worker_memory's floor grows there, and workers reading
    new pages of a mapped file (resident, but the file's) do not."""
    cache = verdicts("worker_cache_128k").resources["worker_resident"]
    assert cache.verdict == "grows", cache
    mapped = verdicts("worker_reads_mapped_file").resources["worker_resident"]
    assert mapped.verdict == "bounded", mapped


def test_a_leak_that_starts_mid_series_is_caught_in_its_resource_at_its_rate():
    report = verdicts("starts_late")
    assert report.resource == "cpu_tensors" and report.verdict == "grows", report.summary()
    assert 512 <= report.per_step_bytes <= 2048, report.summary()  # the true rate is 1 KiB/step


@pytest.mark.parametrize("name", ["first_torch_call_late", "periodic_spike", "variable_batch", "decreasing",
                                  "random_temporaries", "cyclic_garbage", "mlp"])
def test_bounded_but_tricky_steps_never_grow(name):
    report = verdicts(name)
    assert report.verdict == "bounded", report.summary()


def test_a_cache_that_fills_is_a_plateau():
    report = verdicts("cache_fills")
    assert report.verdict == "plateau" and report.resource == "cpu_tensors", report.summary()


@pytest.mark.parametrize(("filling", "unbounded"), [("deque_fills", "deque_unbounded"),
                                                   ("lru_cache_fills", "lru_cache_unbounded")])
def test_a_bounded_container_filling_is_watched_until_full_and_is_a_plateau(filling, unbounded):
    report = verdicts(filling)
    assert report.verdict == "plateau" and report.resource == "cpu_tensors", report.summary()
    assert report.filled and "cpu_tensors" in report.filled["resources"], report.summary()
    twin = verdicts(unbounded)
    assert twin.verdict == "grows" and twin.resource == "cpu_tensors" and not twin.filled, twin.summary()


def test_a_lazy_initialisation_after_warm_up_is_measured_past():
    report = verdicts("lazy_init_late")
    assert report.restarts, "the lazy initialisation was not noticed"
    assert report.verdict == "bounded", report.summary()


def test_cyclic_garbage_is_collected_and_reported():
    report = verdicts("cyclic_garbage")
    assert report.verdict == "bounded", report.summary()
    assert "cyclic-garbage object(s) per step" in (report.cyclic_garbage() or "")
    per_step = sorted(report.garbage["bytes"])[len(report.garbage["bytes"]) // 2]
    assert per_step >= 100_000  # each Record holds a 100,000-byte scratch buffer


@pytest.mark.end_to_end  # fresh interpreters: each turns its collector off
@pytest.mark.parametrize(("name", "verdict"), [("collector_off_cycles", "grows"), ("collector_off_no_cycles", "bounded")])
def test_with_the_collector_off_cycles_grow_and_nothing_else_does(name, verdict):
    done = subprocess.run([sys.executable, "-m", "leaklab", "check", f"{EDGES}:{name}", "--json", "--quiet"],
                          capture_output=True, text=True, timeout=240)
    report = json.loads(done.stdout)
    assert report["verdict"] == verdict and report["collector_off"] and not report["uncertain"], report["summary"]
    if verdict == "grows":
        assert report["resource"] == "host_heap" and "cyclic_garbage" in report["summary"], report["summary"]
    else:  # not even a rise to watch: read uncollected, the free lists made one of Python's objects
        assert not report.get("long_pass_steps"), report["summary"]


def test_the_budget_applies_from_the_first_warm_up_step():
    started = time.monotonic()
    report = verdicts("big_leak", warmup=60, budget={"cpu_tensors": 256 * 2**20})
    assert report.stopped_by_budget == "cpu_tensors" and report.stopped_in_warmup, report.summary()
    assert report.verdict == "grows"
    assert time.monotonic() - started < 60


# --------------------------------------------------------------------------- the CLI's answers
def cli(capsys, *args):
    try:
        code = main(["check", *args, "--quiet", "--steps", "6", "--warmup", "1"])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("name", "says"), [
    ("exits", "exited: the step called sys.exit(0)"),
    ("exits_1", "exited: the step called sys.exit(1)"),
    ("interrupted", "interrupted: KeyboardInterrupt"),
])
def test_a_step_that_exits_or_is_interrupted_exits_3_with_one_line(capsys, name, says):
    code, out, err = cli(capsys, f"{EDGES}:{name}")
    assert code == 3, (out, err)
    assert says in err.strip().splitlines()[-1]


def test_a_step_that_exits_is_reported_in_json_too(capsys):
    code, out, err = cli(capsys, f"{EDGES}:exits", "--json")
    assert code == 3
    data = json.loads(out)
    assert data["verdict"] == "raises" and data["exit_code"] == 3 and "sys.exit(0)" in data["error"]


def test_a_script_that_exits_on_import_exits_2(capsys, tmp_path):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(0)\n")
    code, _, err = cli(capsys, str(script))
    assert code == 2
    assert "the script called sys.exit(0)" in err and len(err.strip().splitlines()) == 1


def test_a_factory_that_fails_exits_2(capsys):
    code, _, err = cli(capsys, f"{EDGES}:factory_fails")
    assert code == 2 and "factory_fails('cpu') failed: RuntimeError: no data here" in err


def test_a_step_named_where_its_factory_was_meant_exits_2_saying_so(capsys):
    code, out, err = cli(capsys, f"{EDGES}:step_without_device")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "step_without_device() takes no device: the check calls a factory" in err and not out


def test_a_hanging_step_times_out_with_exit_3(capsys):
    started = time.monotonic()
    code, _, err = cli(capsys, f"{EDGES}:hangs", "--timeout", "1")
    assert code == 3 and "timed out" in err
    assert time.monotonic() - started < 30


@pytest.mark.end_to_end  # fresh interpreters: run by .ci/run with -m end_to_end
def test_children_are_reported_stopped_and_fail_the_check():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    done = subprocess.run([sys.executable, "-m", "leaklab", "check", f"{EDGES}:starts_children", "--quiet",
                           "--steps", "4", "--warmup", "1"], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 1, done.stderr
    assert "child process(es) running, now stopped" in done.stdout.splitlines()[0]  # the answer leads; what grows follows
    time.sleep(0.2)
    sleepers = [p for p in psutil.process_iter(["cmdline", "ppid"])
                if p.info["cmdline"] == ["sleep", "600"] and p.pid not in before]
    assert not sleepers, f"children left running: {sleepers}"


@pytest.mark.end_to_end  # fresh interpreters: run by .ci/run with -m end_to_end
def test_a_daemon_the_factory_started_is_named_and_stopped_when_the_check_exits():
    done = subprocess.run([sys.executable, "-m", "leaklab", "check", f"{EDGES}:factory_starts_a_daemon", "--quiet",
                           "--steps", "4", "--warmup", "1"], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the factory started still run (pid " in done.stdout and "sleep 602" in done.stdout
    time.sleep(0.2)
    sleepers = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "602"]]
    assert not sleepers, f"left running after the check exited: {sleepers}"


@pytest.mark.end_to_end  # fresh interpreters: run by .ci/run with -m end_to_end
def test_a_queue_backlog_left_by_the_step_cannot_hang_the_exit():
    """Python's exit joins a multiprocessing queue's feeder thread, which waits forever on a
    backlog for a reader that is gone: the answer stands, and the command ends, saying why."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "leaklab", "check", f"{EDGES}:queue_backlog_at_exit", "--quiet",
                           "--steps", "6", "--warmup", "1"], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode in (0, 1), done.stderr
    assert done.stdout.startswith(f"{EDGES}:queue_backlog_at_exit: ")
    assert "ended it, the answer above stands" in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr  # the reader, stopped at exit, ends quietly
    assert time.monotonic() - started < 90


def _descendant_cmdlines(pid: int) -> list[list[str]]:
    """Command lines of ``pid``'s descendants. One that exits while we look is passed over: it is
    a zombie until reaped, and psutil raises for its command line (seen once in the loaded gate)."""
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in descendants:
        try:
            found.append(child.cmdline())
        except psutil.Error:
            continue
    return found


def test_a_zombie_descendant_is_passed_over_while_polling():
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, time\n"
                               "child = subprocess.Popen(['true'])\ntime.sleep(30)"])  # never reaps its child
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(
                c.status() == psutil.STATUS_ZOMBIE for c in psutil.Process(parent.pid).children()):
            time.sleep(0.05)
        assert any(c.status() == psutil.STATUS_ZOMBIE for c in psutil.Process(parent.pid).children())
        assert _descendant_cmdlines(parent.pid) == []
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.end_to_end  # fresh interpreters: run by .ci/run with -m end_to_end
def test_sigterm_to_leaklab_stops_the_childrens_too(tmp_path):
    script = tmp_path / "slow_children.py"
    script.write_text("import subprocess, time\nkept = []\n"
                      "def make_step(device):\n"
                      "    def step():\n        kept.append(subprocess.Popen(['sleep', '601']))\n        time.sleep(0.2)\n"
                      "    return step\n")
    process = subprocess.Popen([sys.executable, "-m", "leaklab", "check", str(script), "--quiet", "--steps", "500"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=Path(__file__).parent.parent)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and ["sleep", "601"] not in _descendant_cmdlines(process.pid):
        time.sleep(0.1)
    process.terminate()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 3, err
    assert "interrupted" in err.strip().splitlines()[-1]
    time.sleep(0.2)
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "601"]]
    assert os.path.exists(script)


@pytest.mark.end_to_end  # fresh interpreters: run by .ci/run with -m end_to_end
def test_sigterm_to_leaklab_run_stops_its_workers_and_theirs(tmp_path):
    """`leaklab run` runs cases in worker processes: SIGTERM ends it as Ctrl-C does, one line,
    exit 3, and no worker, nor a DataLoader worker of theirs, is left running."""
    stderr = tmp_path / "stderr"
    with stderr.open("w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "leaklab", "run", "-v", "--jobs", "2", "hook_registered_every_forward",
                                    "dataloader_prefetch_shared_memory"], stdout=subprocess.DEVNULL, stderr=sink,
                                   cwd=Path(__file__).parent.parent)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "running dataloader_prefetch_shared_memory" not in stderr.read_text():
            time.sleep(0.1)
        time.sleep(1.0)  # its DataLoader workers started
        tree = psutil.Process(process.pid).children(recursive=True)
        assert len(tree) >= 3, [child.cmdline() for child in tree]
        process.terminate()
        assert process.wait(timeout=60) == 3, stderr.read_text()
    assert stderr.read_text().strip().splitlines()[-1] == "leaklab: interrupted"
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive, [child.pid for child in alive]


def test_python_objects_growing_alone_must_keep_its_rate_through_a_long_pass():
    """A per-item cache that fills over a first epoch rises like a leak for the whole measured
    series, then stops: the long pass says bounded. One object kept per step keeps its rate."""
    filled = verdicts("per_item_cache_fills")
    assert filled.crept == ["python_objects"] and filled.verdict == "bounded", filled.summary()
    kept = verdicts("bytes_256")
    assert kept.crept == ["python_objects"] and kept.verdict == "grows", kept.summary()


def test_the_checks_own_objects_make_no_jump_where_a_pass_begins():
    """Issue 28, item 3: between two passes the check makes objects of its own (the verdicts so
    far, a census kept through the confirmation, a pass's loop); one byte string kept a step must
    read as one block a step across every pass boundary, not as a jump where a pass begins."""
    kept = verdicts("bytes_256")
    assert kept.long_pass_steps, kept.summary()
    samples = kept.resources["python_objects"].samples
    moves = [b - a for a, b in zip(samples, samples[1:], strict=False)]
    assert max(moves) <= 3 and min(moves) >= -1, moves  # one a step; the loop's locals wiggle by one or two
