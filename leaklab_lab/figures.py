"""Figures in a case's text, filled from the committed results files: no figure is typed by hand.

A case's text fields (``what``, ``why``, ``claim_note``, ``fix_changes_training``,
``known_problems``, ``fix_not_bounded``) write a figure as a placeholder ``{DEVICE:RUN:QUANTITY}``:

- DEVICE: ``cpu`` or ``cuda`` (the results file :data:`FIGURE_SOURCES` names for it);
- RUN: ``leak``, ``fix`` (the first fix, ``fixes/<slug>.py``) or the stem of one of the case's
  fix scripts (``undetached_ema_state_dict``);
- QUANTITY: ``RESOURCE.per_step`` (bytes per step), ``RESOURCE.level``, ``RESOURCE.rise``,
  ``RESOURCE.peak`` (bytes), ``RESOURCE.verdict``, ``metric.NAME.first|last|mean|min|max``,
  ``garbage.objects`` / ``garbage.bytes`` (what the collector freed per step, median)
  (a number the step returns), ``verdict``, ``error`` (its first line) or ``failed_step``; in a
  case of several ranks (``nproc``) these read the rank its answer leads with, ``answer`` is the
  merged one-line answer and ``rankN.RESOURCE.per_step|level|verdict`` one rank's figure.

A placeholder that names no such device, run, resource or quantity, or a metric the case's
scripts never return, is an error naming the case. A well-formed placeholder whose run (or
resource, or metric) is not in the committed results yet renders as :data:`NOT_MEASURED`, and
the catalog lists every such figure, so a missing measurement is never silent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from leaklab.report import Report, ResourceResult
from leaklab.resources import BY_NAME
from leaklab.resources import NAMES as RESOURCES
from leaklab.verdict import format_bytes
from leaklab_lab.cases import RANK_TABLE, ROOT, Case
from leaklab_lab.results import case_runs, role_of

T = TypeVar("T")

# The results file each DEVICE of a placeholder reads (under results/). Change these when the
# catalog's figures are re-measured into a new file.
FIGURE_SOURCES = {"cpu": "cpu-torch2.14.1.json", "cuda": "h200-torch2.11.0.json"}
TEXT_FIELDS = ("what", "why", "claim_note", "fix_changes_training", "known_problems", "versions_note", "fix_not_bounded")
NOT_MEASURED = "(not measured)"

# Anything shaped like a placeholder: three colon-separated words in braces, no spaces (a dict
# comprehension in a code span, `{k: v for ...}`, is not one).
PLACEHOLDER = re.compile(r"\{([A-Za-z_]+):([A-Za-z0-9_]+):([A-Za-z0-9_.]+)\}")
_BYTES = ("per_step", "level", "rise", "peak")
_BYTE_VALUES: dict[str, Callable[[ResourceResult], float]] = {
    "per_step": lambda r: r.per_step_bytes, "level": lambda r: r.level_bytes,
    "rise": lambda r: r.trend.rise_bytes, "peak": lambda r: r.peak_bytes}
_STATS = ("first", "last", "mean", "min", "max")
_RANK_VALUES = {"per_step": "per_step_bytes", "level": "level_bytes", "verdict": "verdict"}

# A figure written by hand: bytes with a unit, or a ratio (`1.8x`, `2×`); `3x32x32` (a shape)
# is not a ratio. Placeholders are removed before this is applied.
HAND_TYPED = re.compile(
    r"(?<![\w.])\d[\d,.]*\s?(?:B|KiB|MiB|GiB|TiB|KB|kB|MB|GB|TB)\b"
    r"|(?<![\w.])\d[\d,.]*\s?[x×](?![\w\d])"
)


class FigureError(ValueError):
    """A placeholder that cannot name a figure (the message names the case)."""


@dataclass
class Unmeasured:
    case: str
    placeholder: str
    why: str


def case_seconds() -> dict[tuple[str, str], float]:
    """(device, slug) -> seconds the case's runs took (every phase, leak and fixes) in the results
    file :data:`FIGURE_SOURCES` names for the device; a missing or unreadable file adds nothing.
    The lab starts the costliest cases first with these (``leaklab run``, pytest-xdist)."""
    seconds: dict[tuple[str, str], float] = {}
    for device, name in FIGURE_SOURCES.items():
        try:
            runs = json.loads((ROOT / "results" / name).read_text())["runs"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for key, run in runs.items():
            slug = key.partition("/")[2].partition(":")[0]
            took = sum((run.get("phase_seconds") or {}).values()) if isinstance(run, dict) else 0.0
            seconds[device, slug] = seconds.get((device, slug), 0.0) + took
    return seconds


def costliest_first(things: Iterable[T], case_of: Callable[[T], tuple[str, str] | None]) -> list[T]:
    """``things`` in the order to start them: those whose case (``case_of``: (device, slug), or
    None) took longest in the committed results first, the unmeasured after them in their own
    order; one started last sets when a parallel run ends."""
    seconds = case_seconds()
    return sorted(things, key=lambda thing: -seconds.get(case_of(thing), 0.0))  # sorted is stable


@dataclass
class Figures:
    """Fills placeholders from results documents, by device; remembers what was not measured."""

    documents: dict[str, tuple[str, dict[str, Any]] | None]
    unmeasured: list[Unmeasured] = field(default_factory=list)

    @classmethod
    def from_results(cls, results: list[tuple[str, dict[str, Any]]]) -> Figures:
        by_name = dict(results)
        return cls({device: (name, by_name[name]) if name in by_name else None
                    for device, name in FIGURE_SOURCES.items()})

    def render(self, case: Case, text: str) -> str:
        return PLACEHOLDER.sub(lambda match: self._fill(case, match), text)

    def render_fields(self, case: Case) -> dict[str, str]:
        return {key: self.render(case, case.meta[key]) for key in TEXT_FIELDS if key in case.meta}

    # ------------------------------------------------------------------ one placeholder
    def _fill(self, case: Case, match: re.Match[str]) -> str:
        device, run_name, quantity = match.groups()
        placeholder = match.group(0)
        _validate(case, device, run_name, quantity, placeholder)
        source = self.documents.get(device)
        if source is None:
            return self._missing(case, placeholder, f"no results file {FIGURE_SOURCES[device]} is committed")
        filename, document = source
        run = _find_run(case, document, run_name)
        if run is None:
            return self._missing(case, placeholder, f"{filename} has no {run_name} run of this case")
        value = _quantity(run, quantity)
        if value is None:
            return self._missing(case, placeholder, f"{filename}'s {run_name} run has no {quantity}")
        return value

    def _missing(self, case: Case, placeholder: str, why: str) -> str:
        self.unmeasured.append(Unmeasured(case.slug, placeholder, why))
        return NOT_MEASURED


def _validate(case: Case, device: str, run_name: str, quantity: str, placeholder: str) -> None:
    def fail(why: str) -> FigureError:
        return FigureError(f"case {case.slug}: placeholder {placeholder}: {why}")

    if device not in FIGURE_SOURCES:
        raise fail(f"device must be one of {sorted(FIGURE_SOURCES)}")
    if device not in case.devices:
        raise fail(f"the case does not run on {device} (devices = {case.devices})")
    stems = [fix.stem for fix in case.fixes]
    if run_name not in ("leak", "fix", *stems):
        raise fail(f"run must be leak, fix or a fix script's stem ({', '.join(stems)})")
    head, _, rest = quantity.partition(".")
    if quantity in ("verdict", "error", "failed_step", "garbage.objects", "garbage.bytes", "answer"):
        if quantity == "answer" and case.nproc < 2:
            raise fail("answer is the merged answer of a case of several ranks (nproc)")
        return
    if RANK_TABLE.fullmatch(head):  # rank1.cpu_tensors.per_step: one rank's figure
        if int(head[4:]) >= case.nproc:
            raise fail(f"{head}: the case runs {case.nproc} rank(s)")
        name, _, what = rest.partition(".")
        if name in RESOURCES and what in _RANK_VALUES:
            return
        raise fail(f"a rank's figure is {head}.RESOURCE.{'|'.join(_RANK_VALUES)}")
    if head == "metric":
        name, _, stat = rest.rpartition(".")
        if not name or stat not in _STATS:
            raise fail(f"a metric is metric.NAME.{'|'.join(_STATS)}")
        scripts = [case.leak, *case.fixes]
        if not any(f'"{name}"' in script.read_text() or f"'{name}'" in script.read_text() for script in scripts):
            raise fail(f"no script of the case returns a metric {name!r}")
        return
    if head in RESOURCES and rest in (*_BYTES, "verdict"):
        return
    raise fail(f"unknown quantity {quantity!r}: RESOURCE.{'|'.join((*_BYTES, 'verdict'))} "
               f"(RESOURCE one of {', '.join(RESOURCES)}), metric.NAME.STAT, verdict, error or failed_step")


def _find_run(case: Case, document: dict[str, Any], run_name: str) -> Report | None:
    for run in case_runs(document, case.slug):
        if run_name == "leak" and role_of(run) == "leak":
            return run
        if role_of(run) == "fix":
            script = run.labels.get("script") or case.slug
            if (run_name == "fix" and script == case.fixes[0].stem) or script == run_name:
                return run
    return None


def _number(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.4g}"


def head_of(quantity: str) -> str:
    return quantity.partition(".")[0]


def _quantity(run: Report, quantity: str) -> str | None:
    if quantity == "verdict":
        return run.verdict
    if quantity == "answer":
        return run.labels.get("answer")
    if RANK_TABLE.fullmatch(head_of(quantity)):
        return _rank_quantity(run, quantity)
    if quantity == "error":
        return one_line(run.error) if run.error else None
    if quantity == "failed_step":
        return None if run.failed_step is None else str(run.failed_step)
    if head_of(quantity) == "garbage":
        # The median per step of what the garbage collector freed before each reading.
        values = sorted(run.garbage.get(quantity.split(".")[1]) or [])
        if not values:
            return None
        middle = values[len(values) // 2]
        return format_bytes(middle) if quantity.endswith("bytes") else _number(middle)
    head, _, rest = quantity.partition(".")
    if head == "metric":
        name, _, stat = rest.rpartition(".")
        values = run.metrics.get(name)
        if not values:
            return None
        stats = {"first": values[0], "last": values[-1], "mean": sum(values) / len(values),
                 "min": min(values), "max": max(values)}
        return _number(stats[stat])
    result = run.resources.get(head)
    if result is None:
        return None
    if rest == "verdict":
        return result.verdict
    return result.kind.format(_BYTE_VALUES[rest](result))  # bytes as bytes, fds as fds, threads as threads


def _rank_quantity(run: Report, quantity: str) -> str | None:
    """``rank1.cpu_tensors.per_step``: from the rank's verdicts the lab kept (leaklab_lab.cases.rank_summary)."""
    rank, name, what = quantity.split(".")
    kept = next((r for r in run.labels.get("ranks", ()) if f"rank{r['rank']}" == rank), None)
    result = None if kept is None else kept["resources"].get(name)
    if result is None:
        return None
    value = result[_RANK_VALUES[what]]
    return value if what == "verdict" else BY_NAME[name].format(value)


def one_line(text: str, limit: int = 240) -> str:
    """A message fit for one line of Markdown (a table cell): a traceback becomes its first and
    last lines (the wrapper's message and the error it wraps), ``|`` and backticks escaped."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    joined = lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"
    if len(joined) > limit:
        joined = joined[: limit - 1] + "…"
    return joined.replace("|", "\\|").replace("`", "'")


def hand_typed(text: str) -> list[str]:
    """Figures written by hand in ``text`` (placeholders removed first)."""
    return [match.group(0) for match in HAND_TYPED.finditer(PLACEHOLDER.sub("", text))]
