"""The seed documents' claims (``cases/seed_claims.toml``) and the cases that address each one.

A case's ``seed`` field names sections (``"000 §6.2, 001 §3.1"``, ``"000 §2.3, §6.1"``); a
claim maps to the cases naming its section, narrowed by the claim's ``cases`` list where a
section makes several claims. The map is checked both ways: a claim's case must exist and name
the section, and a case naming a section must be under one of that section's claims.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from leaklab_lab.cases import ROOT, Case

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CLAIMS_PATH = ROOT / "cases" / "seed_claims.toml"
KINDS = ("claim", "method", "same", "benchmark")
_SECTION = re.compile(r"^(?:(\d{3})\s+)?§\s*([\d.]+)$")


class SeedClaimError(ValueError):
    """The claim map and the cases' ``seed`` fields disagree."""


@dataclass
class Claim:
    section: str
    claim: str
    cases: list[str]
    kind: str        # claim | method | same | benchmark
    covered: str


def case_sections(seed: str) -> list[str]:
    """``"000 §2.3, §6.1"`` -> ``["000 §2.3", "000 §6.1"]``; a seed that is not a section
    (``"PyTorch FAQ"``, ``"none"``) names none."""
    sections, document = [], None
    for part in (p.strip() for p in seed.split(",")):
        match = _SECTION.match(part)
        if not match:
            continue
        document = match.group(1) or document
        if document:
            sections.append(f"{document} §{match.group(2)}")
    return sections


def load_claims(path: Path = CLAIMS_PATH) -> list[dict]:
    with open(path, "rb") as handle:
        return tomllib.load(handle)["claim"]


def claim_map(cases: list[Case], path: Path = CLAIMS_PATH) -> list[Claim]:
    """Every claim with the cases that address it, in the file's order."""
    by_section: dict[str, list[str]] = {}
    for case in cases:
        for section in case_sections(case.meta["seed"]):
            by_section.setdefault(section, []).append(case.slug)
    raw = load_claims(path)
    known_sections = {entry["section"] for entry in raw}
    for section, slugs in by_section.items():
        if section not in known_sections:
            raise SeedClaimError(f"{', '.join(slugs)} name seed section {section!r}, which {path.name} does not list")
    claims, placed = [], set()
    for entry in raw:
        naming = by_section.get(entry["section"], [])
        kind = entry.get("kind", "claim")
        if kind not in KINDS:
            raise SeedClaimError(f"{path.name}: {entry['section']}: kind must be one of {KINDS}")
        if kind != "claim":
            if entry.get("cases") or not entry.get("covered"):
                raise SeedClaimError(f"{path.name}: {entry['section']}: a {kind} lists no cases and says in `covered` "
                                     "where the suite covers it")
            chosen = []
        elif "cases" in entry:
            for slug in entry["cases"]:
                if slug not in naming:
                    raise SeedClaimError(f"{path.name}: {entry['section']} lists case {slug!r}, "
                                         f"which does not exist or whose seed does not name {entry['section']}")
            chosen = list(entry["cases"])
        else:
            chosen = list(naming)
        placed.update((entry["section"], slug) for slug in chosen)
        claims.append(Claim(entry["section"], entry["claim"], chosen, kind, entry.get("covered", "")))
    for section, slugs in by_section.items():
        for slug in slugs:
            if (section, slug) not in placed:
                raise SeedClaimError(f"case {slug} names seed section {section}, but no claim of that section in "
                                     f"{path.name} lists it: add it to `cases` of the claim it addresses")
    return claims
