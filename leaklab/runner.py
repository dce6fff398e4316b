"""Running steps: build the step, warm it up, take a baseline, then read every resource after
every step, and decide.

A *factory* is a callable ``factory(device) -> step`` where ``step()`` runs one training or
evaluation step. It is how the catalog's scripts and users' own code are both put under the
check. A step may return a mapping of numbers (a loss scale, a gradient norm): those are kept
per step as *metrics*, for symptoms that are not memory.

The run, in order:

1. a reading before the step is built (for the release check), the step built, a reading after;
2. the passes: warm-up, then the measured series, then whatever the policy asks for next
   (:func:`leaklab.verdict.next_pass`: measuring again after a lazy initialisation, the
   confirmation, the long pass) until it gives the verdicts. This module runs each pass and reads
   after every step (garbage collected first); the rule of which pass comes next, and every
   verdict, is in :mod:`leaklab.verdict`. Every pass stops once a resource passes its budget;
3. optionally, a few extra steps with allocation sites recorded (attribution); where Python
   objects, threads, descriptors or file mappings grow, what grows is named from two censuses
   (:mod:`leaklab.growth`) taken around the confirmation pass, or around a few extra steps where
   the growth was not seen before it;
4. the step dropped, garbage collected, and what stayed behind and which child processes are
   still running are reported; those children are terminated.

The step's own failure (an exception, ``sys.exit``, Ctrl-C, a timeout) ends the run and is
reported as such, never as a verdict on memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from leaklab import attribution, growth, holders, signature
from leaklab import resources as known
from leaklab.children import leave_to_process, remove_left_folders, stop_children, temp_folders
from leaklab.measure import Probe, cuda_usable, device_counters, format_exception, live_children, release_free_heap
from leaklab.release import stuck_workers_stopped
from leaklab.report import Report, ResourceResult, median_seconds
from leaklab.series import Series, Step, call_step
from leaklab.timelimit import StepTimeout, TimeLimit
from leaklab.verdict import (
    CONFIRMATION,
    CREEP_WINDOW,
    HORIZON,
    MEASURED,
    MIN_READINGS,
    REMEASURED,
    SETTLE,
    SETTLE_SECONDS,
    STOPPED,
    WARMUP,
    Done,
    Pass,
    Plan,
    Records,
    Verdicts,
    growing,
    next_pass,
)

Factory = Callable[[str], Step]

ATTRIBUTION_STEPS = 5   # steps run after the series with allocation sites recorded
NAMING_STEPS = 5        # steps run between two censuses of what grows (Python objects, threads, fds, mappings)
MAX_STEPS = 100_000     # a series longer than this is a typo, not a leak check
# In a run of several ranks, a collective's work outlives its wait by a moment: the process group's
# worker thread wakes the waiter, then drops the work (and the tensors it holds). On a busy machine
# that thread can lag the reading, at step after step, and one batch's tensors read as late growth
# (gathered_results_kept_on_rank0's fix, 133 B/step, under pytest -n 2 beside two busy processes).
# A reading where an exact counter rose is taken again after this pause; a leak's tensors stay.
REREAD_SECONDS = 0.02


class BadInput(ValueError):
    """The thing to check cannot be run: a missing file, a factory that is not one, bad numbers."""


class StepFailed(Exception):
    """The step itself failed: it raised, exited, was interrupted or ran past its time limit."""


class FactoryFailed(BadInput):
    """The factory raised: bad input (nothing was measured), with its traceback to show above the line."""

    def __init__(self, message: str, traceback: str) -> None:
        super().__init__(message)
        self.traceback = traceback


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM outside the steps (while the script is imported, the step built): its
    message says where. Still a KeyboardInterrupt, so that it stops whatever runs the check."""


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
    strict: bool = False                   # any growth is a leak, a record of plain data too (verdict.records)
    horizon: int = HORIZON                 # steps over which a record of plain data is judged
    progress: Callable[[int, int, dict[str, int], bool], None] | None = None  # (done, of, readings, the pass's last)
    name: str = ""
    ranks: Any = None                      # under torchrun: every rank's steps agreed (a leaklab.distributed.Coordinator)

    @property
    def plan(self) -> Plan:
        """The settings the policy reads (:class:`leaklab.verdict.Plan`)."""
        return Plan(self.steps, self.confirm, self.strict, self.horizon)

    @property
    def confirm_steps(self) -> int:
        return Plan(self.steps).confirm_steps

    @property
    def creep_steps(self) -> int:
        """The long pass that tells a slow leak from a saw-tooth (see :func:`leaklab.verdict.creeps`)."""
        return Plan(self.steps).creep_steps

    def validate(self, device: str) -> str:
        """Check every setting before anything runs; returns the device, checked."""
        _whole("steps", self.steps, 2)
        _whole("warmup", self.warmup, 0)
        if isinstance(self.horizon, bool) or not isinstance(self.horizon, int) or self.horizon < 1:
            raise BadInput(f"horizon must be a whole number of steps, 1 or more, got {self.horizon!r}")
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


