"""The pytest plugin as a user meets it: one-line failures, the curve in the report, skips."""

import json
import os
import re
from importlib.metadata import entry_points

import pytest

pytestmark = pytest.mark.usefixtures("check_once_outside_pytester")  # see tests/conftest.py

PLUGIN_ARGS = [] if any(ep.name == "leaklab" for ep in entry_points(group="pytest11")) else ["-p", "leaklab.plugin"]

USER_TESTS = '''
import pytest
import torch

def make_growing():
    outputs = []
    layer = torch.nn.Linear(32, 32)
    x = torch.randn(16, 32)
    def step():
        outputs.append(layer(x))
    return step

def make_bounded():
    layer = torch.nn.Linear(32, 32)
    x = torch.randn(16, 32)
    def step():
        layer(x).sum().backward()
        layer.zero_grad(set_to_none=True)
    return step

def test_bounded_passes(leak_check):
    leak_check.bounded(make_bounded(), steps=8, warmup=2)

def test_growth_fails_bounded(leak_check):
    leak_check.bounded(make_growing(), steps=8, warmup=2)

def test_growth_passes_grows(leak_check):
    leak_check.grows(make_growing(), steps=8, warmup=2)

def test_bounded_fails_grows(leak_check):
    leak_check.grows(make_bounded(), steps=8, warmup=2)

@pytest.mark.cuda
def test_the_projects_own_cuda_marker():
    pass  # leaklab must not skip it: the marker is this project's, not leaklab's
'''


def test_user_tests_pass_and_fail_with_one_line(pytester, monkeypatch):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines([
        "grows, expected bounded: test_growth_fails_bounded: grows in cpu_tensors by 2.0 KiB/step*",
        "bounded, expected grows: test_bounded_fails_grows: bounded: nothing of * watched resources grows*",
    ])
    # the per-step curve is in the failure's report section
    result.stdout.fnmatch_lines(["*leaklab test_growth_fails_bounded*", "*cpu_tensors: grows, 2.0 KiB/step*"])


def test_results_file_from_pytest(pytester, tmp_path):
    pytester.makepyfile(test_user=USER_TESTS)
    out = tmp_path / "results.json"
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-p", "leaklab_lab.plugin", "-p", "no:cacheprovider",
                                          "-k", "passes", f"--leaklab-results={out}")
    result.assert_outcomes(passed=2, deselected=3)
    runs = json.loads(out.read_text())["runs"]
    assert runs["cpu/test_growth_passes_grows"]["verdict"] == "grows"
    assert runs["cpu/test_bounded_passes"]["verdict"] == "bounded"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # written whole, no temporary file left


@pytest.mark.cuda
def test_cuda_marker_runs_here_only_with_a_gpu():
    import torch

    assert torch.cuda.is_available()


# --------------------------------------------------------------------------- the lab's results file
LAB_TESTS = '''
import pytest
from pathlib import Path
from leaklab_lab.cases import load_case
from leaklab_lab.plugin import case_marks

CASE = load_case(Path({root!r}) / "cases" / "loss_accumulation.toml")

@pytest.mark.parametrize(("case", "device", "role", "script"), [
    pytest.param(CASE, "cpu", "leak", CASE.leak, marks=case_marks(CASE, "cpu")),
    pytest.param(CASE, "cpu", "fix", CASE.fixes[0], marks=case_marks(CASE, "cpu")),
    pytest.param(CASE, "cuda", "leak", CASE.leak, marks=case_marks(CASE, "cuda")),
])
def test_case(case, device, role, script, lab):
    lab.expect(lab.case_report(case, role, device, script), case.expected(device, role))
'''


def test_an_unwritable_results_path_is_a_usage_error_before_anything_runs(pytester, tmp_path):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-p", "leaklab_lab.plugin", "-p", "no:cacheprovider",
                                          f"--leaklab-results={tmp_path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --leaklab-results: {tmp_path} is a folder, not a file"])
    assert "passed" not in result.stdout.str() and "leaklab test_" not in result.stdout.str()


