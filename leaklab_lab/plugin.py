"""The lab's pytest plugin (loaded by this repository's conftest.py, never by an install): the
suite's ``cuda``/``multi_gpu``/``needs_ipython`` markers, the ``lab`` fixture that runs the
catalog's cases once per session, the results file and the closing table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from leaklab.plugin import REPORTS, show
from leaklab.report import Report
from leaklab_lab import marks
from leaklab_lab.cases import Case, case_row, format_table, mismatches, run_case
from leaklab_lab.results import entry, environment, write_results

_STATE = pytest.StashKey["LabState"]()


@dataclass
class LabState:
    """Everything the session measured, for the results file and the closing table."""

    reports: dict[tuple[str, str, str, str], Report] = field(default_factory=dict)  # (slug, role, device, script)
    cases: dict[str, Case] = field(default_factory=dict)
    benchmarks: dict[str, Any] = field(default_factory=dict)  # timing summaries (empty_cache, overheads)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leaklab-lab", "the leaklab lab (this repository's suite)")
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


class LabCheck:
    """What the ``lab`` fixture gives a test: the catalog's cases, run once per session."""

    def __init__(self, item: pytest.Item, state: LabState, attribute: bool) -> None:
        self._item = item
        self._state = state
        self._attribute = attribute

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
        show(self._item, report)
        problems = mismatches(report, expectation, fix_report)
        if problems:
            pytest.fail(f"{report.name}: {'; '.join(problems)}", pytrace=False)


@pytest.fixture
def lab(request: pytest.FixtureRequest) -> LabCheck:
    """The catalog's cases: ``lab.case_report(case, role, device)``, ``lab.expect(report, ...)``."""
    return LabCheck(request.node, request.config.stash[_STATE], request.config.getoption("--leaklab-attribute"))


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
    if path and (state.reports or config.stash.get(REPORTS, []) or state.benchmarks):
        terminalreporter.write_line(f"leaklab results written to {path}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(_STATE, None)
    path = session.config.getoption("--leaklab-results")
    loose = session.config.stash.get(REPORTS, [])
    if state is None or not path or not (state.reports or loose or state.benchmarks):
        return
    entries = [entry(report, case=slug, role=role, script=script)
               for (slug, role, _device, script), report in state.reports.items()]
    entries += [entry(report) for report in loose]
    devices = {e["device"] for e in entries}
    write_results(path, entries, "cuda" if "cuda" in devices or state.benchmarks else "cpu",
                  note="written by pytest --leaklab-results", benchmarks=state.benchmarks)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """pytest-benchmark's machine_info gains the GPU, driver, CUDA and torch versions."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    machine_info["leaklab"] = environment(device)
