"""A leak's signature, and the catalog entries it resembles.

A signature is what a report already knows about a leak, in a form two leaks can be compared
by: the resources that grow and how fast (orders of magnitude), what holds the growth (an
autograd history chained across steps, a hook dict, a cache, a container, worker processes,
threads, descriptors, mappings), what is held (tensors, modules, optimizers, callables, ...),
whether the step makes cyclic garbage, whether growth comes every step, late or now and then,
and what a growing autograd graph is (a running sum, a moving average, of parameters alone).

The catalog's own entries carry the signature of their measured leak runs, in
``catalog_signatures.json`` beside this module (written by the lab's ``leaklab catalog`` from the
committed results; the tool reads it and imports nothing of the lab). :func:`resemble` ranks the
entries by :func:`similarity` and keeps those close enough: a forced match is worse than none.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from leaklab import resources as known
from leaklab.chain import chain_from_json, graph_shape_of
from leaklab.families import Evidence, decide
from leaklab.verdict import BOUNDED, GROWS, PLATEAU

SIGNATURES_PATH = Path(__file__).with_name("catalog_signatures.json")
ENTRY_PAGES = "docs/entries"        # each entry's own page, docs/entries/<slug>.md, relative to a leaklab checkout
CLOSE_ENOUGH = 0.6                  # the least similarity called a resemblance (no family evidence)
FAMILY_CLOSE = 0.45                 # the least, among the entries of the family the evidence named
SHOWN = 3                           # entries named at most

# What holds the growth, as the families' rules name it from the holder chain (leaklab.families).
HOLDERS = ("autograd_history", "hook_dict", "cache", "container", "workers", "threads", "descriptors", "mappings",
           "allocator", "garbage")
# What is held, read from the type of what the holder gains.
HELD = ("tensor", "view", "module", "optimizer", "callable", "exception", "object")

# How much each part of a signature counts towards similarity.
WEIGHTS = {"headline": 3.0, "resources": 2.0, "rate": 1.0, "holder": 2.0, "held": 2.0, "box": 1.0, "garbage": 0.5,
           "pattern": 0.5, "rule": 3.0, "graph": 2.0}


@dataclass(frozen=True)
class Signature:
    grows: dict[str, float] = field(default_factory=dict)   # resource -> log10 of its rate (units/step)
    headline: str | None = None                              # the resource the verdict is about
    holder: str | None = None
    held: str | None = None
    garbage: bool = False                                    # cyclic garbage every step
    pattern: str | None = None                               # "steady", "late", "periodic"
    families: tuple[str, ...] | None = None                  # decided from the evidence (None: no evidence kept)
    why: str | None = None                                   # the evidence, in a few words
    bounded: str | None = None                               # the holder is bounded by construction
    kept: str | None = None                                  # what a registry keeps (leaklab.families)
    ranks: int = 1                                           # the ranks checked together (torchrun)
    rule: str | None = None                                  # the specific family rule that decided, if one did
    box: str | None = None                                   # the type of the container nearest what grew
    collector_off: bool = False                              # the program turned the garbage collector off
    graph: str | None = None                                 # what a growing autograd graph is (leaklab.chain.GRAPH_SHAPES)
    flat: tuple[str, ...] = ()                               # watched resources that stayed bounded
    gaining: tuple[tuple[str, str, str], ...] = ()           # containers a census saw gain items (families.Evidence)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["families"] = list(self.families) if self.families is not None else None
        data["flat"] = list(self.flat)
        data["gaining"] = [list(gain) for gain in self.gaining]
        for key in ("collector_off", "graph", "flat", "gaining"):
            if not data[key]:
                del data[key]  # as signatures were before it was kept
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Signature:
        families = data.get("families")
        return cls(**{key: data.get(key) for key in ("headline", "holder", "held", "pattern", "why", "bounded", "kept", "rule", "box", "graph")},
                   grows=dict(data.get("grows") or {}), garbage=bool(data.get("garbage")),
                   collector_off=bool(data.get("collector_off")), flat=tuple(data.get("flat") or ()),
                   gaining=tuple(tuple(gain) for gain in data.get("gaining") or ()),
                   families=tuple(families) if families is not None else None, ranks=int(data.get("ranks") or 1))


_HELD = {"tensor": "tensor", "module": "module", "optimizer": "optimizer", "callable": "callable",
         "exception": "exception"}


def _held(held: Any) -> str | None:
    """What is held, as a signature keeps it: a kept view of a larger storage is told apart from
    a tensor kept whole (a row of a batch keeps the batch)."""
    if held is None:
        return None
    kind = _HELD.get(held.kind, "object")
    return "view" if kind == "tensor" and "view of a larger storage" in held.what else kind


def _box(found: Evidence) -> str | None:
    """The type of the container that gains the entries: the one nearest what grew whose next
    link is any of its items (``[*]``, a key of a type), else the nearest (a list, a dict, a
    deque, a library's own), tuples left out (an item's fields, not a container that gains
    entries). A list of per-step dicts is a list that grows, whatever each record is."""
    links = [link for link in found.links if link.kind != "graph"]
    boxes = [(link, after) for link, after in zip(links, links[1:], strict=False)
             if link.kind == "container" and not link.type.startswith("tuple")]
    box = next((link for link, after in reversed(boxes) if after.name == "[*]" or after.name.endswith(" key]")),
               boxes[-1][0] if boxes else None)
    return box.type.split(" ")[0].rsplit(".", 1)[-1] if box is not None else None


def evidence(report: Any) -> Evidence:
    """What the report knows that can decide the family: its holder chain, its resources."""
    chain = None
    if report.holder is not None or report.holder_missing is not None:
        chain = chain_from_json(report.holder, report.holder_missing)
    growing = frozenset(name for name, result in report.resources.items() if result.verdict == report.verdict)
    flat = frozenset(name for name, result in report.resources.items() if result.verdict == BOUNDED)
    objects = (report.garbage or {}).get("objects") or []
    garbage = bool(objects) and sorted(objects)[len(objects) // 2] > 0
    gaining = tuple((gain["path"], gain["gains"], gain["kind"]) for gain in report.gaining or ())
    return Evidence(chain, report.resource, growing, garbage, _rates(report, growing), report.collector_off, flat,
                    gaining)


def _rates(report: Any, growing: frozenset[str]) -> dict[str, float]:
    """log10 of each growing resource's rate (units a step), as a signature keeps them."""
    return {name: round(math.log10(max(abs(report.resources[name].per_step_bytes), 1e-3)), 2) for name in growing}