_WHERE = {"the step": "during the step", "the factory": "while building the step",
          "the script": "while importing the script"}


def describe_failure(exc: BaseException, who: str = "the step") -> str:
    if isinstance(exc, StepTimeout):
        return f"timed out: {exc}"
    if isinstance(exc, SystemExit):
        return f"exited: {who} called sys.exit({exc.code!r})"
    if isinstance(exc, KeyboardInterrupt):  # the CLI's SIGTERM handler raises it as "signal 15"
        how = "SIGTERM" if str(exc) == f"signal {signal.SIGTERM.value}" else "KeyboardInterrupt (Ctrl-C or SIGINT)"
        return f"interrupted: {how} {_WHERE.get(who, f'in {who}')}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def run_factory(factory: Factory, device: str = "cpu", options: RunOptions | None = None) -> Report:
    """Build a step with ``factory(device)``, run it under the probe, and decide the verdicts."""
    options = options or RunOptions()
    device = options.validate(device)
    children_before = {p.pid for p in live_children()}
    folders_before = temp_folders()
    built: set[int] = set()  # children the factory started (filled once it returned)
    try:
        run = _run(factory, device, options, built)
    finally:
        # Whatever happened (a failure, Ctrl-C), nothing the steps started is left running; what the
        # factory started and outlives the step is the process's (leaklab.children), stopped at its exit.
        children = stop_children(children_before | built, options.child_wait)
        kept = leave_to_process(built - children_before)
        remove_left_folders(folders_before)
    return resemble(run.report(children, kept), options.ranks.world if options.ranks is not None else 1)


def resemble(report: Report, ranks: int = 1) -> Report:
    """The report with its signature and the catalog entries it resembles, where it grows or
    plateaus; ``ranks``: the ranks checked together (under torchrun)."""
    found = signature.signature(report, ranks)
    if found is None:
        return report
    return dataclasses.replace(report, signature=found.to_json(),
                               resembles=[entry.to_json() for entry in signature.resemble(found, device=report.device)])


BASELINE, CONTINUE = "baseline", "continue"


