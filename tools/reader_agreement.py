"""How often two careful readers give a held-out step the same answer: the ceiling under the
matching rates, which score the check against one reader's answers (tests/data/fresh_steps.py's
FAMILY and ENTRY).

  python3 tools/reader_agreement.py sample DIR [ROUNDS]  # DIR/steps.md for a second reader, blind to the first
  python3 tools/reader_agreement.py record DIR [ROUNDS]  # DIR/second_reader.json against the first reader's answers:
                                                        # results/held-out/reader-agreement[-ROUNDS].json
  python3 tools/reader_agreement.py disagreements DIR SAMPLE_DIR...  # DIR/disagreements.md: every step the two readers
                                                        # answered differently in the agreement files, both answers unnamed
  python3 tools/reader_agreement.py adjudicate DIR      # DIR/adjudicated.json, an adjudicator's answers to those:
                                                        # results/held-out/adjudicated.json, the check scored against them

``sample`` draws five steps of each of rounds 14 to 25 (a fixed seed, so that ``record`` draws the same
ones), or every step of the rounds named (``26``, ``26-27``), each with the comment block of its report
and the prefixed helpers it uses. Comment lines that
name a family, an entry or the catalog are left out: the first reader's answer shows in some of them
("no entry fits, because..."). The second reader reads the catalog (cases/, CATALOG.md, docs/entries/),
never tests/ or the check's rules, and writes {step: {"family": ..., "entry": slug or null}}.
"""

import ast
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from leaklab.files import atomic_write  # noqa: E402
from leaklab.scripts import load_script  # noqa: E402

STEPS = ROOT / "tests" / "data" / "fresh_steps.py"
RESULTS = ROOT / "results" / "held-out"
MATCHING = ROOT / "results" / "cpu-matching-torch2.14.1.json"
ROUNDS, PER_ROUND, SEED = range(14, 26), 5, 26
_HELPER = re.compile(r"\b(_r\d+_\w+|_[A-Z][A-Z_0-9]+)\b")
_NEW_PART = re.compile(r"^# (https?://|Seen:|Fix:|Here )")  # where a comment block's next part begins


def _rounds(named: str | None) -> tuple[range, int | None]:
    """The rounds sampled and how many steps of each (None: all of them)."""
    if named is None:
        return ROUNDS, PER_ROUND
    first, _, last = named.partition("-")
    return range(int(first), int(last or first) + 1), None


def _sample(rounds: range = ROUNDS, per_round: int | None = PER_ROUND) -> tuple[list[str], dict[str, ast.AST], list[str], Any]:
    module = load_script(STEPS)
    source = STEPS.read_text()
    definitions: dict[str, ast.AST] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            definitions[node.name] = node
        for target in getattr(node, "targets", []):
            if isinstance(target, ast.Name):
                definitions[target.id] = node
    rng = random.Random(SEED)
    chosen = []
    for number in rounds:
        names = sorted(name for name in module.FAMILY if module.ROUND.get(name) == number and name in definitions)
        chosen += rng.sample(names, min(per_round or len(names), len(names)))
    rng.shuffle(chosen)
    return chosen, definitions, source.splitlines(), module


def _text(node: ast.AST, lines: list[str], banned: re.Pattern[str]) -> str:
    """The definition with the comment block right above it, less the lines that name an answer."""
    start = (node.decorator_list[0].lineno if getattr(node, "decorator_list", None) else node.lineno) - 1
    top = start
    while top > 0 and lines[top - 1].startswith("#"):
        top -= 1
    comments, dropping = [], False
    for line in lines[top:start]:
        # A line that names an answer goes, and so do the lines that finish its sentence (one round 28
        # reader read half a sentence of the writer's reasoning where only its first line had gone).
        if banned.search(line) or (dropping and not _NEW_PART.match(line)):
            dropping = not line.rstrip().endswith(".")
            continue
        dropping = False
        comments.append(line)
    body = [line.split("#", 1)[0].rstrip() if "#" in line and banned.search(line.split("#", 1)[1]) else line
            for line in lines[start:node.end_lineno]]
    return "\n".join(comments + body)


