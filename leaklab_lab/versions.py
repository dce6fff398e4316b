"""The catalog across torch versions: one ``leaklab run`` results file per torch version
(``results/matrix/cpu-torch<version>.json``, made by ``tools/torch_matrix.sh``), side by side.

Adjacent versions are compared with :func:`leaklab_lab.results.compare`, the rule a CI gates a
torch upgrade on: a verdict that changed is shown in bold, a headline rate that moved beyond
the compare's tolerance in italics. A verdict change is a claim about torch, so the case must
explain it (``versions_note`` in its TOML); one that is not explained is listed as such, and
``leaklab catalog --strict`` (and a test) refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from leaklab.report import Report
from leaklab.verdict import GROWS, PLATEAU, RAISES
from leaklab_lab.cases import Case
from leaklab_lab.results import case_of, compare, compare_text, load_results

MATRIX_DIR = "results/matrix"


def torch_of(document: dict[str, Any]) -> str:
    return document["environment"]["torch"].split("+")[0]


def load_matrix(directory: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(file name, torch version, document) for each results file under ``directory``, oldest
    torch first; a malformed file is refused (:class:`ResultsError`, naming it)."""
    found = [(path.name, load_results(path)) for path in sorted(directory.glob("*.json"))]
    return sorted(((name, torch_of(doc), doc) for name, doc in found), key=lambda row: Version(row[1]))


def cell(run: Report | None) -> str:
    """A run's verdict and, where it leaks, the headline resource's figure."""
    if run is None:
        return "–"
    if run.verdict == RAISES:
        return "raises"
    result = run.resources[run.resource] if run.resource else None
    if run.verdict == GROWS and result is not None:
        return f"grows {result.rate()} (`{run.resource}`)"
    if run.verdict == PLATEAU and result is not None:
        return f"plateau +{result.kind.format(result.trend.rise_bytes)} (`{run.resource}`)"
    return run.verdict


@dataclass
class VerdictChange:
    case: str
    run: str
    older: str     # torch versions
    newer: str
    was: str
    now: str
    uncertain: bool


@dataclass
class Matrix:
    versions: list[str]
    files: list[str]
    rows: list[tuple[str, list[str]]] = field(default_factory=list)   # run key, one cell per version
    changes: list[VerdictChange] = field(default_factory=list)


def build(cases: list[Case], matrix: list[tuple[str, str, dict[str, Any]]]) -> Matrix:
    """The table's cells and the verdict changes between adjacent versions."""
    slugs = {case.slug for case in cases}
    table = Matrix([version for _, version, _ in matrix], [name for name, _, _ in matrix])
    keys = sorted({key for _, _, doc in matrix for key, run in doc["runs"].items() if case_of(run) in slugs},
                  key=lambda key: (key.split(":")[0], ":leak" not in key, key))  # a case's leak, then its fixes
    marks: dict[tuple[str, int], str] = {}
    for i in range(1, len(matrix)):
        (_, older, before), (_, newer, after) = matrix[i - 1], matrix[i]
        for change in compare(before, after):
            run = after["runs"].get(change.run)
            if change.run not in keys or run is None:
                continue
            if change.what.startswith("verdict"):
                marks[change.run, i] = "**"
                table.changes.append(VerdictChange(case_of(run), change.run, older, newer, change.old, change.new,
                                                   "uncertain" in change.what))
            elif change.what == f"{run.resource} per step":
                marks.setdefault((change.run, i), "_")
    for key in keys:
        cells = []
        for i, (_, _, doc) in enumerate(matrix):
            text, mark = cell(doc["runs"].get(key)), marks.get((key, i), "")
            cells.append(f"{mark}{text}{mark}" if mark else text)
        table.rows.append((key, cells))
    return table


def unexplained(cases: list[Case], table: Matrix) -> list[VerdictChange]:
    """Verdict changes between versions whose case has no ``versions_note``."""
    notes = {case.slug: case.meta.get("versions_note", "") for case in cases}
    return [change for change in table.changes if not change.uncertain and not notes.get(change.case)]


def render(cases: list[Case], matrix: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """The catalog's "Across torch versions" section (nothing when there is no matrix)."""
    if not matrix:
        return []
    table = build(cases, matrix)
    by_slug = {case.slug: case for case in cases}
    out = ['<a id="across-torch-versions"></a>', "", "## Across torch versions", "",
           f"`leaklab run --device cpu` on {len(table.versions)} torch versions, each in its own environment "
           "(`tools/torch_matrix.sh`; the files are under [results/matrix](results/matrix)). Adjacent versions are "
           "compared as `leaklab compare` compares them: a **bold** cell is a verdict that changed, an _italic_ one "
           "a headline rate that moved beyond the compare's tolerance.", "",
           "| run | " + " | ".join(f"torch {v} ([file]({MATRIX_DIR}/{name}))" for v, name in zip(table.versions, table.files, strict=True)) + " |",
           "| --- |" + " --- |" * len(table.versions)]
    out += [f"| `{key.split('/', 1)[1]}` | " + " | ".join(cells) + " |" for key, cells in table.rows]
    out.append("")
    (older_file, older, before), (newer_file, newer, after) = matrix[-2] if len(matrix) > 1 else matrix[0], matrix[-1]
    text, fails = compare_text(before, after)
    out += [f"What the CI recipe ([docs/torch-upgrade.md](docs/torch-upgrade.md)) prints for the two newest versions, "
            f"torch {older} and {newer} (exit {1 if fails else 0}):", "", "```",
            f"$ leaklab compare {MATRIX_DIR}/{older_file} {MATRIX_DIR}/{newer_file}", text, "```", ""]
    if not table.changes:
        out += ["No verdict changed between adjacent versions.", ""]
        return out
    out += ["Verdict changes between versions:", ""]
    for change in table.changes:
        note = by_slug[change.case].meta.get("versions_note", "") if change.case in by_slug else ""
        why = ("uncertain (the confirmation pass changed it): not a change in torch" if change.uncertain
               else note or "**not explained**: the case's `versions_note` must say why")
        out.append(f"- `{change.run}`, torch {change.older} → {change.newer}: {change.was} → {change.now}. {why}")
    return [*out, ""]