def signature(report: Any, ranks: int = 1) -> Signature | None:
    """The signature of a report whose verdict is grows or plateau (None otherwise). The holder
    and the family come from the holder chain (:mod:`leaklab.holders`) by the rules of
    :mod:`leaklab.families`; a report made before chains were named (no ``holder`` in its JSON)
    where the growth is in Python's objects has no family evidence (``families`` None).
    ``ranks``: how many ranks the check ran on together (under torchrun)."""
    if report.verdict not in (GROWS, PLATEAU):
        return None
    headline = report.resource
    found = evidence(report)
    # the judged resources among what grows (a counter that is only read is not part of a leak's signature)
    rates = {name: rate for name, rate in found.rates.items() if name not in known.BY_NAME or known.BY_NAME[name].judged}
    decision = decide(found)
    held_kind = _held(found.held)
    if held_kind is None and headline in ("cpu_tensors", "device_allocated"):
        held_kind = "tensor"
    census = known.BY_NAME[headline].census if headline in known.BY_NAME else None
    unmeasured = found.chain is None and census == "objects" and report.growth
    families = None if unmeasured else decision.families
    holder = decision.holder or (known.BY_NAME[headline].holder if headline in known.BY_NAME else None)
    return Signature(rates, headline, holder, held_kind, found.garbage, _pattern(report, headline), families,
                     decision.why, decision.bounded, decision.kept, ranks, decision.rule, _box(found),
                     found.collector_off, _graph_shape(found), tuple(sorted(found.flat)), found.gaining)


def _graph_shape(found: Evidence) -> str | None:
    """What the chain's growing autograd graph is, where its link says (leaklab.chain.GRAPH_SHAPES)."""
    return graph_shape_of(found.graph.type) if found.graph is not None else None


