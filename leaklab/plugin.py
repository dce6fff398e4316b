"""leaklab's pytest plugin for your own tests: the ``leaklab`` marker, ``--leaklab`` and the
``leak_check`` fixture.

Check an existing test as it is: the marker (or ``pytest --leaklab`` for every selected test)
re-runs the test's body in-process, ``warmup`` times and then ``steps`` times with every watched
resource sampled after each repeat, and fails the test with one line when memory grows::

    @pytest.mark.leaklab(steps=20, warmup=5, device="cpu", resource=None)
    def test_training_step(model, batch):
        train_step(model, batch)

Settings come from the marker, then the command line (``--leaklab-steps`` ...), then the ini
file (``leaklab_steps`` ...), then the defaults, as one record per test (:class:`Settings`).
``expect="grows"`` keeps a reproduction honest; ``leaklab(enabled=False)`` opts a test out of
``--leaklab``.

Fixtures are set up once, before the first repeat, and shared by every repeat (as pytest-leaks
does): the repeats are calls of the test function with the same arguments, so what a fixture's
object accumulates across repeats counts as growth, and a fixture's teardown runs once, after
the check. A test that cannot be repeated (it fails or skips on the first call) fails or skips
as it would without leaklab; one that fails on a later repeat (it consumed a one-shot resource,
it asserts on state the previous repeat changed) fails with ``step N raised ...``: a step
failure, not a leak verdict. Tests that use the ``leak_check`` fixture are checks already and
are not repeated by ``--leaklab``.

Fixture for a step you build yourself::

    def test_my_step_does_not_leak(leak_check):
        leak_check.bounded(make_step("cpu"))          # fails with one line, curve in the report

``leak_check.grows(step)`` asserts the opposite, to keep a reproduction honest. The plugin adds
nothing else to a project that does not use it: one namespaced marker, no skips, and torch is
imported only when a check runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from leaklab.report import Report

# Every report a check made in this session, for whoever keeps them (the lab's results file).
REPORTS = pytest.StashKey[list]()


MARKER = ("leaklab(steps=20, warmup=5, device='cpu', resource=None, expect='bounded', strict=False, enabled=True): "
          "re-run this test's body under leaklab's leak check and fail when memory grows")


@dataclass(frozen=True)
class Settings:
    """One test's leak-check settings: marker > command line > ini > these defaults."""

    enabled: bool = False
    steps: int = 20
    warmup: int = 5
    device: str = "cpu"
    resource: tuple[str, ...] = ()
    expect: str = "bounded"
    strict: bool = False  # any growth is a leak, a record of plain data (a loss history of floats) too


def _resource_tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(name.strip() for name in value.split(",") if name.strip())
    return tuple(value)


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


# each setting: how a marker keyword, a command-line value or an ini string is read; its option/ini name
_PARSE = {"enabled": _bool, "steps": int, "warmup": int, "device": str, "resource": _resource_tuple, "expect": str,
          "strict": _bool}
_OPTION = {"enabled": "leaklab", "steps": "leaklab_steps", "warmup": "leaklab_warmup", "device": "leaklab_device",
           "resource": "leaklab_resource", "strict": "leaklab_strict"}
_EXPECTS = ("bounded", "grows")