def _commit() -> str:
    """The commit whose rules gave the check's answers (the checkout's, with a mark where the rules differ from it)."""
    import subprocess

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    edited = subprocess.run(["git", "status", "--porcelain", "leaklab"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return f"{head} with edits" if edited else head


def sample(folder: Path, named: str | None = None) -> None:
    chosen, definitions, lines, _ = _sample(*_rounds(named))
    slugs = [path.stem for path in (ROOT / "cases").glob("*.toml") if path.stem != "families"]
    families = list(tomllib.loads((ROOT / "cases" / "families.toml").read_text()))
    # Answers are slugs and family keys with underscores; "processes" is a family's key and a plain word too.
    answers = [name for name in slugs + families if "_" in name]
    banned = re.compile(r"\b(entry|entries|catalog|family|families|" + "|".join(map(re.escape, answers)) + r")\b", re.I)
    parts = []
    for number, name in enumerate(chosen, 1):
        text = _text(definitions[name], lines, banned)
        helpers, seen, todo = [], set(), sorted(set(_HELPER.findall(text)))
        while todo:  # in the order first named, so that the same file comes out every time
            helper = todo.pop(0)
            if helper in seen or helper not in definitions:
                continue
            seen.add(helper)
            helpers.append(_text(definitions[helper], lines, banned))
            todo += sorted(set(_HELPER.findall(helpers[-1])) - seen)
        parts.append(f"## Step {number}: {name}\n\n```python\n{text}\n\n# helpers it uses:\n" + "\n\n".join(helpers) + "\n```\n")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "steps.md").write_text("\n".join(parts))
    print(f"{folder / 'steps.md'}: {len(chosen)} steps")


def _check_answers() -> dict[str, dict[str, str | None]]:
    """The check's answer for each held-out step of the CPU matching file, rematched with the rules as
    they are now: its first suggestion's family and entry; where nothing is close, the one family the
    evidence named and no entry; where it did not find growth, its verdict in both places."""
    from leaklab.signature import Signature, load_entries, redecide
    from leaklab_lab.matching import rematch

    summary = json.loads(MATCHING.read_text())["benchmarks"]["matching"]
    answers = {}
    for name, row in rematch(summary, load_entries())["rows"].items():
        if row["suggested"]:
            answers[name] = {"family": row["suggested"][0][1], "entry": row["suggested"][0][0]}
        elif row.get("verdict") != "grows" or not row.get("signature"):
            answers[name] = {"family": row.get("verdict"), "entry": row.get("verdict")}
        else:
            decided = redecide(Signature.from_json(row["signature"]), row.get("holder"), row.get("holder_missing"))
            families = tuple(decided.families or ())
            answers[name] = {"family": families[0] if len(families) == 1 else None, "entry": None}
    return answers


def _agree(rows: dict[str, dict], a: str, b: str) -> dict[str, int]:
    named = [row for row in rows.values() if row[a]["entry"]]
    return {"family": sum(row[a]["family"] == row[b]["family"] for row in rows.values()),
            "entry": sum(row[a]["entry"] == row[b]["entry"] for row in rows.values()),
            f"{a}_named": len(named), "same_entry_where_named": sum(row[a]["entry"] == row[b]["entry"] for row in named),
            f"{a}_none": len(rows) - len(named),
            "none_too": sum(not row[b]["entry"] for row in rows.values() if not row[a]["entry"])}


def _on_agreed(rows: dict[str, dict]) -> dict[str, int]:
    """The check scored only where the two readers gave the same answer: the answers two careful
    readers reproduce."""
    family = [row for row in rows.values() if row["first"]["family"] == row["second"]["family"]]
    entry = [row for row in rows.values() if row["first"]["entry"] == row["second"]["entry"]]
    return {"family_agreed": len(family), "check_family": sum(row["check"]["family"] == row["first"]["family"] for row in family),
            "entry_agreed": len(entry), "check_entry": sum(row["check"]["entry"] == row["first"]["entry"] for row in entry)}


def record(folder: Path, named: str | None = None) -> None:
    rounds, per_round = _rounds(named)
    chosen, _, _, module = _sample(rounds, per_round)
    second = json.loads((folder / "second_reader.json").read_text())
    check = _check_answers()
    rows = {name: {"round": module.ROUND[name], "first": {"family": module.FAMILY[name], "entry": module.ENTRY.get(name)},
                   "second": {"family": second[name]["family"], "entry": second[name].get("entry")},
                   "check": check.get(name, {"family": None, "entry": None})}
            for name in chosen if name in second}
    counts = {"steps": len(rows), "readers": _agree(rows, "first", "second"),
              "check_and_first": _agree(rows, "first", "check"), "check_and_second": _agree(rows, "second", "check"),
              "check_where_readers_agree": _on_agreed(rows)}
    sampled = f"{per_round} steps of each of" if per_round else "every step of"
    result = RESULTS / (f"reader-agreement-rounds{named}.json" if named else "reader-agreement.json")
    atomic_write(str(result), json.dumps({
        "note": f"{sampled} rounds {rounds.start}-{rounds.stop - 1} (seed {SEED}), a second reader blind to "
                "the first (tools/reader_agreement.py); the check's answers from "
                f"{MATCHING.name}, rematched with the rules as they are now",
        "rounds": [rounds.start, rounds.stop - 1], "sampled": per_round, "rules_at": _commit(),
        "counts": counts, "rows": rows}, indent=1))
    print(result, counts)


def _agreement_files() -> list[Path]:
    return [RESULTS / "reader-agreement.json", *sorted(RESULTS.glob("reader-agreement-rounds*.json"))]


def disagreements(folder: Path, *samples: str) -> None:
    """Every step whose two answers differ, for an adjudicator: its text as the second reader read it
    (from each sample's steps.md, in the order of the agreement files) and both answers, A and B in an
    order drawn at random (the adjudicator is not told whose is whose)."""
    rng = random.Random(7)
    parts, whose = [], {}
    for path, sampled in zip(_agreement_files(), samples, strict=True):
        text = (Path(sampled) / "steps.md").read_text()
        sections = {m.group(1): m.group(0) for m in re.finditer(r"## Step \d+: (\w+)\n.*?```\n", text, re.S)}
        for name, row in json.loads(path.read_text())["rows"].items():
            if row["first"] == row["second"]:
                continue
            pair = [("first", row["first"]), ("second", row["second"])]
            rng.shuffle(pair)
            whose[name] = {"A": pair[0][0], "B": pair[1][0]}
            answers = "".join(f"Answer {letter}: family `{answer['family']}`, entry `{answer['entry']}`\n"
                              for letter, (_, answer) in zip("AB", pair, strict=True))
            parts.append(f"## {name}\n\n{answers}\n{sections[name].split(chr(10), 1)[1]}\n")
    rng.shuffle(parts)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "disagreements.md").write_text("\n".join(parts))
    (folder / "key.json").write_text(json.dumps(whose, indent=1))
    print(f"{folder / 'disagreements.md'}: {len(parts)} steps")


