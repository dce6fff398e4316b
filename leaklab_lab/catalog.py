"""CATALOG.md and docs/harness.md: generated from ``cases/*.toml``, ``cases/families.toml``, the
twin scripts and the committed ``results/*.json``.

CATALOG.md is for a reader with a symptom: what the catalog is, the symptom index, the case
table, the families (mechanism and shared fix), then the entries. Entries follow rust-clippy's
and ruff's rule pages: what it does, why it is bad, an example, what to use instead (the diff
between the twins), then what was measured and where. docs/harness.md holds the evidence about
the harness itself (costs, flake gates, sensitivity, the torch-version matrix, the resources
watched, timings). Nothing in either is typed by hand, so neither can drift from the code or
the measurements: both are written by one ``leaklab catalog`` run (:func:`pages`), and a test
fails when either is stale (:func:`stale`).
"""

from __future__ import annotations

import difflib
import json
import posixpath
import re
from pathlib import Path
from statistics import median
from typing import Any

from leaklab.report import Report
from leaklab.resources import BY_NAME as RESOURCES
from leaklab.verdict import GROWS, PLATEAU, RAISES, format_bytes
from leaklab_lab import fresh_clone, models, versions
from leaklab_lab.cases import ROOT, SYMPTOMS, Case, discover, families
from leaklab_lab.figures import FIGURE_SOURCES, NOT_MEASURED, FigureError, Figures, one_line
from leaklab_lab.results import case_of, case_runs, load_results, role_of
from leaklab_lab.seeds import claim_map
from leaklab_lab.timing import ALL_DEFAULTS, ALLOCATED_BLOCKS

CATALOG_PATH = ROOT / "CATALOG.md"
HARNESS_PATH = ROOT / "docs" / "harness.md"  # the evidence about the harness itself, written with CATALOG.md
RESULTS_DIR = ROOT / "results"
CURVES_DIR = ROOT / "docs" / "curves"


def load_all_results(directory: Path = RESULTS_DIR) -> list[tuple[str, dict[str, Any]]]:
    """Every committed results file, by name, in name order; a malformed one is refused
    (:class:`ResultsError`, naming it) rather than rendered half."""
    return [(path.name, load_results(path)) for path in sorted(directory.glob("*.json"))]


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
    leak = [run.verdict for run in runs if role_of(run) == "leak"]
    fixes = [run.verdict for run in runs if role_of(run) == "fix"]
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


def _figure(run: Report) -> str:
    if run.verdict == RAISES:
        return f"raises: {one_line(run.error)}"
    resource = run.resource
    result = run.resources[resource]
    if run.verdict == GROWS:
        return f"**grows** {format_bytes(result.per_step_bytes)}/step in `{resource}`"
    if run.verdict == PLATEAU:
        return f"**plateau** in `{resource}` (rose {format_bytes(result.trend.rise_bytes)}, then flat)"
    return f"bounded (`{resource}` level {format_bytes(result.level_bytes)})"


def _others(run: Report) -> str:
    parts = []
    for name, result in run.resources.items():
        if name == run.resource:
            continue
        if name in RESOURCES and RESOURCES[name].resets:  # a peak: how high, not a trend
            parts.append(f"`{name}` {format_bytes(result.level_bytes)}")
        elif result.verdict == GROWS:
            parts.append(f"`{name}` grows {format_bytes(result.per_step_bytes)}/step")
        elif result.verdict == PLATEAU:
            parts.append(f"`{name}` plateau +{format_bytes(result.trend.rise_bytes)}")
        else:
            parts.append(f"`{name}` bounded")
    for metric, values in run.metrics.items():
        if values:
            parts.append(f"{metric}: {values[0]:.4g} → {values[-1]:.4g} (mean {sum(values) / len(values):.3g})")
    return "; ".join(parts)


