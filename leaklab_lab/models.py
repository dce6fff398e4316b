"""The real-model corpus (``real_models/``): library training and inference steps (transformers,
timm, torchvision, torchmetrics, PEFT, Lightning Fabric) built from configs, each a bounded idiom
(``make_step``) and the same step with a realistic mistake (``make_mistake``, marked
``# MISTAKE:``). It answers whether the check is right on the steps users run: an idiom must not be
called ``grows``, a mistake must be.

This module finds the steps, says which libraries each needs (read from its ``LIBRARIES`` tuple
without importing it), labels their runs for the results file, and renders the committed
results as docs/harness.md's table. The steps' libraries are the ``models`` extra."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from statistics import median
from typing import Any

import torch

from leaklab import measure
from leaklab.measure import LiveTensorBytes
from leaklab.report import Report
from leaklab.resources import BY_NAME as RESOURCES
from leaklab.resources import resolve
from leaklab.runner import RunOptions, run_factory
from leaklab.scripts import factory_from_script, forget_script, load_script
from leaklab.verdict import GROWS, RAISES

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "real_models"
CORPUS = "real_models"          # the label that files a run under this corpus
TWINS = {"make_step": "idiom", "make_mistake": "mistake"}
EXTRA = "pip install -e '.[models]'"


def steps(directory: Path = MODELS_DIR) -> list[Path]:
    """The corpus's step files, by name."""
    return sorted(path for path in directory.glob("*.py") if not path.name.startswith("_"))


def libraries(path: Path) -> tuple[str, ...]:
    """The importable names a step needs besides torch: its module-level ``LIBRARIES`` tuple."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LIBRARIES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise ValueError(f"{path} has no LIBRARIES tuple")


def missing(path: Path) -> str | None:
    """Why ``path``'s steps cannot run here (a library not installed), or None."""
    absent = [name for name in libraries(path) if importlib.util.find_spec(name) is None]
    if absent:
        return f"needs {', '.join(absent)}, not installed here: {EXTRA}"
    return None


def run_name(path: Path, factory: str) -> str:
    """What ``leaklab check`` would be given: ``real_models/<file>:<factory>``."""
    return f"{path.parent.name}/{path.name}:{factory}"


def label(report: Report, path: Path, factory: str) -> Report:
    """File ``report`` under the corpus: its step, and whether it is the idiom or the mistake."""
    report.name = run_name(path, factory)
    report.labels.update({"corpus": CORPUS, "step": path.stem, "twin": TWINS[factory]})
    return report


def corpus_runs(document: dict[str, Any]) -> list[Report]:
    """A results document's corpus runs: by step, the idiom before its mistake."""
    runs = [run for run in document["runs"].values() if run.labels.get("corpus") == CORPUS]
    return sorted(runs, key=lambda run: (run.labels["step"], run.labels["twin"] != "idiom", run.name))


def wrong(run: Report) -> bool:
    """The check's answer is wrong: an idiom called ``grows``, or a mistake not."""
    return (run.verdict == GROWS) != (run.labels["twin"] == "mistake")


def _rate(run: Report) -> str:
    if run.verdict == RAISES or run.resource is None:
        return "–"
    result = run.resources[run.resource]
    if result.verdict != GROWS:
        return "–"
    kind = RESOURCES.get(run.resource)
    return (kind.format(result.per_step_bytes) if kind else f"{result.per_step_bytes:.0f}") + "/step"


def _passes(run: Report) -> str:
    notes = []
    if run.confirmed_steps:
        notes.append(f"confirmation {run.confirmed_steps} steps")
    if run.long_pass_steps:
        notes.append(f"long pass {run.long_pass_steps} steps")
    if run.uncertain:
        notes.append(f"uncertain: {', '.join(run.uncertain)}")
    if run.stopped_by_budget:
        notes.append("stopped by budget" + (" in warm-up" if run.stopped_in_warmup else ""))
    return "; ".join(notes) or "–"


def _cost(filename: str, document: dict[str, Any]) -> list[str]:
    """The check's cost on the corpus (:func:`check_cost`), where ``document`` holds it."""
    cost = document.get("benchmarks", {}).get("models_cost")
    if not cost:
        return []
    env = document["environment"]
    variants = [variant for variant in COST_VARIANTS if f"median_{variant}_ratio" in cost]
    out = [f"### What the check costs: {env['device_name']}, torch {env['torch']} ([{filename}](results/{filename}))", "",
           f"Each run below checked with default settings against the same step built and called as many times, bare, in one "
           f"process, {cost['rounds']} rounds; start-up (Python, torch, the libraries) is outside both. Median over the "
           f"steps: **{cost['median_ratio']:.2f}×** the bare steps.", ""]
    if variants:
        out += ["In the same rounds, over the same bare steps, the check again with:", "",
                *(f"- {COST_VARIANTS[variant]}: **{cost[f'median_{variant}_ratio']:.2f}×** (median over the steps)"
                  for variant in variants), ""]
    out += ["| run | check | bare, the same calls | calls | ratio (median of rounds) | range | verdicts |"
            + "".join(f" {VARIANT_COLUMNS[variant]} |" for variant in variants),
            "| --- | --- | --- | --- | --- | --- | --- |" + " --- |" * len(variants)]
    for name, row in cost["rows"].items():
        low, high = row["ratio_range"]
        out.append(f"| `{name}` | {row['check_s']:.2f} s | {row['bare_s']:.2f} s | {row['calls']} | {row['ratio']:.2f}× | "
                   f"{low:.2f}–{high:.2f}× | {', '.join(sorted(set(row['verdicts'])))} |"
                   + "".join(f" {row[f'{variant}_ratio']:.2f}× |" for variant in variants))
    return [*out, ""]


