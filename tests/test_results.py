"""Results files and `leaklab compare`: a torch upgrade that breaks a fix is caught."""

import json
import shutil
from pathlib import Path

import pytest

from leaklab.cli import main
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


def test_two_identical_runs_compare_clean(tmp_path, capsys):
    root = _copy_case(tmp_path)
    first = _results_for(root, tmp_path, "first.json")
    second = _results_for(root, tmp_path, "second.json")
    assert main(["compare", str(first), str(second)]) == 0
    assert "regression" not in capsys.readouterr().out


def test_compare_rejects_a_file_that_is_not_results(tmp_path, capsys):
    bogus = tmp_path / "bogus.json"
    bogus.write_text("{}")
    assert main(["compare", str(bogus), str(bogus)]) == 2
    assert "not a leaklab results file" in capsys.readouterr().err


@pytest.mark.parametrize("path", CPU_RESULTS + sorted((ROOT / "results").glob("h200-*.json")), ids=lambda p: p.name)
def test_committed_results_say_where_and_when(path):
    document = json.loads(path.read_text())
    assert document["created"] and document["environment"]["torch"] and document["environment"]["device_name"]
    assert document["note"], "a committed results file says where and why it was made"
