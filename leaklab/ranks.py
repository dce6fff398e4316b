"""Every rank's series as one: the pure part of a check under ``torchrun`` (no process group here;
:mod:`leaklab.distributed` moves these records between the ranks).

The rule, in one place:

- After every pass, each rank's :class:`~leaklab.verdict.Done` is merged into one
  (:func:`merge_done`) whose series are named per rank (``cpu_tensors@rank1``), and the policy,
  :func:`leaklab.verdict.next_pass`, unchanged, decides on the merged history with every rank's
  resources watched (:func:`rank_resources`). So a series that grows on one rank only is
  confirmed, measured again or continued exactly as it would be in one process, and every rank
  runs the same pass, of the same steps (a collective inside the step never waits on a rank that
  has stopped).
- The decision is split back (:func:`split`): each rank reads its own series' names.
- A pass stopped on one rank (its budget, a failed step) is stopped on every rank at the same
  step; its merged record is stopped, or over budget, where any rank's is.
- Growth that keeps only a record of plain data (:func:`leaklab.verdict.records`) is settled
  only on the ranks whose censuses found one, all the same kind (a loss history kept on every
  rank, or on one): the merged record covers those ranks' series alone, so a series that still
  grows on any other rank is not a record; the rate taken is the smallest rank's, so that it has
  to explain every such rank's growth. (A rank the confirmation named for a heap that then
  settled found none: its record must not be asked of it.) Growth held in bounded containers (:func:`leaklab.verdict.fills`) is
  filled only where every such rank's census found one; the fill pass lasts until the slowest
  rank's is full.
- The answer (:func:`answer`): the check failed where any rank's step failed (the rank it failed
  on first is named); else it grows where any rank grows, each growing rank named with its
  rate, the others' verdicts after; else stopped (a budget's safety stop, no verdict), else
  plateau, else bounded, in the order a one-process report ranks them. The exit code is that
  verdict's, as in one process (:func:`merged_code`).
- A *level skew* (:func:`skew`): a resource that grows on no rank, but that one rank holds at
  least :data:`SKEW_FACTOR` times as much of as the median of the others, and more than the
  resource's smallest cache (its ``plateau_min``) beyond them: rank 0 holding gathered results,
  a model loaded onto GPU 0. It is a level, not growth, and never changes the exit code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from leaklab import resources as known
from leaklab.report import EXIT_BAD_INPUT, EXIT_BOUNDED, EXIT_LEAK, EXIT_PLATEAU, EXIT_STEP_FAILED
from leaklab.verdict import (
    BOUNDED,
    GROWS,
    PLATEAU,
    RAISES,
    STOPPED,
    Done,
    Filling,
    Pass,
    PlainData,
    Records,
    Resource,
    Verdicts,
)

SEPARATOR = "@rank"
SKEW_FACTOR = 2.0   # a rank holding this many times the others' median level (and a cache's worth more) is a skew


def rank_name(name: str, rank: int) -> str:
    """``cpu_tensors`` on rank 1: ``cpu_tensors@rank1``."""
    return f"{name}{SEPARATOR}{rank}"


def rank_path(path: str, rank: int) -> str:
    """A file one rank writes where the command names one for all (``--snapshot mem.pickle``):
    ``mem.rank1.pickle``."""
    folder, _, name = path.rpartition("/")
    stem, dot, suffix = name.rpartition(".") if "." in name.lstrip(".") else (name, "", "")
    return f"{folder}{'/' if folder else ''}{stem}.rank{rank}{dot}{suffix}"


def parse(name: str) -> tuple[str, int | None]:
    """``cpu_tensors@rank1`` -> (``cpu_tensors``, 1); a name of no rank -> (name, None)."""
    base, sep, rank = name.rpartition(SEPARATOR)
    if sep and rank.isdigit():
        return base, int(rank)
    return name, None


def rank_resources(watched: Sequence[Sequence[str]]) -> tuple[Resource, ...]:
    """Every rank's watched resources, each a copy of its resource named for its rank; ``watched``:
    each rank's names, in rank order."""
    return tuple(dataclasses.replace(known.get(name), name=rank_name(name, rank), process=f"rank{rank}")
                 for rank, names in enumerate(watched) for name in names)


