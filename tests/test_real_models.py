"""The real-model corpus under the check, as a user would run it: ``leaklab check FILE:FACTORY`` with
default settings, on each library step of real_models/ (its bounded idiom and its mistake twin).

A bounded idiom must not be called ``grows``; a mistake must be. Each run goes into the session's
results file (``--leaklab-results``), from which docs/harness.md renders the corpus's table.
Where today's harness calls an idiom ``grows``, the test is marked ``xfail(strict=True)`` with what
was measured, so that it fails the day the false alarm is fixed; nothing is loosened for it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from leaklab.plugin import REPORTS, show
from leaklab.report import EXIT_LEAK
from leaklab.runner import RunOptions
from leaklab.scripts import run_script
from leaklab.verdict import GROWS
from leaklab_lab import models
from leaklab_lab.catalog import load_all_results, render_harness

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

# (step, factory, device) -> what was measured: today's false alarms, each failing the day it is fixed.
FALSE_ALARMS: dict[tuple[str, str, str], str] = {
    # ("loss_history", "make_step", "cpu") was one until the records rule (verdict.records): a float a step
    # in `history` grew python_objects through the 200-step long pass; it is bounded now, with its note.
}


def _params() -> list:
    params = []
    for path in models.steps():
        for factory in models.TWINS:
            for device in ("cpu", "cuda"):
                marks = [pytest.mark.cuda] if device == "cuda" else []
                why = FALSE_ALARMS.get((path.stem, factory, device))
                if why:
                    # only the verdict's assertion is expected to fail: a step that raises still fails the test
                    marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=why))
                params.append(pytest.param(path, factory, device, marks=marks,
                                           id=f"{path.stem}-{models.TWINS[factory]}-{device}"))
    return params


@pytest.mark.models
@pytest.mark.parametrize(("path", "factory", "device"), _params())
def test_real_model(request: pytest.FixtureRequest, path: Path, factory: str, device: str) -> None:
    why = models.missing(path)
    if why:
        pytest.skip(why)
    report = run_script(path, factory, device, RunOptions())
    report = models.label(report, path, factory)
    request.config.stash[REPORTS].append(report)  # the session's results file keeps it
    show(request.node, report)
    if report.error is not None:
        pytest.fail(f"the step failed under the check: {report.summary()}", pytrace=False)
    if factory == "make_step":
        assert report.verdict != GROWS, f"a bounded idiom called grows: {report.summary()}"
        # nor failed as a leak otherwise (Fabric's MPI daemon, stopped as the step's child, once made it exit 1)
        assert report.exit_code != EXIT_LEAK, f"a bounded idiom exits as a leak: {report.summary()}"
    else:
        assert report.verdict == GROWS, f"a mistake not found: {report.summary()}"


# --------------------------------------------------------------------------- the corpus's files
def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("path", models.steps(), ids=lambda p: p.stem)
def test_each_step_has_its_twin_and_marks_its_mistake(path: Path) -> None:
    """Every step file has the idiom and the mistake, the mistake's line marked, and the idiom's not."""
    functions = _functions(path)
    assert set(models.TWINS) <= set(functions), f"{path.name} lacks {set(models.TWINS) - set(functions)}"
    lines = path.read_text().splitlines()
    marked = [i + 1 for i, line in enumerate(lines) if "# MISTAKE:" in line]
    mistake, idiom = functions["make_mistake"], functions["make_step"]
    assert marked and all(mistake.lineno <= n <= mistake.end_lineno for n in marked), path.name
    assert not any(idiom.lineno <= n <= idiom.end_lineno for n in marked), path.name


def test_every_library_a_step_needs_is_in_the_models_extra() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["models"]
    base = {"torch", "torchvision"}  # the package's own dependencies
    needed = {name for path in models.steps() for name in models.libraries(path)} - base
    assert needed and needed <= set(extra), f"not in the models extra: {needed - set(extra)}"


def test_a_missing_library_skips_naming_it_and_the_extra(tmp_path: Path) -> None:
    step = tmp_path / "absent.py"
    step.write_text('LIBRARIES = ("torch", "leaklab_no_such_library")\n')
    assert models.missing(step) == f"needs leaklab_no_such_library, not installed here: {models.EXTRA}"
    step.write_text('LIBRARIES = ("torch",)\n')
    assert models.missing(step) is None


# --------------------------------------------------------------------------- the rendering
def _corpus_file() -> tuple[str, dict]:
    found = [(name, doc) for name, doc in load_all_results() if models.corpus_runs(doc)]
    assert found, "no committed results file holds the real-model corpus"
    return found[0]


def test_harness_renders_the_corpus_from_its_results_file(tmp_path: Path) -> None:
    """docs/harness.md's table is read from the committed file: each run's row is there, and a
    verdict changed in a copy of the file changes the rendered row (the mutation)."""
    name, document = _corpus_file()
    text = render_harness()
    runs = models.corpus_runs(document)
    for run in runs:
        row = f"| [`{run.labels['step']}`](../real_models/{run.labels['step']}.py) | {run.labels['twin']} | "
        assert any(line.startswith(row) and run.verdict in line for line in text.splitlines()), row

    # the mutation: an idiom made to grow in a copy of the file renders in bold, read from that copy
    root = tmp_path / "repo"
    (root / "results").mkdir(parents=True)
    for sub in ("cases", "fixes"):
        (root / sub).symlink_to(ROOT / sub)
    raw = json.loads((ROOT / "results" / name).read_text())
    run = next(r for r in raw["runs"].values() if r["twin"] == "idiom" and r["verdict"] != GROWS)
    run["resources"][run["resource"]]["verdict"] = run["verdict"] = GROWS
    (root / "results" / name).write_text(json.dumps(raw))
    row = f"| [`{run['step']}`](../real_models/{run['step']}.py) | idiom | **grows** |"
    assert row in render_harness(root)
    assert row not in text


def test_harness_renders_the_checks_cost_on_the_corpus_from_its_results_file() -> None:
    """``leaklab bench --models``'s figures (the check against the same steps run bare) are read from
    the committed file: every step's ratio and the median over the steps."""
    costs = [(name, doc["benchmarks"]["models_cost"]) for name, doc in load_all_results()
             if "models_cost" in doc.get("benchmarks", {})]
    if not costs:
        pytest.skip("no committed results file holds leaklab bench --models's figures")
    text = render_harness()
    for name, cost in costs:
        assert f"[{name}](../results/{name})" in text
        assert f"**{cost['median_ratio']:.2f}×** the bare steps" in text
        for run, row in cost["rows"].items():
            assert f"| `{run}` | {row['check_s']:.2f} s | {row['bare_s']:.2f} s | {row['calls']} | {row['ratio']:.2f}× |" in text
        for variant in models.COST_VARIANTS:
            if f"median_{variant}_ratio" in cost:
                assert f"{models.COST_VARIANTS[variant]}: **{cost[f'median_{variant}_ratio']:.2f}×**" in text


