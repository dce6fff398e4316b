"""Results files and `leaklab compare`: a torch upgrade that breaks a fix is caught."""

import json
import shutil
from pathlib import Path

import pytest

from leaklab.cli import main
from leaklab.report import Report, ResourceResult
from leaklab.verdict import BOUNDED, RAISES, Trend
from leaklab_lab.cases import ROOT, load_case, run_case
from leaklab_lab.results import entry, write_results

CPU_RESULTS = sorted((ROOT / "results").glob("cpu-*.json"))


def _results_for(case_dir: Path, tmp_path: Path, name: str) -> Path:
    case = load_case(case_dir / "cases" / "loss_accumulation.toml")
    entries = [entry(run_case(case, role, "cpu"), case=case.slug, role=role, script=case.slug) for role in ("leak", "fix")]
    path = tmp_path / name
    write_results(path, entries, "cpu")
    return path


def _copy_case(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for folder in ("cases", "fixes"):
        (root / folder).mkdir(parents=True)
    for name in ("cases/loss_accumulation.py", "cases/loss_accumulation.toml", "fixes/loss_accumulation.py"):
        shutil.copy(ROOT / name, root / name)
    return root


def _only_loss_accumulation(committed: Path, tmp_path: Path) -> Path:
    document = json.loads(committed.read_text())
    document["runs"] = {k: v for k, v in document["runs"].items() if v.get("case") == "loss_accumulation"}
    assert document["runs"], f"{committed} has no loss_accumulation runs"
    path = tmp_path / "committed.json"
    path.write_text(json.dumps(document))
    return path


def test_a_fix_edited_to_leak_is_a_regression_against_the_committed_results(tmp_path, capsys):
    assert CPU_RESULTS, "no committed CPU results file (results/cpu-*.json)"
    root = _copy_case(tmp_path)
    fix = root / "fixes" / "loss_accumulation.py"
    fix.write_text(fix.read_text().replace("running_loss += loss.item()  # FIX:", "running_loss += loss  # FIX:"))
    new = _results_for(root, tmp_path, "new.json")
    old = _only_loss_accumulation(CPU_RESULTS[-1], tmp_path)
    assert main(["compare", str(old), str(new)]) == 1
    out = capsys.readouterr().out
    assert "cpu/loss_accumulation:fix" in out and "bounded" in out and "grows" in out and "YES" in out


def _verdict_of_fix_set_to(path: Path, verdict: str, tmp_path: Path) -> Path:
    document = json.loads(path.read_text())
    run = document["runs"]["cpu/loss_accumulation:fix"]
    run["verdict"] = run["resources"][run["resource"]]["verdict"] = verdict  # the verdict is its resources'
    planted = tmp_path / f"planted-{verdict}.json"
    planted.write_text(json.dumps(document))
    return planted


def test_two_identical_runs_compare_clean(tmp_path, capsys):
    root = _copy_case(tmp_path)
    first = _results_for(root, tmp_path, "first.json")
    second = _results_for(root, tmp_path, "second.json")
    assert main(["compare", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert "YES" not in out
    assert out.splitlines()[-1].startswith("compare: 2 runs in both, 0 regression(s), 0 missing")
    # the same two files still fail the compare once a regression is planted in the second
    assert main(["compare", str(first), str(_verdict_of_fix_set_to(second, "grows", tmp_path))]) == 1
    out = capsys.readouterr().out
    assert "cpu/loss_accumulation:fix" in out and "YES" in out and "1 regression(s)" in out


# --------------------------------------------------------------------------- compare, on made-up files
def _run(case: str, role: str, verdict: str = "bounded", times: list[float] | None = None,
         per_step: float = 0.0, resource: str = "cpu_tensors") -> dict:
    """A run as a results file keeps it, made the way leaklab makes one: a report, to JSON."""
    times = times or [0.010] * 8
    trend = Trend(BOUNDED if verdict == RAISES else verdict, per_step, per_step, 0.0, 1024.0)
    report = Report(device="cpu", steps=len(times), warmup=1, name=f"{case}:{role}", device_name="CPU",
                    step_seconds=times, error="RuntimeError: boom" if verdict == RAISES else None)
    report.resources[resource] = ResourceResult(resource, [0] * (len(times) + 1), trend, 0)
    return entry(report, case=case, role=role, script=case)


def _document(*runs: dict, skipped: dict | None = None) -> dict:
    return {"format": 1, "created": "2026-01-01T00:00:00+00:00", "command": "", "note": "made up",
            "environment": {"torch": "2.14.1", "device": "cpu", "device_name": "CPU", "python": "3.11"},
            "runs": {f"cpu/{run['name']}": run for run in runs}, "skipped": skipped or {}, "benchmarks": {}}


def _compare(tmp_path, capsys, old: dict, new: dict, *extra: str) -> tuple[int, str, str]:
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    try:
        code = main(["compare", str(tmp_path / "old.json"), str(tmp_path / "new.json"), *extra])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


PAIR = (_run("a", "leak", "grows", per_step=8192.0), _run("a", "fix"))


@pytest.mark.parametrize(("old", "new", "code"), [
    (("grows", "bounded"), ("grows", "bounded"), 0),
    (("grows", "bounded"), ("grows", "grows"), 1),     # the fix started leaking
    (("grows", "bounded"), ("grows", "plateau"), 1),
    (("grows", "bounded"), ("bounded", "bounded"), 1),  # the leak stopped reproducing
    (("grows", "bounded"), ("raises", "bounded"), 1),   # started raising
    (("raises", "bounded"), ("grows", "bounded"), 1),   # stopped raising
    (("grows", "bounded"), ("plateau", "bounded"), 0),  # still leaks: reported, not a regression
])
def test_verdict_changes_decide_the_exit_code(tmp_path, capsys, old, new, code):
    def document(leak, fix):
        return _document(_run("a", "leak", leak, per_step=8192.0), _run("a", "fix", fix))

    assert _compare(tmp_path, capsys, document(*old), document(*new))[0] == code


def test_a_step_that_raised_in_a_pass_the_check_added_raised_for_compare_too(tmp_path, capsys):
    """gradscaler_new_optimizer's leak raises when CPython reuses a freed optimizer's address: in one
    H100 run that came in the confirmation pass (its verdict grows, the pass stopped by the error),
    in the next in the series (raises). Its expectations read both as raising; compare did not, and
    flagged each change as a regression both ways."""
    def document(leak):
        return _document(leak, _run("a", "fix"))

    raised_late = _run("a", "leak", "grows", per_step=8192.0)
    raised_late["pass_stopped"] = "the confirmation stopped at step 26: RuntimeError: boom"
    raised_now = _run("a", "leak", "raises")
    for old, new in ((raised_late, raised_now), (raised_now, raised_late)):
        code, out, _ = _compare(tmp_path, capsys, document(old), document(new))
        assert code == 0 and "verdict" not in out, out
    code, out, _ = _compare(tmp_path, capsys, document(_run("a", "leak", "grows", per_step=8192.0)), document(raised_late))
    assert code == 1 and "grows -> raises" in out.replace("  ", " ").replace("  ", " "), out


def test_bytes_per_step_change_is_reported_not_failed(tmp_path, capsys):
    new = _document(_run("a", "leak", "grows", per_step=3 * 8192.0), _run("a", "fix"))
    code, out, _ = _compare(tmp_path, capsys, _document(*PAIR), new)
    assert code == 0 and "cpu_tensors per step" in out and "8.0 KiB" in out and "24.0 KiB" in out


def test_a_rate_change_is_said_in_its_resources_unit(tmp_path, capsys):
    """python_objects counts blocks: its rate is never shown in bytes (compare once said `192 B -> 48 B`)."""
    def document(rate):
        return _document(_run("a", "leak", "grows", per_step=rate, resource="python_objects"), _run("a", "fix"))

    code, out, _ = _compare(tmp_path, capsys, document(3000.0), document(9000.0))  # above the made-up floor
    assert code == 0 and "python_objects per step" in out and "3,000 blocks -> 9,000 blocks" in out, out


def test_a_missing_run_fails_unless_skipped_for_a_stated_reason(tmp_path, capsys):
    code, out, _ = _compare(tmp_path, capsys, _document(*PAIR), _document(PAIR[0]))
    assert code == 1
    assert "cpu/a:fix" in out and "missing" in out and "YES" in out
    assert out.splitlines()[-1].endswith("0 regression(s), 1 missing without a reason, 0 skipped with one")
    reason = "needs IPython, which is not installed here"
    code, out, _ = _compare(tmp_path, capsys, _document(*PAIR), _document(PAIR[0], skipped={"cpu/a:fix": reason}))
    assert code == 0
    assert f"skipped: {reason}" in out and "YES" not in out


def test_a_slower_machine_is_not_a_step_time_change(tmp_path, capsys):
    # everything 3x slower: the leak's time against its fix's has not moved
    old = _document(_run("a", "leak", "grows", [0.02, 0.021, 0.019, 0.02, 0.022, 0.02], 8192.0),
                    _run("a", "fix", times=[0.01, 0.011, 0.0095, 0.01, 0.0105, 0.01]))
    new = _document(*(_run("a", role, verdict, [3 * t for t in run["step_seconds"]], run["per_step_bytes"])
                      for (role, verdict), run in zip((("leak", "grows"), ("fix", "bounded")), old["runs"].values(), strict=True)))
    code, out, _ = _compare(tmp_path, capsys, old, new)
    assert code == 0 and "step time" not in out


def test_a_step_time_that_moved_beyond_its_spread_is_reported_and_never_fails(tmp_path, capsys):
    fix_times = [0.01, 0.011, 0.0095, 0.01, 0.0105, 0.01]
    old = _document(_run("a", "leak", "grows", [2 * t for t in fix_times], 8192.0), _run("a", "fix", times=fix_times))
    new = _document(_run("a", "leak", "grows", [6 * t for t in fix_times], 8192.0), _run("a", "fix", times=fix_times))
    code, out, _ = _compare(tmp_path, capsys, old, new)
    assert code == 0
    assert "cpu/a:leak" in out and "step time / fix's" in out and "2.00x" in out and "6.00x" in out
    # the same move inside a wide spread (a loaded machine) is not reported
    noisy = [0.01, 0.05, 0.002, 0.04, 0.003, 0.03]
    old = _document(_run("a", "leak", "grows", [2 * t for t in noisy], 8192.0), _run("a", "fix", times=noisy))
    new = _document(_run("a", "leak", "grows", [3 * t for t in noisy], 8192.0), _run("a", "fix", times=noisy))
    assert "step time" not in _compare(tmp_path, capsys, old, new)[1]


def test_tolerance_must_not_be_negative(tmp_path, capsys):
    code, _, err = _compare(tmp_path, capsys, _document(*PAIR), _document(*PAIR), "--tolerance", "-1")
    assert code == 2 and "--tolerance: must be 0 or more, not -1" in err and len(err.strip().splitlines()) == 1


def _malformed() -> list:
    good = _document(*PAIR)

    def edited(edit):
        document = json.loads(json.dumps(good))
        edit(document)
        return json.dumps(document)

    def drop_verdict(d):
        del d["runs"]["cpu/a:fix"]["verdict"]

    def set_run(key, value):
        return lambda d: d["runs"].__setitem__(key, value)

    return [
        pytest.param("", "is empty", id="empty"),
        pytest.param(json.dumps(good)[:200], "is not valid JSON", id="truncated"),
        pytest.param("runs: yes", "is not valid JSON", id="not-json"),
        pytest.param("[1, 2]", "holds a list", id="a-list"),
        pytest.param("{}", "has no 'format'", id="empty-object"),
        pytest.param(edited(lambda d: d.__setitem__("format", 0)), "is results format 0; this leaklab reads format 1",
                     id="older-format"),
        pytest.param(edited(lambda d: d.pop("environment")), "has no 'environment'", id="no-environment"),
        pytest.param(edited(drop_verdict), "run 'cpu/a:fix' has no 'verdict'", id="run-without-verdict"),
        pytest.param(edited(set_run("cpu/a:fix", None)), "run 'cpu/a:fix' is null", id="null-run"),
        pytest.param(edited(lambda d: d["runs"]["cpu/a:fix"].__setitem__("per_step_bytes", "8 KiB")),
                     "per_step_bytes is a string, expected a number", id="wrong-type"),
        pytest.param(edited(lambda d: d["runs"]["cpu/a:fix"].__setitem__("resources", [])),
                     "resources is a list", id="resources-a-list"),
        pytest.param(edited(lambda d: d.__setitem__("runs", [])), "'runs' is a list", id="runs-a-list"),
        pytest.param(edited(lambda d: d["runs"]["cpu/a:fix"].__setitem__("verdict", "grows")),
                     "run 'cpu/a:fix' says verdict 'grows', its resources say 'bounded'", id="verdict-not-its-resources"),
        pytest.param(edited(lambda d: d["runs"]["cpu/a:fix"].pop("steps")), "run 'cpu/a:fix' has no 'steps'",
                     id="run-without-steps"),
        pytest.param(edited(lambda d: d.__setitem__("runs", {})), "has no runs to compare", id="no-runs"),
    ]


@pytest.mark.parametrize(("text", "message"), _malformed())
@pytest.mark.parametrize("side", ["old", "new"])
def test_a_malformed_results_file_is_refused_with_one_line_naming_it(tmp_path, capsys, text, message, side):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_document(*PAIR)))
    bad.write_text(text)
    args = [str(bad), str(good)] if side == "old" else [str(good), str(bad)]
    code = main(["compare", *args])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith(f"leaklab: {bad}") and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("path", CPU_RESULTS + sorted((ROOT / "results").glob("h200-*.json")), ids=lambda p: p.name)
def test_committed_results_say_where_and_when(path):
    document = json.loads(path.read_text())
    assert document["created"] and document["environment"]["torch"] and document["environment"]["device_name"]
    assert document["note"], "a committed results file says where and why it was made"


def test_a_verdict_change_marked_uncertain_is_reported_not_failed(tmp_path):
    from leaklab_lab.results import compare, load_results

    def document(verdict, uncertain):
        run = _run("x", "fix", verdict)
        run["uncertain"] = uncertain
        path = tmp_path / f"{verdict}-{len(uncertain)}.json"
        path.write_text(json.dumps(_document(run)))
        return load_results(path)

    changes = compare(document("bounded", []), document("grows", ["cpu_tensors"]))
    assert [c.regression for c in changes] == [False] and "uncertain: cpu_tensors" in changes[0].what
    changes = compare(document("bounded", []), document("grows", []))  # the mutation: without the mark it fails
    assert [c.regression for c in changes] == [True]


@pytest.mark.parametrize("path", sorted((ROOT / "results").glob("*.json")) + sorted((ROOT / "results" / "matrix").glob("*.json")),
                         ids=lambda p: p.name)
def test_a_committed_run_is_one_report_read_back_without_loss(path):
    """A run is one object: every run of every committed results file, read back as the Report
    it was written from, writes the same JSON again (verdict, headline and summary recomputed)."""
    from leaklab_lab.results import load_results

    raw = json.loads(path.read_text())["runs"]
    for key, report in load_results(path)["runs"].items():
        assert isinstance(report, Report)
        assert json.loads(json.dumps(report.to_json())) == raw[key], key
