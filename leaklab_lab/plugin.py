"""The lab's pytest plugin (loaded by this repository's conftest.py, never by an install): the
suite's ``cuda``/``multi_gpu``/``needs_ipython`` markers, the ``lab`` fixture that runs the
catalog's cases once per session, the results file and the closing table.

``--leaklab-results`` is checked when pytest starts (a path that cannot be written is a usage
error: nothing runs) and written atomically at the end. Under pytest-xdist (``-n N``) each
worker hands its part (every report, skip and benchmark) to the controller when it finishes;
the controller merges them, writes the one file and prints the one table."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from leaklab.files import UnwritablePath, check_writable
from leaklab.plugin import REPORTS, show
from leaklab.report import Report, report_from_json
from leaklab_lab import marks
from leaklab_lab.cases import (
    Case,
    Started,
    case_row,
    format_table,
    isolated,
    load_case,
    mismatches,
    run_name,
    start_case,
)
from leaklab_lab.figures import costliest_first
from leaklab_lab.pool import cores
from leaklab_lab.results import entry, environment, write_results

_STATE = pytest.StashKey["LabState"]()


@dataclass
class LabState:
    """Everything the session measured, for the results file and the closing table."""

    reports: dict[tuple[str, str, str, str], Report] = field(default_factory=dict)  # (slug, role, device, script)
    cases: dict[str, Case] = field(default_factory=dict)
    benchmarks: dict[str, Any] = field(default_factory=dict)  # timing summaries (empty_cache, overheads)
    skipped: dict[str, str] = field(default_factory=dict)  # run key (device/name) -> why it did not run here
    write_error: str | None = None  # the results file could not be written (the old one is unchanged)
    lost_workers: list[str] = field(default_factory=list)  # xdist workers that died before handing their part
    selected: set[tuple[str, str, str, str]] = field(default_factory=set)  # the runs this session's tests ask for
    started: dict[tuple[str, str, str, str], Started] = field(default_factory=dict)  # fresh processes not waited for yet


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leaklab-lab", "the leaklab lab (this repository's suite)")
    group.addoption("--leaklab-results", metavar="PATH", default=None,
                    help="write every leak-check run's verdicts and figures to this JSON file")
    group.addoption("--leaklab-attribute", action="store_true", default=False,
                    help="attribute every case's leak to a source line (slower)")


def is_worker(config: pytest.Config) -> bool:
    """This process is a pytest-xdist worker (the controller writes the file and the table)."""
    return hasattr(config, "workerinput")


def worker_device(config: pytest.Config, device: str) -> str:
    """The one place that chooses the device a run of ``device`` uses in this pytest process.
    Today every process (controller or xdist worker ``gwN``) uses the session's device as asked.
    With several GPUs this is where worker N will take ``cuda:N`` (one worker per GPU)."""
    return device


@pytest.hookimpl
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n N``), the tests of one case on one device go to one worker
    (``--dist loadgroup``, unless a ``--dist`` was asked for): its leak, fix and attribution tests
    then share one run of each script, as they do in a serial session, instead of each worker
    running it again (the costliest case ran twice, on two workers, under ``-n 4``)."""
    asked = any(str(arg).startswith(("--dist", "-d")) for arg in config.invocation_params.args)
    if getattr(config.option, "dist", "no") == "load" and not asked:
        config.option.dist = "loadgroup"
        # The groups go out in the order collected, costliest first (see pytest_collection_modifyitems), not
        # xdist's (the groups with the most tests first).
        config.option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's workers parse the command line afresh (plain ``load``): tell them of the groups."""
    node.workerinput["leaklab_loadgroup"] = node.config.option.dist == "loadgroup"


def case_marks(case: Case, device: str) -> list[pytest.MarkDecorator]:
    """The marks of a test of ``case`` on ``device``: its markers and its xdist group."""
    return [getattr(pytest.mark, name) for name in case.markers(device)] + [
        pytest.mark.xdist_group(f"{case.slug}-{device}")]