def test_check_cost_counts_the_checks_calls_and_runs_as_many_bare(tmp_path: Path) -> None:
    """``leaklab bench --models`` on a 1 ms step: the bare run makes exactly the calls the check made
    (warm-up and measured steps at least), so the check cannot come out cheaper than the steps."""
    (tmp_path / "sleeper.py").write_text(
        "import time\nLIBRARIES = ()\n\ndef make_step(device):\n    return lambda: time.sleep(0.001)\n")
    cost = models.check_cost("cpu", rounds=2, directory=tmp_path)
    row = cost["rows"][f"{tmp_path.name}/sleeper.py:make_step"]
    default = RunOptions()
    assert row["calls"] >= default.warmup + default.steps and row["verdicts"] == ["bounded", "bounded"]
    assert row["bare_s"] >= row["calls"] * 0.001 and row["ratio"] > 1 and cost["median_ratio"] == row["ratio"]
    assert set(cost) >= {f"median_{variant}_ratio" for variant in models.COST_VARIANTS}  # on the CPU


def test_the_emptied_counter_counts_nothing_and_the_counter_comes_back() -> None:
    """The cost bench's floor (a dispatch mode that only calls each operator) swaps the counter's
    hook for the block's length only."""
    import torch

    from leaklab.measure import LiveTensorBytes

    with LiveTensorBytes() as counter:
        with models._counter_emptied():
            emptied = torch.zeros(256)
            assert counter.live_bytes() == 0
        counted = torch.zeros(256)
        assert counter.live_bytes() == counted.nbytes
    del emptied


def test_harness_renders_the_comparisons_of_repeated_runs() -> None:
    """tools/models_runs.py --json's files under results/models-gate/: each one's flips and wrong answers."""
    gates = sorted((ROOT / "results" / "models-gate").glob("*.json"))
    assert gates, "no comparison of repeated corpus runs is committed"
    text = render_harness()
    for path in gates:
        gate = json.loads(path.read_text())
        line = next(line for line in text.splitlines() if f"[{path.name}](../results/models-gate/{path.name})" in line)
        assert f"{len(gate['runs'])} runs" in line and f"{len(gate['flips'])} flip(s) of {gate['compared']}" in line
        assert all(f"`{flip['what']}`" in line for flip in gate["flips"])
        assert all(f"`{name}`" in line for run in gate["runs"] for name in run["wrong"])


def test_the_gpu_suite_leaves_the_corpus_out_unless_asked_for_by_name():
    """`pytest -m cuda` replaces the default -m: the corpus's CUDA steps must not ride along (they
    took the H200 suite past its time limit); `-m "models and cuda"` still selects them. The
    plugin's hook on stand-in items (a collection in a fresh interpreter cost seconds a run)."""
    from types import SimpleNamespace

    from leaklab_lab.plugin import pytest_collection_modifyitems

    def collected(expression: str) -> list[str]:
        items = [SimpleNamespace(name=name, get_closest_marker=lambda mark, name=name: mark if "real_model" in name else None)
                 for name in ("test_case[leak-cuda]", "test_real_model[lora-idiom-cuda]")]
        deselected = []
        config = SimpleNamespace(getoption=lambda option, default=None: expression,
                                 hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
        pytest_collection_modifyitems(config, items)
        assert len(items) + len(deselected) == 2
        return [item.name for item in items]

    assert collected("cuda") == ["test_case[leak-cuda]"]
    assert "test_real_model[lora-idiom-cuda]" in collected("models and cuda")
