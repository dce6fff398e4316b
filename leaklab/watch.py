"""Watching a loop you cannot restructure into a step factory.

    with leaklab.watch(device="cuda", warmup=5) as w:
        for batch in loader:
            train(batch)
            w.step()
    print(w.report.summary())

The loop is the step: the first ``warmup`` calls of :meth:`Watch.step` end warm-up steps, the
baseline is taken after them, and every later call takes one sample of every watched resource.
At the end of the block the same :class:`~leaklab.report.Report` as :func:`leaklab.check` gives
(verdict, summary, curve) is decided by the runner's own code, and kept as ``w.report``.

What differs from :func:`leaklab.check`, because the loop is not ours to run:

- Nothing is dropped at the end (the loop's objects are still yours), so the release check
  (``leftover``) compares the end with the start of the block, after a garbage collection:
  memory that your loop still holds on purpose shows there.
- A resource that passes its budget stops the *sampling* (``stopped_by_budget``), not your loop.
- No confirmation pass and no re-measuring after a lazy initialisation (both need more steps
  than the series), and child processes the loop started are counted, never stopped.
- ``steps`` caps how many steps are sampled (default 200; the verdict's slope costs time
  quadratic in the samples): later calls of :meth:`Watch.step` are counted but not sampled.
- No attribution (it needs extra steps run after the series).
- An exception in the block is recorded as a ``raises`` report (the step that raised and the
  traceback) and then propagates: the watch never swallows it.

Under ``torchrun`` every rank watches its own loop, and at the end of the block the ranks' reports
are gathered (:func:`leaklab.distributed.Coordinator`): ``w.answer`` is the one answer for every
rank (:func:`leaklab.ranks.answer`: ``grows on rank 1 of 2 (rank 0 bounded): ...``), the same on
each, and ``w.reports`` every rank's report as JSON; ``w.report`` stays this rank's. The ranks
meet at the end of the block, so every rank must reach it (a rank whose loop raised meets the
others once theirs end, or their collectives time out).

torch and the runner are imported when the block starts, not with ``leaklab``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leaklab.measure import Probe
    from leaklab.report import Report
    from leaklab.runner import RunOptions


class Watch:
    """The object ``with leaklab.watch(...) as w`` gives: call :meth:`step` after each step."""

    def __init__(self, device: str = "cpu", *, warmup: int = 5, steps: int = 200,
                 resource: str | tuple[str, ...] | None = None, budget: dict[str, int] | None = None,
                 name: str = "") -> None:
        from leaklab.runner import RunOptions

        resources = (resource,) if isinstance(resource, str) else tuple(resource or ())
        self.device = device
        self.options: RunOptions = RunOptions(steps=steps, warmup=warmup, resources=resources,
                                              budget=budget or {}, name=name)
        self.report: Report | None = None
        self.answer: str | None = None        # under torchrun: the one answer for every rank
        self.reports: list[dict[str, Any]] = []  # under torchrun: every rank's report, in rank order
        self._ranks: Any = None
        self._probe: Probe | None = None
        self._calls = 0

    # ------------------------------------------------------------------ the block
    def __enter__(self) -> Watch:
        from leaklab import distributed
        from leaklab.measure import Probe, live_children, release_free_heap
        from leaklab.resources import resolve
        from leaklab.series import Series

        if distributed.launched():  # the groups come before the first reading: their threads and sockets are the baseline's
            self.device = distributed.rank_device(self.device)
        self.device = self.options.validate(self.device)
        if distributed.launched():
            distributed.quiet_flight_recorder()
            self._ranks = distributed.Coordinator.start(self.device)
        self._children_before = {p.pid for p in live_children()}
        release_free_heap()  # as a check does before its factory: workers forked in the block copy only what they share
        probe = Probe(self.device, resolve(self.device, tuple(self.options.resources)))
        self._budget = {r.name: self.options.budget.get(r.name, r.budget) for r in probe.watched}
        self._series = Series(probe.resources, self.options.steps + 1)
        self._counters_start: dict[str, int] = {}
        self._stopped_by_budget: str | None = None
        probe.__enter__()
        self._probe = probe
        probe.settle(clear_workspaces=True)
        self._before = probe.sample()
        if self.options.warmup == 0:
            self._baseline()
        self._last = time.perf_counter()
        return self

    def step(self, result: Mapping[str, Any] | None = None) -> None:
        """One step of the loop is done. ``result``: numbers to keep per step as metrics (a loss
        scale, a gradient norm), as a check's step may return."""
        from leaklab.runner import over_budget
        from leaklab.series import call_step

        if self._probe is None:
            raise RuntimeError("w.step() outside the `with leaklab.watch(...)` block")
        self._calls += 1
        measured = self._calls - self.options.warmup
        if measured == 0:
            self._baseline()
            return
        if measured < 0 or measured > self.options.steps or self._stopped_by_budget:
            return
        if self._probe.kind == "cuda":
            import torch

            torch.cuda.synchronize(self._probe.device)
        seconds = time.perf_counter() - self._last
        if result is not None:
            call_step(lambda: result, self._series)  # the runner's reading of a step's numbers
        sample = self._probe.sample()
        self._series.add(sample, self._probe, seconds)
        self._stopped_by_budget = over_budget(self._series.last(), self._before, self._budget)
        if self.options.progress:
            self.options.progress(measured, self.options.steps, sample, measured == self.options.steps)
        self._last = time.perf_counter()

    def _baseline(self) -> None:
        from leaklab.measure import device_counters

        self._probe.freeze_existing()
        self._series.count = 0
        self._series.add(self._probe.sample(), self._probe, 0.0)
        if self._probe.kind == "cuda":
            self._counters_start = device_counters(self.device)
        self._last = time.perf_counter()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        from leaklab.measure import device_counters, format_exception, live_children
        from leaklab.report import Report, median_seconds
        from leaklab.runner import BadInput, describe_failure, leftover, resemble, results
        from leaklab.verdict import Verdicts, judge

        probe, self._probe = self._probe, None
        series = self._series
        found: dict[str, Any] = {}
        if exc is not None:
            found.update(error=describe_failure(exc), traceback=format_exception(exc),
                         failed_step=self._calls)  # the step that had not called w.step() yet
        if self._counters_start:
            end = device_counters(self.device)
            found["counters"] = {k: end[k] - self._counters_start.get(k, 0) for k in end}
        too_short = exc is None and series.count < 3
        try:
            if exc is None and not too_short:
                readings = {name: series.series(name) for name in series.names}
                verdicts = Verdicts(judge(readings, probe.watched, self._stopped_by_budget), readings, 0, series.count)
                found.update(series.per_step())
                found["resources"] = results(verdicts, probe.watched, self._before, self.device,
                                             self.options.exhaust_at, median_seconds(found["step_seconds"]))
                if any(r.kind.judged and r.verdict in ("grows", "plateau", "stopped") for r in found["resources"].values()):
                    # what holds it, while the collector lists only what came since
                    from leaklab import growth, holders

                    after = growth.take({"objects"}, first=False, collect=probe.collect)
                    chain = holders.name_holder(growth.Census(), after, max(1, series.count - 1),
                                                ignore=probe.kept_garbage())
                    found["holder"], found["holder_missing"] = holders.fields(chain)
            probe.settle(clear_workspaces=True)
            found["leftover"] = leftover(probe.watched, self._before, probe.sample())
        finally:
            probe.__exit__(None, None, None)
        # The loop's children (persistent DataLoader workers) may still be in use: counted, never stopped.
        children_left = len([p for p in live_children() if p.pid not in self._children_before])
        report = resemble(Report(device=self.device, steps=max(0, series.count - 1), warmup=self.options.warmup,
                                 name=self.options.name, before_build=self._before,
                                 stopped_by_budget=self._stopped_by_budget, children_left=children_left,
                                 collector_off=probe.collector_off, **found),
                          self._ranks.world if self._ranks is not None else 1)
        self.report = report
        if self._ranks is not None:
            from leaklab import ranks

            report.labels = {**report.labels, "rank": self._ranks.rank, "world_size": self._ranks.world}
            self.reports = self._ranks.gather(report.to_json())
            self.answer = f"{report.name + ': ' if report.name else ''}{ranks.answer(self.reports)}"
            self._ranks.close()
        if too_short and exc is None:
            raise BadInput(f"the block called w.step() {self._calls} time(s): a verdict needs the "
                           f"{self.options.warmup} warm-up steps and at least 2 measured ones")
        return False  # an exception from the block propagates


def watch(device: str = "cpu", *, warmup: int = 5, steps: int = 200, resource: str | tuple[str, ...] | None = None,
          budget: dict[str, int] | None = None, name: str = "") -> Watch:
    """A context manager that watches the loop inside it; call ``w.step()`` after every step.
    ``w.report`` (the same report as :func:`leaklab.check`) is there after the block."""
    return Watch(device, warmup=warmup, steps=steps, resource=resource, budget=budget, name=name)