def redecide(mine: Signature, holder: list[dict[str, str]] | None, missing: str | None) -> Signature:
    """``mine`` with its family decided again from its holder chain by the rules as they are now
    (a committed signature of a held-out step, matched again against today's catalog)."""
    if holder is None and missing is None:
        return mine
    found = Evidence(chain_from_json(holder, missing), mine.headline, frozenset(mine.grows), mine.garbage, mine.grows,
                     mine.collector_off, frozenset(mine.flat), mine.gaining)
    decision = decide(found)
    return replace(mine, families=decision.families, why=decision.why, bounded=decision.bounded, kept=decision.kept, rule=decision.rule,
                   holder=decision.holder or mine.holder, held=_held(found.held) or mine.held, box=_box(found),
                   graph=_graph_shape(found))


def _pattern(report: Any, headline: str | None) -> str | None:
    if headline is None or headline not in report.resources:
        return None
    result = report.resources[headline]
    if result.trend.onset:
        return "late"
    samples = result.samples
    moves = [b - a for a, b in zip(samples, samples[1:], strict=False)]
    rising = sum(move > 0 for move in moves)
    return "steady" if moves and rising >= 0.7 * len(moves) else "periodic"


def similarity(a: Signature, b: Signature) -> float:
    """How alike two signatures are, from 0 to 1, weighted by :data:`WEIGHTS`: the resource a
    leak lives in counts in full where both name it, half where it only grows in the other; a
    part one of them knows and the other does not counts against them at half its weight; the
    specific family rule that decided (``Rule.specific``) counts where either has one; what a
    growing autograd graph is counts only where both read it (signatures made before it was read)."""
    score = total = 0.0
    total += WEIGHTS["headline"]
    if a.headline == b.headline:
        score += WEIGHTS["headline"]
    elif a.headline in b.grows or b.headline in a.grows:
        score += WEIGHTS["headline"] / 2
    union = set(a.grows) | set(b.grows)
    total += WEIGHTS["resources"]
    score += WEIGHTS["resources"] * (len(set(a.grows) & set(b.grows)) / len(union) if union else 1.0)
    if a.headline == b.headline and a.headline in a.grows and b.headline in b.grows:
        total += WEIGHTS["rate"]
        score += WEIGHTS["rate"] * max(0.0, 1 - abs(a.grows[a.headline] - b.grows[b.headline]) / 3)
    for part in ("holder", "held", "box"):
        mine, theirs = getattr(a, part), getattr(b, part)
        if mine is not None and theirs is not None:
            total += WEIGHTS[part]
            score += WEIGHTS[part] * (mine == theirs)
        elif mine is not None or theirs is not None:
            total += WEIGHTS[part] / 2
    if a.graph and b.graph:  # what a growing graph is (a running sum, a moving average), where both read it
        total += WEIGHTS["graph"]
        score += WEIGHTS["graph"] * (a.graph == b.graph)
    if a.rule or b.rule:  # a specific holder (a hook registry, handles of async work) named in one or both
        total += WEIGHTS["rule"]
        score += WEIGHTS["rule"] * (a.rule == b.rule)
    total += WEIGHTS["garbage"]
    score += WEIGHTS["garbage"] * (a.garbage == b.garbage)
    if a.pattern and b.pattern:
        total += WEIGHTS["pattern"]
        score += WEIGHTS["pattern"] * (a.pattern == b.pattern)
    return score / total


@dataclass(frozen=True)
class Resemblance:
    slug: str
    title: str
    family: str
    fix: str
    score: float
    why: str = ""        # the evidence that named the family, in a few words

    @property
    def link(self) -> str:
        return f"{ENTRY_PAGES}/{self.slug}.md"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "link": self.link}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resemblance:
        return cls(data["slug"], data["title"], data["family"], data["fix"], data["score"], data.get("why", ""))


def load_entries(path: Path = SIGNATURES_PATH) -> list[dict[str, Any]]:
    """The catalog's entries with their signatures; none where the file is missing or unreadable
    (an installed tool without the catalog's data answers without resemblances). Read once per
    version of the file, not once per run."""
    try:
        return _entries(path, path.stat().st_mtime_ns)
    except OSError:
        return []