def _gates(directory: Path | None) -> list[str]:
    """The comparisons of repeated runs (``tools/models_runs.py --json``) under ``directory``."""
    lines = []
    for path in sorted(directory.glob("*.json")) if directory else []:
        gate = json.loads(path.read_text())
        runs = gate["runs"]
        hows = ", ".join(f"{sum(run['how'] == how for run in runs)} {how or 'unlabelled'}"
                         for how in dict.fromkeys(run["how"] for run in runs))
        wrong_runs = sorted({name for run in runs for name in run["wrong"]})
        wrong_in = {name: sum(name in run["wrong"] for run in runs) for name in wrong_runs}
        flips = "".join(f"; flipped: `{flip['what']}` ("
                        + ", ".join(f"{verdict} in {len(where)}" for verdict, where in flip["verdicts"].items()) + ")"
                        for flip in gate["flips"])
        lines.append(f"- [{path.name}](results/{path.parent.name}/{path.name}): {len(runs)} runs ({hows}), "
                     f"{runs[0]['device_name']}, torch {runs[0]['torch']}: {len(gate['flips'])} flip(s) of "
                     f"{gate['compared']} verdicts (each run's and each resource's) compared; wrong in some run: "
                     + (", ".join(f"`{name}` (in {count} of {len(runs)})" for name, count in wrong_in.items()) or "none") + flips)
    if not lines:
        return []
    return ["### The same verdicts from run to run", "",
            "Repeated runs of the corpus compared verdict by verdict (`tools/models_runs.py`, with tools/flake_gate.py's "
            "rule: a flip is a run's verdict or one of its per-resource verdicts that differs between runs).", "",
            *lines, ""]


def render(results: list[tuple[str, dict[str, Any]]], gates: Path | None = None) -> list[str]:
    """docs/harness.md's section on the corpus: one table per results file holding corpus runs, the
    check's cost where measured, and the comparisons of repeated runs under ``gates``."""
    tables = []
    for filename, document in results:
        tables += _cost(filename, document)
        runs = corpus_runs(document)
        if not runs:
            continue
        env = document["environment"]
        found = sum(run.verdict == GROWS for run in runs if run.labels["twin"] == "mistake")
        alarms = sum(run.verdict == GROWS for run in runs if run.labels["twin"] == "idiom")
        mistakes = sum(run.labels["twin"] == "mistake" for run in runs)
        tables += [f"### {env['device_name']}, torch {env['torch']} ([{filename}](results/{filename}))", "",
                   f"Mistakes found: **{found} of {mistakes}**; bounded idioms called `grows`: "
                   f"**{alarms} of {len(runs) - mistakes}**.", "",
                   "| step | idiom or mistake | verdict | resource | rate | time to verdict | passes |",
                   "| --- | --- | --- | --- | --- | --- | --- |"]
        for run in runs:
            verdict = f"**{run.verdict}**" if wrong(run) else run.verdict
            to_verdict = f"{run.seconds_to_verdict:.1f} s" if run.seconds_to_verdict is not None else "–"
            tables.append(f"| [`{run.labels['step']}`](real_models/{run.labels['step']}.py) | {run.labels['twin']} | "
                          f"{verdict} | `{run.resource}` | {_rate(run)} | {to_verdict} | {_passes(run)} |")
        tables.append("")
    tables += _gates(gates)
    if not tables:
        return []
    return ['<a id="real-models"></a>', "", "## Real models", "",
            "Library steps built from configs ([real_models/](real_models/)), each run as `leaklab check FILE:FACTORY` "
            "would run it, with default settings: the bounded idiom (`make_step`) and the same step with a realistic "
            "mistake (`make_mistake`, marked `# MISTAKE:`). A verdict in bold is wrong: an idiom called `grows`, or a "
            "mistake not. `tests/test_real_models.py` (`-m models`) runs them; their libraries are the `models` extra.",
            "", *tables]


# --------------------------------------------------------------------------- what the check costs
WITHOUT_COUNTER, EMPTIED_COUNTER = "without_counter", "emptied_counter"
COST_VARIANTS = {  # the CPU's checks beside the default one, each a ratio over the same bare steps
    WITHOUT_COUNTER: "default settings less cpu_tensors (no dispatch mode)",
    EMPTIED_COUNTER: "the tensor counter's hook emptied: only torch's Python dispatch of every operator",
}
VARIANT_COLUMNS = {WITHOUT_COUNTER: "without cpu_tensors", EMPTIED_COUNTER: "counter emptied"}


