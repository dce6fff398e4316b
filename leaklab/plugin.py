"""leaklab's pytest plugin for your own tests: the ``leak_check`` fixture.

    def test_my_step_does_not_leak(leak_check):
        leak_check.bounded(make_step("cpu"))          # fails with one line, curve in the report

``leak_check.grows(step)`` asserts the opposite, to keep a reproduction honest. The plugin adds
nothing else to a project that does not use it: torch is imported only when a check runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from leaklab.report import Report

# Every report a check made in this session, for whoever keeps them (the lab's results file).
REPORTS = pytest.StashKey[list]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[REPORTS] = []


class LeakCheck:
    """What the ``leak_check`` fixture gives a test."""

    def __init__(self, item: pytest.Item, reports: list[Report], attribute: bool = False) -> None:
        self._item = item
        self._reports = reports
        self._attribute = attribute

    def run(self, step: Callable[[], Any] | None = None, *, factory: Callable[[str], Any] | None = None,
            device: str = "cpu", steps: int = 20, warmup: int = 5, resource: str | tuple[str, ...] | None = None,
            budget: dict[str, int] | None = None, attribute: bool | None = None, name: str = "") -> Report:
        """Run a step (or a factory) under the check and return the report; asserts nothing."""
        from leaklab.runner import RunOptions, run_factory

        if (step is None) == (factory is None):
            raise TypeError("pass either a step or factory=")
        resources = (resource,) if isinstance(resource, str) else tuple(resource or ())
        options = RunOptions(steps=steps, warmup=warmup, resources=resources, budget=budget or {},
                             attribute=self._attribute if attribute is None else attribute,
                             name=name or self._item.name)
        report = run_factory(factory or (lambda _device: step), device, options)
        self._reports.append(report)
        show(self._item, report)
        return report

    def bounded(self, step: Callable[[], Any] | None = None, **kwargs: Any) -> Report:
        """Fail the test unless no watched resource grows or plateaus."""
        report = self.run(step, **kwargs)
        if report.verdict != "bounded":
            pytest.fail(f"expected bounded memory: {report.summary()}", pytrace=False)
        return report

    def grows(self, step: Callable[[], Any] | None = None, **kwargs: Any) -> Report:
        """Fail the test unless some watched resource grows (keeps reproductions honest)."""
        report = self.run(step, **kwargs)
        if report.verdict != "grows":
            pytest.fail(f"expected growth: {report.summary()}", pytrace=False)
        return report


def show(item: pytest.Item, report: Report) -> None:
    """The report's one line and its per-step curve, as a section of the test's report."""
    body = report.curve() if report.error is None else (report.traceback or report.error)
    item.add_report_section("call", f"leaklab {report.name}", f"{report.summary()}\n{body}")


@pytest.fixture
def leak_check(request: pytest.FixtureRequest) -> LeakCheck:
    """Run steps under the leak check: ``leak_check.bounded(step)``, ``leak_check.grows(step)``."""
    return LeakCheck(request.node, request.config.stash[REPORTS])