@dataclass
class _Run:
    """One run, in one place: the step and its probe, the settings, the budget, the time limit and
    the clock; the passes run so far and what they found. The report is built from it once, at
    the end (:meth:`report`)."""

    probe: Probe
    options: RunOptions
    limit: TimeLimit
    series: Series
    budget: dict[str, int | None]
    step: Step | None = None
    before: dict[str, int] = field(default_factory=dict)  # read before the step was built
    built: dict[str, int] = field(default_factory=dict)   # read just after: warm-up's first reading
    budget_from: dict[str, int] = field(default_factory=dict)  # where each budget counts from (built, or after a jump)
    done: int = 0                      # steps run so far, warm-up included
    failed_step: int | None = None     # the step running now: the one that failed, if one does
    stage: str | None = None
    over_budget: str | None = None
    stopped_at: int = 0                    # the steps done when the budget stopped the run
    budget_moved: dict[str, str] = field(default_factory=dict)  # resources whose budget counts from after a jump
    stopped_in_warmup: bool = False
    pass_stopped: str | None = None
    restarts: list[str] = field(default_factory=list)
    verdicts: Verdicts | None = None
    counters_start: dict[str, int] = field(default_factory=dict)
    found: dict[str, Any] = field(default_factory=dict)  # what the run found besides the verdicts (Report's fields)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    _phase: str | None = None
    _phase_started: float = 0.0

    def enter(self, phase: str | None, stage: bool = True) -> None:
        """The run moves to ``phase`` (None: the end); the time of the phase it leaves is added to
        :attr:`phase_seconds` (what each pass cost, and the time to a verdict). ``stage``: the
        phase is also where a failure of the step would be reported."""
        now = time.perf_counter()
        if self._phase is not None:
            self.phase_seconds[self._phase] = self.phase_seconds.get(self._phase, 0.0) + now - self._phase_started
        self._phase, self._phase_started = phase, now
        if stage:
            self.stage = phase

    def fail(self, exc: BaseException) -> None:
        """The step's own failure: reported as such, not as a verdict and not as a crash of ours."""
        self.limit.disarm()
        self.found["error"] = describe_failure(exc)
        self.found["traceback"] = format_exception(exc)

    def measure(self, series: Series, count: int, *, only: list[str] | None = None, start: str | None = None,
                quiet: bool = False, pass_steps: tuple[int, int] | None = None) -> None:
        """``count`` more steps, each followed by a reading (of ``only`` these resources, if given).
        ``start``: :data:`BASELINE` takes the series' first reading here first, :data:`CONTINUE` a
        reading from which the series goes on where it stopped. ``pass_steps``: (steps run, steps
        planned) of a pass these steps are a part of, as progress counts them."""
        run_before, planned = pass_steps or (0, count)
        probe, limit, step, ranks = self.probe, self.limit, self.step, self.options.ranks
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
            self.failed_step = self.done
            limit.arm()
            started = time.perf_counter()
            if ranks is None:
                call_step(step, series)
            else:
                ranks.call_step(step, series)  # its failure is raised at the agreement below, on every rank
            if sync:
                torch.cuda.synchronize(probe.device)
            seconds = time.perf_counter() - started
            limit.disarm()
            self.done += 1
            sample = probe.sample(only)
            if ranks is not None and _exact_rose(series, sample):
                sample = _read_again(probe, sample, only)
            series.add(sample, probe, seconds)
            if self.options.progress and not quiet:
                self.options.progress(run_before + i + 1, planned, sample, run_before + i + 1 == planned)
            over = over_budget(series.last(), self.budget_from, self.budget)
            if over and self.jumped(series, over):
                over = None  # one jump, not growth: the budget counts again from after it
            if ranks is not None:  # every rank stops where one does: its step failed, or its budget passed
                over = ranks.agree(series, over)
            if over:
                self.over_budget, self.stopped_at = over, self.done
                break

    def jumped(self, series: Series, name: str) -> bool:
        """A budget passed by one jump (one step rose by half the budget or more, the first such
        for this resource: a model's buffers allocated on a first large input) is a level, not
        growth: the budget counts again from after it, once per resource. A leak passes it again
        and is stopped then, with the readings that show it grow."""
        values, limit = series.values[name], self.budget[name]
        if name in self.budget_moved or series.count < 2 or values[series.count - 1] - values[series.count - 2] < limit / 2:
            return False
        last = series.last()[name]
        self.budget_moved[name] = f"{name} jumped by {known.get(name).format(last - self.budget_from[name])} at step {self.done}"
        self.budget_from = {**self.budget_from, name: last}
        return True

    def steps_allowed(self, count: int) -> int:
        """How many of ``count`` extra steps (attribution's, naming's) the check may run: all of
        them, except after a budget stop, where the resource that passed its budget may grow by one
        more budget at most, at the rate its verdict gives, counting every extra step run since the
        stop (attribution's and naming's together). The biggest leaks still get named."""
        trend = self.verdicts.trends.get(self.over_budget) if self.verdicts and self.over_budget else None
        if trend is None or trend.per_step_bytes <= 0:
            return count
        left = int(self.budget[self.over_budget] // trend.per_step_bytes) - (self.done - self.stopped_at)
        return max(0, min(count, left))

    def too_big(self) -> str:
        return (f"{self.over_budget} passed its budget, and the steps this needs would take it past one more "
                f"budget ({known.get(self.over_budget).format(self.budget[self.over_budget])})")

    def run_steps(self, count: int) -> None:
        """``count`` steps with no reading (attribution's, naming's)."""
        for i in range(count):
            self.failed_step = self.done + i
            self.limit.arm()
            call_step(self.step)
            self.limit.disarm()
        self.done += count
        self.failed_step = None

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
            self.pass_stopped = f"the {name} stopped at step {self.failed_step}: {describe_failure(exc)}"
            self.done = self.failed_step or 0
            self.failed_step = None

    def report(self, children: list[str], kept: list[str]) -> Report:
        """The report of this run, built once, at its end."""
        verdicts, series, options = self.verdicts, self.series, self.options
        per_step: dict[str, Any] = series.per_step() if verdicts else {}
        resources = results(verdicts, self.probe.watched, self.before, self.probe.device, options.exhaust_at,
                            median_seconds(per_step["step_seconds"])) if verdicts else {}
        return Report(
            device=self.probe.device, steps=options.steps, warmup=options.warmup, name=options.name,
            resources=resources, **per_step, **self.found, failed_step=self.failed_step, stage=self.stage,
            stopped_by_budget=self.over_budget, stopped_in_warmup=self.stopped_in_warmup, children=children, kept_children=kept,
            budget_moved=list(self.budget_moved.values()),
            children_left=len(children), restarts=self.restarts, pass_stopped=self.pass_stopped,
            confirmed_steps=verdicts.confirmed_steps if verdicts else 0,
            uncertain=list(verdicts.uncertain) if verdicts else [],
            crept=list(verdicts.long_passed) if verdicts else [],
            long_pass_steps=verdicts.long_pass_steps if verdicts else 0,
            changed={name: [before, after] for name, before, after in verdicts.changed} if verdicts else {},
            records=_records_json(verdicts.records) if verdicts and verdicts.records else None,
            filled={"what": verdicts.filled.what, "steps": verdicts.fill_steps, "resources": list(verdicts.fill_settled)}
            if verdicts and verdicts.filled else None,
            paused={name: [rate, kept] for name, rate, kept in verdicts.paused} if verdicts else {},
            phase_seconds=self.phase_seconds, before_build=self.before, collector_off=self.probe.collector_off)


def _records_json(found: Records) -> dict[str, Any]:
    return {"what": found.what, "bytes_per_step": found.bytes_per_step, "horizon": found.horizon,
            "after_horizon": found.after_horizon, "resources": list(found.resources)}


def _run(factory: Factory, device: str, options: RunOptions, built: set[int]) -> _Run:
    """The run, in the order of the module's docstring: build, the passes (warm-up, measured, and
    those the policy adds), attribution, naming what grows, the release."""
    probe = Probe(device, known.resolve(device, tuple(options.resources)), track_tensors=options.attribute)
    run = _Run(probe, options, TimeLimit(options.timeout, hard=options.hard_timeout),
               Series(probe.resources, max(options.warmup, options.steps + Plan(options.steps).confirm_steps) + 1),
               {r.name: options.budget.get(r.name, r.budget) for r in probe.watched})
    with probe, run.limit:
        run.enter("build", stage=False)
        probe.settle(clear_workspaces=True)
        run.before = probe.sample()
        run.step = _build(factory, device)
        built.update(p.pid for p in live_children())
        run.built = run.budget_from = probe.sample()
        watcher = censuses = None
        try:
            censuses = _passes(run)
            if run.counters_start:
                end = device_counters(device)
                run.found["counters"] = {k: end[k] - run.counters_start.get(k, 0) for k in end}
            if options.attribute and not run.pass_stopped:
                if run.steps_allowed(ATTRIBUTION_STEPS) == ATTRIBUTION_STEPS:
                    watcher = _attribute(run)
                else:
                    run.found["history"] = f"not attributed: {run.too_big()}"
            run.failed_step = None
            run.enter(None)
        except (Exception, SystemExit, KeyboardInterrupt, StepTimeout) as exc:
            run.fail(exc)
            del exc
        run.enter("release", stage=False)
        if watcher is not None:
            run.found["sites"], run.found["history"] = attribution.finish(watcher, probe, run.step)
        if "error" not in run.found:
            try:
                if not run.pass_stopped:  # naming may run a few more steps
                    _name_growth(run, censuses)
                _name_children(run)  # runs no step
            except KeyboardInterrupt as exc:
                run.fail(exc)
                del exc
            run.enter("release", stage=False)
        censuses = None  # they hold the step's containers: they go with the step
        after = _release(run)
    run.found["leftover"] = leftover(probe.watched, run.before, after)
    run.enter(None, stage=False)
    return run


def _build(factory: Factory, device: str) -> Step:
    """The step, built by ``factory(device)``; a factory that fails or returns no callable is bad
    input; Ctrl-C or SIGTERM while it runs is :class:`Interrupted`."""
    if not _takes_a_device(factory):
        name = getattr(factory, "__name__", "the factory")
        raise BadInput(f"{name}() takes no device: the check calls a factory, {name}(device), that builds what the "
                       "step needs and returns the step (def make_step(device): ... return step)")
    release_free_heap()  # the workers it forks then copy only what they share (leaklab.resources.WORKER_RESIDENT)
    try:
        step = factory(device)
    except BadInput:
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C is exit 3 wherever it comes, never bad input
        raise Interrupted(describe_failure(exc, "the factory")) from None
    except (Exception, SystemExit) as exc:
        name = getattr(factory, "__name__", "the factory")
        line = f"{name}({device!r}) failed: {describe_failure(exc, 'the factory')}"
        if isinstance(exc, SystemExit):  # a sys.exit has no traceback worth showing
            raise BadInput(line) from None
        raise FactoryFailed(line, format_exception(exc)) from None
    if not callable(step):
        raise BadInput(f"the factory returned {type(step).__name__}, not a callable that runs one step")
    return step


def _takes_a_device(factory: Factory) -> bool:
    """Whether ``factory`` can be called with the device: a step named where its factory was meant
    (``mytrain.py:step``) cannot, and would fail inside the call with a TypeError of the user's."""
    try:
        inspect.signature(factory).bind("cpu")
    except TypeError:
        return False
    except ValueError:  # a callable without a signature Python can read: let the call tell
        pass
    return True


def _passes(run: _Run) -> _Censuses | None:
    """Warm-up, then each pass the policy asks for (:func:`leaklab.verdict.next_pass`) until it
    gives the verdicts, kept on the run. Returns the censuses taken around the confirmation."""
    probe, series = run.probe, run.series
    plan = run.options.plan
    history = [_warm_up(run)]
    kept: dict[int, dict[str, Any]] = {}  # a measured series, kept when it is measured again
    censuses = None
    decide = next_pass if run.options.ranks is None else run.options.ranks.next_pass  # on every rank's series
    while not isinstance(decision := decide(history, probe.watched, plan), Verdicts):
        run.enter(MEASURED if decision.kind == REMEASURED else decision.kind)
        if decision.kind == REMEASURED:
            kept[len(history) - 1] = series.kept()
            run.restarts.append(f"{decision.why}: measured again after {run.done} steps")
        if decision.kind in (MEASURED, REMEASURED):
            history.append(_measured(run, decision))
        elif decision.kind == CONFIRMATION:
            # The series continued. What the decision itself keeps alive (a few Python objects, a
            # census) must not read as a step of the series: the readings go on from where it
            # stopped. What already grows is named over the confirmation's own steps, between two
            # censuses, instead of over extra steps after the verdict (see _name_growth).
            censuses = _Censuses(growth.kinds(set(decision.growing)), decision.steps)
            censuses.before = censuses.take(run.step, probe)
            start = series.count
            with run.added_pass(decision.kind):
                run.measure(series, decision.steps, start=CONTINUE)
            plain = filling = None
            if run.pass_stopped:
                censuses = None
            elif censuses.before is not None:  # taken before anything of the check's is made
                censuses.after = censuses.take(run.step, probe, first=False)
                if censuses.cover({"objects"}):  # what grew in Python objects: all plain data? all in bounded containers?
                    plain = growth.plain_growth(censuses.before, censuses.after, censuses.steps)
                    filling = growth.filling(censuses.before, censuses.after, censuses.steps)
            done = Done(decision.kind, _readings(series, start), stopped=run.pass_stopped is not None,
                        over_budget=run.over_budget, plain=plain, filling=filling)
            history.append(done)
        elif decision.kind == SETTLE:
            history.append(_settle(run, decision))
        else:
            history.append(_long_pass(run, decision))
    if decision.base in kept:  # a re-measured series too short to judge: the one before it stands
        series.restore(kept[decision.base])
    series.count = decision.readings
    run.verdicts = decision
    return censuses


def _readings(series: Series, start: int = 0) -> dict[str, list[int]]:
    return {name: series.series(name)[start:] for name in series.names}


def _warm_up(run: _Run) -> Done:
    """Warm-up runs through the very loop the measured steps use, read for the budget only, so
    that whatever that loop sets up on its first turns is in place before the baseline."""
    run.enter(WARMUP)
    run.series.count = 0
    run.series.add(run.built, run.probe, 0.0)
    run.measure(run.series, run.options.warmup, quiet=True)
    run.stopped_in_warmup = run.over_budget is not None
    return Done(WARMUP, _readings(run.series), over_budget=run.over_budget)


def _measured(run: _Run, plan: Pass) -> Done:
    """A series from a new baseline, everything alive frozen first. The first one is the steps
    asked for, so a failure in it is the step's own; measured again, it is a pass the check added."""
    series, probe = run.series, run.probe
    series.count = 0
    series.shift = dict.fromkeys(series.names, 0)
    probe.freeze_existing()
    if probe.kind == "cuda":
        run.counters_start = device_counters(probe.device)
    with run.added_pass(plan.kind) if plan.kind == REMEASURED else contextlib.nullcontext():
        run.measure(series, plan.steps, start=BASELINE)
    return Done(plan.kind, _readings(series), stopped=run.pass_stopped is not None, over_budget=run.over_budget)


def _long_pass(run: _Run, plan: Pass) -> Done:
    """The series of ``plan.resources`` alone continued (the others were decided, and a
    DataLoader's workers cost milliseconds a reading), in runs of :data:`CREEP_WINDOW` steps,
    until the pass may stop (:meth:`leaklab.verdict.Pass.may_stop`)."""
    series, names = run.series, list(plan.resources)
    light = Series(plan.resources, plan.steps + 2)
    # Go on from the series' last value as kept, as the confirmation does (CONTINUE): what the
    # check made between the passes (a census kept through the confirmation, the loop's own
    # locals) is taken out, or it would read as a jump where the pass begins.
    for name in names:
        light.values[name][0] = series.values[name][series.count - 1]
    light.count = 1
    with run.added_pass(plan.kind), run.probe.tensors_paused(names) as paused:
        if paused:
            # The first step without the counter frees what the counter made for the step before
            # it (the Python objects of the gradients it saw: 8 blocks in a small training step), a
            # fall of the check's own at the pass's start: that step is run, not read.
            run.run_steps(1)
        # In runs of CREEP_WINDOW steps, ended once no series can be called growing any more.
        while light.count - 1 < plan.steps and not run.over_budget:
            run.measure(light, min(CREEP_WINDOW, plan.steps - light.count + 1), only=names,
                        start=CONTINUE if light.count == 1 else None, pass_steps=(light.count - 1, plan.steps))
            if plan.may_stop({name: series.series(name) + light.series(name)[1:] for name in names}):
                if run.options.progress:  # progress's line for the pass, ended where the pass ends
                    run.options.progress(light.count - 1, plan.steps, light.last(), True)
                break
    return Done(plan.kind, _readings(light, 1), stopped=run.pass_stopped is not None, over_budget=run.over_budget)


def _exact_rose(series: Series, sample: dict[str, int]) -> bool:
    """Whether a counter that moves only by allocation and free (tensors, objects) rose since the
    series' last reading."""
    last = series.last()
    return any(known.get(name).exact and sample[name] > last[name] for name in series.names if name in sample)


def _read_again(probe: Probe, sample: dict[str, int], only: list[str] | None) -> dict[str, int]:
    """``sample`` with each exact counter read again after :data:`REREAD_SECONDS`, the lower of the
    two kept; every other reading, and what the first collection found, stay the first's (a peak
    is reset by a reading, and the step's cyclic garbage was collected by the first)."""
    garbage = probe.garbage
    time.sleep(REREAD_SECONDS)
    again = probe.sample(only)
    probe.garbage = garbage
    return {name: min(value, again[name]) if known.get(name).exact and not known.get(name).resets else value
            for name, value in sample.items()}


def _settle(run: _Run, plan: Pass) -> Done:
    """A settling pass: after a pause of :data:`leaklab.verdict.SETTLE_SECONDS` with no step, each
    series of ``plan.resources`` is read, ``plan.steps`` steps are run (read as a long pass reads),
    and after another pause it is read again (every rank pauses and runs them)."""
    names = list(plan.resources)
    light = Series(plan.resources, plan.steps + 2)
    after: dict[str, int] = {}
    # The tensor counter stays on (the series' rate was read with it), and so does what it sees.
    with run.added_pass(plan.kind):
        time.sleep(SETTLE_SECONDS)
        run.measure(light, plan.steps, only=names, start=BASELINE)
        time.sleep(SETTLE_SECONDS)
        after = run.probe.sample(names) if names else {}
    stopped = run.pass_stopped is not None
    return Done(plan.kind, {} if stopped else {name: [light.series(name)[0], after[name]] for name in names},
                stopped=stopped, over_budget=run.over_budget)


def results(verdicts: Verdicts, watched: tuple[known.Resource, ...], before: dict[str, int], device: str,
            exhaust_at: int | None = None, median_seconds: float | None = None) -> dict[str, ResourceResult]:
    """Each judged series with its verdict, as the report shows it, with how soon it would run out."""
    found = {}
    for resource in watched:
        trend = verdicts.trends.get(resource.name)
        if trend is None:
            continue  # the budget cut the run before this resource had a series to judge
        values = verdicts.series[resource.name]
        result = ResourceResult(resource.name, values, trend, before.get(resource.name, values[0]))
        total = (exhaust_at if exhaust_at and resource.unit == "B"
                 else resource.capacity(device) if resource.capacity else None)
        if total is not None and len(values) > MIN_READINGS:  # no forecast from a couple of steps
            result.steps_to_exhaust = trend.steps_to_exhaust(values[-1], total)
            if result.steps_to_exhaust is not None and median_seconds:
                result.hours_to_exhaust = result.steps_to_exhaust * median_seconds / 3600
        found[resource.name] = result
    return found


def _attribute(run: _Run) -> attribution.Watcher:
    """A few extra steps with allocation sites recorded, after the measured series: recording
    allocation stacks costs host memory (the allocator's history lives on the host), which must
    not show in the verdicts it explains."""
    probe, options = run.probe, run.options
    run.enter("attribution")
    watcher = attribution.start(probe, run.step, options.snapshot, snapshot_overwrite=options.snapshot_overwrite,
                                snapshot_html=options.snapshot_html)
    with run.added_pass("attribution"):
        for i in range(ATTRIBUTION_STEPS):
            if probe.tensors is not None:
                probe.tensors.step = i + 1  # which attribution step allocated each storage
            run.run_steps(1)
    return watcher


def _release(run: _Run) -> dict[str, int]:
    """The step dropped and its memory read again (after a full collection where anything seems to
    have stayed); returns that reading."""
    probe = run.probe
    with stuck_workers_stopped():
        run.step = None
        probe.settle(clear_workspaces=True)
        after = probe.sample()
        if leftover(probe.watched, run.before, after):
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
            return growth.take(self.what, step, first=first, collect=probe.collect)
        except Exception:  # noqa: BLE001 - a user object that cannot be measured leaves the growth unnamed
            return None

    def cover(self, what: set[str]) -> bool:
        return self.after is not None and self.before is not None and what <= self.what


def _name_growth(run: _Run, censuses: _Censuses | None = None) -> None:
    """Where Python objects, tensors, threads, descriptors or mappings grow, name what grows from
    two censuses: those taken around the confirmation pass where they cover what grows (no step
    is added), or else a census, a few extra steps, a census again, after attribution so that
    attribution watches the steps right after the series. A step that fails in those extra steps
    leaves the growth unnamed (they are ours), and the verdict stands."""
    step, probe = run.step, run.probe
    # What grows, and what a budget stopped (it rose past its budget: named, though not judged).
    rose = {name for name, trend in run.verdicts.trends.items() if trend.verdict == STOPPED} if run.verdicts else set()
    what = growth.kinds(set(growing(run.verdicts.trends, probe.watched)) | rose) if run.verdicts else set()
    if not what:
        return
    run.enter("naming")
    if (censuses is None or not censuses.cover(what)) and run.options.ranks is not None:
        run.enter(None)  # extra steps on the ranks that grow alone would wait on the others' collectives
        return
    if censuses is None or not censuses.cover(what):
        steps = run.steps_allowed(NAMING_STEPS)
        if steps < 2:  # a census needs two steps to tell what gains an item a step
            run.found["holder_missing"] = f"not looked for: {run.too_big()}"
            run.enter(None)
            return
        censuses = _Censuses(what, steps)
        censuses.before = censuses.take(step, probe)
        try:
            run.run_steps(steps)
        except (Exception, SystemExit, StepTimeout):
            run.limit.disarm()
            run.failed_step = None
            run.enter(None)
            return
        censuses.after = censuses.take(step, probe, first=False)
    if censuses.cover(what):
        run.found["growth"] = growth.growth(censuses.before, censuses.after, censuses.steps, what)
        if "objects" in what:
            run.found["gaining"] = growth.gaining(censuses.before, censuses.after, censuses.steps)
        run.found["holder"], run.found["holder_missing"] = holders.fields(
            holders.name_holder(censuses.before, censuses.after, censuses.steps, step, ignore=probe.kept_garbage()))
        if "objects" in what and run.found.get("history") is None:
            run.found["history"] = attribution.autograd_history(censuses.after.graphs, censuses.before.graphs,
                                                                censuses.steps)
    run.enter(None)


def _name_children(run: _Run) -> None:
    """Where memory of child processes grows: what owns those processes (a DataLoader's iterator
    and its workers, a Manager's server, a Pool), so that a loader's workers are told from the
    step's own processes. Where the verdict is about the children (the headline, as
    :attr:`leaklab.report.Report.resource` picks it), their owners are the holder, before what a
    census of this process named beside them (torch's cache of the storages its workers sent,
    gaining a weak reference a batch); elsewhere, only where nothing else was named."""
    if run.verdicts is None:
        return
    grown = [known.get(name) for name in growing(run.verdicts.trends, run.probe.watched)]
    if not any(resource.holder == "workers" for resource in grown):
        return
    about_children = min(grown, key=lambda resource: resource.rank).holder == "workers"
    if run.found.get("holder") is not None and not about_children:
        return
    pids = [child.pid for child in live_children()]
    if pids:
        run.enter("naming")
        chain = holders.children_holder(pids, run.step)
        if chain.found or run.found.get("holder") is None:
            run.found["holder"], run.found["holder_missing"] = holders.fields(chain)
        run.enter(None)


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


def options_for(*, resource: str | tuple[str, ...] | None = None, budget: dict[str, int] | None = None,
                **settings: Any) -> RunOptions:
    """:class:`RunOptions` from the keyword settings that :func:`check` and the ``leak_check``
    fixture take (``resource`` one name or several, the rest as RunOptions names them); a name it
    does not know is a TypeError, as a misspelled keyword is."""
    resources = (resource,) if isinstance(resource, str) else tuple(resource or ())
    return RunOptions(resources=resources, budget=budget or {}, **settings)


def check(
    step: Step,
    *,
    device: str = "cpu",
    steps: int = RunOptions.steps,
    warmup: int = RunOptions.warmup,
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
    options = options_for(steps=steps, warmup=warmup, resource=resource, budget=budget, attribute=attribute,
                          timeout=timeout)
    return run_factory(lambda _device: step, device, options)