def _counted(factory: Callable[[str], Callable[[], None]], calls: list[int]) -> Callable[[str], Callable[[], None]]:
    """``factory`` whose steps count their calls in ``calls[0]``."""
    def build(device: str) -> Callable[[], None]:
        step = factory(device)

        def counted() -> None:
            calls[0] += 1
            step()
        return counted
    return build


def _checked(path: Path, factory_name: str, device: str, options: RunOptions | None = None) -> tuple[float, int, str]:
    """One check as ``leaklab check`` runs it (default settings, or ``options``): wall seconds,
    step calls, verdict."""
    module = load_script(path)
    calls = [0]
    try:
        started = time.perf_counter()
        report = run_factory(_counted(factory_from_script(module, factory_name), calls), device, options or RunOptions())
        seconds = time.perf_counter() - started
    finally:
        forget_script(module)
    return seconds, calls[0], report.verdict


@contextlib.contextmanager
def _counter_emptied() -> Iterator[None]:
    """The CPU tensor counter's operator hook replaced by one that only calls the operator
    (wrapped as torch wraps any dispatch mode's): what any dispatch mode costs, torch's Python
    dispatch and one Python call per operator, the floor under an exact counter of this kind."""
    measure._keep_out_of_compiler()  # the counter's own hook is wrapped once the compiler is imported

    def passthrough(self: LiveTensorBytes, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))

    counter = LiveTensorBytes.__torch_dispatch__
    LiveTensorBytes.__torch_dispatch__ = passthrough if measure._COMPILER_UNSEEN else torch._disable_dynamo(
        passthrough, recursive=True)
    try:
        yield
    finally:
        LiveTensorBytes.__torch_dispatch__ = counter


def _bare(path: Path, factory_name: str, device: str, calls: int) -> float:
    """The same step built and called ``calls`` times with nothing watching: wall seconds."""
    module = load_script(path)
    try:
        started = time.perf_counter()
        step = factory_from_script(module, factory_name)(device)
        for _ in range(calls):
            step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        del step
    finally:
        forget_script(module)
    return seconds


def check_cost(device: str, rounds: int = 3, factories: tuple[str, ...] = ("make_step",),
               progress: Callable[[str, dict[str, Any]], None] | None = None,
               directory: Path = MODELS_DIR) -> dict[str, Any]:
    """Issue 28's item 7: each corpus step checked with default settings, against the same step
    built and called as many times as the check called it, bare, in the same process, round by
    round (check, then bare). Start-up (Python, torch, the libraries' imports) is outside both:
    every step file is imported once before the first round. Per step: the medians, the median
    of the per-round ratios and their spread; overall, the median ratio over the steps. By default
    the bounded idioms only: the steps a CI runs the check on (a mistake's check stops early).

    On the CPU, where the tensor counter (a dispatch mode) runs on every operator, two more checks
    in each round say where the cost lies (:data:`COST_VARIANTS`): without ``cpu_tensors``, and
    with the counter's hook emptied (the floor of any counter that is a dispatch mode)."""
    rows: dict[str, Any] = {}
    variants = COST_VARIANTS if device == "cpu" else {}
    defaults = [resource.name for resource in resolve(device, ())]
    for path in steps(directory):
        if missing(path):
            continue
        for factory_name in factories:
            name = run_name(path, factory_name)
            _bare(path, factory_name, device, 3)  # imports and lazy initialisations, once, untimed
            checks, bares, counts, verdicts = [], [], [], []
            varied: dict[str, list[float]] = {variant: [] for variant in variants}
            for _ in range(rounds):
                seconds, calls, verdict = _checked(path, factory_name, device)
                checks.append(seconds)
                counts.append(calls)
                verdicts.append(verdict)
                for variant in variants:
                    options = RunOptions(resources=[r for r in defaults if r != "cpu_tensors"]) if variant == WITHOUT_COUNTER else None
                    with _counter_emptied() if variant == EMPTIED_COUNTER else contextlib.nullcontext():
                        varied[variant].append(_checked(path, factory_name, device, options)[0])
                bares.append(_bare(path, factory_name, device, calls))
            per_round = sorted(c / b for c, b in zip(checks, bares, strict=True))
            rows[name] = {"check_s": median(checks), "bare_s": median(bares), "ratio": median(per_round),
                          "ratio_range": [per_round[0], per_round[-1]], "calls": int(median(counts)),
                          "verdicts": verdicts, "rounds": rounds,
                          **{f"{variant}_ratio": median(v / b for v, b in zip(varied[variant], bares, strict=True))
                             for variant in variants}}
            if progress:
                progress(name, rows[name])
    ratios = [row["ratio"] for row in rows.values()]
    return {"rows": rows, "median_ratio": median(ratios) if ratios else None, "rounds": rounds,
            **{f"median_{variant}_ratio": median(row[f"{variant}_ratio"] for row in rows.values())
               for variant in variants if rows}}
