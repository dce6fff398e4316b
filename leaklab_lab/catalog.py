"""CATALOG.md: generated from ``cases/*.toml``, the twin scripts and the committed ``results/*.json``.

Entries follow rust-clippy's and ruff's rule pages: what it does, why it is bad, an example,
what to use instead (the diff between the twins), then what was measured and where. Nothing in
it is typed by hand, so it cannot drift from the code or the measurements: ``leaklab catalog
--check`` (and a test) fails when it is stale.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from leaklab.resources import BY_NAME as RESOURCES
from leaklab.verdict import GROWS, PLATEAU, format_bytes
from leaklab_lab.cases import ROOT, SYMPTOMS, Case, discover
from leaklab_lab.results import case_runs

CATALOG_PATH = ROOT / "CATALOG.md"
RESULTS_DIR = ROOT / "results"
CURVES_DIR = ROOT / "docs" / "curves"


def load_all_results(directory: Path = RESULTS_DIR) -> list[tuple[str, dict[str, Any]]]:
    """Every committed results file, by name, in name order."""
    found = []
    for path in sorted(directory.glob("*.json")):
        document = json.loads(path.read_text())
        if "runs" in document:
            found.append((path.name, document))
    return found


def _anchor(case: Case) -> str:
    return case.slug  # an explicit <a id> before each entry: heading anchors differ between renderers


def _where(document: dict[str, Any]) -> str:
    env = document["environment"]
    return f"{env['device_name']}, torch {env['torch']}"


def _short_where(document: dict[str, Any]) -> str:
    env = document["environment"]
    return f"{'H200' if 'H200' in env['device_name'] else 'CPU'} (torch {env['torch'].split('+')[0]})"


def _verdict_pair(case: Case, document: dict[str, Any]) -> str:
    """``grows → bounded`` for a case in one results file (``–`` where it did not run)."""
    runs = case_runs(document, case.slug)
    leak = [run["verdict"] for run in runs if run["role"] == "leak"]
    fixes = [run["verdict"] for run in runs if run["role"] == "fix"]
    if not leak:
        return "–"
    return f"{leak[0]} → {', '.join(fixes) or '–'}"


def _example(case: Case, context: int = 3) -> str:
    """The leaky lines: each ``# LEAK:`` line with a few lines around it."""
    lines = case.leak.read_text().splitlines()
    marks = case.leak_lines()
    keep = sorted({i for mark in marks for i in range(max(1, mark - context), min(len(lines), mark + 1) + 1)})
    out, previous = [], None
    for i in keep:
        if previous is not None and i != previous + 1:
            out.append("    ...")
        out.append(lines[i - 1])
        previous = i
    return "\n".join(out)


def _diff(case: Case, fix: Path) -> str:
    diff = difflib.unified_diff(
        case.leak.read_text().splitlines(), fix.read_text().splitlines(),
        fromfile=f"cases/{case.leak.name}", tofile=f"fixes/{fix.name}", lineterm="", n=2,
    )
    return "\n".join(diff)


def _figure(run: dict[str, Any]) -> str:
    if run["verdict"] == "raises":
        return f"raises `{run['error']}`"
    resource = run["resource"]
    result = run["resources"][resource]
    if run["verdict"] == GROWS:
        return f"**grows** {format_bytes(result['per_step_bytes'])}/step in `{resource}`"
    if run["verdict"] == PLATEAU:
        return f"**plateau** in `{resource}` (rose {format_bytes(result['rise_bytes'])}, then flat)"
    return f"bounded (`{resource}` level {format_bytes(result['level_bytes'])})"


def _others(run: dict[str, Any]) -> str:
    parts = []
    for name, result in run.get("resources", {}).items():
        if name == run.get("resource"):
            continue
        if result["verdict"] == GROWS:
            parts.append(f"`{name}` grows {format_bytes(result['per_step_bytes'])}/step")
        elif result["verdict"] == PLATEAU:
            parts.append(f"`{name}` plateau +{format_bytes(result['rise_bytes'])}")
        else:
            parts.append(f"`{name}` bounded")
    for metric, values in run.get("metrics", {}).items():
        if values:
            parts.append(f"{metric}: {values[0]:.4g} → {values[-1]:.4g} (mean {sum(values) / len(values):.3g})")
    return "; ".join(parts)


