"""The ``leaklab`` marker and ``--leaklab``: an existing test re-run under the check, as a user meets it."""

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_ARGS = [] if any(ep.name == "leaklab" for ep in entry_points(group="pytest11")) else ["-p", "leaklab.plugin"]

# hook_caching from the catalog, as a project's own training test: the model with its forward
# hook is a fixture, the test runs one training step.
CATALOG_TEST = '''
import importlib.util
import pytest

def load(path):
    spec = importlib.util.spec_from_file_location(path.replace("/", "_").replace(".", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

@pytest.fixture
def train_step(request):
    return load(request.param).make_step("cpu")

@pytest.mark.leaklab(steps=10, warmup=3)
@pytest.mark.parametrize("train_step", [{leak!r}], ids=["leak"], indirect=True)
def test_hook_caching(train_step):
    train_step()

@pytest.mark.leaklab(steps=10, warmup=3)
@pytest.mark.parametrize("train_step", [{fix!r}], ids=["fix"], indirect=True)
def test_hook_caching_fixed(train_step):
    train_step()
'''


pytestmark = pytest.mark.usefixtures("check_once_outside_pytester")


class _CallsWithoutRepeats(list):
    """pytester's in-process runs record every hook call (HookRecorder.calls), a few Python
    objects each; the marker repeats the test through the pytest_pyfunc_call hook, so each repeat
    would be recorded, and python_objects would rightly call that growth. Those records are the
    recorder's, not the test's: left out here. A plain pytest session records nothing."""

    def append(self, call):
        if getattr(call, "_name", None) != "pytest_pyfunc_call":
            super().append(call)


@pytest.fixture(autouse=True)
def _recorder_keeps_no_repeats(monkeypatch):
    from _pytest.pytester import HookRecorder

    original = HookRecorder.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.calls = _CallsWithoutRepeats(self.calls)

    monkeypatch.setattr(HookRecorder, "__init__", init)


def run(pytester, *args):
    return pytester.runpytest_inprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", *args)


def test_catalog_leak_fails_under_the_marker_and_its_fix_passes(pytester):
    pytester.makepyfile(test_train=CATALOG_TEST.format(leak=str(ROOT / "cases/hook_caching.py"),
                                                         fix=str(ROOT / "fixes/hook_caching.py")))
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "grows, expected bounded: test_hook_caching[[]leak[]]: grows in cpu_tensors by 2.0 MiB/step*",
    ])
    # the curve is a section of the failure's report, as the leak_check fixture gives it
    result.stdout.fnmatch_lines(["*leaklab test_hook_caching[[]leak[]]*", "*cpu_tensors: grows, 2.0 MiB/step*"])


GROWING_AND_BOUNDED = '''
import torch

kept = []

def test_appends_to_a_global():
    kept.append(torch.ones(1024))  # 4 KiB per call

def test_bounded():
    torch.ones(1024).sum()
'''


def test_switch_rechecks_every_selected_test(pytester):
    pytester.makepyfile(test_user=GROWING_AND_BOUNDED)
    run(pytester).assert_outcomes(passed=2)  # without the switch: one call each, nothing checked
    result = run(pytester, "--leaklab", "--leaklab-steps=8", "--leaklab-warmup=2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*grows, expected bounded: test_appends_to_a_global: grows in cpu_tensors by 4.0 KiB/step*"])


def test_ini_turns_the_check_on(pytester):
    pytester.makepyfile(test_user=GROWING_AND_BOUNDED)
    pytester.makeini("[pytest]\nleaklab = true\nleaklab_steps = 8\nleaklab_warmup = 2\n")
    run(pytester).assert_outcomes(passed=1, failed=1)


COUNTING = '''
import pytest

calls = {"marked": 0, "plain": 0, "opted_out": 0, "fixture": 0, "teardown": 0}

@pytest.fixture
def resource():
    calls["fixture"] += 1
    yield []
    calls["teardown"] += 1

@pytest.mark.leaklab(steps=4, warmup=1)
def test_marked(resource):
    calls["marked"] += 1

def test_plain():
    calls["plain"] += 1

@pytest.mark.leaklab(enabled=False)
def test_opted_out():
    calls["opted_out"] += 1

def test_zz_counts():
    print("COUNTS", calls)
'''


