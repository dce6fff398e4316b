"""The catalog's cases: one ``cases/<slug>.toml`` declares everything about a case.

A case is a leaky script ``cases/<slug>.py`` and its fixed twin(s) ``fixes/<slug>.py``; both
define ``make_step(device)`` and run by themselves. The TOML file holds the metadata (title,
seed section, the seed's claim and its status, the resource, references) and the expected
verdicts per device and role, which the tests assert and the catalog prints. See
``cases/README.md`` for every key.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from leaklab.families import RULES
from leaklab.report import Report, failed_at, report_from_json
from leaklab.resources import NAMES as RESOURCES
from leaklab.resources import Resource, defaults, device_type
from leaklab.resources import get as get_resource
from leaklab.runner import RunOptions
from leaklab.scripts import IsolatedCheck, run_script
from leaklab.verdict import VERDICTS, decide

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CLAIM_STATUSES = ("confirmed", "not reproduced", "different mechanism", "not in seeds", "not measured")
ROLES = ("leak", "fix")
SYMPTOMS = (
    "allocated climbs every step",
    "reserved climbs, allocated flat",
    "host RAM climbs",
    "workers' memory climbs",
    "crash in a forked child",
    "training slower",
    "an error is raised",
    "training goes wrong, memory flat",
    "memory held, not growing",
)
FAMILIES_PATH = ROOT / "cases" / "families.toml"  # the families (mechanisms), one definition for every case
NOT_CASES = {"seed_claims.toml", FAMILIES_PATH.name}  # the seed documents' claims (leaklab_lab.seeds), the families
_GENERIC_HOLDER_NAMES = {"cache", "keys", "values", "items", "__traceback__", "self"}
TORCH_RANGE = "torch"  # expect.<device>.<role>."torch>=2.6,<2.12": expectations for those versions only
_CHECKS = ("raises", "metrics", "level_over_fix", "released")
RANK_TABLE = re.compile(r"rank\d+")  # expect.<device>.<role>.rank1: rank 1's own verdicts, in a case of nproc ranks
_REQUIRED = ("title", "seed", "claim", "claim_status", "resource", "family", "symptoms", "what", "why", "expect")


# A metric's own series (a gradient norm, a loss scale) judged by the same rule as a resource:
# no counter quantum, no floor, any cache size.
METRIC = Resource("metric", "a number the step returns", "the step's return value", (), lambda reading: 0,
                  exact=False, quantum=0, floor=0, plateau_min=0, budget=None, release_tolerance=None, rank=99, unit="")


class CaseError(ValueError):
    """A case's TOML is malformed."""


@dataclass(frozen=True)
class Family:
    """A mechanism that groups cases, and the fix its cases share (``cases/families.toml``)."""

    name: str
    description: str
    fix: str


@functools.cache
def families(path: Path = FAMILIES_PATH) -> dict[str, Family]:
    """The families table, in the file's order; read once. A family without its description or
    fix is an error naming it."""
    with open(path, "rb") as handle:
        table = tomllib.load(handle)
    found = {}
    for name, fields in table.items():
        if not isinstance(fields, dict) or set(fields) != {"description", "fix"}:
            raise CaseError(f"{path}: [{name}] must have exactly `description` and `fix`")
        found[name] = Family(name, fields["description"], fields["fix"])
    return found


