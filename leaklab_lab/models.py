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
import importlib.util
from pathlib import Path
from typing import Any

from leaklab.report import Report
from leaklab.resources import BY_NAME as RESOURCES
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


def render(results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """docs/harness.md's section on the corpus: one table per results file holding corpus runs."""
    tables = []
    for filename, document in results:
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
    if not tables:
        return []
    return ['<a id="real-models"></a>', "", "## Real models", "",
            "Library steps built from configs ([real_models/](real_models/)), each run as `leaklab check FILE:FACTORY` "
            "would run it, with default settings: the bounded idiom (`make_step`) and the same step with a realistic "
            "mistake (`make_mistake`, marked `# MISTAKE:`). A verdict in bold is wrong: an idiom called `grows`, or a "
            "mistake not. `tests/test_real_models.py` (`-m models`) runs them; their libraries are the `models` extra.",
            "", *tables]