def _measured(case: Case, results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    rows = []
    for filename, document in results:
        for run in case_runs(document, case.slug):
            script = run.labels.get("script", "")
            label = role_of(run) + (f" (`{script}`)" if script and script != case.slug else "")
            rows.append(f"| {_where(document)} | {label} | {_figure(run)} | {_others(run)} | "
                        f"{run.steps} steps after {run.warmup} | [{filename}](results/{filename}) |")
    if not rows:
        return ["Not measured yet: no committed results file has this case."]
    return ["| where | twin | verdict | every other resource and metric | series | file |",
            "| --- | --- | --- | --- | --- | --- |", *rows]


def _site(case: Case, results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = []
    for _, document in results:
        for run in case_runs(document, case.slug):
            if role_of(run) == "leak":
                site = run.leak_site
                if site is not None:
                    lines.append(f"- {_where(document)}: allocated at `{Path(site.filename).name}:{site.lineno}` "
                                 f"(`{site.code}`), {format_bytes(site.bytes)} alive at the end"
                                 + (f", held by `{site.held_by}`" if site.held_by else ""))
                elif run.history:
                    lines.append(f"- {_where(document)}: {one_line(run.history, limit=400)}")
    return lines


def entry(case: Case, results: list[tuple[str, dict[str, Any]]], figures: Figures | None = None) -> list[str]:
    figures = figures or Figures.from_results(results)
    meta = {**case.meta, **figures.render_fields(case)}
    out = [f'<a id="{_anchor(case)}"></a>', "", f"## `{case.slug}`: {case.title}", ""]
    out.append(f"**Family:** [`{case.family.name}`](#family-{case.family.name}) · "
               f"**Seed:** {meta['seed']} · **Leaks in:** `{meta['resource']}` · **Seed claim:** {meta['claim_status']} · "
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


def _sensitivity(filename: str, document: dict[str, Any], grid: dict[str, Any]) -> list[str]:
    """The sensitivity benchmark's table: each controlled leak and bounded control, as measured."""
    out = [f"### Sensitivity ({_where(document)}, [{filename}](results/{filename}))", "",
           f"Leaks detected: **{grid['leaks_detected']} of {grid['leaks']}**; bounded controls called growing: "
           f"**{grid['false_alarms']} of {grid['controls']}** (default check: 20 measured steps after 5 of warm-up, then "
           "the confirmation's steps where a verdict needed one).", "",
           "| step | what | true rate | verdict | where | measured rate | confirmation steps |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in grid["rows"].items():
        true = format_bytes(row["true_per_step"]) + "/step" if row["kind"] == "leak" else "none"
        if row["resource"] == "open_fds" and row["kind"] == "leak":
            true = "1 fd/step"
        wrong = (row["kind"] == "leak") != (row["verdict"] == "grows")
        verdict = f"**{row['verdict']}**" if wrong else row["verdict"]
        rate = RESOURCES[row["resource"]].format(row["per_step"]) + "/step" if row["verdict"] == "grows" else "–"
        out.append(f"| `{name}` | {row['what']} | {true} | {verdict} | `{row['resource']}` | {rate} | "
                   f"{row.get('confirmed_steps', 0)} |")
    return [*out, "", "A verdict in bold is wrong: a leak missed or a control called growing.", ""]


def _benchmarks(results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    out = []
    for filename, document in results:
        for name, summary in sorted(document.get("benchmarks", {}).items()):
            if name == "sensitivity":
                out += _sensitivity(filename, document, summary)
                continue
            if name == "matching":
                continue  # rendered under "From a leak to its catalog entry"
            if name == "models_cost":
                continue  # rendered under "Real models" (leaklab_lab.models)
            if name.startswith("check_cost"):
                out += [f"### {name} ({_where(document)}, [{filename}](results/{filename}))", "",
                        "Each command in a fresh interpreter, interleaved round by round; the check's own cost is its "
                        "median over `import torch`'s.", "",
                        "| command | median | quartiles | over `import torch` | verdict | time to verdict | measured steps |",
                        "| --- | --- | --- | --- | --- | --- | --- |"]
                for variant, row in summary.items():
                    q1, q3 = row["quartiles_s"]
                    verdict = row.get("verdict", "–")
                    to_verdict = f"{row['seconds_to_verdict']:.2f} s" if row.get("seconds_to_verdict") else "–"
                    out.append(f"| {variant} | {row['median_s']:.2f} s | {q1:.2f}–{q3:.2f} s | "
                               f"{row['over_import_torch_s']:+.2f} s | {verdict} | {to_verdict} | {row.get('measured_steps', '–')} |")
                out.append("")
                continue
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


def _ratio(row: dict[str, Any]) -> str:
    q1, q3 = row["ratio_quartiles"]
    return f"{row['ratio']:.3f}× (IQR {q1:.3f}–{q3:.3f})"


def _bench(results: list[tuple[str, dict[str, Any]]], name: str) -> tuple[str, dict[str, Any]] | None:
    for filename, document in results:
        if name in document.get("benchmarks", {}):
            return filename, document
    return None


def attribution_hits(cases: list[Case], results: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, bool, str]]:
    """Per tensor-memory leak run with sites: (case, results file, whether its first-named site
    is the leak's allocation or holder, that site), the rule tests/test_attribution.py asserts."""
    by_slug = {case.slug: case for case in cases}
    rows = []
    for filename, document in results:
        for run in document["runs"].values():
            case = by_slug.get(case_of(run))
            site = run.leak_site
            if case is None or role_of(run) != "leak" or site is None:
                continue
            hit = case.names_its_leak(site.filename, site.code, site.held_by)
            held = f", held by `{site.held_by}`" if site.held_by else ""
            rows.append((case.slug, filename, hit, f"`{Path(site.filename).name}:{site.lineno}` "
                                                   f"(`{site.code.split('#')[0].strip()}`){held}"))
    return rows


def _suite_measured(cases: list[Case], results: list[tuple[str, dict[str, Any]]], root: Path = ROOT) -> list[str]:
    """What the suite measured, and what it costs: every figure from a committed results file."""
    out = ['<a id="what-the-suite-measured"></a>', "", "## What the suite measured, and what it costs", "",
           "Every figure below is read from a committed results file; ratios are medians within one run, "
           "with the quartiles of the per-round ratios.", ""]
    found = _bench(results, "empty_cache_resnet18")
    if found:
        filename, document = found
        rows = document["benchmarks"]["empty_cache_resnet18"]
        every, epoch = rows.get("per_step"), rows.get("per_epoch")
        if every and epoch:
            counters = every.get("counters", {})
            out.append(f"- **`torch.cuda.empty_cache()` on a resnet18 training step** ({_short_where(document)}, "
                       f"[{filename}](results/{filename})): every step {_ratio(every)} the time of never emptying, "
                       f"once per epoch {_ratio(epoch)}. Over {every['rounds']} timed steps, emptying every step cost "
                       f"{counters.get('num_device_alloc', 0):,} `cudaMalloc` and {counters.get('num_device_free', 0):,} "
                       f"`cudaFree` calls and {counters.get('num_sync_all_streams', 0):,} `num_sync_all_streams`. "
                       f"The seed (000 §6.3) says it halves training speed.")
    for name, label in (("probe_overhead_cuda", "Probe overhead on the GPU"), ("probe_overhead_cpu", "Probe overhead on the CPU")):
        found = _bench(results, name)
        if found and "probe on" in found[1]["benchmarks"][name]:
            filename, document = found
            out.append(f"- **{label}** (reading every default resource after each step of a resnet18 training step, "
                       f"interleaved with steps that do not; {_short_where(document)}, [{filename}](results/{filename})): "
                       f"{_ratio(document['benchmarks'][name]['probe on'])}.")
    for _, document in results:
        costs = document.get("benchmarks", {}).get("probe_costs")
        if costs:
            whole, walk = costs.get(ALL_DEFAULTS), costs.get(ALLOCATED_BLOCKS)
            parts = ", ".join(f"`{resource}` {row['median_us']:.1f} µs" for resource, row in costs.items()
                              if resource not in (ALL_DEFAULTS, ALLOCATED_BLOCKS))
            out.append(f"- **One reading of each resource** ({_short_where(document)}, "
                       f"Python {document['environment'].get('python', '?')}, median): {parts}"
                       + (f"; one sample of all of them together (what a check takes after each step): "
                          f"{whole['median_us']:.1f} µs" if whole else "")
                       + (f"; CPython's own count of its objects, `sys.getallocatedblocks()`, timed on its own in a "
                          f"loop of its own (it walks every pool of the object allocator, so its cost moves with the "
                          f"heap's size and the state of the CPU's caches): {walk['median_us']:.1f} µs "
                          f"(IQR {walk['quartiles_us'][0]:.1f}–{walk['quartiles_us'][1]:.1f})" if walk else "")
                       + ".")
    found = _bench(results, "tracker_overhead_cpu")
    if found:
        filename, document = found
        rows = document["benchmarks"]["tracker_overhead_cpu"]
        if "tracker on" in rows:
            sites = f"; recording allocation sites on top of it: {_ratio(rows['tracker + sites'])}" if "tracker + sites" in rows else ""
            out.append(f"- **Counting CPU tensors** (the dispatch hook on every operator; {_short_where(document)}, "
                       f"[{filename}](results/{filename})): {_ratio(rows['tracker on'])}{sites}.")
    found = _bench(results, "history_overhead_cuda")
    if found and "history on" in found[1]["benchmarks"]["history_overhead_cuda"]:
        filename, document = found
        out.append(f"- **Recording the CUDA allocator's history** for `--attribute` ({_short_where(document)}, "
                   f"[{filename}](results/{filename})): {_ratio(document['benchmarks']['history_overhead_cuda']['history on'])} "
                   "per step; attribution runs its extra steps after the measured series, so it never shows in the verdicts.")
    hits = attribution_hits(cases, results)
    if hits:
        good = sum(hit for _, _, hit, _ in hits)
        out.append(f"- **Attribution**: in {good} of {len(hits)} runs whose tensor memory grows, the first-named site is "
                   "the leak's allocation (a `# LEAK:` line) or its holder (the container a marked statement names). "
                   "The others name first:")
        out += [f"  - `{slug}` ({filename}): {site}" for slug, filename, hit, site in hits if not hit]
    out += _flake_gates(root)
    out += _suite_logs(root)
    out += fresh_clone.render(root)
    out += ["- **Same verdicts on every run**: second passes over the catalog, compared with `leaklab compare`, are in "
            "[docs/reports.md](docs/reports.md).", ""]
    return out


def _flake_gates(root: Path) -> list[str]:
    """One line per flake-gate summary (``tools/flake_gate.py --json``) under results/flake-gate/."""
    lines = []
    for path in sorted((root / "results" / "flake-gate").glob("*.json")):
        gate = json.loads(path.read_text())
        mode = (f"pytest -n {gate['workers']}" if gate.get("workers") else "serial") + (
            ", beside two CPU-bound processes" if gate.get("load") else "")
        stopped = f" (stopped after {gate['runs']} of {gate['runs_asked']})" if gate.get("interrupted") else ""
        flips = "".join(f"; flipped: `{flip['what']}`" for flip in gate.get("flip_list", [])[:3])
        more = f" and {len(gate['flip_list']) - 3} more" if len(gate.get("flip_list", [])) > 3 else ""
        lines.append(f"  - [{path.name}](results/flake-gate/{path.name}): {gate['runs']} run(s) of the CPU suite and "
                     f"`leaklab run`, {mode}{stopped}: {gate['flips']} flip(s), {gate['failures']} failure(s), "
                     f"{gate.get('compared', 0)} verdicts compared"
                     + (f", commit {gate['commit']}, {gate['finished']}" if gate.get("commit") else "")
                     + (f" ({gate['note']})" if gate.get("note") else "")
                     + _gate_times(gate.get("run_list", [])) + flips + more)
    if not lines:
        return []
    return ["- **Flake gates** (`tools/flake_gate.py`: every verdict of every run compared across runs):", *lines]


def _suite_logs(root: Path) -> list[str]:
    """One line per saved log of a GPU suite run (``tools/h200_full.sh``'s pytest.log, kept as
    results/<machine>-suite-torch<version>.log): its outcome and its wall time."""
    lines = []
    for path in sorted((root / "results").glob("*-suite-*.log")):
        text = path.read_text(errors="replace")
        outcome = re.findall(r"^=*\s*(\d+ passed.*? in [\d.]+s)", text, re.M)
        wall = re.findall(r"^cuda suite wall time: (\d+)s \(workers: (\S+)\)(?: with: (.*))?$", text, re.M)
        if outcome and wall:
            seconds, workers, extra = wall[-1]
            extra = extra.strip()
            command = f"python3 -m pytest -m cuda{'' if workers == 'none' else f' -n {workers}'}"
            added = f" (arguments added: `{extra}`)" if extra else ""
            lines.append(f"  - [{path.name}](results/{path.name}): `{command}`{added}: {outcome[-1]}; wall time {seconds} s")
    if not lines:
        return []
    return ["- **The GPU suite's wall time** (its log, as the run printed it):", *lines]


def _gate_times(runs: list[dict[str, Any]]) -> str:
    """Wall time of the suite and of `leaklab run` in a gate's runs: median, and the range."""
    parts = []
    for key, what in (("pytest_seconds", "the suite"), ("run_seconds", "`leaklab run`")):
        seconds = sorted(run[key] for run in runs if isinstance(run.get(key), (int, float)))
        if seconds:
            spread = f" ({seconds[0]:.0f}-{seconds[-1]:.0f})" if len(seconds) > 1 else ""
            parts.append(f"{what} {median(seconds):.0f} s{spread}")
    return f"; wall time: {', '.join(parts)}" if parts else ""


def _claims(cases: list[Case], path: Path) -> list[str]:
    if not path.is_file():
        return []
    by_slug = {case.slug: case for case in cases}
    out = ['<a id="seed-claims"></a>', "", "## Seed claims → cases", "",
           "Every section of the two seed write-ups that makes a claim (translated; the list is "
           "[cases/seed_claims.toml](cases/seed_claims.toml)), and the cases whose `seed` names it.", "",
           "| seed | claim | cases |", "| --- | --- | --- |"]
    for claim in claim_map(cases, path):
        if claim.cases:
            cell = ", ".join(f"[`{slug}`](#{slug}) ({by_slug[slug].meta['claim_status']})" for slug in claim.cases)
        elif claim.kind == "method":
            cell = f"a method, not a leak: {claim.covered}"
        elif claim.kind == "same":
            cell = f"the same claim as {claim.covered}"
        elif claim.kind == "benchmark":
            cell = f"timed, not a case: {claim.covered} ([docs/harness.md](docs/harness.md#what-the-suite-measured))"
        else:
            cell = "**no case yet**" + (f" ({claim.covered})" if claim.covered else "")
        out.append(f"| {claim.section} | {claim.claim.replace('|', chr(92) + '|')} | {cell} |")
    return [*out, ""]


def _unmeasured(figures: Figures) -> list[str]:
    if not figures.unmeasured:
        return []
    out = ['<a id="not-measured"></a>', "", "## Figures not measured yet", "",
           f"These placeholders in the cases' text rendered as `{NOT_MEASURED}`: their run, resource or metric is "
           "not in the committed results file yet.", ""]
    out += [f"- `{u.case}`: `{u.placeholder}`: {u.why}" for u in figures.unmeasured]
    return [*out, ""]


def _resources_table() -> list[str]:
    """Every resource the check can watch, from its one definition in leaklab.resources."""
    from leaklab.resources import ALL

    out = ['<a id="resources-watched"></a>', "", "## Resources watched", "",
           "Rendered from `leaklab/resources.py`. Headline order: when several resources grow, the first in this table "
           "is named. *Exact* counters change only when something is allocated or freed and are judged down to one "
           "quantum; the others against their own scatter and the floor.", "",
           "| resource | what | read from | devices (default) | exact | quantum | floor/step | smallest plateau | budget |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(ALL, key=lambda r: r.rank):
        devices = ", ".join(r.devices) + (" (opt-in)" if r.optional else "") + ("" if r.judged else ", shown only")
        out.append(f"| `{r.name}` | {r.description} | {r.source} | {devices} | {'yes' if r.exact else 'no'} | "
                   f"{r.format(r.quantum)} | {r.format(r.floor) if r.floor else '–'} | {r.format(r.plateau_min)} | "
                   f"{r.format(r.budget) if r.budget else 'none'} |")
    return [*out, ""]


def _measured_on(results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    if not results:
        return []
    out = ['<a id="measured-on"></a>', "", "## Measured on", ""]
    for filename, document in results:
        env = document["environment"]
        out.append(f"- [{filename}](results/{filename}): {env['device_name']}, torch {env['torch']}, "
                   f"Python {env['python']}, {document['created']}" + (f" ({document['note']})" if document.get("note") else ""))
    return [*out, ""]


def _families(cases: list[Case]) -> list[str]:
    """The families table: each mechanism, the fix its cases share, and its cases."""
    out = ['<a id="families"></a>', "", "## Families", "",
           "Each case belongs to one family: the mechanism that holds the memory (or, for `not_a_leak`, that it holds "
           "none), and the fix its cases share. The list is [cases/families.toml](cases/families.toml).", "",
           "| family | what it is | the fix, in every case of it | cases |", "| --- | --- | --- | --- |"]
    for family in families().values():
        members = [case for case in cases if case.family.name == family.name]
        cell = ", ".join(f"[`{c.slug}`](#{_anchor(c)})" for c in members) or "none yet"
        out.append(f'| <a id="family-{family.name}"></a>`{family.name}` | {family.description} | {family.fix} | {cell} |')
    return [*out, ""]


_REBASED = ("results/", "docs/", "cases/", "fixes/", "tools/", "real_models/", "CATALOG.md", "README.md")
_LINK = re.compile(r"\]\(([^)\s#]*)(#[^)\s]*)?\)")


def rebase(lines: list[str], folder: str) -> list[str]:
    """Lines written with links relative to the repository root, for a page in ``folder``:
    ``[f](results/f)`` becomes ``[f](../results/f)`` under ``docs``."""
    def move(match: re.Match[str]) -> str:
        target, anchor = match.group(1), match.group(2) or ""
        if not target.startswith(_REBASED):
            return match.group(0)
        return f"]({posixpath.relpath(target, folder)}{anchor})"
    return [_LINK.sub(move, line) for line in lines]


def _matching(signatures: dict[str, Any], results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """How often the check's first suggestion (and any of its first three) is an entry of the
    leak's own family: leave-one-out over the catalog's entries, and held-out steps."""
    from leaklab_lab.matching import leave_one_out, rematch

    out = ['<a id="leak-to-entry"></a>', "", "## From a leak to its catalog entry", "",
           "`leaklab check` names the catalog entries a growing run resembles (its signature against each entry's, "
           "derived from the entry's own measured leak run in "
           + ", ".join(f"[{name}](results/{name})" for name in signatures["generated_from"]) + "). "
           "A suggestion counts when its family (see [Families](CATALOG.md#families)) is the leak's own.", "",
           "| test | device | runs counted | first suggestion right | one of the first three right | nothing close | "
           "not counted (no other entry of its family) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for device in sorted({entry["device"] for entry in signatures["entries"]}):
        rates = leave_one_out(signatures["entries"], device)
        out.append(f"| leave-one-out over the catalog | {device} | {rates['counted']} | {rates['first']} | {rates['top3']} | "
                   f"{rates['none_close']} | {', '.join(f'`{s}`' for s in rates['without_sibling']) or '–'} |")
    misses = []
    for filename, document in results:
        summary = document.get("benchmarks", {}).get("matching")
        if not summary:
            continue
        summary = rematch(summary, signatures["entries"])
        out.append(f"| held-out steps from public reports ([{filename}](results/{filename})) | {_short_where(document)} | "
                   f"{summary['counted']} | {summary['first']} | {summary['top3']} | {summary['none_close']} | – |")
        misses += [f"- `{name}` ({_short_where(document)}, a reader's family `{row['family']}`): "
                   + (", ".join(f"`{slug}` ({family})" for slug, family, _ in row["suggested"]) or "nothing close")
                   for name, row in summary["rows"].items() if not row["first"]]
    out.append("")
    if misses:
        out += ["Held-out steps whose first suggestion was not of their family:", "", *misses, ""]
    return out


def _time_to_verdict(results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Per results file: the time to a verdict over its runs, and what each stage of a run cost."""
    from statistics import median

    out = ['<a id="time-to-verdict"></a>', "", "## Time to a verdict", "",
           "Wall time per run, from building the step to its verdict, and the total each stage took over all runs "
           "of the file (the naming of what grows, attribution and the release check come after the verdict).", "",
           "| results | runs | median to verdict | slowest to verdict | " + " | ".join(STAGES) + " |",
           "| --- | --- | --- | --- | " + " --- |" * len(STAGES)]
    for filename, document in results:
        timed = [run for run in document["runs"].values() if run.phase_seconds]
        if not timed:
            continue
        to_verdict = sorted(run.seconds_to_verdict for run in timed)
        slowest = max(timed, key=lambda run: run.seconds_to_verdict)
        totals = [sum(run.phase_seconds.get(stage, 0.0) for run in timed) for stage in STAGES]
        out.append(f"| [{filename}](results/{filename}) | {len(timed)} | {median(to_verdict):.2f} s | "
                   f"{slowest.seconds_to_verdict:.2f} s (`{slowest.name}`) | " + " | ".join(f"{t:.1f} s" for t in totals) + " |")
    return [*out, ""]


STAGES = ("build", "warm-up", "measured", "confirmation", "long pass", "naming", "attribution", "release")


def _pages(root: Path, strict: bool) -> tuple[str, str, str]:
    """CATALOG.md's text, docs/harness.md's and the entries' signatures, from one reading of the
    cases and results."""
    from leaklab_lab.matching import catalog_signatures

    cases = discover(root)
    results = load_all_results(root / "results")
    signatures = catalog_signatures(cases, results)
    figures = Figures.from_results(results)
    entries = [line for case in cases for line in entry(case, results, figures)]
    if strict and figures.unmeasured:
        raise FigureError("figures not in the committed results: "
                          + "; ".join(f"{u.case} {u.placeholder} ({u.why})" for u in figures.unmeasured))
    matrix = versions.load_matrix(root / versions.MATRIX_DIR)
    if strict:
        unexplained = versions.unexplained(cases, versions.build(cases, matrix))
        if unexplained:
            raise FigureError("verdicts that changed between torch versions with no versions_note: "
                              + "; ".join(f"{c.run} {c.older}→{c.newer} {c.was}→{c.now}" for c in unexplained))
    harness_link = f"[{HARNESS_PATH.relative_to(ROOT).as_posix()}]({HARNESS_PATH.relative_to(ROOT).as_posix()})"
    out = ["# The leaklab catalog", "",
           "<!-- Generated by `leaklab catalog` from cases/*.toml, cases/, fixes/ and results/*.json. Do not edit by hand. -->", "",
           "A catalog of PyTorch memory leaks, and of things mistaken for them: each entry is a short training script "
           "that shows the problem, its fixed twin (the diff is the fix), and what both did when measured on a CPU "
           "and a GPU. Find your symptom in the index below, or the mechanism under [Families](#families); where a "
           "claim of the seed write-ups did not reproduce, the entry says so and shows what does happen. Figures in "
           "the entries' text come from "
           + " and ".join(f"[{name}](results/{name}) ({device})" for device, name in FIGURE_SOURCES.items()) + ".", "",
           f"How the harness was validated: {harness_link} (what a check costs, flake gates, the sensitivity grid, "
           "the torch-version matrix, the resources watched). The seed write-ups' claims, each with its cases: "
           "[Seed claims → cases](#seed-claims).", ""]
    out += ['<a id="symptom-index"></a>', "", "## Symptom index", ""]
    for symptom in SYMPTOMS:
        matching = [case for case in cases if symptom in case.meta["symptoms"]]
        if matching:
            out.append(f"- **{symptom}**: " + ", ".join(f"[`{c.slug}`](#{_anchor(c)})" for c in matching))
    # the catalog's columns: files holding its cases' runs (not the real-model corpus's, rendered in docs/harness.md)
    runs_files = [(name, doc) for name, doc in results if any(case_of(run) for run in doc["runs"].values())]
    where = [_short_where(doc) for _, doc in runs_files]
    out += ["", '<a id="all-cases"></a>', "", "## All cases", "",
            "| case | family | leaks in | seed | seed claim | " + " | ".join(f"{w}: leak → fix" for w in where) + " |",
            "| --- | --- | --- | --- | --- |" + " --- |" * len(where)]
    for case in cases:
        cells = [_verdict_pair(case, doc) for _, doc in runs_files]
        out.append(f"| [`{case.slug}`](#{_anchor(case)}) | [`{case.family.name}`](#family-{case.family.name}) | "
                   f"`{case.meta['resource']}` | {case.meta['seed']} | {case.meta['claim_status']} | " + " | ".join(cells) + " |")
    out.append("")
    out += _families(cases)
    out += entries
    out += _claims(cases, root / "cases" / "seed_claims.toml")
    out += _unmeasured(figures)
    catalog = "\n".join(out).rstrip() + "\n"

    harness = ["# How the harness was validated", "",
               "<!-- Generated by `leaklab catalog` from cases/*.toml and results/ with CATALOG.md. Do not edit by hand. -->", "",
               "The evidence about leaklab's harness itself, for judging the verdicts in [CATALOG.md](CATALOG.md): what "
               "reading the resources costs, whether the verdicts are the same from run to run (flake gates) and across "
               "torch versions, how often a controlled leak is missed or a bounded control called growing (sensitivity), "
               "and what each watched resource is. Every figure is read from a committed results file.", ""]
    harness += _measured_on(results)
    harness += _matching(signatures, results)
    harness += _time_to_verdict(results)
    harness += models.render(results, root / "results" / "models-gate")
    harness += _suite_measured(cases, results, root)
    harness += versions.render(cases, matrix)
    harness += _resources_table()
    bench = _benchmarks(results)
    if bench:
        harness += ['<a id="timings"></a>', "", "## Timings and overheads", "",
                    "Ratios are medians within one run, variants interleaved or in alternating blocks.", "", *bench]
    folder = HARNESS_PATH.parent.relative_to(ROOT).as_posix()
    return catalog, "\n".join(rebase(harness, folder)).rstrip() + "\n", json.dumps(signatures, indent=1, sort_keys=True) + "\n"


def render(root: Path = ROOT, strict: bool = False) -> str:
    """CATALOG.md's text. ``strict``: a figure not in the committed results (or a verdict that
    changed between torch versions with no ``versions_note``) is an error."""
    return _pages(root, strict)[0]


def render_harness(root: Path = ROOT, strict: bool = False) -> str:
    """docs/harness.md's text: the evidence about the harness itself, moved out of CATALOG.md."""
    return _pages(root, strict)[1]


def pages(root: Path = ROOT, strict: bool = False) -> dict[Path, str]:
    """Every file ``leaklab catalog`` writes, by its path under ``root``: CATALOG.md, docs/harness.md
    and the entries' signatures the tool reads (leaklab/catalog_signatures.json)."""
    from leaklab.signature import SIGNATURES_PATH

    catalog, harness, signatures = _pages(root, strict)
    return {root / CATALOG_PATH.name: catalog, root / HARNESS_PATH.relative_to(ROOT): harness,
            root / SIGNATURES_PATH.relative_to(ROOT): signatures}


def stale(root: Path = ROOT, strict: bool = False) -> list[Path]:
    """The generated pages whose file differs from what ``leaklab catalog`` would write now."""
    return [path for path, text in pages(root, strict).items() if not path.is_file() or path.read_text() != text]


def write_pages(root: Path = ROOT, strict: bool = False) -> list[Path]:
    """Write every generated page (each replaced whole, atomically); the paths written."""
    from leaklab.files import atomic_write

    written = []
    for path, text in pages(root, strict).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
        written.append(path)
    return written
