"""Memory curves: the leak's series against the fix's, per step (needs matplotlib: the plot extra).

Curves are drawn from reports (a results file's runs, read back), so the
catalog's pictures can be redrawn from the committed measurements without running anything.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from leaklab.files import atomic_write, check_writable
from leaklab.report import Report
from leaklab.resources import BY_NAME as RESOURCES
from leaklab.runner import BadInput
from leaklab.verdict import BOUNDED, RAISES
from leaklab_lab.cases import Case
from leaklab_lab.results import case_runs, role_of


def pyplot() -> Any:
    """matplotlib's pyplot, headless; one line naming the extra where matplotlib is missing (a run
    asked for curves checks this before it runs anything)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise BadInput("drawing curves needs matplotlib, which is not installed here: pip install -e '.[lab]'") from exc
    return plt


def plot_case(case: Case, leak: Report, fixes: list[Report], path: str | Path) -> None:
    """One small figure: the case's resource (and any other that moved in the leak), per step,
    for the leak and each fix; the leak's staircase against the fix's flat line."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    runs = [leak, *fixes]
    resources = [case.meta["resource"]] if case.meta["resource"] in leak.resources else []
    resources += [r for r, result in leak.resources.items() if r not in resources and result.verdict != BOUNDED]
    resources = resources or ([leak.resource] if leak.resource else [])
    # symptoms that are not memory (a loss scale, a gradient norm, reserved over peak)
    metrics = [m for m, values in leak.metrics.items() if values][:2]
    panels = ([("metric", m) for m in metrics] + [("resource", r) for r in resources])[:4]
    if not panels:
        raise BadInput(f"{case.slug}: nothing to draw (the leak raised: {leak.error})")
    figure, axes = plt.subplots(1, len(panels), figsize=(4.8 * len(panels), 3.3), squeeze=False)
    for axis, (kind, name) in zip(axes[0], panels, strict=True):
        series = []
        # A memory that is held but does not grow shows against what was there before the step
        # was built (the leak's line above the fix's); a growing one against its own baseline.
        held = kind == "resource" and name in leak.resources and leak.resources[name].verdict == BOUNDED
        for run in runs:
            if kind == "resource" and name in run.resources:
                result = run.resources[name]
                origin = result.before if held else result.samples[0]
                series.append((run, [v - origin for v in result.samples], result.verdict))
            elif kind == "metric" and run.metrics.get(name):
                series.append((run, run.metrics[name], ""))
        span = max((abs(v) for _, values, _ in series for v in values), default=0)
        unit, scale = ("", 1) if kind == "metric" else ("MiB", 2**20) if span >= 2**20 else ("KiB", 2**10)
        for (run, values, verdict), style in zip(series, ["-o", "-s", "-^", "-v"], strict=False):
            label = run.name.split(":", 1)[-1] + (f": {verdict}" if verdict else "")
            first = 1 if kind == "metric" else 0  # metrics come from measured steps 1..n; samples start at the baseline
            axis.plot(range(first, first + len(values)), [v / scale for v in values], style, markersize=3, label=label)
        axis.set_title(f"{case.slug} ({leak.device_name}, torch {leak.torch_version})\n{name}", fontsize=8)
        axis.set_xlabel("measured step (0 = baseline after warm-up)", fontsize=8)
        axis.set_ylabel((f"{unit} above the level before the step was built" if held else f"{unit} above baseline")
                        if unit else name, fontsize=7)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
        if kind == "resource":
            axis.annotate(RESOURCES[name].description if name in RESOURCES else "", (0.0, -0.36), xycoords="axes fraction", fontsize=6, color="gray")
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=100, metadata={"Software": None})
    plt.close(figure)
    check_writable(path)
    atomic_write(path, image.getvalue())  # a failed write leaves the previous picture whole


def plot_results(cases: list[Case], document: dict[str, Any], directory: Path) -> list[Path]:
    """Draw ``<case>-<device>.png`` for every case with a leak run in a results document."""
    written = []
    for case in cases:
        runs = case_runs(document, case.slug)
        for device in sorted({run.device for run in runs}):
            leak, *fixes = [run for run in runs if run.device == device]
            if role_of(leak) != "leak" or leak.verdict == RAISES:
                continue
            path = directory / f"{case.slug}-{device}.png"
            plot_case(case, leak, fixes, path)
            written.append(path)
    return written
