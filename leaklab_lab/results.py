"""Results files: every run's verdicts and figures, the torch version and the device, in one JSON.

``leaklab compare OLD NEW`` reads two of them (say, before and after a torch upgrade) and says
what changed; it fails when a fix started leaking or a leak stopped reproducing.
"""

from __future__ import annotations

import json
import platform
import socket
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from leaklab import resources as known
from leaklab.files import atomic_write, check_writable
from leaklab.report import Report, device_name, report_from_json
from leaklab.verdict import BOUNDED, GROWS, PLATEAU, RAISES, format_bytes
from leaklab_lab.cases import raised

FORMAT = 1  # a run is Report.to_json() with the lab's labels; see entry()


def environment(device: str) -> dict[str, Any]:
    info = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "device_name": device_name(device),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cuda": torch.version.cuda,
    }
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info["total_memory"] = props.total_memory
        info["driver"] = cuda_driver_version()
    return info


def cuda_driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py, where installed

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - no NVML here: the driver stays unknown
        return None


def entry(report: Report, **labels: Any) -> dict[str, Any]:
    """A run as a results file keeps it: all of the report (read back, it is the same report)
    with the lab's labels (case, role, script)."""
    report.labels.update(labels)
    return report.to_json()


def write_results(path: str | Path, entries: list[dict[str, Any]], device: str, note: str = "",
                  benchmarks: dict[str, Any] | None = None, skipped: dict[str, str] | None = None) -> None:
    """Write one results file, atomically: a write that fails half-way (disk full, a file size
    limit) leaves the file that was there as it was. ``entries`` come from :func:`entry`; each has
    a unique ``name``. ``skipped`` maps a run's key (``<device>/<name>``) to why it did not run
    here (no GPU, no IPython), so that ``compare`` can tell a skipped run from a lost one."""
    document = {
        "format": FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "note": note,
        "environment": environment(device),
        "runs": {f"{e['device']}/{e['name']}": e for e in sorted(entries, key=lambda e: (e["device"], e["name"]))},
        "skipped": dict(sorted((skipped or {}).items())),
        "benchmarks": benchmarks or {},
    }
    check_writable(path)
    atomic_write(path, json.dumps(document, indent=1, sort_keys=False) + "\n")


class ResultsError(ValueError):
    """A results file that cannot be read or is not one this leaklab writes; one line, naming it."""


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _run_problem(key: str, run: Any) -> str | None:
    """What is wrong with one run of a results file, or None."""
    if not isinstance(run, dict):
        return f"run {key!r} is {_kind(run)}, not an object"
    for field, check, wanted in (
        ("verdict", lambda v: isinstance(v, str) and v, "a verdict string"),
        ("name", lambda v: isinstance(v, str), "a string"),
        ("device", lambda v: isinstance(v, str), "a string"),
        ("per_step_bytes", _is_number, "a number"),
        ("resources", lambda v: isinstance(v, dict), "an object"),
    ):
        if field not in run:
            return f"run {key!r} has no {field!r}"
        if not check(run[field]):
            return f"run {key!r}: {field} is {_kind(run[field])}, expected {wanted}"
    for field, check, wanted in (
        ("resource", lambda v: v is None or isinstance(v, str), "a string or null"),
        ("median_step_seconds", lambda v: v is None or _is_number(v), "a number or null"),
        ("step_seconds", lambda v: isinstance(v, list) and all(map(_is_number, v)), "a list of numbers"),
        ("case", lambda v: isinstance(v, str), "a string"),
        ("role", lambda v: isinstance(v, str), "a string"),
        ("script", lambda v: isinstance(v, str), "a string"),
    ):
        if field in run and not check(run[field]):
            return f"run {key!r}: {field} is {_kind(run[field])}, expected {wanted}"
    for name, result in run["resources"].items():
        if not isinstance(result, dict):
            return f"run {key!r}: resource {name!r} is {_kind(result)}, not an object"
        if not isinstance(result.get("verdict"), str):
            return f"run {key!r}: resource {name!r} has no verdict string"
        for field in ("per_step_bytes", "floor_bytes"):
            if field in result and not _is_number(result[field]):
                return f"run {key!r}: {name}.{field} is {_kind(result[field])}, expected a number"
        if "per_step_bytes" not in result:
            return f"run {key!r}: resource {name!r} has no 'per_step_bytes'"
    return None