@dataclass
class Case:
    slug: str
    meta: dict[str, Any]
    leak: Path
    fixes: list[Path]
    toml: Path

    @property
    def title(self) -> str:
        return self.meta["title"]

    @property
    def family(self) -> Family:
        return families()[self.meta["family"]]

    @property
    def devices(self) -> list[str]:
        return list(self.meta.get("devices", ["cpu", "cuda"]))

    @property
    def factory(self) -> str:
        return self.meta.get("factory", "make_step")

    @property
    def nproc(self) -> int:
        """Ranks the case runs as (``leaklab check --nproc``, gloo on the CPU); 1: one process."""
        return int(self.meta.get("nproc", 1))

    def options(self, device: str, attribute: bool = False) -> RunOptions:
        per_device = self.meta.get("run", {}).get(device, {})
        resources = tuple(per_device.get("resources", self.meta.get("resources", ())))
        also = [r for r in self.meta.get("watch_also", []) if device_type(device) in get_resource(r).devices]
        left_out = set(self.meta.get("watch_not", []))
        if also or left_out:  # the defaults (or the list given), these opt-in readings added, those left out
            resources = tuple(name for name in (*(resources or (r.name for r in defaults(device))), *also)
                              if name not in left_out)
        return RunOptions(
            steps=int(per_device.get("steps", self.meta.get("steps", 20))),
            warmup=int(per_device.get("warmup", self.meta.get("warmup", 5))),
            resources=resources,
            attribute=attribute,
        )

    def expected(self, device: str, role: str, torch_version: str = torch.__version__) -> dict[str, Any]:
        """What a run should show here: ``expect.<device>.<role>``, with the keys of each of its
        ``"torch<range>"`` tables whose range holds ``torch_version`` on top (a mechanism that
        behaves differently on some torch versions names them)."""
        table = self.meta["expect"].get(device, {}).get(role, {})
        merged = {key: value for key, value in table.items() if not key.startswith(TORCH_RANGE)}
        for key, override in table.items():
            if key.startswith(TORCH_RANGE) and torch_in(key, torch_version):
                merged.update(override)
        return merged

    def scripts(self, role: str) -> list[Path]:
        return [self.leak] if role == "leak" else self.fixes

    def markers(self, device: str) -> list[str]:
        """The pytest markers (see leaklab.marks) a run of this case on ``device`` needs."""
        names = ["cuda"] if device == "cuda" else []
        if int(self.meta.get("needs_gpus", 1)) >= 2 and device == "cuda":  # the CPU form runs its ranks anywhere
            names.append("multi_gpu")
        if "IPython" in self.meta.get("extra_imports", []):
            names.append("needs_ipython")
        slow = self.meta.get("slow", False)  # true, or the devices on which it is slow
        if slow is True or (isinstance(slow, list) and device in slow) or self.nproc > 1:
            names.append("slow")  # ranks are fresh interpreters, each paying torch's import
        if self.nproc > 1:
            names.append("distributed")
        return names

    def leak_lines(self) -> list[int]:
        """Line numbers of the ``# LEAK:`` marks in the leaky script."""
        return [i for i, line in enumerate(self.leak.read_text().splitlines(), 1) if "# LEAK:" in line]

    def mark_statements(self) -> list[str]:
        """The code (comments cut) of each ``# LEAK:`` line; a marked decorator includes the
        ``def`` line it decorates."""
        lines = self.leak.read_text().splitlines()
        statements = []
        for mark in self.leak_lines():
            code = [lines[mark - 1].split("#", 1)[0]]
            i = mark
            while code[0].strip().startswith("@") and i < len(lines):
                code.append(lines[i].split("#", 1)[0])
                if lines[i].lstrip().startswith(("def ", "async def ")):
                    break
                i += 1
            statements.append("\n".join(code))
        return statements

    def names_its_leak(self, filename: str, code: str, held_by: str) -> bool:
        """Whether an attributed site names this leak: it was allocated on a ``# LEAK:`` line
        of the leaky script, or the container that holds it is the one a marked statement
        names (``feats`` for ``feats.append(feat)  # LEAK: ...``)."""
        if Path(filename).name == self.leak.name and "# LEAK:" in code:
            return True
        names = set(re.findall(r"[A-Za-z_]\w*", held_by.split("[")[0])) - _GENERIC_HOLDER_NAMES
        return any(re.search(rf"\b{re.escape(name)}\b", statement)
                   for name in names for statement in self.mark_statements())