@pytest.mark.end_to_end  # fresh interpreters: run by .ci/run with -m end_to_end
def test_xdist_workers_parts_make_one_results_file_and_one_table(pytester, tmp_path, monkeypatch):
    pytest.importorskip("xdist")
    from leaklab_lab.cases import ROOT

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import this checkout's leaklab_lab
    pytester.makepyfile(test_user=USER_TESTS, test_lab=LAB_TESTS.format(root=str(ROOT)))
    out = tmp_path / "results.json"
    result = pytester.runpytest_subprocess("-p", "leaklab_lab.plugin", "-p", "no:cacheprovider", "-n", "2", "-v",
                                           "-k", "passes or test_case", f"--leaklab-results={out}")
    import torch

    skipped = 0 if torch.cuda.is_available() else 1
    result.assert_outcomes(passed=4 + 1 - skipped, skipped=skipped)
    document = json.loads(out.read_text())
    assert set(document["runs"]) >= {"cpu/test_growth_passes_grows", "cpu/test_bounded_passes",
                                      "cpu/loss_accumulation:leak", "cpu/loss_accumulation:fix"}
    assert document["runs"]["cpu/loss_accumulation:leak"]["verdict"] == "grows"
    if skipped:
        assert "needs a CUDA device" in document["skipped"]["cuda/loss_accumulation:leak"]
    text = result.stdout.str()
    assert text.count("leaklab: what each case did here") == 1
    result.stdout.fnmatch_lines(["loss_accumulation*cpu*grows*bounded*"])
    # One case's tests on one device go to one worker (xdist's loadgroup), which runs each script once.
    workers = set(re.findall(r"\[(gw\d)\].*PASSED .*test_case\[.*cpu.*\]@loss_accumulation-cpu", text))
    assert len(workers) == 1, text


@pytest.mark.end_to_end  # fresh interpreters: run by .ci/run with -m end_to_end
def test_a_results_write_cut_by_a_file_size_limit_keeps_the_old_file_and_fails_the_session(pytester, tmp_path):
    import resource
    import subprocess
    import sys

    from leaklab_lab.cases import ROOT

    pytester.makepyfile(test_user=USER_TESTS)
    previous = tmp_path / "prev.json"
    previous.write_text(json.dumps({"format": 1, "note": "last week's", "runs": {}}) + " " * 8000)
    before = previous.read_bytes()

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    done = subprocess.run([sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "leaklab_lab.plugin", "-p",
                           "no:cacheprovider", "-k", "passes", f"--leaklab-results={previous}"],
                          cwd=pytester.path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, preexec_fn=limit, timeout=300)
    assert "2 passed" in done.stdout, done.stdout + done.stderr
    assert f"leaklab results NOT written to {previous}: File too large; the file that was there is unchanged" \
        in done.stdout
    assert done.returncode == 1
    assert previous.read_bytes() == before and os.listdir(tmp_path) == ["prev.json"]


@pytest.mark.end_to_end  # fresh interpreters: run by .ci/run with -m end_to_end
def test_a_worker_that_dies_is_named_not_silently_dropped(pytester, tmp_path, monkeypatch):
    pytest.importorskip("xdist")
    from leaklab_lab.cases import ROOT

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_die="import os\n\ndef test_dies():\n    os._exit(1)\n")
    # --dist load: under the lab's default loadgroup, xdist re-queues a crashed test's group, and
    # runs the crashing test again on each replacement worker (up to its restart limit)
    # One worker and no replacement for it: two interpreters to start, not four.
    result = pytester.runpytest_subprocess("-p", "leaklab_lab.plugin", "-p", "no:cacheprovider", "-n", "1",
                                           "--max-worker-restart", "0", "--dist", "load",
                                           f"--leaklab-results={tmp_path / 'r.json'}")
    result.stdout.fnmatch_lines(["*leaklab: gw* died before handing over its runs; they are not in *r.json"])