def merge_done(dones: Sequence[Done], growing: Sequence[str] = ()) -> Done:
    """One record of a pass from every rank's (in rank order): the readings named per rank,
    stopped where any rank's is, over budget with the first rank's resource that passed it.
    ``growing``: the merged names the pass was planned with (what its censuses named), which
    decide whether bounded containers are merged (see the module's rule)."""
    kinds = {done.kind for done in dones}
    if len(kinds) != 1:
        raise ValueError(f"the ranks ran different passes: {sorted(kinds)}")
    readings = {rank_name(name, rank): list(values)
                for rank, done in enumerate(dones) for name, values in done.readings.items()}
    # The rank that passed its budget names it; the others stopped because it did (their record
    # names it already, with its rank).
    owned = [rank_name(done.over_budget, rank) for rank, done in enumerate(dones)
             if done.over_budget and parse(done.over_budget)[1] is None]
    told = [done.over_budget for done in dones if done.over_budget]
    over = owned[0] if owned else (told[0] if told else None)
    return Done(dones[0].kind, readings, stopped=any(done.stopped for done in dones),
                over_budget=over, plain=merge_plain(dones), filling=merge_filling(dones, growing))


def _growing_ranks(growing: Sequence[str]) -> list[int]:
    return sorted({rank for rank in (parse(name)[1] for name in growing) if rank is not None})


def merge_filling(dones: Sequence[Done], growing: Sequence[str]) -> Filling | None:
    """The bounded containers every growing rank's growth is held in, or None (see the module's rule)."""
    ranks = _growing_ranks(growing)
    found = [dones[rank].filling for rank in ranks if rank < len(dones)]
    if not found or any(filling is None for filling in found):
        return None
    return Filling("; ".join(f"rank {rank}: {filling.what}" for rank, filling in zip(ranks, found, strict=True)),
                   max(filling.steps_to_full for filling in found))


def merge_plain(dones: Sequence[Done]) -> PlainData | None:
    """The record of plain data the ranks' censuses found, covering those ranks' series, or None
    (see the module's rule)."""
    by_rank = {rank: done.plain for rank, done in enumerate(dones) if done.plain is not None}
    found = list(by_rank.values())
    if not found or len({plain.what for plain in found}) != 1:
        return None
    ranks = sorted(by_rank)
    what = f"{found[0].what}, on rank{'s' if len(ranks) > 1 else ''} {_listed(ranks)}"
    covers = frozenset(rank_name(name, rank) for rank in ranks for name in dones[rank].readings)
    return PlainData(what, min(plain.bytes_per_step for plain in found), min(plain.objects_per_step for plain in found), covers)


def _mine(names: Sequence[str], rank: int) -> tuple[str, ...]:
    return tuple(base for base, owner in map(parse, names) if owner == rank)


def split(decision: Pass | Verdicts, rank: int) -> Pass | Verdicts:
    """The merged decision as one rank runs it: its own series, under their own names. A long pass
    that watches none of this rank's series still runs its steps here (reading nothing)."""
    if isinstance(decision, Pass):
        return dataclasses.replace(decision, resources=_mine(decision.resources, rank),
                                   growing=_mine(decision.growing, rank))
    records = decision.records
    if records is not None:
        own = _mine(records.resources, rank)
        records = Records(records.what, records.bytes_per_step, records.horizon, own) if own else None
    return dataclasses.replace(
        decision,
        trends={base: trend for (base, owner), trend in zip(map(parse, decision.trends), decision.trends.values(),
                                                              strict=True) if owner == rank},
        series={base: values for (base, owner), values in zip(map(parse, decision.series), decision.series.values(),
                                                              strict=True) if owner == rank},
        uncertain=_mine(decision.uncertain, rank), long_passed=_mine(decision.long_passed, rank),
        changed=tuple((parse(name)[0], before, after) for name, before, after in decision.changed
                      if parse(name)[1] == rank),
        records=records, fill_settled=_mine(decision.fill_settled, rank),
        paused=tuple((parse(name)[0], rate, kept) for name, rate, kept in decision.paused if parse(name)[1] == rank),
        filled=decision.filled if _mine(decision.fill_settled, rank) else None)


# ----------------------------------------------------------------------------- the answer
def _listed(ranks: Sequence[int]) -> str:
    items = [str(rank) for rank in ranks]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _body(report: Mapping[str, Any], opening: str) -> str:
    """A rank's summary without its name and its verdict's opening words (``grows in ``)."""
    summary, name = report["summary"], report.get("name")
    if name and summary.startswith(f"{name}: "):
        summary = summary[len(name) + 2:]
    return summary[len(opening):] if summary.startswith(opening) else summary