def test_settings_marker_over_command_line_over_ini(pytester):
    pytester.makepyfile(test_user=COUNTING)
    pytester.makeini("[pytest]\nleaklab_steps = 3\nleaklab_warmup = 3\n")
    result = run(pytester, "--leaklab", "--leaklab-steps=7", "-s", "-k", "not zz")
    result.assert_outcomes(passed=3)
    result = run(pytester, "--leaklab", "--leaklab-steps=7", "-s")
    # marker: 1 + 4; command line steps 7 over ini 3, ini warmup 3: 10; opted out: 1. The
    # counting test itself is repeated too (10 lines); the fixture is set up once for 5 repeats.
    result.stdout.fnmatch_lines(["COUNTS {'marked': 5, 'plain': 10, 'opted_out': 1, 'fixture': 1, 'teardown': 1}"])


NOT_REPEATABLE = '''
import pytest

done = []

@pytest.mark.leaklab(steps=4, warmup=1)
def test_fails_on_its_own():
    assert 1 + 1 == 3

@pytest.mark.leaklab(steps=4, warmup=1)
def test_one_shot():
    assert not done, "already ran"
    done.append(1)

@pytest.mark.leaklab(steps=4, warmup=1)
def test_skips():
    pytest.skip("not here")
'''


def test_tests_that_cannot_be_repeated(pytester):
    pytester.makepyfile(test_user=NOT_REPEATABLE)
    result = run(pytester, "-rfs")
    result.assert_outcomes(failed=2, skipped=1)
    result.stdout.fnmatch_lines([
        "*assert (1 + 1) == 3*",  # the test's own failure, as without leaklab
        "leaklab: the test cannot be repeated (a step failure, not a leak): test_one_shot: the step failed at "
        "measured step 1: AssertionError: already ran assert not [[]1[]]",
        "SKIPPED*not here",
    ])
    assert "expected bounded" not in result.stdout.str()


@pytest.mark.end_to_end  # pytest in a fresh interpreter: run by .ci/run with -m end_to_end
def test_projects_own_cuda_marker_runs_unchanged(pytester, monkeypatch):
    """Installed as a user installs it (pytest11 entry point, no lab, --strict-markers), leaklab
    neither skips nor claims a project's own ``cuda`` test."""
    pytester.makeini('[pytest]\nmarkers =\n    cuda: this project\'s own GPU tests\n')
    pytester.makepyfile(test_project='''
import pytest

@pytest.mark.cuda
def test_the_projects_own_cuda_test():
    pass

def test_leaklab_is_loaded(request):
    assert request.config.pluginmanager.hasplugin("leaklab") or request.config.pluginmanager.hasplugin("leaklab.plugin")
''')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's leaklab, not another install
    result = pytester.runpytest_subprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", "--strict-markers", "-rs")
    result.assert_outcomes(passed=2)


def test_plugin_does_not_import_torch():
    done = subprocess.run([sys.executable, "-c", "import sys, leaklab.plugin; print('torch' in sys.modules)"],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "False"


LOSS_HISTORY = '''
import pytest
import torch

model = torch.nn.Linear(8, 1)
history = []

@pytest.mark.leaklab(steps=10, warmup=3)
def test_step_keeps_its_loss_history():
    loss = model(torch.ones(4, 8)).sum()
    history.append(loss.item())  # a float a step: a record, which every training loop keeps

@pytest.mark.leaklab(steps=10, warmup=3, strict=True)
def test_step_keeps_its_loss_history_strictly():
    loss = model(torch.ones(4, 8)).sum()
    history.append(loss.item())
'''


def test_a_loss_history_passes_and_strict_fails_it(pytester):
    """Issue 28: `history.append(loss.item())` is correct code; strict=True keeps any growth a leak."""
    pytester.makepyfile(test_user=LOSS_HISTORY)
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*grows, expected bounded: test_step_keeps_its_loss_history_strictly: grows in python_objects*"])