def document_problem(document: Any) -> str | None:
    """What makes ``document`` not a results file this leaklab reads (format ``FORMAT``), or None."""
    if not isinstance(document, dict):
        return f"holds {_kind(document)}, not a results object"
    if "format" not in document:
        return "has no 'format': not a leaklab results file"
    if document["format"] != FORMAT:
        return f"is results format {document['format']!r}; this leaklab reads format {FORMAT}"
    environment = document.get("environment")
    if not isinstance(environment, dict):
        return "has no 'environment' object" if environment is None else f"'environment' is {_kind(environment)}"
    for field in ("torch", "device", "device_name"):
        if not isinstance(environment.get(field), str):
            return f"environment.{field} is {_kind(environment.get(field))}, expected a string"
    runs = document.get("runs")
    if not isinstance(runs, dict):
        return "has no 'runs' object" if runs is None else f"'runs' is {_kind(runs)}, expected an object keyed by run"
    skipped = document.get("skipped", {})
    if not isinstance(skipped, dict) or not all(isinstance(v, str) for v in skipped.values()):
        return "'skipped' must map runs to the reason they did not run"
    for key, run in runs.items():
        problem = _run_problem(key, run)
        if problem:
            return problem
    return None


def load_results(path: str | Path, need_runs: bool = False) -> dict[str, Any]:
    """Read and check one results file; :class:`ResultsError` (one line, naming the file) if it is
    missing, unreadable, not JSON, from another format or malformed. ``need_runs``: a file with
    no runs (a bench file) is refused too."""
    path = Path(path)
    if path.is_dir():
        raise ResultsError(f"{path} is a folder, not a results file")
    if not path.exists():
        raise ResultsError(f"no results file at {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ResultsError(f"{path} is not text (not UTF-8): not a leaklab results file") from None
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not text.strip():
        raise ResultsError(f"{path} is empty")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path} is not valid JSON (truncated?): {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    problem = document_problem(document)
    if problem:
        raise ResultsError(f"{path} {problem}" if problem.startswith(("is ", "has ", "holds ")) else f"{path}: {problem}")
    if need_runs and not document["runs"]:
        raise ResultsError(f"{path} has no runs to compare (a bench file, or an empty run?)")
    document["runs"] = {key: _report(path, key, run) for key, run in document["runs"].items()}
    return document


def _report(path: Path, key: str, run: dict[str, Any]) -> Report:
    """One run of a results file as the :class:`Report` it was written from."""
    try:
        report = report_from_json(run)
    except KeyError as exc:
        raise ResultsError(f"{path}: run {key!r} has no {exc.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ResultsError(f"{path}: run {key!r} cannot be read as a run: {exc}") from None
    if report.verdict != run["verdict"]:  # edited by hand, or written by another rule
        raise ResultsError(f"{path}: run {key!r} says verdict {run['verdict']!r}, its resources say {report.verdict!r}")
    return report


def case_of(run: Report) -> str | None:
    return run.labels.get("case")


def role_of(run: Report) -> str | None:
    return run.labels.get("role")


def case_runs(document: dict[str, Any], slug: str) -> list[Report]:
    """A case's runs in a results document: the leak first, then its fixes, by name."""
    runs = [run for run in document["runs"].values() if case_of(run) == slug]
    return sorted(runs, key=lambda run: (role_of(run) != "leak", run.name))


# --------------------------------------------------------------------------- compare
@dataclass
class Change:
    run: str
    what: str
    old: str
    new: str
    regression: bool


def _role(run_name: str) -> str:
    parts = run_name.split("/", 1)[-1].split(":")
    return parts[1] if len(parts) > 1 else ""


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 4], ordered[n // 2], ordered[(3 * n) // 4]


def time_ratio(document: dict[str, Any], key: str) -> tuple[float, float, float] | None:
    """A run's step time against its case's fix in the same file and on the same device (the
    fix is the reference: a slower machine slows both): the ratio of the medians, and its spread
    (the run's lower quartile over the fix's upper one, and the other way round). None for the
    reference itself, a run of no case, or too few step times."""
    run = document["runs"][key]
    slug = case_of(run)
    if not slug:
        return None
    fixes = [(k, r) for k, r in sorted(document["runs"].items())
             if case_of(r) == slug and role_of(r) == "fix" and r.device == run.device]
    if not fixes or fixes[0][0] == key:
        return None
    run_times, fix_times = run.step_seconds, fixes[0][1].step_seconds
    if len(run_times) < 4 or len(fix_times) < 4 or min(fix_times) <= 0:
        return None
    (r1, r2, r3), (f1, f2, f3) = _quartiles(run_times), _quartiles(fix_times)
    return r2 / f2, r1 / f3, r3 / f1


def _outcome(run: Report) -> str:
    """A run's verdict, or raises where the step raised, also in a pass the check added after the
    steps asked for (gradscaler_new_optimizer's leak raises when CPython reuses a freed optimizer's
    address, in the series or after it): a case's expectations read it so (:func:`cases.raised`)."""
    return RAISES if raised(run) is not None else run.verdict


def compare(old: dict[str, Any], new: dict[str, Any], tolerance: float = 0.25) -> list[Change]:
    """What changed between two results documents.

    A regression (the compare fails) is a fix that now grows (or plateaus) where it was bounded,
    a leak that no longer reproduces (it was growing, now it is bounded), a run that now raises
    where it did not or the other way round, and a run that is missing from ``new`` without a
    stated reason (``new``'s ``skipped``: no GPU, no IPython). Bytes per step moving by more
    than ``tolerance`` (relative) is reported, and so is a step time that moved, as a ratio to
    the case's fix within each file, beyond that ratio's spread; neither fails the compare.
    """
    if tolerance < 0:
        raise ValueError(f"tolerance must be 0 or more, not {tolerance}")
    changes: list[Change] = []
    old_runs, new_runs = old["runs"], new["runs"]
    skipped = new.get("skipped", {})
    for name in sorted(set(old_runs) | set(new_runs)):
        if name not in new_runs:
            if name in skipped:
                changes.append(Change(name, "skipped", old_runs[name].verdict, f"skipped: {skipped[name]}", False))
            else:
                changes.append(Change(name, "run missing", old_runs[name].verdict, "missing (no reason)", True))
            continue
        if name not in old_runs:
            changes.append(Change(name, "new run", "missing", new_runs[name].verdict, False))
            continue
        before, after = old_runs[name], new_runs[name]
        role = _role(name)
        was, now = _outcome(before), _outcome(after)
        if was != now:
            regression = (
                (role == "fix" and was == BOUNDED and now in (GROWS, PLATEAU))
                or (role == "leak" and was in (GROWS, PLATEAU) and now == BOUNDED)
                or now == RAISES and was != RAISES
                or was == RAISES and now != RAISES
            )
            # A verdict the confirmation pass changed in either run could flip: it is reported as
            # uncertain, not as a regression.
            unsure = sorted(set(before.uncertain) | set(after.uncertain))
            what = f"verdict (uncertain: {', '.join(unsure)})" if regression and unsure else "verdict"
            changes.append(Change(name, what, was, now, regression and not unsure))
        for resource, result in after.resources.items():
            previous = before.resources.get(resource)
            if previous is None:
                continue
            if previous.verdict != result.verdict and resource != after.resource:
                changes.append(Change(name, f"{resource} verdict", previous.verdict, result.verdict, False))
            a, b = previous.per_step_bytes, result.per_step_bytes
            floor = result.trend.floor_bytes
            scale = max(abs(a), abs(b), floor)
            if scale and abs(b - a) > tolerance * scale and max(abs(a), abs(b)) > floor:
                changes.append(Change(name, f"{resource} per step", _in_units(resource, a), _in_units(resource, b), False))
        was, now = time_ratio(old, name), time_ratio(new, name)
        if was and now and (now[2] < was[1] or now[1] > was[2]):  # the spreads do not overlap
            changes.append(Change(name, "step time / fix's", f"{was[0]:.2f}x", f"{now[0]:.2f}x", False))
    return changes


def _in_units(resource: str, value: float) -> str:
    """A rate in its resource's unit (python_objects counts blocks, threads count threads); bytes
    for a resource this version does not know (a results file written by another)."""
    return known.BY_NAME[resource].format(value) if resource in known.BY_NAME else format_bytes(value)


def format_changes(changes: list[Change]) -> str:
    if not changes:
        return "no changes"
    width = max(len(c.run) for c in changes)
    lines = [f"{'run':<{width}}  {'what':<26} {'old':>14} -> {'new':<22} fails"]
    for c in changes:
        lines.append(f"{c.run:<{width}}  {c.what:<26} {c.old:>14} -> {c.new:<22} {'YES' if c.regression else ''}")
    return "\n".join(lines)


def compare_text(old: dict[str, Any], new: dict[str, Any], tolerance: float = 0.25) -> tuple[str, bool]:
    """What ``leaklab compare`` prints for two results documents, and whether it fails."""
    changes = compare(old, new, tolerance=tolerance)
    failing = [c for c in changes if c.regression]
    missing = sum(c.what == "run missing" for c in failing)
    skipped = sum(c.what == "skipped" for c in changes)
    lines = [f"old: torch {old['environment']['torch']} on {old['environment']['device_name']}",
             f"new: torch {new['environment']['torch']} on {new['environment']['device_name']}",
             format_changes(changes),
             f"compare: {len(set(old['runs']) & set(new['runs']))} runs in both, {len(failing) - missing} regression(s), "
             f"{missing} missing without a reason, {skipped} skipped with one"]
    return "\n".join(lines), bool(failing)
