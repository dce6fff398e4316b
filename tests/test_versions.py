"""The catalog across torch versions, and expectations that name torch versions."""

import json
import shutil

import pytest

from leaklab_lab import versions
from leaklab_lab.cases import ROOT, CaseError, discover, load_case


def test_the_matrix_is_committed_and_every_verdict_change_is_explained():
    matrix = versions.load_matrix(ROOT / versions.MATRIX_DIR)
    assert len(matrix) >= 2, "results/matrix needs a file per torch version (tools/torch_matrix.sh)"
    cases = discover()
    assert versions.unexplained(cases, versions.build(cases, matrix)) == []


def _matrix_with_a_fix_that_started_leaking(tmp_path):
    by_version = versions.load_matrix(ROOT / versions.MATRIX_DIR)  # oldest torch first (not file-name order)
    older, newer = (ROOT / versions.MATRIX_DIR / by_version[i][0] for i in (0, -1))
    for path in (older, newer):
        shutil.copy(path, tmp_path / path.name)
    document = json.loads(newer.read_text())
    run = document["runs"]["cpu/loss_accumulation:fix"]
    run["verdict"] = run["resources"][run["resource"]]["verdict"] = "grows"
    (tmp_path / newer.name).write_text(json.dumps(document))
    return versions.load_matrix(tmp_path)


def test_a_verdict_change_between_versions_is_bold_and_unexplained_until_the_case_says_why(tmp_path):
    matrix = _matrix_with_a_fix_that_started_leaking(tmp_path)
    cases = discover()
    table = versions.build(cases, matrix)
    row = dict(table.rows)["cpu/loss_accumulation:fix"]
    assert row[0] == "bounded" and row[-1].startswith("**grows")
    assert [(c.run, c.was, c.now) for c in versions.unexplained(cases, table)] == [
        ("cpu/loss_accumulation:fix", "bounded", "grows")]
    assert "**not explained**" in "\n".join(versions.render(cases, matrix))
    explained = [case for case in cases if case.slug == "loss_accumulation"][0]
    explained.meta["versions_note"] = "torch X changed how loss.item() syncs."
    assert versions.unexplained(cases, table) == []


def test_the_committed_matrix_changes_nothing_when_nothing_changed():
    matrix = versions.load_matrix(ROOT / versions.MATRIX_DIR)
    table = versions.build(discover(), matrix[:1] * 2)  # a version against itself
    assert table.changes == [] and all(len(set(cells)) == 1 for _, cells in table.rows)


def _case_with(tmp_path, extra: str):
    for folder in ("cases", "fixes"):
        (tmp_path / folder).mkdir(exist_ok=True)
    shutil.copy(ROOT / "cases" / "loss_accumulation.py", tmp_path / "cases")
    shutil.copy(ROOT / "fixes" / "loss_accumulation.py", tmp_path / "fixes")
    toml = tmp_path / "cases" / "loss_accumulation.toml"
    toml.write_text((ROOT / "cases" / "loss_accumulation.toml").read_text() + extra)
    return load_case(toml)


def test_an_expectation_can_name_the_torch_versions_it_holds_for(tmp_path):
    case = _case_with(tmp_path, '\n[expect.cpu.fix."torch>=2.5,<2.12"]\nhost_heap = "grows"\n')
    base = case.expected("cpu", "fix", "2.14.1+cu130")
    assert base.get("host_heap") != "grows"
    assert case.expected("cpu", "fix", "2.11.0+cu130")["host_heap"] == "grows"
    assert case.expected("cpu", "fix", "2.4.0")["host_heap"] == base.get("host_heap")
    assert case.expected("cpu", "fix", "2.12.0")["host_heap"] == base.get("host_heap")  # not "2.12" < "2.5" as text


@pytest.mark.parametrize(("extra", "message"), [
    ('\n[expect.cpu.fix."torch~~2"]\nhost_heap = "grows"\n', "is not a torch version range"),
    ('\n[expect.cpu.fix."torch<2.6"]\nhost_heap = "leaks"\n', "is not a verdict"),
    ('\n[expect.cpu.fix."torch<2.6"]\nheap = "grows"\n', "is not a resource or check"),
])
def test_a_bad_version_range_is_refused_naming_it(tmp_path, extra, message):
    with pytest.raises(CaseError, match=message):
        _case_with(tmp_path, extra)


def test_the_recipes_compare_runs_clean_between_adjacent_versions(capsys):
    from leaklab.cli import main

    matrix = versions.load_matrix(ROOT / versions.MATRIX_DIR)
    for (older, _, _), (newer, _, _) in zip(matrix, matrix[1:], strict=False):
        code = main(["compare", str(ROOT / versions.MATRIX_DIR / older), str(ROOT / versions.MATRIX_DIR / newer)])
        out = capsys.readouterr().out
        assert code == 0, out
        assert "0 regression(s), 0 missing without a reason" in out.splitlines()[-1]