def load_case(toml_path: Path) -> Case:
    slug = toml_path.stem
    with open(toml_path, "rb") as handle:
        meta = tomllib.load(handle)
    missing = [key for key in _REQUIRED if key not in meta]
    if missing:
        raise CaseError(f"{toml_path}: missing {', '.join(missing)}")
    if meta["claim_status"] not in CLAIM_STATUSES:
        raise CaseError(f"{toml_path}: claim_status must be one of {CLAIM_STATUSES}")
    if meta["family"] not in families():
        raise CaseError(f"{toml_path}: family {meta['family']!r} is not in {FAMILIES_PATH.name}; "
                        f"known: {', '.join(families())}")
    unknown_symptoms = set(meta["symptoms"]) - set(SYMPTOMS)
    if unknown_symptoms:
        raise CaseError(f"{toml_path}: unknown symptoms {sorted(unknown_symptoms)}; known: {SYMPTOMS}")
    root = toml_path.parent.parent
    leak = root / "cases" / f"{slug}.py"
    fixes = [root / p for p in meta.get("fixes", [f"fixes/{slug}.py"])]
    for path in [leak, *fixes]:
        if not path.is_file():
            raise CaseError(f"{toml_path}: {path} does not exist")
    for key in ("watch_also", "watch_not"):
        for name in meta.get(key, []):
            if name not in RESOURCES:
                raise CaseError(f"{toml_path}: {key} names {name!r}, not a resource ({', '.join(RESOURCES)})")
    specific = {rule.test.__name__ for rule in RULES if rule.specific and meta["family"] in rule.families}
    for name in meta.get("answers", []):
        if name not in specific:
            raise CaseError(f"{toml_path}: answers names {name!r}, not a specific rule of family {meta['family']} "
                            f"in leaklab.families ({', '.join(sorted(specific)) or 'none'})")
    for device, roles in meta["expect"].items():
        for role, expectation in roles.items():
            if device not in ("cpu", "cuda") or role not in ROLES:
                raise CaseError(f"{toml_path}: expect.{device}.{role} is not a device.role")
            ranges = {key: value for key, value in expectation.items() if key.startswith(TORCH_RANGE)}
            for where, table in [(f"expect.{device}.{role}", expectation),
                                 *((f'expect.{device}.{role}."{key}"', value) for key, value in ranges.items())]:
                if not isinstance(table, dict):
                    raise CaseError(f"{toml_path}: {where} must be a table")
                for key, value in table.items():
                    if RANK_TABLE.fullmatch(key):
                        if int(key[4:]) >= int(meta.get("nproc", 1)) or not isinstance(value, dict):
                            raise CaseError(f"{toml_path}: {where}.{key} must be a table, for a rank below "
                                            f"nproc = {meta.get('nproc', 1)}")
                        for name, verdict in value.items():
                            if name not in RESOURCES or not _verdicts(verdict):
                                raise CaseError(f"{toml_path}: {where}.{key}.{name} = {verdict!r} is not a "
                                                "resource's verdict")
                        continue
                    if key in ranges and table is expectation:
                        try:
                            SpecifierSet(key[len(TORCH_RANGE):])
                        except InvalidSpecifier:
                            raise CaseError(f"{toml_path}: {where}.\"{key}\" is not a torch version range "
                                            "(e.g. \"torch>=2.6,<2.12\")") from None
                        continue
                    if key in RESOURCES and not _verdicts(value):
                        raise CaseError(f"{toml_path}: {where}.{key} = {value!r} is not a verdict or a list of verdicts")
                    if key not in RESOURCES and key not in _CHECKS:
                        raise CaseError(f"{toml_path}: {where}.{key} is not a resource or check")
    return Case(slug, meta, leak, fixes, toml_path)


def torch_in(key: str, torch_version: str) -> bool:
    """Whether ``torch_version`` (``2.11.0+cu130``) is in the range of a ``"torch<range>"`` key."""
    version = Version(torch_version.split("+")[0])
    return SpecifierSet(key[len(TORCH_RANGE):]).contains(version, prereleases=True)


def discover(root: Path = ROOT) -> list[Case]:
    """Every case under ``root/cases``, sorted by slug."""
    found = sorted(path for path in (root / "cases").glob("*.toml") if path.name not in NOT_CASES)
    if not found:
        raise CaseError(f"no cases in {root / 'cases'}: the catalog's cases live in a leaklab checkout "
                        "(cases/, fixes/); run `leaklab run` from there")
    return [load_case(path) for path in found]


def get_case(slug: str, root: Path = ROOT) -> Case:
    path = root / "cases" / f"{slug}.toml"
    if not path.is_file():
        known = ", ".join(case.slug for case in discover(root))
        raise CaseError(f"no case {slug!r}; known cases: {known}")
    return load_case(path)


def run_name(case: Case, role: str, script: Path | None = None) -> str:
    """A run's name (``slug:role``, ``slug:fix:<stem>`` for a second fix); results files key runs
    by ``<device>/<name>``."""
    script = script or case.scripts(role)[0]
    return f"{case.slug}:{role}" + (f":{script.stem}" if script.stem != case.slug else "")


