"""From a leak to its catalog entry: the entries' signatures, and how well the check names them.

- :func:`catalog_signatures` derives each entry's signature from its own measured leak run in the
  committed results (the files :data:`leaklab_lab.figures.FIGURE_SOURCES` names), never by hand;
  ``leaklab catalog`` writes them beside the tool (:data:`leaklab.signature.SIGNATURES_PATH`).
- :func:`leave_one_out` matches every entry's leak run against the others, its own entry left out,
  and counts the first suggestion, and any of the first three, that share its family (where
  nothing is close, the family the evidence named).
- :func:`fresh_steps` runs held-out leaky steps written from public reports
  (tests/data/fresh_steps.py, never catalog cases) and counts the same against the family a
  reader would pick; ``leaklab bench --matching`` keeps the figures in a results file. The
  steps come in held-out rounds (the module's ``ROUND``): the rates are given per round as well,
  since a round that the family rules were later fixed on is no longer held out.
- :func:`corpus` scores the same for the real-model corpus's mistakes (real_models/, measured by
  ``pytest -m models``), against a reader's answers written blind to the check
  (real_models/reader_answers.toml).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from leaklab.report import Report, report_from_json
from leaklab.runner import BadInput, RunOptions
from leaklab.scripts import load_script, run_isolated
from leaklab.signature import Resemblance, Signature, redecide, resemble, signature
from leaklab_lab.cases import ROOT, Case, tomllib
from leaklab_lab.figures import FIGURE_SOURCES
from leaklab_lab.results import case_runs, role_of

FRESH_STEPS = ROOT / "tests" / "data" / "fresh_steps.py"
CORPUS_ANSWERS = ROOT / "real_models" / "reader_answers.toml"
_MISTAKE = re.compile(r"(^|/)real_models/(\w+)\.py:make_mistake$")
SHOWN = 3


def fix_line(case: Case) -> str:
    """The fixed line of the case's first fix, with its ``# FIX:`` comment: the fix in one line."""
    for line in case.fixes[0].read_text().splitlines():
        if "# FIX:" in line:
            return re.sub(r"\s+", " ", line.strip())
    return ""