def test_under_loadgroup_the_costliest_case_groups_are_collected_first(monkeypatch):
    """The groups whose runs took longest in the committed results go out first, the other tests
    after them in their own order; every worker sorts the same collection the same way."""
    from types import SimpleNamespace

    from leaklab_lab import figures, plugin

    monkeypatch.setattr(figures, "case_seconds", lambda: {("cuda", "slow"): 50.0, ("cuda", "quick"): 2.0})

    def item(name, group=None):
        mark = SimpleNamespace(args=(group,)) if group else None
        return SimpleNamespace(name=name, get_closest_marker=lambda marker: mark if marker == "xdist_group" else None)

    items = [item("a"), item("quick leak", "quick-cuda"), item("b"), item("slow leak", "slow-cuda"),
             item("unmeasured", "new-cuda"), item("slow fix", "slow-cuda"), item("quick fix", "quick-cuda")]
    plugin.pytest_collection_modifyitems(
        SimpleNamespace(workerinput={"leaklab_loadgroup": True}, getoption=lambda name, default=None: "models"), items)
    assert [i.name for i in items] == ["slow leak", "slow fix", "quick leak", "quick fix", "a", "b", "unmeasured"]


def test_the_seconds_a_case_took_are_read_from_the_committed_results():
    from leaklab_lab.figures import case_seconds

    seconds = case_seconds()
    assert seconds["cpu", "loss_accumulation"] > 0 and seconds["cuda", "cudnn_benchmark_variable_shapes"] > 0


def test_leaklab_run_starts_the_costliest_cases_first(monkeypatch):
    from leaklab_lab import figures, pool

    monkeypatch.setattr(figures, "case_seconds", lambda: {("cpu", "slow"): 9.0, ("cpu", "quick"): 1.0, ("cuda", "quick"): 99.0})
    started = []
    monkeypatch.setattr(pool, "ProcessPoolExecutor", _Started.factory(started))
    pool.run_pairs(["a", "quick", "b", "slow"], "cpu", attribute=False, jobs=2)
    assert started == ["slow", "quick", "a", "b"]


class _Started:
    """A stand-in for the process pool: it records the order cases are submitted in and runs nothing."""

    def __init__(self, started: list) -> None:
        self.started = started

    @classmethod
    def factory(cls, started: list):
        return lambda *args, **kwargs: cls(started)

    def submit(self, function, slug, *args):
        from concurrent.futures import Future

        self.started.append(slug)
        done = Future()
        done.set_result((slug, {"leak": [], "fix": [], "stderr": ""}))
        return done

    def shutdown(self, **kwargs) -> None:
        pass


def test_a_cases_fresh_process_scripts_start_side_by_side(monkeypatch):
    """A case whose scripts each run in a fresh process (``isolate``) starts its fix beside its
    leak at the first request, where this worker has a core for each and a test will ask for the
    fix; the fix's request then waits for that run instead of starting another."""
    from types import SimpleNamespace

    from leaklab.report import Report
    from leaklab_lab import plugin
    from leaklab_lab.cases import discover

    case = next(c for c in discover() if c.slug == "malloc_arena_fragmentation")  # isolate = true
    started = []

    def start_case(case, role, device, script, attribute=False):
        started.append((role, script.stem))
        return plugin.Started(lambda: Report(device=device, steps=1, warmup=0, name=f"{role}:{script.stem}"))

    monkeypatch.setattr(plugin, "start_case", start_case)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    runs = [(role, script.stem) for role in ("leak", "fix") for script in case.scripts(role)]

    def requests(cores, selected=runs):
        started.clear()
        monkeypatch.setattr(plugin, "cores", lambda: cores)
        state = plugin.LabState(selected={(case.slug, role, "cpu", stem) for role, stem in selected})
        lab = plugin.LabCheck(SimpleNamespace(config=None), state, False)
        first = list(started) if lab.case_report(case, "leak", "cpu") else None
        lab.case_report(case, "fix", "cpu")
        return first, list(started)

    assert requests(cores=2) == (runs, runs)            # side by side, each started once
    assert requests(cores=1) == (runs[:1], runs)        # one core: one after the other
    assert requests(cores=2, selected=runs[:1])[0] == runs[:1]  # no test asks for the fix: not started beside