def isolated(case: Case, script: Path) -> bool:
    """Whether the script runs in a fresh process (``isolate``, an ``env`` of its own, or ranks)."""
    isolate = case.meta.get("isolate", False)
    return isolate is True or script.stem in (isolate or ()) or bool(case.meta.get("env")) or case.nproc > 1


@dataclass
class Started:
    """One script of a case, started (:func:`start_case`): ``report`` waits for it (or runs it, in
    this process), ``stop`` ends a fresh process nobody will wait for."""

    report: Callable[[], Report]
    stop: Callable[[], None] = lambda: None


def start_case(case: Case, role: str, device: str, script: Path | None = None, attribute: bool = False) -> Started:
    """One script of a case (the leak, or one of its fixes), started: a script that runs in a fresh
    process starts now, so that several can run side by side; one that runs in this process runs
    when its report is asked for."""
    script = script or case.scripts(role)[0]
    options = case.options(device, attribute)
    options.name = run_name(case, role, script)
    if not isolated(case, script):
        return Started(lambda: run_script(script, case.factory, device, options))
    env = {key: str(value) for key, value in case.meta.get("env", {}).items()}
    started = IsolatedCheck(script, case.factory, device, options, env=env, nproc=case.nproc)

    def report() -> Report:
        data = started.result()
        found = ranks_report(data) if case.nproc > 1 else report_from_json(data)
        found.name = options.name
        return found

    return Started(report, started.stop)


def run_case(case: Case, role: str, device: str, script: Path | None = None, attribute: bool = False) -> Report:
    """Run one script of a case (the leak, or one of its fixes) under the check."""
    return start_case(case, role, device, script, attribute).report()


def ranks_report(merged: dict[str, Any]) -> Report:
    """A check of several ranks (``leaklab check --nproc``'s JSON) as the lab keeps one run: the
    report of the rank its answer leads with (the first that grows, else rank 0), labelled with
    the merged answer and every rank's verdicts (:func:`rank_summary`)."""
    reports = merged["ranks"]
    lead = next((data for data in reports if data["verdict"] == "grows"), reports[0])
    report = report_from_json(lead)
    report.labels.update(answer=merged["summary"].split(": ", 1)[-1], merged_exit_code=merged["exit_code"],
                         ranks=[rank_summary(data) for data in reports])
    return report


def rank_summary(data: dict[str, Any]) -> dict[str, Any]:
    """What the lab keeps of one rank's report: its verdict, and each resource's verdict, rate and
    level (a figure of the catalog reads them: ``{cpu:leak:rank1.cpu_tensors.per_step}``)."""
    return {"rank": data["rank"], "verdict": data["verdict"], "released": data["released"],
            "resources": {name: {"verdict": result["verdict"], "per_step_bytes": result["per_step_bytes"],
                                 "level_bytes": result["level_bytes"]} for name, result in data["resources"].items()}}


# What a case's seed claim (``claim_status``) means, in plain words, for the run's table.
CLAIM_WORDS = {
    "confirmed": "holds",
    "not reproduced": "does not hold here",
    "different mechanism": "another cause",
    "not in seeds": "-",
    "not measured": "not measured",
}


def case_row(case: Case, leak: Report, fixes: list[Report]) -> dict[str, str]:
    """One row of the lab's verdict table: what the case did here."""
    site = leak.leak_site
    growing = leak.verdict in ("grows", "plateau")
    return {
        "case": case.slug,
        "device": leak.device,
        "leak": leak.verdict,
        "fix": ",".join(fix.verdict for fix in fixes) or "-",
        "resource": (leak.resource if growing else case.meta["resource"])
        + (f" (rank {leak.labels['rank']})" if growing and leak.labels.get("ranks") else ""),
        "per step": leak.resources[leak.resource].kind.format(leak.per_step_bytes) if leak.verdict == "grows" else "-",
        "line": f"{Path(site.filename).name}:{site.lineno}" + (f" ({site.held_by})" if site.held_by else "")
        if site else "-",
        "popular claim": CLAIM_WORDS[case.meta["claim_status"]],
    }


