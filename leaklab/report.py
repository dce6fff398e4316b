"""What one run of a step series found, and how it is shown: one line, a curve, JSON; and the
exit code that stands for it."""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from leaklab import resources as known
from leaklab.attribution import Site
from leaklab.chain import Chain, chain_from_json
from leaklab.verdict import BOUNDED, GROWS, PLATEAU, RAISES, SETTLE_SECONDS, STOPPED, Trend, format_bytes

# The exit codes of `leaklab check` (and the meaning of a report for a CI), in one place.
EXIT_BOUNDED = 0       # nothing grows, nothing was left behind
EXIT_LEAK = 1          # a resource grows, or the step left child processes running
EXIT_BAD_INPUT = 2     # usage, file, factory: nothing was measured
EXIT_STEP_FAILED = 3   # the step raised, called sys.exit, was interrupted or timed out; or no verdict (stopped)
EXIT_PLATEAU = 4       # memory rose, then stopped (a bounded cache): not a leak, worth knowing

# The phases of a run up to its verdict (the rest name what grows, attribute it, check the release).
VERDICT_STAGES = ("build", "warm-up", "measured", "confirmation", "long pass")


@dataclass
class ResourceResult:
    """One resource's series (absolute readings; ``samples[0]`` is the baseline after warm-up)."""

    resource: str
    samples: list[int]
    trend: Trend
    before: int          # before the step was built
    steps_to_exhaust: int | None = None
    hours_to_exhaust: float | None = None

    @property
    def kind(self) -> known.Resource:
        return known.get(self.resource)

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

    def rate(self) -> str:
        return f"{self.kind.format(self.per_step_bytes)}/step"

    def severity(self) -> str:
        """How soon this growth runs the machine out, in steps and hours of training."""
        if self.steps_to_exhaust is None:
            return ""
        hours = f", {_duration(self.hours_to_exhaust)} at the measured step time" if self.hours_to_exhaust else ""
        return f"runs out in ~{self.steps_to_exhaust:,} steps{hours}"


def _duration(hours: float) -> str:
    """About how long, as said in a line: "~3.5 h"; the bounds carry no "~" of their own."""
    if hours < 1 / 60:
        return "under a minute"
    if hours < 1:
        return f"~{hours * 60:.0f} min"
    if hours < 72:
        return f"~{hours:.1f} h"
    if hours < 24 * 365 * 10:
        return f"~{hours / 24:.0f} days"
    return "over ten years"


def failed_at(failed_step: int | None, stage: str | None, warmup: int) -> str:
    """Which step failed, counted as the table counts (from 1, warm-up apart): "warm-up step 3 of
    5", "measured step 2"; ``failed_step`` counts every step run from 0, warm-up included."""
    if failed_step is None:
        return f"in the {stage}" if stage else "before its first step"
    if failed_step < warmup:
        return f"at warm-up step {failed_step + 1} of {warmup}"
    after = failed_step - warmup + 1
    if stage in (None, "measured"):
        return f"at measured step {after}"
    return f"at step {after} after warm-up (the {stage})"


