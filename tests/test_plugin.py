"""The pytest plugin as a user meets it: one-line failures, the curve in the report, skips."""

from importlib.metadata import entry_points

import pytest

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
        "expected bounded memory: test_growth_fails_bounded: grows in cpu_tensors by 2.0 KiB/step*",
        "expected growth: test_bounded_fails_grows: bounded in cpu_tensors",
    ])
    # the per-step curve is in the failure's report section
    result.stdout.fnmatch_lines(["*leaklab test_growth_fails_bounded*", "*cpu_tensors: grows, 2.0 KiB/step*"])


def test_results_file_from_pytest(pytester, tmp_path):
    pytester.makepyfile(test_user=USER_TESTS)
    out = tmp_path / "results.json"
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-p", "leaklab_lab.plugin", "-p", "no:cacheprovider",
                                          "-k", "passes", f"--leaklab-results={out}")
    result.assert_outcomes(passed=2, deselected=3)
    import json

    runs = json.loads(out.read_text())["runs"]
    assert runs["cpu/test_growth_passes_grows"]["verdict"] == "grows"
    assert runs["cpu/test_bounded_passes"]["verdict"] == "bounded"


@pytest.mark.cuda
def test_cuda_marker_runs_here_only_with_a_gpu():
    import torch

    assert torch.cuda.is_available()