def catalogued(case: Case, device: str, leak: Report, fixes: list[Report], problems: list[str]) -> str:
    """The table's ``as catalogued`` cell. A fix that grows is never a plain ``yes``: where its
    entry expects that growth (``expect.<device>.fix`` names the resource as growing), it reads
    ``yes (expected, see entry)``; where the entry asserts nothing of that resource, ``yes, but
    the fix also grows in X (not asserted by its entry)``, which does not fail the run (the
    catalog's open question, not a regression); growth where the entry asserts ``bounded`` is a
    difference (``NO``). A leak catalogued to raise reads ``raises <Error>, as catalogued``."""
    expected = case.expected(device, "fix")
    grown = {name for fix in fixes if fix.error is None for name, result in fix.resources.items()
             if (name not in RESOURCES or result.kind.judged) and result.verdict == "grows"}
    unasserted = sorted(name for name in grown if name not in expected)
    if problems:
        return "NO: " + "; ".join(problems)[:120]
    if unasserted:
        return f"yes, but the fix also grows in {', '.join(unasserted)} (not asserted by its entry)"
    if grown:
        return "yes (expected, see entry)"
    error = raised(leak)
    if error is not None and case.expected(device, "leak").get("raises"):
        return f"raises {error.split(':')[0]}, as catalogued"
    return "yes"


LEGEND = """case           the catalog entry (cases/<case>.py, its fix fixes/<case>.py, CATALOG.md#<case>)
device         where it ran (cpu, or cuda)
leak, fix      the verdict of the leaky script and of each fix: grows (a leak), bounded (nothing
               grows), plateau (rose, then stopped: a bounded cache), raises (the step raised)
resource       what grows in the leak (or, where nothing grows, what its entry watches)
per step       how fast it grows, per measured step: in bytes, or in what it counts (threads, fds,
               processes, mappings; blocks: Python objects, one block of Python's allocator each)
line           (with --attribute) the line that allocated what stayed alive, and what holds it
popular claim  what the popular claim about this leak comes to here: holds; does not hold here;
               another cause (what happens here has another cause than the claim says); - (no claim)
as catalogued  yes: leak and fix behave as the entry says; yes (expected, see entry): the fix
               grows too, as the entry expects (its notes say why); yes, but the fix also grows in X:
               growth in a resource its entry asserts nothing of (not a failure; worth a look); raises <Error>, as catalogued:
               the case is meant to fail; skipped: why it did not run; NO: what differs"""


def table_columns(rows: list[dict[str, str]]) -> list[str]:
    """The columns to show: a column no row fills (``-`` everywhere, e.g. ``line`` without
    --attribute) is left out."""
    if not rows:
        return []
    return [h for h in rows[0] if h in ("case", "as catalogued") or any(str(r[h]) not in ("-", "") for r in rows)]


def legend(columns: list[str]) -> str:
    """The legend lines of the columns shown."""
    shown = set(columns)
    blocks, current = [], []
    for line in LEGEND.splitlines():
        if not line.startswith(" ") and current:
            blocks.append(current)
            current = []
        current.append(line)
    blocks.append(current)
    keep = [block for block in blocks if any(name in shown for name in block[0][:15].strip().split(", "))]
    return "\n".join(line for block in keep for line in block)


