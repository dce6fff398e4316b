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
- ``steps`` caps how many steps are sampled (default 200; the verdict's slope costs time
  quadratic in the samples): later calls of :meth:`Watch.step` are counted but not sampled.
- No attribution (it needs extra steps run after the series).
- An exception in the block is recorded as a ``raises`` report (the step that raised and the
  traceback) and then propagates: the watch never swallows it.

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
        self._probe: Probe | None = None
        self._calls = 0
        self._samples: list[dict[str, int]] = []
        self._before: dict[str, int] = {}
        self._counters_start: dict[str, int] = {}
        self._metrics: dict[str, list[float]] = {}
        self._step_seconds: list[float] = []
        self._last = 0.0
        self._stopped_by_budget: str | None = None
        self._children_before: set[int] = set()

    # ------------------------------------------------------------------ the block
    def __enter__(self) -> Watch:
        from leaklab.measure import Probe, live_children
        from leaklab.runner import DEFAULT_BUDGET

        self.options.validate(self.device)
        self._budget = {**DEFAULT_BUDGET, **self.options.budget}
        self._children_before = {p.pid for p in live_children()}
        self._probe = Probe(self.device, self.options.resources)
        self._probe.__enter__()
        self._probe.settle(clear_workspaces=True)
        self._before = self._probe.sample()
        if self.options.warmup == 0:
            self._baseline()
        self._last = time.perf_counter()
        return self

    def step(self, result: Mapping[str, Any] | None = None) -> None:
        """One step of the loop is done. ``result``: numbers to keep per step as metrics (a loss
        scale, a gradient norm), as a check's step may return."""
        from leaklab.runner import _call_step

        if self._probe is None:
            raise RuntimeError("w.step() outside the `with leaklab.watch(...)` block")
        self._calls += 1
        measured = self._calls - self.options.warmup
        if measured == 0:
            self._baseline()
            return
        if measured < 0 or measured > self.options.steps or self._stopped_by_budget:
            return
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        self._step_seconds.append(time.perf_counter() - self._last)
        if result is not None:
            _call_step(lambda: result, self._metrics)  # the runner's reading of a step's metrics
        sample = self._probe.sample()
        self._samples.append(sample)
        over = [r for r, v in sample.items() if v - self._samples[0][r] > self._budget.get(r, float("inf"))]
        if over:
            self._stopped_by_budget = over[0]
        if self.options.progress:
            self.options.progress(measured, self.options.steps, sample)
        self._last = time.perf_counter()

    def _baseline(self) -> None:
        from leaklab.measure import device_counters

        self._probe.settle()
        self._samples.append(self._probe.sample())
        if self.device.startswith("cuda"):
            self._counters_start = device_counters()
        self._last = time.perf_counter()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        from leaklab.measure import device_counters, format_exception
        from leaklab.report import Report
        from leaklab.runner import BadInput, _decide_all, _wait_for_children

        measured = max(0, len(self._samples) - 1)
        report = Report(device=self.device, steps=measured, warmup=self.options.warmup, name=self.options.name)
        report.metrics = self._metrics
        report.step_seconds = self._step_seconds
        report.stopped_by_budget = self._stopped_by_budget
        if exc is not None and isinstance(exc, Exception):
            report.error = f"{type(exc).__name__}: {exc}"
            report.traceback = format_exception(exc)
            report.failed_step = self._calls  # the step that had not called w.step() yet
        if self._counters_start:
            end = device_counters()
            report.counters = {k: end[k] - self._counters_start.get(k, 0) for k in end}
        probe, self._probe = self._probe, None
        try:
            probe.settle(clear_workspaces=True)
            after = probe.sample()
        finally:
            probe.__exit__(None, None, None)
        too_short = report.error is None and len(self._samples) < 3
        if report.error is None and not too_short:
            self.options.steps = measured
            _decide_all(report, self._samples, self._before, after, self._budget, self.options, self.device)
        report.children_left = _wait_for_children(self._children_before, self.options.child_wait)
        self.report = report
        if too_short and exc is None:
            raise BadInput(f"the block called w.step() {self._calls} time(s): a verdict needs the "
                           f"{self.options.warmup} warm-up steps and at least 2 measured ones")
        return False  # an exception from the block propagates


def watch(device: str = "cpu", *, warmup: int = 5, steps: int = 200, resource: str | tuple[str, ...] | None = None,
          budget: dict[str, int] | None = None, name: str = "") -> Watch:
    """A context manager that watches the loop inside it; call ``w.step()`` after every step.
    ``w.report`` (the same report as :func:`leaklab.check`) is there after the block."""
    return Watch(device, warmup=warmup, steps=steps, resource=resource, budget=budget, name=name)