def catalog_signatures(cases: list[Case], results: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Every entry whose leak run grows or plateaus, with that run's signature, per device."""
    by_name = dict(results)
    entries = []
    for device, name in FIGURE_SOURCES.items():
        document = by_name.get(name)
        if document is None:
            continue
        for case in cases:
            leak = next((run for run in case_runs(document, case.slug) if role_of(run) == "leak"), None)
            ranks = int(leak.labels.get("world_size") or 1) if leak is not None else 1
            found = signature(leak, ranks) if leak is not None and leak.error is None else None
            if found is None:
                continue
            entries.append({"slug": case.slug, "title": case.meta["title"], "family": case.family.name, "fix": fix_line(case),
                            "device": device, "signature": found.to_json(), "devices": case.devices,
                            **({"answers": case.meta["answers"]} if case.meta.get("answers") else {}),
                            # whether its run named a holder chain (runs made before chains did not)
                            "chains": leak.holder is not None or leak.holder_missing is not None})
    return {"generated_from": sorted(name for name in FIGURE_SOURCES.values() if name in by_name), "entries": entries}


def signatures_text(cases: list[Case], results: list[tuple[str, dict[str, Any]]]) -> str:
    return json.dumps(catalog_signatures(cases, results), indent=1, sort_keys=True) + "\n"


def _hits(family: str, suggestions: list[Any], decided: Signature | None) -> tuple[bool, bool]:
    """Whether the family named is ``family``: the first suggestion's (and any of the first
    three's); where nothing is close, the one family the evidence named (the check says it:
    "resembles no catalog entry closely (the evidence names FAMILY ...)")."""
    families = [s.family for s in suggestions[:SHOWN]]
    if not families:
        named = decided is not None and decided.families is not None and tuple(decided.families) == (family,)
        return named, named
    return families[0] == family, family in families


def leave_one_out(entries: list[dict[str, Any]], device: str) -> dict[str, Any]:
    """Each entry measured on ``device`` matched against every other entry (its own left out on
    both devices). Entries whose family has no other entry cannot be named by family and are
    counted apart."""
    rows = {}
    for entry in entries:
        if entry["device"] != device:
            continue
        siblings = {e["slug"] for e in entries if e["family"] == entry["family"] and e["slug"] != entry["slug"]}
        mine = Signature.from_json(entry["signature"])
        found = resemble(mine, entries, device=device, exclude=entry["slug"], shown=SHOWN)
        first, any_of_three = _hits(entry["family"], found, mine)
        rows[entry["slug"]] = {"family": entry["family"], "has_sibling": bool(siblings),
                               "suggested": [[s.slug, s.family, s.score] for s in found],
                               "first": first, "top3": any_of_three}
    return _rates(rows)


def _counts(rows: dict[str, Any]) -> dict[str, Any]:
    """The counts rendered in docs/harness.md. ``entry_*``: among the steps whose mechanism has an
    entry (their ``entry`` names it), how often the first suggestion is that entry;
    ``no_entry_*``: among those whose mechanism has none (``entry`` None), how often the answer
    is "resembles no catalog entry closely"."""
    counted = [row for row in rows.values() if row.get("has_sibling", True)]
    with_entry = [row for row in counted if row.get("entry")]
    no_entry = [row for row in counted if "entry" in row and row["entry"] is None]
    # A leak the check did not find gets no suggestion either: that is a miss, never a right silence.
    silent = [row for row in counted if not row["suggested"] and row.get("verdict", "grows") == "grows"]
    return {"counted": len(counted), "first": sum(row["first"] for row in counted),
            "top3": sum(row["top3"] for row in counted), "none_close": len(silent),
            "entry_counted": len(with_entry),
            "entry_first": sum(bool(row["suggested"]) and row["suggested"][0][0] == row["entry"] for row in with_entry),
            "no_entry_counted": len(no_entry), "no_entry_none": sum(any(row is r for r in silent) for row in no_entry),
            "without_sibling": sorted(slug for slug, row in rows.items() if not row.get("has_sibling", True))}


def _rates(rows: dict[str, Any]) -> dict[str, Any]:
    """:func:`_counts` over all rows, and, where the rows name their held-out round (``round``),
    the same counts per round (keys are the round numbers as strings, as JSON keeps them)."""
    rounds = sorted({row["round"] for row in rows.values() if "round" in row})
    by_round = {str(r): _counts({name: row for name, row in rows.items() if row.get("round") == r}) for r in rounds}
    return {"rows": rows, **_counts(rows), **({"rounds": by_round} if by_round else {})}


def side_by_side() -> int:
    """How many held-out steps run at once: each its own process with two cores (one on the
    2-core CPU machine, eight on the GPU machine's sixteen)."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def fresh_steps(device: str, entries: list[dict[str, Any]] | None = None, progress: Any = None,
                rounds: set[int] | None = None, steps: set[str] | None = None) -> dict[str, Any]:
    """The held-out leaky steps run under the default check on ``device``, each matched against
    the catalog; the family a reader would pick is the module's FAMILY. Each step runs in a fresh
    process, as a user's own ``leaklab check`` does: run one after another in one process, a step
    whose leak is in the native heap read bounded behind ~170 steps that had already grown the heap
    and oneDNN's cache (features_queued_faster_than_written, conv1d_width_varies_on_cpu).
    ``rounds``: only the steps of these held-out rounds; ``steps``: only these steps (an unknown
    name is bad input, said before anything runs)."""
    module = load_script(FRESH_STEPS)
    round_of: dict[str, int] = dict(getattr(module, "ROUND", {}))
    unknown = sorted((steps or set()) - set(module.FAMILY))
    if unknown:
        raise BadInput(f"--steps: no held-out step named {', '.join(unknown)} in {FRESH_STEPS}")
    families: dict[str, str] = {name: family for name, family in module.FAMILY.items()
                                if (rounds is None or round_of.get(name, 1) in rounds) and (steps is None or name in steps)}
    entries_named: dict[str, str | None] = dict(getattr(module, "ENTRY", {}))
    rows = {}
    with ThreadPoolExecutor(side_by_side()) as pool:
        reports = pool.map(lambda name: _isolated(name, device), families)
        for name, report in zip(families, reports, strict=True):
            mine = signature(report) if report is not None else None
            found = ([] if report is None else
                     resemble(mine, entries, device=device, shown=SHOWN) if entries is not None
                     else [Resemblance.from_json(r) for r in report.resembles or []])
            first, any_of_three = _hits(families[name], found, mine)
            rows[name] = {"family": families[name], "device": device,
                          **({"verdict": "failed", "summary": f"{name}: the check did not answer", "signature": None,
                              "holder": None, "holder_missing": None} if report is None else
                             {"verdict": report.verdict, "summary": report.summary(), "signature": report.signature,
                              "holder": report.holder, "holder_missing": report.holder_missing}),
                          **({"entry": entries_named[name]} if name in entries_named else {}),
                          **({"round": round_of[name]} if name in round_of else {}),
                          "suggested": [[s.slug, s.family, s.score] for s in found], "first": first,
                          "top3": any_of_three}
            if progress:
                progress(name, rows[name])
    return _rates(rows)


def merged_rows(before: dict[str, Any], summary: dict[str, Any], note: str) -> tuple[dict[str, Any], str]:
    """``summary``'s rows (some rounds, measured now) in place of the same steps' rows of the
    matching results document ``before`` (:func:`leaklab_lab.results.load_results`), whose other
    rows are kept; the note says which were kept."""
    kept = before.get("benchmarks", {}).get("matching", {}).get("rows", {})
    rounds = ", ".join(map(str, sorted({row["round"] for row in summary["rows"].values() if "round" in row})))
    said = (f"rounds {rounds} measured now" if len(summary["rows"]) >= _rows_in_rounds(kept, summary) else
            f"{len(summary['rows'])} of the steps of rounds {rounds} measured now") + (f" ({note})" if note else "")
    return _rates({**kept, **summary["rows"]}), f"{said}; the other rows kept from: {before.get('note', '')}"


def _rows_in_rounds(kept: dict[str, Any], summary: dict[str, Any]) -> int:
    """How many rows the rounds of ``summary`` hold, counting those kept: fewer measured is a subset."""
    rounds = {row.get("round") for row in summary["rows"].values()}
    return len({name for name, row in {**kept, **summary["rows"]}.items() if row.get("round") in rounds})


def _isolated(name: str, device: str) -> Report | None:
    """One held-out step's check in its own process; None where it did not answer (killed past
    its time, or it crashed): counted as a miss, the run goes on."""
    try:
        return report_from_json(run_isolated(FRESH_STEPS, name, device, RunOptions()))
    except (subprocess.TimeoutExpired, RuntimeError, ValueError) as exc:
        print(f"{name}: the check did not answer: {str(exc).splitlines()[0]}", file=sys.stderr, flush=True)
        return None


def rematch(summary: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The held-out steps' committed signatures matched again against ``entries`` (the catalog as
    it is now), so that the rates rendered always describe the catalog that ships."""
    rows = {}
    module = load_script(FRESH_STEPS)
    named = dict(getattr(module, "ENTRY", {}))  # the answers as they are now
    rounds = dict(getattr(module, "ROUND", {}))
    for name, row in summary["rows"].items():
        row = {**{key: value for key, value in row.items() if key not in ("entry", "round")},
               **({"entry": named[name]} if name in named else {}),
               **({"round": rounds[name]} if name in rounds else {})}
        mine = Signature.from_json(row["signature"]) if row.get("signature") else None
        if mine is not None:
            mine = redecide(mine, row.get("holder"), row.get("holder_missing"))
        found = resemble(mine, entries, device=row.get("device"), shown=SHOWN)
        first, any_of_three = _hits(row["family"], found, mine)
        rows[name] = {**row, "suggested": [[s.slug, s.family, s.score] for s in found], "first": first,
                      "top3": any_of_three}
    return _rates(rows)


def corpus(runs: list[Report], entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The real-model corpus's mistakes among ``runs`` (a models results file's), each matched
    against ``entries`` (the catalog as it is now, its family decided by today's rules from the
    run's committed holder chain) and scored against the reader's answer; a mistake the check did
    not find growing has no suggestion to score and is left out. None where ``runs`` holds none."""
    with open(CORPUS_ANSWERS, "rb") as handle:
        answers = tomllib.load(handle)
    rows = {}
    for run in runs:
        name = _MISTAKE.search(run.name or "")
        mine = signature(run) if name and name.group(2) in answers else None
        if mine is None:
            continue
        answer = answers[name.group(2)]
        found = resemble(mine, entries, device=run.device, shown=SHOWN)
        first, any_of_three = _hits(answer["family"], found, mine)
        entry = {"entry": None if answer["entry"] == "none" else answer["entry"]} if "entry" in answer else {}
        rows[name.group(2)] = {"family": answer["family"], **entry, "suggested": [[s.slug, s.family, s.score] for s in found],
                               "first": first, "top3": any_of_three}
    return _rates(rows) if rows else None


__all__ = ["catalog_signatures", "corpus", "fix_line", "fresh_steps", "leave_one_out", "rematch", "signatures_text"]
