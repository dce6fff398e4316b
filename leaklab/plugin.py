"""The pytest plugin: a ``leak_check`` fixture, the ``cuda`` markers, a results file and the lab table.

    def test_my_step_does_not_leak(leak_check):
        leak_check.bounded(make_step("cpu"))          # fails with one line, curve in the report

``leak_check.grows(step)`` asserts the opposite, to keep a reproduction honest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from leaklab import marks
from leaklab.cases import Case, case_row, format_table, mismatches, run_case
from leaklab.report import Report
from leaklab.results import entry, environment, write_results
from leaklab.runner import RunOptions, run_factory
from leaklab.verdict import BOUNDED, GROWS

_STATE = pytest.StashKey["LabState"]()


@dataclass
class LabState:
    """Everything the session measured, for the results file and the closing table."""

    reports: dict[tuple[str, str, str, str], Report] = field(default_factory=dict)  # (slug, role, device, script)
    cases: dict[str, Case] = field(default_factory=dict)
    loose: list[Report] = field(default_factory=list)   # users' own checks
    benchmarks: dict[str, Any] = field(default_factory=dict)  # timing summaries (empty_cache, overheads)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leaklab", "leak checks")
    group.addoption("--leaklab-results", metavar="PATH", default=None,
                    help="write every leak-check run's verdicts and figures to this JSON file")
    group.addoption("--leaklab-attribute", action="store_true", default=False,
                    help="attribute every case's leak to a source line (slower)")


def pytest_configure(config: pytest.Config) -> None:
    for line in marks.MARKERS.values():
        config.addinivalue_line("markers", line)
    config.stash[_STATE] = LabState()


def pytest_runtest_setup(item: pytest.Item) -> None:
    reason = marks.skip_reason(item)
    if reason:
        pytest.skip(reason)


class LeakCheck:
    """What the ``leak_check`` fixture gives a test."""

    def __init__(self, item: pytest.Item, state: LabState, attribute: bool) -> None:
        self._item = item
        self._state = state
        self._attribute = attribute

    def run(self, step: Callable[[], Any] | None = None, *, factory: Callable[[str], Any] | None = None,
            device: str = "cpu", steps: int = 20, warmup: int = 5, resource: str | tuple[str, ...] | None = None,
            budget: dict[str, int] | None = None, attribute: bool | None = None, name: str = "") -> Report:
        """Run a step (or a factory) under the check and return the report; asserts nothing."""
        if (step is None) == (factory is None):
            raise TypeError("pass either a step or factory=")
        resources = (resource,) if isinstance(resource, str) else tuple(resource or ())
        options = RunOptions(steps=steps, warmup=warmup, resources=resources, budget=budget or {},
                             attribute=self._attribute if attribute is None else attribute,
                             name=name or self._item.name)
        report = run_factory(factory or (lambda _device: step), device, options)
        self._state.loose.append(report)
        self._show(report)
        return report

    def bounded(self, step: Callable[[], Any] | None = None, **kwargs: Any) -> Report:
        """Fail the test unless no watched resource grows or plateaus."""
        report = self.run(step, **kwargs)
        if report.verdict != BOUNDED:
            pytest.fail(f"expected bounded memory: {report.summary()}", pytrace=False)
        return report

    def grows(self, step: Callable[[], Any] | None = None, **kwargs: Any) -> Report:
        """Fail the test unless some watched resource grows (keeps reproductions honest)."""
        report = self.run(step, **kwargs)
        if report.verdict != GROWS:
            pytest.fail(f"expected growth: {report.summary()}", pytrace=False)
        return report

    # ----------------------------------------------------------------- catalog cases
    def case_report(self, case: Case, role: str, device: str, script: Path | None = None) -> Report:
        """Run one script of a case, once per session (later calls reuse the report)."""
        script = script or case.scripts(role)[0]
        key = (case.slug, role, device, script.stem)
        if key not in self._state.reports:
            attribute = self._attribute or (role == "leak" and case.meta.get("attribute", False))
            self._state.reports[key] = run_case(case, role, device, script, attribute=attribute)
            self._state.cases[case.slug] = case
        return self._state.reports[key]

    def expect(self, report: Report, expectation: dict[str, Any], fix_report: Report | None = None) -> None:
        """Fail with one line if ``report`` does not match ``expectation``."""
        self._show(report)
        problems = mismatches(report, expectation, fix_report)
        if problems:
            pytest.fail(f"{report.name}: {'; '.join(problems)}", pytrace=False)

    def _show(self, report: Report) -> None:
        body = report.curve() if report.error is None else (report.traceback or report.error)
        self._item.add_report_section("call", f"leaklab {report.name}", f"{report.summary()}\n{body}")


@pytest.fixture
def leak_check(request: pytest.FixtureRequest) -> LeakCheck:
    """Run steps under the leak check: ``leak_check.bounded(step)``, ``leak_check.grows(step)``."""
    state = request.config.stash[_STATE]
    return LeakCheck(request.node, state, request.config.getoption("--leaklab-attribute"))


@pytest.fixture
def leaklab_record(request: pytest.FixtureRequest) -> Callable[[str, Any], None]:
    """Keep a benchmark's figures (e.g. the empty_cache ratios) for the results file."""
    state = request.config.stash[_STATE]

    def record(name: str, data: Any) -> None:
        state.benchmarks[name] = data

    return record


# --------------------------------------------------------------------------- session end
def lab_rows(state: LabState) -> list[dict[str, str]]:
    """One row per case and device: what the lab teaches, read off this session's runs."""
    rows = []
    for (slug, role, device, _script), report in sorted(state.reports.items()):
        if role == "leak":
            fixes = [r for (s, ro, d, _), r in sorted(state.reports.items()) if s == slug and ro == "fix" and d == device]
            rows.append(case_row(state.cases[slug], report, fixes))
    return rows


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    rows = lab_rows(state)
    if rows:
        terminalreporter.write_sep("=", "leaklab: what each case did here")
        terminalreporter.write_line(format_table(rows))
    path = config.getoption("--leaklab-results")
    if path and (state.reports or state.loose or state.benchmarks):
        terminalreporter.write_line(f"leaklab results written to {path}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(_STATE, None)
    path = session.config.getoption("--leaklab-results")
    if state is None or not path or not (state.reports or state.loose or state.benchmarks):
        return
    entries = [entry(report, case=slug, role=role, script=script)
               for (slug, role, _device, script), report in state.reports.items()]
    entries += [entry(report) for report in state.loose]
    devices = {e["device"] for e in entries}
    write_results(path, entries, "cuda" if "cuda" in devices or state.benchmarks else "cpu",
                  note="written by pytest --leaklab-results", benchmarks=state.benchmarks)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """pytest-benchmark's machine_info gains the GPU, driver, CUDA and torch versions."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    machine_info["leaklab"] = environment(device)
