"""What one run of a step series found, and how it is shown: one line, a curve, JSON."""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from leaklab.measure import (
    CPU_TENSORS,
    DEVICE_ALLOCATED,
    DEVICE_RESERVED,
    HOST_HEAP,
    PINNED_HOST,
    SHARED_MEMORY,
    WORKER_MEMORY,
)
from leaklab.verdict import BOUNDED, GROWS, PLATEAU, RAISES, Trend, format_bytes

# When several resources grow, the headline names the most specific: CPU tensor storages are
# malloc'd, so a tensor leak on the CPU also grows the host heap; the heap is named only when
# no tensor count explains the growth.
HEADLINE_ORDER = (DEVICE_ALLOCATED, CPU_TENSORS, PINNED_HOST, SHARED_MEMORY, WORKER_MEMORY, DEVICE_RESERVED, HOST_HEAP)


@dataclass
class ResourceResult:
    """One resource's series (absolute bytes; ``samples[0]`` is the baseline after warm-up)."""

    resource: str
    samples: list[int]
    trend: Trend
    before: int          # before the step was built
    after_release: int   # after the step was dropped and garbage collected
    steps_to_exhaust: int | None = None

    @property
    def verdict(self) -> str:
        return self.trend.verdict

    @property
    def per_step_bytes(self) -> float:
        return self.trend.per_step_bytes

    @property
    def level_bytes(self) -> float:
        """How much the running step holds above what was there before it was built."""
        return sorted(self.samples)[len(self.samples) // 2] - self.before

    @property
    def peak_bytes(self) -> int:
        return max(self.samples) - self.before


@dataclass
class Site:
    """A source line where memory that stayed alive was allocated."""

    filename: str
    lineno: int
    function: str
    bytes: int
    count: int
    stack: list[tuple[str, int, str]] = field(default_factory=list)
    code: str = ""
    held_by: str = ""   # the container that keeps the blocks alive, as a path from the step

    def __str__(self) -> str:
        held = f", held by {self.held_by}" if self.held_by else ""
        return f"{self.filename}:{self.lineno} in {self.function}: {format_bytes(self.bytes)} in {self.count} block(s){held}"


@dataclass
class Report:
    """The result of :func:`leaklab.check`: a verdict per resource and the one that matters."""

    device: str
    steps: int
    warmup: int
    resources: dict[str, ResourceResult] = field(default_factory=dict)
    step_seconds: list[float] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None           # "Type: message" when the step raised
    traceback: str | None = None
    failed_step: int | None = None     # which step raised (warm-up steps count from 0)
    stopped_by_budget: str | None = None
    leftover: dict[str, int] = field(default_factory=dict)   # per resource, after release
    children_left: int = 0
    sites: list[Site] = field(default_factory=list)
    history: str | None = None         # growing autograd history, for host-heap leaks
    counters: dict[str, int] = field(default_factory=dict)   # allocator counter deltas (cuda)
    torch_version: str = torch.__version__
    name: str = ""

    # ----------------------------------------------------------------- the headline
    @property
    def verdict(self) -> str:
        if self.error is not None:
            return RAISES
        verdicts = {r.verdict for r in self.resources.values()}
        for candidate in (GROWS, PLATEAU):
            if candidate in verdicts:
                return candidate
        return BOUNDED

    @property
    def resource(self) -> str | None:
        """The resource the verdict is about: the fastest-growing one, else the main one."""
        if not self.resources:
            return None
        verdict = self.verdict
        for resource in HEADLINE_ORDER:
            if resource in self.resources and (verdict == BOUNDED or self.resources[resource].verdict == verdict):
                return resource
        return next(iter(self.resources))

    @property
    def per_step_bytes(self) -> float:
        resource = self.resource
        return self.resources[resource].per_step_bytes if resource else 0.0

    @property
    def samples(self) -> list[int]:
        resource = self.resource
        return list(self.resources[resource].samples) if resource else []

    @property
    def leak_site(self) -> Site | None:
        """Where the growing tensor memory was allocated, when tensor memory is what grows (for a
        host-heap leak the sites are only the last step's live tensors, not the leak)."""
        if self.sites and self.verdict in (GROWS, PLATEAU) and self.resource in (CPU_TENSORS, DEVICE_ALLOCATED):
            return self.sites[0]
        return None

    @property
    def released(self) -> bool:
        """Memory went back to where it was before the step was built, and no child is left."""
        return not self.leftover and self.children_left == 0

    @property
    def median_step_seconds(self) -> float | None:
        times = sorted(self.step_seconds)
        return times[len(times) // 2] if times else None

    # ----------------------------------------------------------------- rendering
    def summary(self) -> str:
        """One line, as a failing test or the CLI shows it."""
        label = f"{self.name}: " if self.name else ""
        if self.verdict == RAISES:
            return f"{label}step {self.failed_step} raised {self.error}"
        resource = self.resource
        line = f"{label}{self.verdict} in {resource}"
        result = self.resources[resource]
        if self.verdict == GROWS:
            line += f" by {format_bytes(result.per_step_bytes)}/step"
            if result.steps_to_exhaust is not None:
                line += f" (memory exhausted in ~{result.steps_to_exhaust:,} steps)"
        elif self.verdict == PLATEAU:
            line += f": rose {format_bytes(result.trend.rise_bytes)}, then flat"
        others = [r.resource for r in self.resources.values() if r.verdict in (GROWS, PLATEAU) and r.resource != resource]
        if others:
            line += f"; also {', '.join(others)}"
        if self.stopped_by_budget:
            line += f"; stopped: {self.stopped_by_budget} passed its budget"
        site = self.leak_site
        if site is not None:
            line += f"; allocated at {site.filename.rsplit('/', 1)[-1]}:{site.lineno}"
            if site.held_by:
                line += f", held by {site.held_by}"
        elif self.history and self.verdict != BOUNDED:
            line += f"; {self.history}"
        return line

    def curve(self, width: int = 40) -> str:
        """Per-step table of every resource, relative to the baseline, with a bar for the main one."""
        names = list(self.resources)
        if not names:
            return "(no samples)"
        main = self.resource
        rows = ["step  " + "  ".join(f"{name:>16}" for name in names)]
        main_samples = self.resources[main].samples
        base = main_samples[0]
        span = max(1, max(abs(s - base) for s in main_samples))
        for i in range(len(main_samples)):
            cells = []
            for name in names:
                samples = self.resources[name].samples
                cells.append(f"{format_bytes(samples[i] - samples[0]) if i < len(samples) else '':>16}")
            bar = "#" * int(width * abs(main_samples[i] - base) / span)
            rows.append(f"{'base' if i == 0 else i:>4}  " + "  ".join(cells) + f"  {bar}")
        for resource_result in self.resources.values():
            rows.append(
                f"{resource_result.resource}: {resource_result.verdict}, "
                f"{format_bytes(resource_result.per_step_bytes)}/step, level {format_bytes(resource_result.level_bytes)}"
            )
        if self.sites:
            rows.append("allocated and still alive at the end:")
            rows.extend(f"  {site}" + (f"\n      {site.code}" if site.code else "") for site in self.sites[:5])
        if self.history:
            rows.append(self.history)
        return "\n".join(rows)

    def to_json(self) -> dict[str, Any]:
        """The object that ``leaklab check --json`` prints and results files store."""
        return {
            "name": self.name,
            "verdict": self.verdict,
            "resource": self.resource,
            "per_step_bytes": self.per_step_bytes,
            "samples": self.samples,
            "device": self.device,
            "device_name": device_name(self.device),
            "torch": self.torch_version,
            "steps": self.steps,
            "warmup": self.warmup,
            "error": self.error,
            "traceback": self.traceback,
            "failed_step": self.failed_step,
            "stopped_by_budget": self.stopped_by_budget,
            "released": self.released,
            "leftover": self.leftover,
            "children_left": self.children_left,
            "median_step_seconds": self.median_step_seconds,
            "step_seconds": self.step_seconds,
            "metrics": self.metrics,
            "counters": self.counters,
            "sites": [asdict(site) for site in self.sites],
            "history": self.history,
            "resources": {
                name: {
                    "verdict": r.verdict,
                    "per_step_bytes": r.per_step_bytes,
                    "tail_per_step_bytes": r.trend.tail_per_step_bytes,
                    "rise_bytes": r.trend.rise_bytes,
                    "level_bytes": r.level_bytes,
                    "peak_bytes": r.peak_bytes,
                    "floor_bytes": r.trend.floor_bytes,
                    "steps_to_exhaust": r.steps_to_exhaust,
                    "samples": r.samples,
                }
                for name, r in self.resources.items()
            },
        }


def device_name(device: str) -> str:
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return f"CPU: {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"CPU: {platform.processor() or platform.machine()}"


def report_from_json(data: dict[str, Any]) -> Report:
    """Rebuild a :class:`Report` from :meth:`Report.to_json` (an isolated run's output)."""
    report = Report(device=data["device"], steps=data["steps"], warmup=data["warmup"], name=data.get("name", ""))
    for key in ("step_seconds", "metrics", "error", "traceback", "failed_step", "stopped_by_budget",
                "leftover", "counters", "history"):
        setattr(report, key, data.get(key) or getattr(report, key))
    report.torch_version = data.get("torch", report.torch_version)
    report.sites = [Site(**{**site, "stack": [tuple(f) for f in site.get("stack", [])]}) for site in data.get("sites", [])]
    report.children_left = data.get("children_left", 0)
    for name, r in data.get("resources", {}).items():
        trend = Trend(r["verdict"], r["per_step_bytes"], r["tail_per_step_bytes"], r["rise_bytes"], r["floor_bytes"])
        samples = r["samples"]
        before = sorted(samples)[len(samples) // 2] - r["level_bytes"]
        result = ResourceResult(name, samples, trend, before, before, r.get("steps_to_exhaust"))
        report.resources[name] = result
    return report
