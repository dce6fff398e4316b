"""Memory curves: the leak's series against the fix's, per step (needs matplotlib: the plot extra)."""

from __future__ import annotations

from pathlib import Path

from leaklab.cases import Case
from leaklab.measure import DESCRIPTIONS
from leaklab.report import Report
from leaklab.runner import BadInput


def plot_case(case: Case, leak: Report, fixes: list[Report], path: str | Path) -> None:
    """One small figure: the case's resource (and any other that moved) per step, leak and fix."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise BadInput("--plot needs matplotlib: pip install 'leaklab[plot]'") from exc
    resources = [case.meta["resource"]] if case.meta["resource"] in leak.resources else []
    resources += [r for r, result in leak.resources.items()
                  if r not in resources and result.verdict != "bounded"]
    resources = resources or [leak.resource]
    figure, axes = plt.subplots(1, len(resources), figsize=(4.8 * len(resources), 3.2), squeeze=False)
    for axis, resource in zip(axes[0], resources, strict=True):
        span = max(abs(v - r.resources[resource].samples[0]) for r in [leak, *fixes]
                   if resource in r.resources for v in r.resources[resource].samples)
        unit, scale = ("MiB", 2**20) if span >= 2**20 else ("KiB", 2**10)
        for report, style in [(leak, "-o"), *[(fix, "-s") for fix in fixes]]:
            if resource not in report.resources:
                continue
            samples = report.resources[resource].samples
            scaled = [(value - samples[0]) / scale for value in samples]
            axis.plot(range(len(scaled)), scaled, style, markersize=3, label=f"{report.name.split(':', 1)[-1]}: {report.resources[resource].verdict}")
        axis.set_title(f"{case.slug} ({leak.device})\n{resource}", fontsize=9)
        axis.set_xlabel("measured step (0 = baseline after warm-up)", fontsize=8)
        axis.set_ylabel(f"{unit} above baseline", fontsize=8)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
        axis.annotate(DESCRIPTIONS.get(resource, ""), (0.01, -0.38), xycoords="axes fraction", fontsize=6, color="gray")
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
