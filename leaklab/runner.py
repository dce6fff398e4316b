"""Running steps: build the step, warm it up, take a baseline, then read every resource after
every step, and decide.

A *factory* is a callable ``factory(device) -> step`` where ``step()`` runs one training or
evaluation step. It is how the catalog's scripts and users' own code are both put under the
check. A step may return a mapping of numbers (a loss scale, a gradient norm): those are kept
per step as *metrics*, for symptoms that are not memory.

The run, in order:

1. a reading before the step is built (for the release check), the step built, a reading after;
2. ``warmup`` steps, each read for the budget only (a leak is stopped in warm-up too);
3. garbage collected, everything alive frozen, the baseline read, then ``steps`` steps, each
   followed by a reading (garbage collected first); the run stops once a resource passes its
   budget;
4. a series that made one jump and stayed flat (a lazy initialisation: a first torch call after
   warm-up) is measured again from a new baseline, at most ``restarts`` times;
5. where any verdict is not ``bounded`` or was close, a confirmation pass of more steps
   continues the series and the verdict is decided again on all of it; a resource whose verdict
   changed is reported as uncertain. Where nothing grows but a noisy series crept up under its
   floor (:func:`leaklab.verdict.creeps`), a long pass continues that series alone, and it is
   decided without its floor (:func:`leaklab.verdict.confirm_creep`); the pass ends early once
   the series can no longer be called growing (:func:`leaklab.verdict.stalled`);
6. optionally, a few extra steps with allocation sites recorded (attribution); where Python
   objects, threads, descriptors or file mappings grow, what grows is named from two censuses
   (:mod:`leaklab.growth`) taken around the confirmation pass, or around a few extra steps where
   the growth was not seen before it;
7. the step dropped, garbage collected, and what stayed behind and which child processes are
   still running are reported; those children are terminated.

The step's own failure (an exception, ``sys.exit``, Ctrl-C, a timeout) ends the run and is
reported as such, never as a verdict on memory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import torch

from leaklab import attribution, growth, holders, signature
from leaklab import resources as known
from leaklab.measure import Probe, cuda_usable, device_counters, format_exception, live_children
from leaklab.report import Report, ResourceResult
from leaklab.verdict import (
    BOUNDED,
    CREEP_PASS,
    CREEP_WINDOW,
    GROWS,
    confirm,
    confirm_creep,
    creeps,
    decide,
    decide_truncated,
    one_jump,
    stalled,
)

Step = Callable[[], Any]
Factory = Callable[[str], Step]

ATTRIBUTION_STEPS = 5   # steps run after the series with allocation sites recorded
NAMING_STEPS = 5        # steps run between two censuses of what grows (Python objects, threads, fds, mappings)
MAX_STEPS = 100_000     # a series longer than this is a typo, not a leak check
RESTARTS = 2            # lazy initialisations measured past at most this many times
CREEP_STEPS_MAX = 400   # a creep's long pass is at most this long
MIN_READINGS = 3        # a series is judged from this many readings on (the baseline and two steps)
CONFIRM_BAR = 0.5       # a bounded series whose predicted rise passed this share of its bar is confirmed too


class BadInput(ValueError):
    """The thing to check cannot be run: a missing file, a factory that is not one, bad numbers."""


class StepFailed(Exception):
    """The step itself failed: it raised, exited, was interrupted or ran past its time limit."""


class StepTimeout(BaseException):
    """Raised inside a step that ran past its time limit (a BaseException, like KeyboardInterrupt,
    so that a step's own ``except Exception`` cannot swallow it)."""


def parse_device(device: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N`` as given, checked against this machine; BadInput otherwise."""
    if not isinstance(device, str):
        raise BadInput(f"device must be a string such as 'cpu', 'cuda' or 'cuda:1', got {device!r}")
    kind, _, index = device.partition(":")
    if kind == "cpu" and not index:
        return device
    if kind != "cuda" or (index and not index.isdigit()):
        raise BadInput(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if not cuda_usable():
        raise BadInput(f"device {device!r} was asked for, but torch sees no CUDA device here")
    if index and int(index) >= torch.cuda.device_count():
        raise BadInput(f"device {device!r} was asked for, but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return device


def _whole(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{name} must be a whole number, got {value!r}")
    if not least <= value <= MAX_STEPS:
        raise BadInput(f"{name} must be from {least} to {MAX_STEPS:,}, got {value:,}")


@dataclass
class RunOptions:
    steps: int = 20
    warmup: int = 5
    resources: tuple[str, ...] = ()
    budget: dict[str, int] = field(default_factory=dict)
    attribute: bool = False
    snapshot: str | None = None            # cuda: write the allocator snapshot here (memory_viz)
    snapshot_overwrite: bool = False       # replace an existing snapshot file
    snapshot_html: bool = False            # also write the snapshot's viewer page beside it
    child_wait: float = 10.0               # seconds children get to exit after the step is dropped
    timeout: float | None = None           # seconds one step may take; None: no limit
    hard_timeout: bool = False             # a step stuck past its limit in C code ends the process (exit 3)
    exhaust_at: int | None = None          # bytes; default: the device's (or host's) total memory
    confirm: bool = True                   # re-measure before reporting anything but a clear bounded
    progress: Callable[[int, int, dict[str, int]], None] | None = None
    name: str = ""

    @property
    def confirm_steps(self) -> int:
        return max(5, self.steps // 2)

    @property
    def creep_steps(self) -> int:
        """The long pass that tells a slow leak from a saw-tooth (see :func:`leaklab.verdict.creeps`)."""
        return min(CREEP_PASS * self.steps, CREEP_STEPS_MAX)

    def validate(self, device: str) -> str:
        """Check every setting before anything runs; returns the device, checked."""
        _whole("steps", self.steps, 2)
        _whole("warmup", self.warmup, 0)
        if self.timeout is not None and (isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float))
                                         or not self.timeout > 0):
            raise BadInput(f"timeout must be a number of seconds above 0, got {self.timeout!r}")
        device = parse_device(device)
        for name in self.resources:
            try:
                resource = known.get(name)
            except ValueError as exc:
                raise BadInput(str(exc)) from None
            why = known.readable(resource, device)
            if why:
                raise BadInput(why)
        for name, value in self.budget.items():
            if name not in known.BY_NAME:
                raise BadInput(f"budget for unknown resource {name!r}; known: {', '.join(known.NAMES)}")
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise BadInput(f"budget for {name} must be a positive whole number, got {value!r}")
        return device


class Series:
    """Readings of every watched resource, in arrays allocated before the first step: the
    harness must allocate nothing per step, or it would be the leak it measures."""

    def __init__(self, names: tuple[str, ...], capacity: int) -> None:
        self.names = names
        self.capacity = capacity
        self.values = {name: array("q", bytes(8 * capacity)) for name in names}
        self.garbage_objects = array("q", bytes(8 * capacity))
        self.garbage_bytes = array("q", bytes(8 * capacity))
        self.seconds = array("d", bytes(8 * capacity))
        self.metrics: dict[str, array] = {}
        self.shift = dict.fromkeys(names, 0)
        self.count = 0

    def last(self) -> dict[str, int]:
        return {name: self.values[name][self.count - 1] + self.shift[name] for name in self.names}

    def shift_from(self, sample: dict[str, int]) -> None:
        """Later readings continue from the last one: what changed between it and ``sample`` (the
        harness's own doing, between two steps) is taken out."""
        for name in self.names:
            if not known.get(name).resets:  # a peak is a figure of its step alone
                self.shift[name] = sample[name] - self.values[name][self.count - 1]

    def add(self, sample: dict[str, int], probe: Probe, seconds: float) -> None:
        i = self.count
        if i >= self.capacity:
            raise RuntimeError("leaklab: more readings than the series was allocated for")
        for name in self.names:
            self.values[name][i] = sample[name] - self.shift[name]
        self.garbage_objects[i] = probe.garbage.objects
        self.garbage_bytes[i] = probe.garbage.bytes
        self.seconds[i] = seconds
        self.count += 1

    def kept(self) -> dict[str, Any]:
        """Everything this series holds, to go back to (:meth:`restore`) when a pass is abandoned."""
        return {"values": {name: array("q", values) for name, values in self.values.items()},
                "metrics": {key: array("d", values) for key, values in self.metrics.items()},
                "garbage_objects": array("q", self.garbage_objects), "garbage_bytes": array("q", self.garbage_bytes),
                "seconds": array("d", self.seconds), "shift": dict(self.shift), "count": self.count}

    def restore(self, kept: dict[str, Any]) -> None:
        for key, value in kept.items():
            setattr(self, key, value)

    def metric_slot(self, key: str) -> array:
        slot = self.metrics.get(key)
        if slot is None:
            slot = self.metrics[key] = array("d", bytes(8 * self.capacity))
        return slot

    def series(self, name: str) -> list[int]:
        return self.values[name][:self.count].tolist()


def call_step(step: Step, series: Series | None = None) -> None:
    """Run one step; keep the numbers it returns in ``series`` (reading index ``series.count``)."""
    result = step()
    if series is not None and isinstance(result, Mapping):
        for key, value in result.items():
            if isinstance(value, (int, float, bool)) or (isinstance(value, torch.Tensor) and value.numel() == 1):
                series.metric_slot(str(key))[series.count] = float(value)


class _TimeLimit:
    """Ends a step that runs past ``seconds``: SIGALRM raises :class:`StepTimeout` in it (main
    thread only; elsewhere there is no limit). A step stuck in C code sees the signal only when
    it returns to Python; with ``hard``, a watchdog thread then ends the process after a grace
    period, with one line and exit 3, once it has stopped the step's children."""

    GRACE = 10.0

    def __init__(self, seconds: float | None, hard: bool = False) -> None:
        self.seconds = seconds if threading.current_thread() is threading.main_thread() else None
        self.hard = hard and self.seconds is not None
        self._previous: Any = None
        self._deadline: float | None = None
        self._children: set[int] = set()
        self._done = threading.Event()  # the watchdog ends with the check: no thread of ours outlives it

    def __enter__(self) -> _TimeLimit:
        if self.seconds:
            self._previous = signal.signal(signal.SIGALRM, self._expired)
        if self.hard:
            self._children = {p.pid for p in live_children()}
            threading.Thread(target=self._watch, name="leaklab-watchdog", daemon=True).start()
        return self

    def _expired(self, signum: int, frame: Any) -> None:
        raise StepTimeout(f"the step ran past its time limit of {self.seconds:g} s")

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                stop_children(self._children, wait=0.0)
                print(f"leaklab: the step ran past its time limit of {self.seconds:g} s and did not return to Python "
                      f"for {self.GRACE:g} s more: stopped", file=sys.stderr, flush=True)
                os._exit(3)

    def arm(self) -> None:
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            if self.hard:
                self._deadline = time.monotonic() + self.seconds + self.GRACE

    def disarm(self) -> None:
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._deadline = None

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self.seconds:
            self.disarm()
            signal.signal(signal.SIGALRM, self._previous)


def describe_failure(exc: BaseException, who: str = "the step") -> str:
    if isinstance(exc, StepTimeout):
        return f"timed out: {exc}"
    if isinstance(exc, SystemExit):
        return f"exited: {who} called sys.exit({exc.code!r})"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted: KeyboardInterrupt (Ctrl-C or SIGINT) during the step"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def run_factory(factory: Factory, device: str = "cpu", options: RunOptions | None = None) -> Report:
    """Build a step with ``factory(device)``, run it under the probe, and decide the verdicts."""
    options = options or RunOptions()
    device = options.validate(device)
    report = Report(device=device, steps=options.steps, warmup=options.warmup, name=options.name)
    children_before = {p.pid for p in live_children()}
    try:
        _run(factory, device, options, report)
    finally:
        # Whatever happened (a failure, Ctrl-C), nothing the step started is left running.
        report.children = stop_children(children_before, options.child_wait)
        report.children_left = len(report.children)
    resemble(report)
    return report


def resemble(report: Report) -> None:
    """The report's signature and the catalog entries it resembles, where it grows or plateaus."""
    found = signature.signature(report)
    if found is not None:
        report.signature = found.to_json()
        report.resembles = [entry.to_json() for entry in signature.resemble(found, device=report.device)]


def _run(factory: Factory, device: str, options: RunOptions, report: Report) -> None:
    """The run, in the order of the module's docstring: build, the series (warm-up, measured,
    measured again after a lazy initialisation), the confirmation, the long pass, attribution,
    naming what grows, the release."""
    probe = Probe(device, known.resolve(device, tuple(options.resources)), track_tensors=options.attribute)
    budget = {r.name: options.budget.get(r.name, r.budget) for r in probe.watched}
    series = Series(probe.resources, max(options.warmup, options.steps + options.confirm_steps) + 1)
    limit = _TimeLimit(options.timeout, hard=options.hard_timeout)
    with probe, limit:
        _enter(report, "build", stage=False)
        probe.settle(clear_workspaces=True)
        before = report.before_build = probe.sample()
        run = _Run(_build(factory, device), probe, options, budget, probe.sample(), limit, report)
        watcher = censuses = None
        trends: dict[str, Any] = {}
        try:
            counters_start = _measure_series(run, series)
            trends, censuses = _decide_with_passes(run, series)
            if counters_start:
                end = device_counters(device)
                report.counters = {k: end[k] - counters_start.get(k, 0) for k in end}
            if options.attribute and not report.stopped_by_budget and not report.pass_stopped:
                watcher = _attribute(run)
            report.failed_step = None
            _enter(report, None)
        except (Exception, SystemExit, KeyboardInterrupt, StepTimeout) as exc:
            # The step's own failure is reported as such, not as a verdict and not as a crash of ours.
            limit.disarm()
            report.error = describe_failure(exc)
            report.traceback = format_exception(exc)
            del exc
        _enter(report, "release", stage=False)
        if watcher is not None:
            report.sites, report.history = attribution.finish(watcher, probe, run.step)
        if report.error is None and not report.stopped_by_budget and not report.pass_stopped:
            try:
                _name_growth(run, trends, censuses)
            except KeyboardInterrupt as exc:
                limit.disarm()
                report.error = describe_failure(exc)
                report.traceback = format_exception(exc)
                del exc
            _enter(report, "release", stage=False)
        censuses = None  # they hold the step's containers: they go with the step
        after = _release(run, before)
    report.leftover = leftover(probe.watched, before, after)
    _enter(report, None, stage=False)


def _build(factory: Factory, device: str) -> Step:
    """The step, built by ``factory(device)``; a factory that fails or returns no callable is bad input."""
    try:
        step = factory(device)
    except BadInput:
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        name = getattr(factory, "__name__", "the factory")
        raise BadInput(f"{name}({device!r}) failed: {describe_failure(exc, 'the factory')}") from None
    if not callable(step):
        raise BadInput(f"the factory returned {type(step).__name__}, not a callable that runs one step")
    return step


def _measure_series(run: _Run, series: Series) -> dict[str, int]:
    """Warm-up, then the measured series, measured again from a new baseline after a lazy
    initialisation (a series that made one jump and stayed flat), at most :data:`RESTARTS` times.
    Returns the CUDA allocator's counters at the last baseline (empty on the CPU)."""
    probe, report, options = run.probe, run.report, run.options
    # Warm-up runs through the very loop the measured steps use, read for the budget only,
    # so that whatever that loop sets up on its first turns is in place before the baseline.
    _enter(report, "warm-up")
    series.count = 0
    series.add(run.built, probe, 0.0)
    run.measure(series, options.warmup, quiet=True)
    report.stopped_in_warmup = report.stopped_by_budget is not None
    counters_start: dict[str, int] = {}
    restarts = 0
    while not report.stopped_by_budget:
        _enter(report, "measured")
        before_restart = series.kept() if restarts else None
        series.count = 0
        series.shift = dict.fromkeys(series.names, 0)
        probe.freeze_existing()
        if probe.kind == "cuda":
            counters_start = device_counters(probe.device)
        if before_restart is None:  # the steps asked for: a failure is the step's own
            run.measure(series, options.steps, start=BASELINE)
        else:
            with run.added_pass("re-measured series"):
                run.measure(series, options.steps, start=BASELINE)
            if report.pass_stopped:
                if series.count < MIN_READINGS:  # too few after the jump to judge: the series before it
                    series.restore(before_restart)
                break
        if report.stopped_by_budget or restarts >= RESTARTS:
            break
        jumps = [r.name for r in probe.watched
                 if r.judged and not r.cache and one_jump(series.series(r.name), r) is not None]
        if not jumps:
            break
        restarts += 1
        report.restarts.append(f"{', '.join(jumps)} made one jump and stayed flat (a lazy initialisation): "
                               f"measured again after {run.done} steps")
    return counters_start


def _decide_with_passes(run: _Run, series: Series) -> tuple[dict[str, Any], _Censuses | None]:
    """The verdicts: decided on the series, then, where any is not a clear bounded, confirmed
    over more steps (with what grows counted by two censuses around them), and a creep or a
    growth of python_objects alone watched through a long pass. Keeps them in the report and
    returns them with the censuses."""
    probe, report, options, watched = run.probe, run.report, run.options, run.probe.watched
    trends = decide_series(series, watched, report)
    crept = _creeping(series, watched, trends)
    first, start = trends, series.count - 1
    censuses = None
    if (options.confirm and not report.stopped_by_budget and not report.pass_stopped
            and (_needs_confirmation(trends) or crept)):
        _enter(report, "confirmation")
        # What already grows is named over the confirmation's own steps, between two
        # censuses, instead of over extra steps after the verdict (see _name_growth).
        censuses = _Censuses(growth.kinds(_growing(trends)), options.confirm_steps)
        censuses.before = censuses.take(run.step, probe)
        # What the decision itself keeps alive (a few Python objects, a census) must not read
        # as a step of the series: the readings go on from where the series stopped.
        with run.added_pass("confirmation"):
            run.measure(series, options.confirm_steps, start=CONTINUE)
        if report.pass_stopped:
            series.count = start + 1  # the verdict stays the series' before it
            censuses = None
        else:
            if censuses.before is not None:
                censuses.after = censuses.take(run.step, probe, first=False)
            trends = decide_series(series, watched, report)
            if not report.stopped_by_budget:
                trends = {name: confirm(first[name], trend, series.series(name)[start:], known.get(name))
                          if name in first else trend for name, trend in trends.items()}
                report.uncertain = [name for name, trend in first.items() if known.get(name).judged and name
                                    not in crept and name in trends and trends[name].verdict != trend.verdict]
            report.confirmed_steps = options.confirm_steps
    extended: dict[str, list[int]] = {}
    # A creep under the floor where nothing grows, or growth seen only in counters that a
    # cache filled lazily over a first epoch makes rise like a leak (python_objects: a
    # dataset's per-item objects), is watched through a long pass before it is reported.
    longer = ((crept if not _growing(trends) else _growing_alone(trends))
              if not report.stopped_by_budget and not report.pass_stopped else [])
    if options.confirm and longer:
        _enter(report, "long pass")
        extended = _long_pass(run, series, longer, start)
        if not report.pass_stopped:
            for name in longer:
                values = extended[name]
                trends[name] = confirm_creep(first[name], decide(values, known.get(name), floor=0 if name in crept
                                                                 else None), values[start:])
        report.crept = longer
    keep_series(report, series, watched, trends, probe.device, options, extended)
    return trends, censuses


def _attribute(run: _Run) -> attribution.Watcher:
    """A few extra steps with allocation sites recorded, after the measured series: recording
    allocation stacks costs host memory (the allocator's history lives on the host), which must
    not show in the verdicts it explains."""
    probe, options = run.probe, run.options
    _enter(run.report, "attribution")
    watcher = attribution.start(probe, run.step, options.snapshot, snapshot_overwrite=options.snapshot_overwrite,
                                snapshot_html=options.snapshot_html)
    with run.added_pass("attribution"):
        for i in range(ATTRIBUTION_STEPS):
            if probe.tensors is not None:
                probe.tensors.step = i + 1  # which attribution step allocated each storage
            run.run_steps(1)
    return watcher


def _release(run: _Run, before: dict[str, int]) -> dict[str, int]:
    """The step dropped and its memory read again (after a full collection where anything seems to
    have stayed); returns that reading."""
    probe = run.probe
    run.step = None
    probe.settle(clear_workspaces=True)
    after = probe.sample()
    if leftover(probe.watched, before, after):
        # Read again after a full collection before saying anything stayed: cycles that were
        # frozen with everything else after warm-up are collectable only once unfrozen.
        probe.unfreeze()
        after = probe.sample()
    return after


@dataclass
class _Censuses:
    """Two censuses of what grows (:mod:`leaklab.growth`) around a run of ``steps`` steps."""

    what: set[str]
    steps: int
    before: growth.Census | None = None
    after: growth.Census | None = None

    def take(self, step: Step, probe: Probe, first: bool = True) -> growth.Census | None:
        """A census, or None where nothing is to be named or it could not be taken (the naming is
        ours, not asked for: it never fails a run)."""
        if not self.what:
            return None
        probe.prune()
        try:
            return growth.take(self.what, step, first=first)
        except Exception:  # noqa: BLE001 - a user object that cannot be measured leaves the growth unnamed
            return None

    def cover(self, what: set[str]) -> bool:
        return self.after is not None and self.before is not None and what <= self.what


def _name_growth(run: _Run, trends: dict[str, Any], censuses: _Censuses | None = None) -> None:
    """Where Python objects, tensors, threads, descriptors or mappings grow, name what grows from
    two censuses: those taken around the confirmation pass where they cover what grows (no step
    is added), or else a census, a few extra steps, a census again, after attribution so that
    attribution watches the steps right after the series. A step that fails in those extra steps
    leaves the growth unnamed (they are ours), and the verdict stands."""
    report, step, probe = run.report, run.step, run.probe
    what = growth.kinds(_growing(trends))
    if not what:
        return
    _enter(report, "naming")
    if censuses is None or not censuses.cover(what):
        censuses = _Censuses(what, NAMING_STEPS)
        censuses.before = censuses.take(step, probe)
        try:
            run.run_steps(NAMING_STEPS)
        except (Exception, SystemExit, StepTimeout):
            run.limit.disarm()
            report.failed_step = None
            _enter(report, None)
            return
        censuses.after = censuses.take(step, probe, first=False)
    if censuses.cover(what):
        report.growth = growth.growth(censuses.before, censuses.after, censuses.steps, what)
        report.holder, report.holder_missing = holders.fields(holders.name_holder(censuses.before, censuses.after, censuses.steps, step))
        if "objects" in what and report.history is None:
            report.history = attribution.autograd_history(censuses.after.graphs, censuses.before.graphs, censuses.steps)
    _enter(report, None)


def _enter(report: Report, phase: str | None, stage: bool = True) -> None:
    """The run moves to ``phase`` (None: the end); the time of the phase it leaves is added to
    :attr:`Report.phase_seconds` (what each pass cost, and the time to a verdict). ``stage``: the
    phase is also where a failure of the step would be reported."""
    now = time.perf_counter()
    if report._phase is not None:
        report.phase_seconds[report._phase] = report.phase_seconds.get(report._phase, 0.0) + now - report._phase_started
    report._phase, report._phase_started = phase, now
    if stage:
        report.stage = phase


def leftover(watched: tuple[known.Resource, ...], before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What stayed behind past each resource's release tolerance, between two readings."""
    return {
        resource.name: after[resource.name] - before[resource.name]
        for resource in watched
        if resource.release_tolerance is not None
        and after[resource.name] - before[resource.name] > resource.release_tolerance
    }


def over_budget(sample: dict[str, int], start: dict[str, int], budget: dict[str, int | None]) -> str | None:
    """The first resource whose reading passed its budget above ``start``, or None."""
    for name, value in sample.items():
        limit = budget.get(name)
        if limit is not None and value - start[name] > limit:
            return name
    return None


BASELINE, CONTINUE = "baseline", "continue"


@dataclass
class _Run:
    """What every pass of one run needs, in one place: the step and its probe, the settings, the
    budget (measured from ``built``, the reading just after the step was built), the time limit,
    the report the run fills in and the steps run so far."""

    step: Step
    probe: Probe
    options: RunOptions
    budget: dict[str, int | None]
    built: dict[str, int]
    limit: _TimeLimit
    report: Report
    done: int = 0

    def measure(self, series: Series, count: int, *, only: list[str] | None = None, start: str | None = None,
                quiet: bool = False) -> None:
        """``count`` more steps, each followed by a reading (of ``only`` these resources, if given).
        ``start``: :data:`BASELINE` takes the series' first reading here first, :data:`CONTINUE` a
        reading from which the series goes on where it stopped."""
        probe, report, limit, step = self.probe, self.report, self.limit, self.step
        sync = probe.kind == "cuda"
        # Every object this loop keeps between two readings (its clock readings, the last sample) is
        # alive before the reference reading too, so that reading counts the same objects of ours as
        # every later one: python_objects is exact, and it would read the loop's own locals as growth.
        started, seconds = time.perf_counter(), time.perf_counter()  # two floats, as the loop keeps
        over = None
        turns = iter(range(count))
        sample = probe.sample(only) if start else {}
        if start:
            sample = probe.sample(only)  # taken while the last one is alive, as every later reading is
        if start == BASELINE:
            series.add(sample, probe, 0.0)
        elif start == CONTINUE:
            series.shift_from(sample)
        for i in turns:
            report.failed_step = self.done
            limit.arm()
            started = time.perf_counter()
            call_step(step, series)
            if sync:
                torch.cuda.synchronize(probe.device)
            seconds = time.perf_counter() - started
            limit.disarm()
            self.done += 1
            sample = probe.sample(only)
            series.add(sample, probe, seconds)
            if self.options.progress and not quiet:
                self.options.progress(i + 1, count, sample)
            over = over_budget(series.last(), self.built, self.budget)
            if over:
                report.stopped_by_budget = over
                break

    def run_steps(self, count: int) -> None:
        """``count`` steps with no reading (attribution's, naming's)."""
        for i in range(count):
            self.report.failed_step = self.done + i
            self.limit.arm()
            call_step(self.step)
            self.limit.disarm()
        self.done += count
        self.report.failed_step = None

    @contextlib.contextmanager
    def added_pass(self, name: str) -> Iterator[None]:
        """A pass the check added (measuring again after a lazy initialisation, the confirmation,
        the long pass, attribution, naming): a step that fails in it ends that pass and runs no
        more steps. Those steps are ours, not asked for, and a step that cannot run that long (a
        finite iterator) leaves the verdict to the series already taken; the report says which
        pass stopped where and why (:attr:`Report.pass_stopped`). The one place that handles it."""
        try:
            yield
        except (Exception, SystemExit, StepTimeout) as exc:
            self.limit.disarm()
            self.report.pass_stopped = f"the {name} stopped at step {self.report.failed_step}: {describe_failure(exc)}"
            self.done = self.report.failed_step or 0
            self.report.failed_step = None


def decide_series(series: Series, watched: tuple[known.Resource, ...], report: Report) -> dict[str, Any]:
    """Each watched resource's verdict on ``series`` (one cut by the budget grows: its slope is given)."""
    trends = {}
    for resource in watched:
        values = series.series(resource.name)
        if resource.resets:  # the baseline reading covers no step: the trend starts at step 1
            values = values[1:]
        if report.stopped_by_budget == resource.name:
            trends[resource.name] = decide_truncated(values, resource)
        elif len(values) >= MIN_READINGS:
            trends[resource.name] = decide(values, resource)
    return trends


def _growing(trends: dict[str, Any]) -> set[str]:
    return {name for name, trend in trends.items() if known.get(name).judged and trend.verdict == GROWS}


def _creeping(series: Series, watched: tuple[known.Resource, ...], trends: dict[str, Any]) -> list[str]:
    """Noisy series that crept up under their floor, where nothing grows (a run that already
    fails needs no long pass)."""
    if _growing(trends):
        return []
    return [r.name for r in watched if r.judged and r.name in trends and creeps(series.series(r.name), r)]


def _growing_alone(trends: dict[str, Any]) -> list[str]:
    """The growing resources, where every one of them is confirmed through a long pass
    (:attr:`leaklab.resources.Resource.long_growth`); none otherwise."""
    growing = [name for name in trends if name in _growing(trends)]
    return growing if growing and all(known.get(name).long_growth for name in growing) else []


def _long_pass(run: _Run, series: Series, crept: list[str], since: int) -> dict[str, list[int]]:
    """The creeping series continued for :attr:`RunOptions.creep_steps` more steps, reading only
    them (the other resources were decided, and a DataLoader's workers cost milliseconds a
    reading), or until every one of them stalled (:func:`leaklab.verdict.stalled`, counted from
    reading ``since``, as :func:`leaklab.verdict.confirm_creep` counts); returns each one's whole
    series. A step that cannot run that long (a finite iterator) ends the pass
    (:meth:`_Run.added_pass`): it is ours, not asked for, and the creep keeps its verdict under the floor."""
    steps = run.options.creep_steps
    light = Series(tuple(crept), steps + 1)
    last = series.last()
    start = run.probe.sample(crept)
    light.shift = {name: start[name] - last[name] for name in crept}  # go on from where the series stopped
    with run.added_pass("long pass"):
        # In runs of CREEP_WINDOW steps, ended once no series can be called growing any more.
        while light.count < steps and not run.report.stopped_by_budget:
            run.measure(light, min(CREEP_WINDOW, steps - light.count), only=crept)
            if all(stalled(series.series(name)[since:] + light.series(name)) for name in crept):
                break
    run.report.long_pass_steps = light.count
    return {name: series.series(name) + light.series(name) for name in crept}


def _needs_confirmation(trends: dict[str, Any]) -> bool:
    return any(
        known.get(name).judged and (trend.verdict != BOUNDED or trend.margin > CONFIRM_BAR)
        for name, trend in trends.items()
    )


def keep_series(report: Report, series: Series, watched: tuple[known.Resource, ...], trends: dict[str, Any],
          device: str, options: RunOptions, extended: dict[str, list[int]] | None = None) -> None:
    """The series and their verdicts into the report (per resource, with how soon each would run out)."""
    count = series.count
    report.step_seconds = series.seconds[1:count].tolist()
    report.metrics = {key: values[1:count].tolist() for key, values in series.metrics.items()}
    report.garbage = {"objects": series.garbage_objects[1:count].tolist(), "bytes": series.garbage_bytes[1:count].tolist()}
    median_seconds = report.median_step_seconds
    for resource in watched:
        trend = trends.get(resource.name)
        if trend is None:
            continue  # the budget cut the run before this resource had a series to judge
        values = (extended or {}).get(resource.name) or series.series(resource.name)
        result = ResourceResult(resource.name, values, trend, report.before_build.get(resource.name, values[0]))
        total = (options.exhaust_at if options.exhaust_at and resource.unit == "B"
                 else resource.capacity(device) if resource.capacity else None)
        if total is not None:
            result.steps_to_exhaust = trend.steps_to_exhaust(values[-1], total)
            if result.steps_to_exhaust is not None and median_seconds:
                result.hours_to_exhaust = result.steps_to_exhaust * median_seconds / 3600
        report.resources[resource.name] = result


def stop_children(existing: set[int], wait: float = 10.0, grace: float = 2.0, quiet: float = 2.0) -> list[str]:
    """Give child processes the step started up to ``wait`` seconds to exit by themselves (the
    wait ends early once ``quiet`` seconds pass with none exiting: a shut-down worker exits in
    milliseconds, a ``sleep 600`` never); terminate those still running (then kill them after
    ``grace`` seconds). Returns one line for each child that had to be stopped."""
    deadline = time.monotonic() + wait
    quiet_until = time.monotonic() + quiet
    running = None
    while True:
        left = [p for p in live_children() if p.pid not in existing]
        if running is not None and len(left) < running:
            quiet_until = time.monotonic() + quiet
        running = len(left)
        now = time.monotonic()
        if not left or now > deadline or now > quiet_until:
            break
        time.sleep(0.05)
    described = []
    for child in left:
        try:
            described.append(f"pid {child.pid}: {' '.join(child.cmdline())[:80] or child.name()}")
            child.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(left, timeout=grace)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return described


def check(
    step: Step,
    *,
    device: str = "cpu",
    steps: int = 20,
    warmup: int = 5,
    resource: str | tuple[str, ...] | None = None,
    budget: dict[str, int] | None = None,
    attribute: bool = False,
    timeout: float | None = None,
) -> Report:
    """Run ``step`` ``warmup`` times, then ``steps`` times with a reading after each; decide.

    Every measurable resource is watched unless ``resource`` names one or more. Tensors that
    the step created before this call are not counted as CPU tensor memory; only what it
    allocates from now on is. To count everything, pass a factory to :func:`run_factory`.
    """
    resources = (resource,) if isinstance(resource, str) else tuple(resource or ())
    options = RunOptions(steps=steps, warmup=warmup, resources=resources, budget=budget or {}, attribute=attribute,
                         timeout=timeout)
    return run_factory(lambda _device: step, device, options)


# --------------------------------------------------------------------------- scripts
def load_script(path: str | os.PathLike[str]) -> types.ModuleType:
    """Import a script by path as a fresh module (a new copy each call: no state is shared)."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"no such file: {path}")
    name = f"leaklab_script_{path.stem}_{time.monotonic_ns()}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BadInput(f"cannot import {path} as a Python script")
    module = importlib.util.module_from_spec(spec)
    # Registered while it runs so that pickling (spawned workers) and dataclasses can find it.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        sys.modules.pop(name, None)
        raise BadInput(f"importing {path} failed: {describe_failure(exc, 'the script')}") from None
    return module


def forget_script(module: types.ModuleType) -> None:
    """Drop a loaded script. Clearing its namespace breaks the cycle between its functions and
    their globals, so reference counting frees its models and caches at once, without a full
    garbage collection (~0.14 s in a pytest session, once per run)."""
    sys.modules.pop(module.__name__, None)
    module.__dict__.clear()


def parse_target(target: str) -> tuple[str, str]:
    """``path.py:factory`` -> (path, factory); the factory defaults to ``make_step``."""
    path, sep, factory = target.rpartition(":")
    if not sep or not path:
        return target, "make_step"
    if not factory.isidentifier():
        raise BadInput(f"{factory!r} is not a Python name; expected PATH.py:FACTORY")
    return path, factory


def factory_from_script(module: types.ModuleType, factory_name: str) -> Factory:
    factory = getattr(module, factory_name, None)
    if factory is None:
        raise BadInput(f"{module.__file__} has no {factory_name!r}")
    if not callable(factory):
        raise BadInput(f"{factory_name!r} in {module.__file__} is a {type(factory).__name__}, not a callable")
    return factory


def run_script(path: str | os.PathLike[str], factory_name: str = "make_step", device: str = "cpu",
               options: RunOptions | None = None) -> Report:
    """Load a script fresh, run its factory under the check, and drop the module again."""
    module = load_script(path)
    try:
        return run_factory(factory_from_script(module, factory_name), device, options)
    finally:
        forget_script(module)


def run_isolated(path: str | os.PathLike[str], factory_name: str, device: str, options: RunOptions,
                 env: Mapping[str, str] | None = None, timeout: float = 300.0) -> dict[str, Any]:
    """Run a script's check in a fresh Python process (for settings that must precede torch's
    import, such as ``PYTORCH_CUDA_ALLOC_CONF``); returns the report as JSON."""
    command = [
        sys.executable, "-m", "leaklab", "check", f"{path}:{factory_name}", "--device", device,
        "--steps", str(options.steps), "--warmup", str(options.warmup), "--json",
    ]
    if options.resources:
        command += ["--resource", ",".join(options.resources)]
    if options.attribute:
        command.append("--attribute")
    root = str(Path(__file__).resolve().parent.parent)
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, child_env.get("PYTHONPATH")]))
    if options.timeout:
        command += ["--timeout", str(options.timeout)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=child_env)
    if done.returncode not in (0, 1, 3, 4):
        raise RuntimeError(f"isolated run of {path} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)