SETTINGS = pytest.StashKey[Settings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leaklab", "leaklab: re-run tests under the leak check")
    group.addoption("--leaklab", action="store_true", default=None,
                    help="re-run every selected test under the leak check (ini: leaklab = true)")
    group.addoption("--leaklab-steps", type=int, default=None, metavar="N",
                    help="measured repeats per checked test (default 20; ini: leaklab_steps)")
    group.addoption("--leaklab-warmup", type=int, default=None, metavar="N",
                    help="repeats before the baseline (default 5; ini: leaklab_warmup)")
    group.addoption("--leaklab-device", default=None, metavar="DEVICE",
                    help="cpu or cuda: which resources are watched (default cpu; ini: leaklab_device)")
    group.addoption("--leaklab-resource", default=None, metavar="NAMES",
                    help="comma-separated resources to watch (default: all; ini: leaklab_resource)")
    group.addoption("--leaklab-strict", action="store_true", default=None,
                    help="any growth is a leak, a record of plain data too (ini: leaklab_strict = true)")
    parser.addini("leaklab", "re-run every test under the leak check", type="bool", default=False)
    parser.addini("leaklab_strict", "any growth is a leak, a record of plain data too", type="bool", default=False)
    parser.addini("leaklab_steps", "measured repeats per checked test", default="20")
    parser.addini("leaklab_warmup", "repeats before the baseline", default="5")
    parser.addini("leaklab_device", "cpu or cuda: which resources are watched", default="cpu")
    parser.addini("leaklab_resource", "comma-separated resources to watch (empty: all)", default="")


def _launched() -> bool:
    """Whether this session is one rank of a torchrun job (:func:`leaklab.distributed.launched`,
    read here without importing torch)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def pytest_configure(config: pytest.Config) -> None:
    config.stash[REPORTS] = []
    if _launched():  # before a test module makes its process group (torch is imported under torchrun only)
        from leaklab.distributed import quiet_flight_recorder

        quiet_flight_recorder()
    config.addinivalue_line("markers", MARKER)
    # the session's settings: command line over ini over defaults (markers come per test)
    values = {}
    for name, option in _OPTION.items():
        value = config.getoption(option, default=None)
        if value is None:
            value = config.getini(option)
        values[name] = _PARSE[name](value)
    config.stash[SETTINGS] = Settings(**values)


def settings_for(item: pytest.Item) -> Settings:
    """The test's settings: its ``leaklab`` marker's keywords over the session's. The marker
    alone (without ``enabled=False``) turns the check on."""
    session = item.config.stash.get(SETTINGS, Settings())
    marker = item.get_closest_marker("leaklab")
    if marker is None:
        return session
    if marker.args:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.leaklab takes keywords only, got {marker.args!r}")
    known = {f.name for f in fields(Settings)}
    unknown = sorted(set(marker.kwargs) - known)
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.leaklab got unknown keyword(s) {unknown}; "
                                f"known: {sorted(known)}")
    values = {name: _PARSE[name](value) for name, value in marker.kwargs.items()}
    values.setdefault("enabled", True)
    return replace(session, **values)


_REPEATING = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Under the check, call the test function (through whichever plugin calls it) repeatedly."""
    if pyfuncitem.stash.get(_REPEATING, False):
        return None  # a repeat: let the next implementation (pytest's own, asyncio's...) call it
    settings = settings_for(pyfuncitem)
    if not settings.enabled or (pyfuncitem.get_closest_marker("leaklab") is None
                                and "leak_check" in getattr(pyfuncitem, "fixturenames", ())):
        return None
    repeat_test(pyfuncitem, settings)
    return True


def repeat_test(item: pytest.Function, settings: Settings) -> Report:
    """Run the test's body ``warmup + steps`` times under the check; fail with one line."""
    __tracebackhide__ = True
    from leaklab.runner import BadInput, RunOptions, run_factory

    if settings.expect not in _EXPECTS:
        raise pytest.UsageError(f"{item.nodeid}: leaklab expect={settings.expect!r}; expected one of {_EXPECTS}")
    first_failure: list[BaseException] = []
    calls = 0

    def step() -> None:
        __tracebackhide__ = True
        nonlocal calls
        calls += 1
        item.stash[_REPEATING] = True
        try:
            item.ihook.pytest_pyfunc_call(pyfuncitem=item)
        except Exception as exc:
            if calls == 1:
                first_failure.append(exc)
            raise
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # pytest.skip/fail/xfail: outcomes, not Exceptions
            if calls == 1:
                first_failure.append(exc)
            raise _Outcome(f"{type(exc).__name__}: {exc}") from exc
        finally:
            item.stash[_REPEATING] = False

    options = RunOptions(steps=settings.steps, warmup=settings.warmup, resources=settings.resource, name=item.name,
                         strict=settings.strict)
    merged = None
    try:
        if _launched():  # under torchrun: every rank checked together, one answer (leaklab.ranks)
            from leaklab.distributed import check_every_rank
            from leaklab.ranks import merged_verdict

            report, every, answer = check_every_rank(lambda _device: step, settings.device, options)
            merged = (merged_verdict(every), f"{report.name}: {answer}")
        else:
            report = run_factory(lambda _device: step, settings.device, options)
    except BadInput as exc:
        pytest.fail(f"leaklab: {exc}", pytrace=False)
    if first_failure:
        raise first_failure[0]  # the test fails (or skips) on its own, as it would without leaklab
    if report.error is not None and report.error.startswith("interrupted:"):
        raise KeyboardInterrupt  # Ctrl-C stops the session, as it would without leaklab
    item.config.stash[REPORTS].append(report)
    show(item, report)
    if report.error is not None:
        line = " ".join(report.summary().split())  # one line, even for a multi-line assertion message
        pytest.fail(f"leaklab: the test cannot be repeated (a step failure, not a leak): {line}", pytrace=False)
    if merged is not None and merged[0] != settings.expect:
        pytest.fail(f"{merged[0]}, expected {settings.expect}: {merged[1]}", pytrace=False)
    if report.verdict != settings.expect:
        pytest.fail(failure_line(report, settings.expect), pytrace=False)
    return report


def failure_line(report: Report, expected: str) -> str:
    """A check's failure, verdict first, so that pytest's short summary (which cuts a line at the
    terminal's width) still says what happened: ``grows, expected bounded: <summary>``. The
    ``leak_check`` fixture and the ``leaklab`` marker fail with the same line."""
    return f"{report.verdict}, expected {expected}: {report.summary()}"


class _Outcome(Exception):
    """A pytest outcome (skip, fail, xfail) raised by a repeat, carried through the check."""


class LeakCheck:
    """What the ``leak_check`` fixture gives a test."""

    def __init__(self, item: pytest.Item, reports: list[Report], attribute: bool = False) -> None:
        self._item = item
        self._reports = reports
        self._attribute = attribute
        self._merged: tuple[str, str] | None = None  # under torchrun: every rank's verdict and the one answer

    def run(self, step: Callable[[], Any] | None = None, *, factory: Callable[[str], Any] | None = None,
            device: str = "cpu", **settings: Any) -> Report:
        """Run a step (or a factory) under the check and return the report; asserts nothing.
        ``settings``: as :func:`leaklab.check` takes them (``steps``, ``warmup``, ``resource``,
        ``budget``, ``attribute``, ``timeout``) and ``name``."""
        from leaklab.runner import options_for, run_factory

        if (step is None) == (factory is None):
            raise TypeError("pass either a step or factory=")
        if settings.get("attribute") is None:
            settings["attribute"] = self._attribute
        settings["name"] = settings.get("name") or self._item.name
        options = options_for(**settings)
        if _launched():  # under torchrun: every rank checked together, one answer (leaklab.ranks)
            from leaklab.distributed import check_every_rank
            from leaklab.ranks import merged_verdict

            report, every, answer = check_every_rank(factory or (lambda _device: step), device, options)
            self._merged = (merged_verdict(every), f"{report.name}: {answer}")
        else:
            report = run_factory(factory or (lambda _device: step), device, options)
            self._merged = None
        self._reports.append(report)
        show(self._item, report)
        return report

    def _expect(self, report: Report, expected: str) -> Report:
        """Fail the test unless the verdict (every rank's, under torchrun) is ``expected``."""
        verdict, line = self._merged or (report.verdict, report.summary())
        if verdict != expected:
            pytest.fail(f"{verdict}, expected {expected}: {line}", pytrace=False)
        return report

    def bounded(self, step: Callable[[], Any] | None = None, **kwargs: Any) -> Report:
        """Fail the test unless no watched resource grows or plateaus."""
        return self._expect(self.run(step, **kwargs), "bounded")

    def grows(self, step: Callable[[], Any] | None = None, **kwargs: Any) -> Report:
        """Fail the test unless some watched resource grows (keeps reproductions honest)."""
        return self._expect(self.run(step, **kwargs), "grows")


def show(item: pytest.Item, report: Report) -> None:
    """The report's one line and its per-step curve, as a section of the test's report."""
    body = report.curve() if report.error is None else (report.traceback or report.error)
    item.add_report_section("call", f"leaklab {report.name}", f"{report.summary()}\n{body}")


@pytest.fixture
def leak_check(request: pytest.FixtureRequest) -> LeakCheck:
    """Run steps under the leak check: ``leak_check.bounded(step)``, ``leak_check.grows(step)``."""
    return LeakCheck(request.node, request.config.stash[REPORTS])