@cache
def _entries(path: Path, version: int) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
        return [entry for entry in data["entries"] if isinstance(entry, dict) and "signature" in entry]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def resemble(mine: Signature | None, entries: list[dict[str, Any]] | None = None, device: str | None = None,
             exclude: str | None = None, shown: int = SHOWN) -> list[Resemblance]:
    """The entries ``mine`` resembles, closest first, at most ``shown``, each once, none under
    :data:`CLOSE_ENOUGH`; where the catalog has an entry's run on ``device``'s kind, only that
    run is compared (the best of both let a run that read less, its graph's shape or its device's
    tensors, outrank the one on this kind). ``exclude``: an entry left out (leave-one-out).

    The family comes first: where the evidence named one (``mine.families``), only its entries
    are ranked, and none where it named none. A signature without evidence (a run made before
    holder chains) is ranked against every entry, as before. Some facts rule an entry out rather
    than lower its score: an entry whose case needs a device (cuDNN, pinned memory) is named only
    for a check on that device; an entry of several ranks (a process group, a gather to rank 0) is
    named only for a check of several ranks, unless the same specific rule decided both (a list
    of finished async handles is that, on one rank or many); a registry's entry only where the
    registry keeps the same kind of object (models are not loggers); an entry whose autograd graph
    grows in another shape (a running sum is not an EMA of the weights). An entry whose catalog
    metadata says it answers the specific rule that decided comes first."""
    if mine is None or mine.families == ():
        return []
    entries = load_entries() if entries is None else entries
    kind = (device or "").split(":")[0]
    entries = [entry for entry in entries if not kind or kind in entry.get("devices", [kind])]
    entries = [entry for entry in entries
               if entry["signature"].get("ranks", 1) <= mine.ranks or (mine.rule and entry["signature"].get("rule") == mine.rule)]
    close = CLOSE_ENOUGH
    if mine.families is not None:
        entries = [entry for entry in entries if entry.get("family") in mine.families]
        close = FAMILY_CLOSE
    # An entry its own specific rule decided (an lru_cache, IPython's output history, a hook
    # registry) is that holder's mistake: its fix applies only where the same rule decided.
    entries = [entry for entry in entries if entry["signature"].get("rule") in (None, mine.rule)]
    # A cache is matched with the catalog's caches only (an entry whose own evidence named one):
    # the shape-keyed native caches and the bounded lru_cache are named from other evidence.
    if mine.holder == "cache":
        entries = [entry for entry in entries if entry["signature"].get("holder") == "cache"]
    if mine.kept is not None:
        entries = [entry for entry in entries if entry["signature"].get("kept") == mine.kept]
    # An entry measured on this device's kind is compared as measured there; its run on the other
    # kind only where it has none (a CUDA-only case for a CPU check is ruled out above).
    here = {entry["slug"] for entry in entries if entry.get("device") == kind}
    entries = [entry for entry in entries if entry["slug"] not in here or entry.get("device") == kind]
    # A growing graph's shape is its mechanism: a running sum, a moving average of a statistic and
    # one of the weights are different mistakes: ruled out where both read it (older runs did not),
    # after each entry's run on this device is chosen.
    if mine.graph:
        entries = [entry for entry in entries if entry["signature"].get("graph") in (None, mine.graph)]
    best: dict[str, tuple[float, dict[str, Any]]] = {}
    for entry in entries:
        if entry["slug"] == exclude:
            continue
        score = similarity(mine, Signature.from_json(entry["signature"]))
        if score > best.get(entry["slug"], (-1.0, None))[0]:
            best[entry["slug"]] = (score, entry)
    # An entry that answers the specific rule which decided (its ``answers``: evidence its own run
    # cannot show, such as a program that turned the collector off) comes first, however unlike its run.
    def answers(entry: dict[str, Any]) -> bool:
        return mine.rule is not None and mine.rule in entry.get("answers", ())
    ranked = sorted(best.values(), key=lambda item: (not answers(item[1]), -item[0], item[1]["slug"]))
    return [Resemblance(entry["slug"], entry.get("title", ""), entry.get("family", ""), entry.get("fix", ""),
                        round(score, 3), mine.why or "")
            for score, entry in ranked[:shown] if score >= close or answers(entry)]


__all__ = ["CLOSE_ENOUGH", "FAMILY_CLOSE", "Resemblance", "Signature", "load_entries", "redecide", "resemble", "signature", "similarity"]