def format_table(rows: list[dict[str, str]], columns: list[str] | None = None) -> str:
    """Rows of equal keys as an aligned text table (the ``columns`` given, or every one that some
    row fills)."""
    if not rows:
        return ""
    headers = columns or table_columns(rows)
    widths = {h: max(len(h), *(len(str(r[h])) for r in rows)) for h in headers}
    lines = ["  ".join(f"{h:<{widths[h]}}" for h in headers).rstrip()]
    lines += ["  ".join(f"{str(r[h]):<{widths[h]}}" for h in headers).rstrip() for r in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- expectations
def metric_summary(values: list[float]) -> dict[str, float]:
    first, last = values[0], values[-1]
    return {
        "mean": sum(values) / len(values),
        "first": first,
        "last": last,
        "min": min(values),
        "max": max(values),
        "last_over_first": last / first if first else float("inf") if last else 1.0,
    }


def raised(report: Report) -> str | None:
    """What the step raised: its own failure, or the one that ended a pass the check added (a step
    that raises only past the steps asked for: gradscaler_new_optimizer's waits on an address being
    reused, which came at step 35, in the long pass, in one H200 run)."""
    if report.error is not None:
        return report.error
    if report.pass_stopped and ": " in report.pass_stopped:
        return report.pass_stopped.split(": ", 1)[1]
    return None


def mismatches(report: Report, expectation: dict[str, Any], fix_report: Report | None = None) -> list[str]:
    """What in ``report`` differs from ``expectation``; empty when it matches."""
    problems: list[str] = []
    expected_error = expectation.get("raises")
    if expected_error is not None:
        error = raised(report)
        if error is None:
            problems.append(f"expected the step to raise {expected_error!r}, but it ran ({report.summary()})")
        elif expected_error not in error:
            problems.append(f"expected {expected_error!r}, got {error}")
        return problems
    if report.error is not None:
        return [f"the step failed {failed_at(report.failed_step, report.stage, report.warmup)}: {report.error}"]
    ranks = report.labels.get("ranks")
    if ranks is None:
        if any(RANK_TABLE.fullmatch(key) for key in expectation):
            problems.append("expected a check of several ranks, got one process")
        problems += _verdict_problems({key: (result.verdict, result.per_step_bytes)
                                       for key, result in report.resources.items()}, expectation)
    for rank in ranks or ():
        own = {**expectation, **expectation.get(f"rank{rank['rank']}", {})}
        got = {key: (result["verdict"], result["per_step_bytes"]) for key, result in rank["resources"].items()}
        problems += [f"rank {rank['rank']}: {problem}" for problem in _verdict_problems(got, own)]
    for metric, bounds in expectation.get("metrics", {}).items():
        values = report.metrics.get(metric)
        if not values:
            problems.append(f"metric {metric!r} was not reported by the step")
            continue
        summary = metric_summary(values)
        for bound, limit in bounds.items():
            if bound == "verdict":
                got = decide(values, METRIC).verdict
                if got != limit:
                    problems.append(f"metric {metric}: expected {limit}, got {got}")
                continue
            stat, _, side = bound.rpartition("_")
            if stat not in summary or side not in ("min", "max"):
                problems.append(f"metric {metric}: unknown bound {bound!r}")
            elif (side == "min" and summary[stat] < limit) or (side == "max" and summary[stat] > limit):
                problems.append(f"metric {metric}: {stat} = {summary[stat]:.4g}, expected {side} {limit}")
    for resource, minimum in expectation.get("level_over_fix", {}).items():
        if fix_report is None or resource not in fix_report.resources or resource not in report.resources:
            problems.append(f"level_over_fix.{resource}: no fix run to compare with")
            continue
        extra = report.resources[resource].level_bytes - fix_report.resources[resource].level_bytes
        if extra < minimum:
            problems.append(f"{resource}: holds {extra:,.0f} B more than the fix, expected at least {minimum:,} B")
    if expectation.get("released", True) and not report.released and ranks is None:
        problems.append(f"memory not released after the run: leftover {report.leftover}, children {report.children_left}")
    if expectation.get("released", True) and any(not rank["released"] for rank in ranks or ()):
        problems.append(f"memory not released after the run on rank(s) "
                        f"{', '.join(str(rank['rank']) for rank in ranks if not rank['released'])}")
    return problems


def _verdict_problems(got: dict[str, tuple[str, float]], expectation: dict[str, Any]) -> list[str]:
    """How the resources' verdicts ``got`` (verdict, bytes a step) differ from ``expectation``'s."""
    problems = []
    for key, verdict in expectation.items():
        if key not in RESOURCES:
            continue
        allowed = _verdicts(verdict)
        if key not in got:
            problems.append(f"{key} was not measured")
        elif got[key][0] not in allowed:
            problems.append(f"{key}: expected {' or '.join(allowed)}, got {got[key][0]} ({got[key][1]:,.0f} B/step)")
    return problems


def _verdicts(value: Any) -> tuple[str, ...]:
    """An expectation's verdicts: one (``"bounded"``), or a list of those a counter's noise allows
    (``["bounded", "plateau"]``, with the reason beside it in the TOML); empty where it is neither."""
    verdicts = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list) else ()
    return verdicts if all(isinstance(v, str) and v in VERDICTS for v in verdicts) else ()