@dataclass
class Report:
    """The result of :func:`leaklab.check`: a verdict per resource and the one that matters."""

    device: str
    steps: int
    warmup: int
    resources: dict[str, ResourceResult] = field(default_factory=dict)
    step_seconds: list[float] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None           # what the step did instead of finishing ("Type: message", "timed out: ...")
    traceback: str | None = None
    failed_step: int | None = None     # which step failed (warm-up steps count from 0)
    stage: str | None = None           # where the run was when the step failed (warm-up, measured, ...)
    stopped_by_budget: str | None = None
    stopped_in_warmup: bool = False
    budget_moved: list[str] = field(default_factory=list)   # budgets passed by one jump, counted again from after it
    leftover: dict[str, int] = field(default_factory=dict)   # per resource, after release
    children: list[str] = field(default_factory=list)        # child processes the run had to stop
    children_left: int = 0
    kept_children: list[str] = field(default_factory=list)   # the factory's, still running: left to the process
    restarts: list[str] = field(default_factory=list)        # why the baseline was taken again
    confirmed_steps: int = 0           # steps of the confirmation pass (0: none was needed)
    uncertain: list[str] = field(default_factory=list)       # resources whose verdict the confirmation changed
    changed: dict[str, list[str]] = field(default_factory=dict)  # ... each one's verdict before and after it
    records: dict[str, Any] | None = None  # growth settled as a record of plain data (leaklab.verdict.records)
    crept: list[str] = field(default_factory=list)           # resources that crept under their floor (long pass)
    long_pass_steps: int = 0           # steps of the long pass (0: none was needed)
    filled: dict[str, Any] | None = None  # growth held in bounded containers, watched until full (verdict.fills)
    paused: dict[str, list[float]] = field(default_factory=dict)  # per resource read across pauses: its rate, what steps kept
    pass_stopped: str | None = None    # a pass the check added that the step could not run through, and why
    garbage: dict[str, list[int]] = field(default_factory=dict)  # per step: cyclic objects and bytes collected
    collector_off: bool = False        # the program turned the garbage collector off: read uncollected
    sites: list[Site] = field(default_factory=list)
    history: str | None = None         # growing autograd history, for host-heap leaks
    growth: dict[str, list[str]] = field(default_factory=dict)  # per resource: what grows, named (leaklab.growth)
    gaining: list[dict[str, Any]] = field(default_factory=list)  # containers that got longer, as data (growth.gaining)
    holder: list[dict[str, str]] | None = None  # what holds it: root first, links {what, name, type, kind} (leaklab.holders)
    holder_missing: str | None = None  # why no holder chain was found ("not found in time", ...)
    phase_seconds: dict[str, float] = field(default_factory=dict)  # wall time of each stage of the run
    signature: dict[str, Any] | None = None    # the leak's signature (leaklab.signature), where it grows or plateaus
    resembles: list[dict[str, Any]] | None = None  # the catalog entries it resembles, closest first ([]: none close)
    counters: dict[str, int] = field(default_factory=dict)   # allocator counter deltas (cuda)
    before_build: dict[str, int] = field(default_factory=dict)
    torch_version: str = torch.__version__
    name: str = ""
    device_name: str = ""              # the machine's name for ``device``; filled in when empty
    labels: dict[str, Any] = field(default_factory=dict)  # what the caller files the run under (a case, its role)

    def __post_init__(self) -> None:
        if not self.device_name:
            self.device_name = device_name(self.device)

    # ----------------------------------------------------------------- the headline
    def _judged(self) -> list[ResourceResult]:
        return [r for r in self.resources.values() if r.resource not in known.BY_NAME or r.kind.judged]

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return RAISES
        verdicts = {r.verdict for r in self._judged()}
        for candidate in (GROWS, STOPPED, PLATEAU):
            if candidate in verdicts:
                return candidate
        return BOUNDED

    @property
    def resource(self) -> str | None:
        """The resource the verdict is about: the most specific one with that verdict (see
        :attr:`leaklab.resources.Resource.rank`), else the most specific one watched."""
        judged = sorted(self._judged(), key=lambda r: r.kind.rank)
        if not judged:
            return None
        verdict = self.verdict
        for result in judged:
            if verdict in (BOUNDED, RAISES) or result.verdict == verdict:
                return result.resource
        return judged[0].resource

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
        resource = self.resource
        if (self.sites and self.verdict in (GROWS, PLATEAU) and resource in known.BY_NAME
                and known.get(resource).holds_tensors):
            return self.sites[0]
        return None

    @property
    def released(self) -> bool:
        """Memory went back to where it was before the step was built, and no child is left."""
        return not self.leftover and self.children_left == 0 and not self.kept_children

    @property
    def seconds_to_verdict(self) -> float | None:
        """Wall time from building the step to the verdict: every stage up to the decision
        (naming what grows, attribution and the release check come after it)."""
        if not self.phase_seconds:
            return None
        return sum(self.phase_seconds.get(stage, 0.0) for stage in VERDICT_STAGES)

    @property
    def median_step_seconds(self) -> float | None:
        return median_seconds(self.step_seconds)

    @property
    def exit_code(self) -> int:
        """What this report means to a CI: see the EXIT_* codes above."""
        if self.verdict in (RAISES, STOPPED):
            return EXIT_STEP_FAILED
        if self.verdict == GROWS or self.children_left:
            return EXIT_LEAK
        if self.verdict == PLATEAU:
            return EXIT_PLATEAU
        return EXIT_BOUNDED

    def holder_chain(self) -> Chain | None:
        """The holder chain (:mod:`leaklab.chain`), or None where none was looked for."""
        if self.holder is None and self.holder_missing is None:
            return None
        return chain_from_json(self.holder, self.holder_missing)

    def cyclic_garbage(self) -> str | None:
        """A line on the reference cycles the step leaves for the garbage collector, if any."""
        objects = self.garbage.get("objects") or []
        if not objects or not any(objects):
            return None
        per_step = sorted(objects)[len(objects) // 2]
        freed = sorted(self.garbage.get("bytes") or [0])[len(objects) // 2]
        if not per_step:
            return None
        return (f"creates {per_step:,} cyclic-garbage object(s) per step ({format_bytes(freed)} of heap): "
                "freed only by the garbage collector, collected before every reading")

    # ----------------------------------------------------------------- rendering
    def summary(self) -> str:
        """One line, as a failing test or the CLI shows it."""
        label = f"{self.name}: " if self.name else ""
        if self.verdict == RAISES:
            line = f"{label}the step failed {failed_at(self.failed_step, self.stage, self.warmup)}: {self.error}"
            if self.children_left:
                line += f"; stopped {self.children_left} child process(es) it left running"
            return line
        resource = self.resource
        if resource is None:
            return f"{label}nothing was measured"
        result = self.resources[resource]
        if self.verdict == BOUNDED:
            line = f"{label}bounded: nothing of {len(self._judged())} watched resources grows"
        else:
            line = f"{label}{self.verdict} in {resource}"
        if self.verdict == GROWS:
            line += f" by {result.rate()}"
            if result.trend.onset:
                line += f" since step {result.trend.onset}"
            severity = result.severity()
            if severity:
                line += f" ({severity})"
        elif self.verdict == PLATEAU:
            line += f": rose {result.kind.format(result.trend.rise_bytes)}, then flat"
        elif self.verdict == STOPPED:
            line += (f": it rose {result.kind.format(result.trend.rise_bytes)} and passed its budget, but not step after "
                     "step, so there is no verdict (a safety stop, not a leak found)")
        if self.records:
            found = self.records
            line += (f"; {', '.join(found['resources'])} keep(s) a record of plain data ({found['what']}): "
                     f"{format_bytes(found['bytes_per_step'])}/step, {format_bytes(found['after_horizon'])} after "
                     f"{found['horizon']:,} steps, not a leak (--strict: growth)")
        others = [r.resource for r in self._judged() if r.verdict in (GROWS, PLATEAU) and r.resource != resource]
        if others:
            line += f"; also {', '.join(others)}"
        if self.budget_moved:
            line += f"; {', '.join(self.budget_moved)}: a jump, not growth (its budget counts from there)"
        if self.stopped_by_budget and self.verdict != STOPPED:
            line += f"; stopped: {self.stopped_by_budget} passed its budget" + (" in warm-up" if self.stopped_in_warmup else "")
        if self.uncertain:
            changes = [f"{name} from {self.changed[name][0]} to {self.changed[name][1]}" if name in self.changed else name
                       for name in self.uncertain]
            line += f"; uncertain: the confirmation pass changed {', '.join(changes)}"
        if self.crept:
            line += f"; {', '.join(self.crept)} watched {self.long_pass_steps} more steps (a long pass)"
        if self.filled:
            line += (f"; held in {self.filled['what']}, bounded by construction: watched {self.filled['steps']} more "
                     f"steps, until it was full" + ("" if self.filled["resources"] else ", and it still grows"))
        for name, (rate, kept) in self.paused.items():
            shown = known.BY_NAME[name].format if name in known.BY_NAME else format_bytes
            if name in self.resources and self.resources[name].verdict != GROWS:
                line += (f"; {name} rose {shown(rate)}/step, but steps between two {SETTLE_SECONDS:g} s pauses kept "
                         f"{shown(kept)}/step: held a while by the process's own threads (as NCCL's watchdog holds "
                         "finished collectives until its next poll), not kept")
            else:
                line += f"; {name} kept {shown(kept)}/step between two {SETTLE_SECONDS:g} s pauses"
        if self.pass_stopped:
            line += f"; {self.pass_stopped} (judged on the steps before it)"
        site = self.leak_site
        if site is not None:
            line += f"; allocated at {site.filename.rsplit('/', 1)[-1]}:{site.lineno}"
            if site.held_by:
                line += f", held by {site.held_by}"
        elif self.history and self.verdict != BOUNDED:
            line += f"; {self.history}"
        named = self.growth.get(known.BY_NAME[resource].census or "") if resource in known.BY_NAME else None
        if named and self.verdict == GROWS and site is None:
            line += f"; {named[0]}"
        held = self.holder_chain()
        if held is not None and self.verdict in (GROWS, PLATEAU, STOPPED):
            line += f"; held by {held.short()}" if held.found else f"; {held.short()}"
        if self.children_left:
            line += f"; left {self.children_left} child process(es) running, now stopped ({'; '.join(self.children[:2])})"
        if self.kept_children:
            line += (f"; {len(self.kept_children)} child process(es) the factory started still run "
                     f"({'; '.join(self.kept_children[:2])}): the process's, stopped when it exits")
        if self.resembles:
            first = self.resembles[0]
            why = f"; {first['why']}" if first.get("why") else ""
            line += f"; resembles {first['slug']} ({first['title']}{why}): {first['link']}"
        elif self.resembles == [] and self.verdict == GROWS:
            line += "; resembles no catalog entry closely" + self._family_named()
        if self.signature and self.signature.get("bounded"):
            line += f"; {self.signature['bounded']}"
        return line

    def _family_named(self) -> str:
        """The one family the evidence named where no entry of it is close: what kind of mistake
        it is, without a fix that is not its own."""
        families = (self.signature or {}).get("families") or []
        if len(families) != 1:
            return ""
        why = self.signature.get("why")
        return f" (the evidence names the family {families[0]}{': ' + why if why else ''})"

    def curve(self, width: int = 40) -> str:
        """Per-step table of every resource, relative to the baseline, with a bar for the main one."""
        names = list(self.resources)
        if not names:
            return "(no samples)"
        main = self.resource or names[0]
        rows = ["step  " + "  ".join(f"{name:>16}" for name in names)]
        main_samples = self.resources[main].samples
        base = main_samples[0]
        span = max(1, max(abs(s - base) for s in main_samples))
        for i in range(len(main_samples)):
            cells = []
            for name in names:
                result = self.resources[name]
                cell = result.kind.format(result.samples[i] - result.samples[0]) if i < len(result.samples) else ""
                cells.append(f"{cell:>16}")
            bar = "#" * int(width * abs(main_samples[i] - base) / span)
            rows.append(f"{'base' if i == 0 else i:>4}  " + "  ".join(cells) + f"  {bar}")
        for result in self.resources.values():
            rows.append(f"{result.resource}: {result.verdict}, {result.rate()}, "
                        f"level {result.kind.format(result.level_bytes)}")
        for why in self.restarts:
            rows.append(f"baseline taken again: {why}")
        if self.confirmed_steps:
            rows.append(f"confirmed over {self.confirmed_steps} more steps")
        garbage = self.cyclic_garbage()
        if garbage:
            rows.append(garbage)
        if self.collector_off:
            rows.append("the step turned the garbage collector off (gc.disable()): read without collecting, as the "
                        "program runs, where its reference cycles are never freed")
        if self.sites:
            rows.append("allocated and still alive at the end:")
            rows.extend(f"  {site}" + (f"\n      {site.code}" if site.code else "") for site in self.sites[:5])
        if self.history:
            rows.append(self.history)
        for kind, lines in self.growth.items():
            rows.append(f"what grows ({kind}):")
            rows.extend(f"  {line}" for line in lines)
        held = self.holder_chain()
        if held is not None:
            rows.append(f"held by: {held}" if held.found else f"held by: {held.missing}")
        if self.resembles:
            rows.append("resembles, in the catalog:")
            rows.extend(f"  {entry['slug']} ({entry['family']}, similarity {entry['score']:.2f}): {entry['title']}"
                        + (f"\n      why: {entry['why']}" if entry.get("why") else "")
                        + f"\n      fix: {entry['fix']}\n      {entry['link']}" for entry in self.resembles)
        elif self.resembles == [] and self.verdict == GROWS:
            rows.append("resembles no catalog entry closely" + self._family_named())
        return "\n".join(rows)

    def to_json(self) -> dict[str, Any]:
        """The object that ``leaklab check --json`` prints and results files store; the labels
        come last, at the top level. :func:`report_from_json` reads it back whole."""
        data = {
            "name": self.name,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "summary": self.summary(),
            "resource": self.resource,
            "per_step_bytes": self.per_step_bytes,
            "samples": self.samples,
            "device": self.device,
            "device_name": self.device_name,
            "torch": self.torch_version,
            "steps": self.steps,
            "warmup": self.warmup,
            "error": self.error,
            "traceback": self.traceback,
            "failed_step": self.failed_step,
            "stage": self.stage,
            "stopped_by_budget": self.stopped_by_budget,
            "stopped_in_warmup": self.stopped_in_warmup,
            **({"budget_moved": self.budget_moved} if self.budget_moved else {}),
            "released": self.released,
            "leftover": self.leftover,
            "children_left": self.children_left,
            "children": self.children,
            **({"kept_children": self.kept_children} if self.kept_children else {}),
            "restarts": self.restarts,
            "confirmed_steps": self.confirmed_steps,
            "uncertain": self.uncertain,
            **({"changed": self.changed} if self.changed else {}),
            **({"records": self.records} if self.records else {}),
            # Absent from runs made before the long pass (and from runs that needed none).
            **({"crept": self.crept} if self.crept else {}),
            **({"long_pass_steps": self.long_pass_steps} if self.long_pass_steps else {}),
            **({"filled": self.filled} if self.filled else {}),
            **({"paused": self.paused} if self.paused else {}),
            **({"pass_stopped": self.pass_stopped} if self.pass_stopped else {}),
            "garbage": self.garbage,
            **({"collector_off": True} if self.collector_off else {}),
            "median_step_seconds": self.median_step_seconds,
            **({"phase_seconds": self.phase_seconds, "seconds_to_verdict": self.seconds_to_verdict}
               if self.phase_seconds else {}),
            "step_seconds": self.step_seconds,
            "metrics": self.metrics,
            "counters": self.counters,
            "sites": [asdict(site) for site in self.sites],
            "history": self.history,
            **({"growth": self.growth} if self.growth else {}),
            **({"gaining": self.gaining} if self.gaining else {}),
            **({"holder": self.holder} if self.holder is not None else {}),
            **({"holder_missing": self.holder_missing} if self.holder_missing else {}),
            **({"signature": self.signature} if self.signature else {}),
            **({"resembles": self.resembles} if self.resembles is not None else {}),
            "resources": {
                name: {
                    "verdict": r.verdict,
                    "unit": r.kind.unit,
                    "per_step_bytes": r.per_step_bytes,
                    "tail_per_step_bytes": r.trend.tail_per_step_bytes,
                    "rise_bytes": r.trend.rise_bytes,
                    "level_bytes": r.level_bytes,
                    "peak_bytes": r.peak_bytes,
                    "floor_bytes": r.trend.floor_bytes,
                    "scatter_bytes": r.trend.scatter_bytes,
                    "onset": r.trend.onset,
                    "margin": r.trend.margin,
                    "before": r.before,
                    "steps_to_exhaust": r.steps_to_exhaust,
                    "hours_to_exhaust": r.hours_to_exhaust,
                    "samples": r.samples,
                }
                for name, r in self.resources.items()
            },
        }
        data.update((key, value) for key, value in self.labels.items() if key not in data)
        return data


def median_seconds(step_seconds: list[float]) -> float | None:
    """The step time a report gives (the upper median), also what its hours to run out are computed from."""
    times = sorted(step_seconds)
    return times[len(times) // 2] if times else None


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return f"CPU: {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"CPU: {platform.processor() or platform.machine()}"


# Keys of :meth:`Report.to_json` that are worked out from the rest (the verdict, the headline),
# so not read back; every other key either is a field or, unknown, becomes a label.
_DERIVED = ("verdict", "exit_code", "summary", "resource", "per_step_bytes", "samples", "released",
            "median_step_seconds", "seconds_to_verdict")
_FIELDS = ("step_seconds", "metrics", "error", "traceback", "failed_step", "stage", "stopped_by_budget",
           "stopped_in_warmup", "budget_moved", "leftover", "children", "children_left", "kept_children", "restarts", "confirmed_steps",
           "uncertain", "changed", "records", "crept", "long_pass_steps", "filled", "paused", "pass_stopped", "garbage", "collector_off", "counters", "history",
           "growth", "gaining", "phase_seconds", "signature", "resembles", "holder", "holder_missing")
_KEYS = {*_DERIVED, *_FIELDS, "name", "device", "device_name", "torch", "steps", "warmup", "sites", "resources"}


def report_from_json(data: dict[str, Any]) -> Report:
    """Rebuild a :class:`Report` from :meth:`Report.to_json` (an isolated run's output, a results
    file's run): every field comes back, keys it does not know become labels, and
    ``report_from_json(d).to_json() == d`` (a test holds every committed run to that)."""
    report = Report(device=data["device"], steps=data["steps"], warmup=data["warmup"], name=data.get("name", ""),
                    device_name=data.get("device_name") or "")
    for key in _FIELDS:
        if data.get(key) is not None:
            setattr(report, key, data[key])
    report.torch_version = data.get("torch", report.torch_version)
    report.sites = [Site(**{**site, "stack": [tuple(f) for f in site.get("stack", [])]}) for site in data.get("sites", [])]
    for name, r in data.get("resources", {}).items():
        trend = Trend(r["verdict"], r["per_step_bytes"], r["tail_per_step_bytes"], r["rise_bytes"], r["floor_bytes"],
                      r.get("scatter_bytes", 0.0), r.get("onset", 0), r.get("margin", 0.0))
        samples = r["samples"]
        before = r.get("before", sorted(samples)[len(samples) // 2] - r["level_bytes"])
        report.resources[name] = ResourceResult(name, samples, trend, before, r.get("steps_to_exhaust"),
                                                r.get("hours_to_exhaust"))
    report.labels = {key: value for key, value in data.items() if key not in _KEYS}
    return report