def _measured(case: Case, results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    rows = []
    for filename, document in results:
        for run in case_runs(document, case.slug):
            script = run.get("script", "")
            label = run["role"] + (f" (`{script}`)" if script and script != case.slug else "")
            rows.append(f"| {_where(document)} | {label} | {_figure(run)} | {_others(run)} | "
                        f"{run['steps']} steps after {run['warmup']} | [{filename}](results/{filename}) |")
    if not rows:
        return ["Not measured yet: no committed results file has this case."]
    return ["| where | twin | verdict | every other resource and metric | series | file |",
            "| --- | --- | --- | --- | --- | --- |", *rows]


def _site(case: Case, results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = []
    for _, document in results:
        for run in case_runs(document, case.slug):
            if run["role"] == "leak":
                if run.get("sites") and run["verdict"] in (GROWS, PLATEAU) and run["resource"] in ("cpu_tensors", "device_allocated"):
                    site = run["sites"][0]
                    lines.append(f"- {_where(document)}: allocated at `{Path(site['filename']).name}:{site['lineno']}` "
                                 f"(`{site['code']}`), {format_bytes(site['bytes'])} alive at the end"
                                 + (f", held by `{site['held_by']}`" if site.get("held_by") else ""))
                elif run.get("history"):
                    lines.append(f"- {_where(document)}: {run['history']}")
    return lines


def entry(case: Case, results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    meta = case.meta
    out = [f'<a id="{_anchor(case)}"></a>', "", f"## `{case.slug}`: {case.title}", ""]
    out.append(f"**Seed:** {meta['seed']} · **Leaks in:** `{meta['resource']}` · **Seed claim:** {meta['claim_status']} · "
               f"**Runs on:** {', '.join(case.devices)}")
    out += ["", "### What it does", "", meta["what"], "", "### Why is this bad", "", meta["why"]]
    if meta["resource"] in RESOURCES:
        out += ["", f"It shows in `{meta['resource']}`: {RESOURCES[meta['resource']].description}."]
    out += ["", "### Example", "", "```python", _example(case), "```", "", "### Use instead", ""]
    for fix in case.fixes:
        out += ["```diff", _diff(case, fix), "```", ""]
    out += ["### Measured", "", *_measured(case, results), ""]
    sites = _site(case, results)
    if sites:
        out += ["Where the leak was attributed:", "", *sites, ""]
    if meta.get("attribute_exempt"):
        out += [f"Not attributed to a line: {meta['attribute_exempt']}", ""]
    for device in case.devices:
        curve = CURVES_DIR / f"{case.slug}-{device}.png"
        if curve.is_file():
            out += [f"![{case.slug} on {device}: leak against fix](docs/curves/{curve.name})", ""]
    out += ["### The seed's claim", "", f"> {meta['claim']}", "", f"**{meta['claim_status'].capitalize()}.** {meta.get('claim_note', '')}".rstrip(), ""]
    out += ["### Does the fix change what training computes?", "", meta.get("fix_changes_training", "Not stated."), ""]
    out += ["### Known problems", "", meta.get("known_problems", "None known."), ""]
    refs = meta.get("references", [])
    if refs:
        out += ["### References", "", *[f"- <{ref}>" for ref in refs], ""]
    return out


def _benchmarks(results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    out = []
    for filename, document in results:
        for name, summary in sorted(document.get("benchmarks", {}).items()):
            if not all("ratio" in row for row in summary.values()):
                out += [f"### {name} ({_where(document)}, [{filename}](results/{filename}))", "",
                        "| resource | one reading (median) |", "| --- | --- |"]
                out += [f"| `{resource}` | {row['median_us']:.1f} µs |" for resource, row in summary.items()]
                out.append("")
                continue
            out += [f"### {name} ({_where(document)}, [{filename}](results/{filename}))", "",
                    "| variant | median step | ratio to the first | ratio IQR | device allocs | device frees | syncs |",
                    "| --- | --- | --- | --- | --- | --- | --- |"]
            for variant, row in summary.items():
                counters = row.get("counters", {})
                q1, q3 = row["ratio_quartiles"]
                out.append(f"| {variant} | {row['median_ms']:.2f} ms | {row['ratio']:.3f} | {q1:.3f}–{q3:.3f} | "
                           f"{counters.get('num_device_alloc', '–')} | {counters.get('num_device_free', '–')} | "
                           f"{counters.get('num_sync_all_streams', '–')} |")
            out.append("")
    return out


def render(root: Path = ROOT) -> str:
    cases = discover(root)
    results = load_all_results(root / "results")
    out = ["# The leaklab catalog", "",
           "<!-- Generated by `leaklab catalog` from cases/*.toml, cases/, fixes/ and results/*.json. Do not edit by hand. -->", "",
           "Every entry is a leaky script and its fixed twin, measured. Where the seed write-ups' claim did not "
           "reproduce, the entry says so and shows what does happen.", ""]
    if results:
        out += ["Measured on:", ""]
        for filename, document in results:
            env = document["environment"]
            out.append(f"- [{filename}](results/{filename}): {env['device_name']}, torch {env['torch']}, "
                       f"Python {env['python']}, {document['created']}" + (f" ({document['note']})" if document.get("note") else ""))
        out.append("")
    out += ["## Symptom index", ""]
    for symptom in SYMPTOMS:
        matching = [case for case in cases if symptom in case.meta["symptoms"]]
        if matching:
            out.append(f"- **{symptom}**: " + ", ".join(f"[`{c.slug}`](#{_anchor(c)})" for c in matching))
    runs_files = [(name, doc) for name, doc in results if doc["runs"]]
    where = [_short_where(doc) for _, doc in runs_files]
    out += ["", "## All cases", "",
            "| case | leaks in | seed | seed claim | " + " | ".join(f"{w}: leak → fix" for w in where) + " |",
            "| --- | --- | --- | --- |" + " --- |" * len(where)]
    for case in cases:
        cells = [_verdict_pair(case, doc) for _, doc in runs_files]
        out.append(f"| [`{case.slug}`](#{_anchor(case)}) | `{case.meta['resource']}` | {case.meta['seed']} | "
                   f"{case.meta['claim_status']} | " + " | ".join(cells) + " |")
    out.append("")
    for case in cases:
        out += entry(case, results)
    bench = _benchmarks(results)
    if bench:
        out += ["## Timings and overheads", "", "Ratios are medians within one run, variants interleaved or in alternating blocks.", "", *bench]
    return "\n".join(out).rstrip() + "\n"