def pytest_configure(config: pytest.Config) -> None:
    for line in marks.MARKERS.values():
        config.addinivalue_line("markers", line)
    if is_worker(config):
        # Each worker gets its share of the cores for torch's thread pool: pools as wide as the
        # machine in every worker made the suite twice as slow under -n 2 as without it (their
        # threads wait for work by spinning).
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        torch.set_num_threads(max(1, cores() // max(1, workers)))
    if getattr(config, "workerinput", {}).get("leaklab_loadgroup"):
        config.option.loadgroup = True  # read by xdist's worker when it names the tests' groups
    if not config.pluginmanager.hasplugin("xdist"):
        config.addinivalue_line("markers", "xdist_group(name): pytest-xdist's grouping, inert without it")
    config.stash[_STATE] = LabState()
    path = config.getoption("--leaklab-results")
    if path and not is_worker(config):
        try:
            check_writable(path)
        except UnwritablePath as exc:  # now, not after the whole run
            raise pytest.UsageError(f"--leaklab-results: {exc}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real-model corpus runs only where its marker is asked for by name (``-m models``,
    ``-m "models and cuda"``): ``-m cuda``, the GPU suite, replaces the default ``-m`` and would
    otherwise take in the corpus's realistic CUDA steps (minutes, and library crashes of their own)."""
    if getattr(config, "workerinput", {}).get("leaklab_loadgroup"):
        # The costliest groups go out first (xdist's loadgroup, reorder off: see pytest_cmdline_main):
        # the longest started last on the H200. Every worker sorts the same collection the same way.
        items[:] = costliest_first(items, _case_of)
    if "models" in (config.getoption("markexpr", "") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("models") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("models")])
        items[:] = kept


def pytest_collection_finish(session: pytest.Session) -> None:
    """The case runs this session's tests ask for (their parameters), so that a case's scripts
    started side by side are only ever ones a test will wait for."""
    state = session.config.stash.get(_STATE, None)
    for item in session.items if state is not None else ():
        params = getattr(getattr(item, "callspec", None), "params", {})
        case, script = params.get("case"), params.get("script")
        if isinstance(case, Case) and params.get("role") and params.get("device"):
            state.selected.add((case.slug, params["role"], params["device"], (script or case.scripts(params["role"])[0]).stem))


def _case_of(item: pytest.Item) -> tuple[str, str] | None:
    """(device, slug) of a case's test, from its xdist group (as :func:`case_marks` names it, ``<slug>-<device>``; slugs have no
    hyphen), or None for any other test."""
    group = item.get_closest_marker("xdist_group")
    if not group or not group.args:
        return None
    slug, _, device = str(group.args[0]).rpartition("-")
    return device, slug


def pytest_runtest_setup(item: pytest.Item) -> None:
    reason = marks.skip_reason(item)
    if reason:
        params = getattr(item, "callspec", None)
        params = params.params if params else {}
        case = params.get("case")
        if isinstance(case, Case) and params.get("role") and params.get("device"):
            # a case run skipped for a stated reason: the results file says so, and compare accepts it
            key = f"{params['device']}/{run_name(case, params['role'], params.get('script'))}"
            item.config.stash[_STATE].skipped[key] = reason
        pytest.skip(reason)


class LabCheck:
    """What the ``lab`` fixture gives a test: the catalog's cases, run once per session."""

    def __init__(self, item: pytest.Item, state: LabState, attribute: bool) -> None:
        self._item = item
        self._config = item.config
        self._state = state
        self._attribute = attribute

    def case_report(self, case: Case, role: str, device: str, script: Path | None = None) -> Report:
        """Run one script of a case, once per session (later calls reuse the report)."""
        script = script or case.scripts(role)[0]
        key = (case.slug, role, device, script.stem)
        if key not in self._state.reports:
            started = self._state.started.pop(key, None) or self._start(case, role, device, script)
            self._start_beside(case, device, key)
            self._state.reports[key] = started.report()
            self._state.cases[case.slug] = case
        return self._state.reports[key]

    def _start(self, case: Case, role: str, device: str, script: Path) -> Started:
        attribute = self._attribute or (role == "leak" and case.meta.get("attribute", False))
        return start_case(case, role, worker_device(self._config, device), script, attribute=attribute)

    def _start_beside(self, case: Case, device: str, asked: tuple[str, str, str, str]) -> None:
        """The case's other scripts that run in fresh processes, and that this session's tests will
        ask for, start now beside the one asked for, where this worker has a core for each (the
        cuDNN case's fix ran 12.5 s after its 41 s leak on the H200, on the suite's critical path)."""
        beside = {(case.slug, role, device, script.stem): (role, script) for role in ("leak", "fix")
                  for script in case.scripts(role) if isolated(case, script)}
        beside = {key: run for key, run in beside.items() if key in self._state.selected and key not in self._state.reports}
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        if len(beside) < 2 or cores() // workers < len(beside) * case.nproc:
            return
        for key, (role, script) in beside.items():
            if key != asked and key not in self._state.started:
                self._state.started[key] = self._start(case, role, device, script)

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
    if state is None or is_worker(config):
        return
    rows = lab_rows(state)
    if rows:
        terminalreporter.write_sep("=", "leaklab: what each case did here")
        terminalreporter.write_line(format_table(rows))
    path = config.getoption("--leaklab-results")
    for worker in state.lost_workers:
        terminalreporter.write_line(f"leaklab: {worker} died before handing over its runs; they are not in {path}",
                                    red=True)
    if state.write_error:
        terminalreporter.write_line(f"leaklab results NOT written to {path}: {state.write_error}", red=True)
    elif path and _has_results(state, config):
        terminalreporter.write_line(f"leaklab results written to {path}")


def _has_results(state: LabState, config: pytest.Config) -> bool:
    return bool(state.reports or config.stash.get(REPORTS, []) or state.benchmarks or state.skipped)


# --------------------------------------------------------------------------- xdist
def worker_part(state: LabState, loose: list[Report]) -> dict[str, Any]:
    """What a worker hands the controller: its reports (whole, so the controller's table and file
    are the ones a serial run makes), skips and benchmarks; plain JSON for execnet."""
    return {
        "reports": [[slug, role, device, script, str(state.cases[slug].toml), report.to_json()]
                    for (slug, role, device, script), report in state.reports.items()],
        "loose": [report.to_json() for report in loose],
        "skipped": state.skipped,
        "benchmarks": state.benchmarks,
    }


def merge_part(state: LabState, loose: list[Report], part: dict[str, Any]) -> None:
    """Fold one worker's part into the controller's state (a run two workers both made, such as a
    leak run that its fix's test also needs, is kept once)."""
    for slug, role, device, script, toml, data in part["reports"]:
        key = (slug, role, device, script)
        if key not in state.reports:
            state.reports[key] = report_from_json(data)
            state.cases.setdefault(slug, load_case(Path(toml)))
    known = {(r.device, r.name) for r in loose}
    loose.extend(report for report in map(report_from_json, part["loose"]) if (report.device, report.name) not in known)
    state.skipped.update(part["skipped"])
    state.benchmarks.update(part["benchmarks"])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: a worker finished; take its part."""
    part = (getattr(node, "workeroutput", None) or {}).get("leaklab_lab")
    state = node.config.stash.get(_STATE, None)
    if state is None or not node.config.getoption("--leaklab-results"):
        return
    if part:
        merge_part(state, node.config.stash.setdefault(REPORTS, []), json.loads(part))
    else:  # the worker died: say so (compare will list its runs as missing)
        state.lost_workers.append(getattr(getattr(node, "gateway", None), "id", "a worker"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = config.stash.get(_STATE, None)
    path = config.getoption("--leaklab-results")
    loose = config.stash.get(REPORTS, [])
    if state is None:
        return
    for started in state.started.values():  # started beside another run, never asked for (a test failed first)
        started.stop()
    state.started.clear()
    if is_worker(config):
        if path:
            # one JSON string: execnet carries only plain types (the torch version is a str subclass)
            config.workeroutput["leaklab_lab"] = json.dumps(worker_part(state, loose))
        return
    if not path or not _has_results(state, config):
        return
    entries = [entry(report, case=slug, role=role, script=script)
               for (slug, role, _device, script), report in state.reports.items()]
    entries += [entry(report) for report in loose]
    devices = {e["device"] for e in entries}
    try:
        write_results(path, entries, "cuda" if "cuda" in devices or state.benchmarks else "cpu",
                      note="written by pytest --leaklab-results", benchmarks=state.benchmarks, skipped=state.skipped)
    except (OSError, UnwritablePath) as exc:  # disk full, a size limit: the old file stays whole
        state.write_error = f"{getattr(exc, 'strerror', None) or exc}; the file that was there is unchanged"
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """pytest-benchmark's machine_info gains the GPU, driver, CUDA and torch versions."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    machine_info["leaklab"] = environment(device)