def skew(reports: Sequence[Mapping[str, Any]]) -> list[str]:
    """The level skews between ranks (see the module's rule), one phrase each."""
    if len(reports) < 2:
        return []
    found = []
    names = [name for name in reports[0].get("resources", {}) if name in known.BY_NAME and known.get(name).judged]
    for name in names:
        levels = [report.get("resources", {}).get(name) for report in reports]
        if any(level is None for level in levels) or any(level["verdict"] == GROWS for level in levels):
            continue
        values = [level["level_bytes"] for level in levels]
        top = max(range(len(values)), key=values.__getitem__)
        rest = median(value for i, value in enumerate(values) if i != top)
        resource = known.get(name)
        if values[top] - rest > max(resource.plateau_min, resource.quantum) and values[top] >= SKEW_FACTOR * max(rest, 0):
            found.append(f"rank {top} holds {resource.format(values[top])} of {name}, the other ranks "
                         f"{resource.format(rest)}{' (median)' if len(values) > 2 else ''}")
    return found


HEADLINES = (GROWS, STOPPED, PLATEAU)  # as a one-process report ranks its resources' verdicts


def merged_verdict(reports: Sequence[Mapping[str, Any]]) -> str:
    """The verdict of every rank at once: raises where any rank's step failed, else the first of
    :data:`HEADLINES` any rank has, else bounded."""
    verdicts = {report["verdict"] for report in reports}
    return next((verdict for verdict in (RAISES, *HEADLINES) if verdict in verdicts), BOUNDED)


def merged_code(reports: Sequence[Mapping[str, Any]]) -> int:
    """The exit code every rank exits with: the merged verdict's, as in one process (a step that
    failed 3, a leak or a child process left running 1, a safety stop 3, a plateau 4)."""
    verdict = merged_verdict(reports)
    if verdict == RAISES:
        return EXIT_STEP_FAILED
    codes = {report["exit_code"] for report in reports}
    for code in (EXIT_LEAK, EXIT_STEP_FAILED, EXIT_PLATEAU):
        if code in codes:
            return code
    return EXIT_BOUNDED


def answer(reports: Sequence[Mapping[str, Any]], origin: int | None = None) -> str:
    """The one line rank 0 prints for every rank's report (in rank order). ``origin``: the rank
    whose step failed first, where one did."""
    world = len(reports)
    of = f"of {world}"
    if any(report["verdict"] == RAISES for report in reports):
        failed = origin if origin is not None else next(i for i, r in enumerate(reports) if r["verdict"] == RAISES)
        return f"the step failed on rank {failed} {of} {_body(reports[failed], 'the step failed ')}; the check ended on every rank"
    verdicts = [report["verdict"] for report in reports]
    headline = merged_verdict(reports)
    levels = skew(reports)
    tail = f"; level skew, not growth: {'; '.join(levels)}" if levels else ""
    if headline == BOUNDED:
        line = f"bounded on every rank ({world}): " + _body(reports[0], f"{BOUNDED}: ")
        return line + tail
    ranks = [i for i, verdict in enumerate(verdicts) if verdict == headline]
    if len(ranks) == 1:
        body = _body(reports[ranks[0]], f"{headline} in ")
    else:
        body = "; ".join(f"rank {i}: {_body(reports[i], f'{headline} in ')}" for i in ranks)
    others = [f"rank {i} {verdict}" for i, verdict in enumerate(verdicts) if i not in ranks]
    line = f"{headline} on rank{'s' if len(ranks) > 1 else ''} {_listed(ranks)} {of}"
    return line + (f" ({', '.join(others)})" if others else "") + f": {body}{tail}"


def launcher_code(exitcodes: Mapping[int, int], world: int) -> tuple[int, str | None]:
    """The code ``leaklab check --nproc`` exits with, from the ranks that exited non-zero (rank:
    exit code, negative for a signal), and a line where no rank answered for all of them. Every
    rank that ends by itself exits with the merged code, so that code is taken; a rank killed by a
    signal after the answer (the launcher stops the others once one exits non-zero) says nothing.
    Where no rank exited by itself, the first rank killed is named, and the check failed (3)."""
    own = sorted(code for code in exitcodes.values() if code >= 0)
    if own:
        for code in (EXIT_STEP_FAILED, EXIT_BAD_INPUT, EXIT_LEAK, EXIT_PLATEAU):
            if code in own:
                return code, None
        return own[0], None
    if not exitcodes:
        return EXIT_BOUNDED, None
    rank = min(exitcodes)
    return EXIT_STEP_FAILED, (f"rank {rank} of {world} was ended by signal {-exitcodes[rank]} before the check "
                              "answered; every rank was stopped")