def _right(answer: dict[str, Any], gold: dict[str, Any]) -> tuple[bool, bool]:
    return answer["family"] == gold["family"], answer["entry"] == gold["entry"]


def adjudicate(folder: Path) -> None:
    """The answers of record: the two readers' where they agree, the adjudicator's where they do not;
    each reader and the check scored against them."""
    adjudicated = json.loads((folder / "adjudicated.json").read_text())
    rows = {}
    for path in _agreement_files():
        document = json.loads(path.read_text())
        for name, row in document["rows"].items():
            decided = adjudicated.get(name) if row["first"] != row["second"] else row["first"]
            if decided is None:
                continue
            gold = {"family": decided["family"], "entry": decided.get("entry")}
            rows[name] = {"round": row["round"], "gold": gold, "adjudicated": row["first"] != row["second"], "file": path.name,
                          **{who: row[who] for who in ("first", "second", "check")}}
    counts = {"steps": len(rows), "adjudicated": sum(row["adjudicated"] for row in rows.values()),
              "with_entry": sum(bool(row["gold"]["entry"]) for row in rows.values())}
    def scored(who: str, among: list[dict[str, Any]]) -> dict[str, int]:
        right = [_right(row[who], row["gold"]) + (bool(row["gold"]["entry"]),) for row in among]
        return {"family": sum(f for f, _, _ in right), "entry_where_one": sum(e for _, e, named in right if named),
                "none_where_none": sum(e for _, e, named in right if not named)}

    for who in ("first", "second", "check"):
        counts[who] = scored(who, list(rows.values()))
    # The check per agreement file: each file's answers were given by the rules named in it (held out or not).
    counts["check_by_file"] = {}
    for path in _agreement_files():
        among = [row for row in rows.values() if row["file"] == path.name]
        if among:
            counts["check_by_file"][path.name] = {"steps": len(among), "with_entry": sum(bool(row["gold"]["entry"]) for row in among),
                                                  **scored("check", among)}
    atomic_write(str(RESULTS / "adjudicated.json"), json.dumps({
        "note": "the answers of record for the steps of the agreement files: the two readers' where they agree, an "
                "adjudicator's (blind to whose answer was whose, and to the check's) where they do not "
                "(tools/reader_agreement.py); each reader and the check (the answers recorded in the agreement files) scored against them",
        "counts": counts, "rows": rows}, indent=1))
    print(RESULTS / "adjudicated.json", counts)


if __name__ == "__main__":
    commands = {"sample": sample, "record": record, "disagreements": disagreements, "adjudicate": adjudicate}
    commands[sys.argv[1]](Path(sys.argv[2]), *sys.argv[3:])
