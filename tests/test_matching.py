"""The held-out matching rates per round: counted per round, and round 2 rendered on a row of its own."""

from pathlib import Path

from leaklab.scripts import load_script
from leaklab_lab.catalog import _matching
from leaklab_lab.matching import FRESH_STEPS, _rates


def _row(family: str, suggested: list, entry: object = "absent", round_: int | None = None) -> dict:
    first = bool(suggested) and suggested[0][1] == family
    return {"family": family, "suggested": suggested, "first": first, "top3": first,
            **({} if entry == "absent" else {"entry": entry}), **({} if round_ is None else {"round": round_})}


def test_rates_are_counted_per_round_as_well_as_in_total():
    rows = {"a": _row("f", [["e1", "f", 0.9]], "e1", 1), "b": _row("f", [["e2", "g", 0.9]], "e1", 1),
            "c": _row("g", [], None, 2), "d": _row("g", [["e3", "g", 0.9]], None, 2)}
    rates = _rates(rows)
    assert (rates["counted"], rates["first"], rates["entry_first"], rates["no_entry_none"]) == (4, 2, 1, 1)
    assert (rates["rounds"]["1"]["counted"], rates["rounds"]["1"]["first"], rates["rounds"]["1"]["entry_first"]) == (2, 1, 1)
    assert (rates["rounds"]["2"]["counted"], rates["rounds"]["2"]["first"], rates["rounds"]["2"]["no_entry_counted"],
            rates["rounds"]["2"]["no_entry_none"]) == (2, 1, 2, 1)
    missed = _rates({**rows, "e": {**_row("g", [], None, 2), "verdict": "bounded"}})
    assert (missed["no_entry_counted"], missed["no_entry_none"], missed["none_close"]) == (3, 1, 1)  # a miss is no silence
    assert "rounds" not in _rates({name: {k: v for k, v in row.items() if k != "round"} for name, row in rows.items()})


def test_every_fresh_step_has_a_round_and_round_2_has_answers_for_family_and_resource():
    module = load_script(FRESH_STEPS)
    assert set(module.ROUND) == set(module.FAMILY) == set(module.RESOURCE)
    second = [name for name, r in module.ROUND.items() if r == 2]
    assert len(second) >= 12
    assert sum(1 for name in second if name in module.ENTRY and module.ENTRY[name] is None) >= 3


def test_each_round_is_rendered_on_a_row_of_its_own_with_its_label():
    module = load_script(FRESH_STEPS)
    one = next(name for name, r in module.ROUND.items() if r == 1)
    two = [name for name, r in module.ROUND.items() if r == 2][:2]
    rows = {name: {"family": module.FAMILY[name], "signature": None, "device": "cpu", "holder": None,
                   "holder_missing": "not found", "suggested": [], "first": False, "top3": False}
            for name in (one, *two)}
    document = {"environment": {"device_name": "cpu", "torch": "2.14.1+cpu"},
                "benchmarks": {"matching": {"rows": rows}}}
    lines = _matching({"generated_from": [], "entries": []}, [("m.json", document)])
    table = [line for line in lines if line.startswith("| held-out steps")]
    assert len(table) == 3, table  # the totals, round 1, round 2
    held_out = [line for line in table if "round 2 (written after round 1's fixes;" in line]
    assert len(held_out) == 1 and "| 2 | 0 |" in held_out[0], held_out
    assert any(f"`{two[0]}` (CPU (torch 2.14.1), round 2," in line for line in lines)


def test_the_corpus_is_scored_against_the_readers_answers(tmp_path, monkeypatch):
    """Each growing mistake of the real-model corpus counts against the reader's answer in
    real_models/reader_answers.toml: the same runs scored against a wrong family all miss, an
    answer of "none" asks for nothing close, a mistake the reader did not answer, or one that
    did not grow, is left out."""
    from pathlib import Path

    from leaklab.signature import load_entries
    from leaklab_lab import matching
    from leaklab_lab.catalog import load_all_results

    runs = list(dict(load_all_results())["cpu-models-torch2.14.1.json"]["runs"].values())
    mistakes = {run.name.split("/")[-1].split(".")[0] for run in runs
                if run.name.endswith(":make_mistake") and run.verdict in ("grows", "plateau")}
    right = matching.corpus(runs, load_entries())
    assert set(right["rows"]) == mistakes and right["counted"] == len(mistakes) > 0
    wrong = tmp_path / "answers.toml"
    names = sorted(mistakes)
    wrong.write_text("".join(f'[{name}]\nfamily = "threads_not_joined"\nentry = "none"\n' for name in names[:-1]))
    monkeypatch.setattr(matching, "CORPUS_ANSWERS", Path(wrong))
    scored = matching.corpus(runs, load_entries())
    assert set(scored["rows"]) == set(names[:-1]) and scored["first"] == 0 < right["first"]
    assert scored["no_entry_counted"] == len(names) - 1 and scored["entry_counted"] == 0


def test_each_round_is_kept_as_first_measured_from_the_files_history(tmp_path, monkeypatch):
    """tools/held_out_rounds.py: a round's counts come from the first commit whose file has it,
    not from a later one (where the rules had been fixed on its misses)."""
    import importlib.util
    import json
    import subprocess

    spec = importlib.util.spec_from_file_location("held_out_rounds", Path(__file__).parents[1] / "tools" / "held_out_rounds.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    counts = dict.fromkeys(tool.KEPT, 0)
    name = "results/m.json"
    (tmp_path / "results").mkdir()
    for first in (3, 5):  # round 2 measured held out (3 right), then rematched after its fixes (5 right)
        rounds = {"1": counts, "2": {**counts, "first": first}} if first == 3 else {"2": {**counts, "first": first}, "3": counts}
        (tmp_path / name).write_text(json.dumps({"benchmarks": {"matching": {"rounds": rounds}}}))
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", f"r{first}"], check=True)
    found = tool.first_measured(name, {2, 3})
    assert sorted(found) == ["2", "3"] and found["2"]["first"] == 3
    assert sorted(tool.first_measured(name, {3})) == ["3"]  # a round measured before the file's first held-out round is left out
    assert sorted(tool.first_measured(name, {2})) == ["2"]  # and one measured after rules were fixed on it (a later device's run)
    assert sorted(tool.first_measured(name, {1, 3})) == ["1", "3"]  # the rounds a device measured held out need not be a range


def test_a_run_of_some_rounds_replaces_their_rows_and_keeps_the_others(tmp_path):
    import argparse
    import subprocess
    import sys

    import pytest

    from leaklab_lab.cli import _rounds
    from leaklab_lab.matching import merged_rows

    earlier = {"note": "the first run", "benchmarks": {"matching": _rates({"a": _row("f", [["e1", "f", 0.9]], "e1", 1),
                                                                           "b": _row("f", [], None, 2)})}}
    now = _rates({"b": _row("f", [["e2", "f", 0.9]], None, 2), "c": _row("g", [], None, 2)})
    merged, note = merged_rows(earlier, now, "today")
    assert sorted(merged["rows"]) == ["a", "b", "c"] and merged["rows"]["b"]["suggested"] == [["e2", "f", 0.9]]
    assert merged["rounds"]["1"]["counted"] == 1 and merged["rounds"]["2"]["counted"] == 2
    assert note.startswith("rounds 2 measured now (today)") and "the first run" in note
    assert _rounds("12") == {12} and _rounds("3, 12") == {3, 12}
    for bad in ("x", "0", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="rounds are numbers"):
            _rounds(bad)
    truncated = tmp_path / "matching.json"
    truncated.write_text('{"format": ')
    done = subprocess.run([sys.executable, "-m", "leaklab", "bench", "--device", "cpu", "--matching", "--rounds", "12",
                           "--results", str(truncated)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not valid JSON" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_only_the_named_steps_are_measured_and_said_so_and_an_unknown_name_is_bad_input(monkeypatch):
    import pytest

    from leaklab.runner import BadInput
    from leaklab_lab import matching

    with pytest.raises(BadInput, match="no held-out step named not_a_step"):
        matching.fresh_steps("cpu", entries=[], steps={"not_a_step"})
    module = load_script(FRESH_STEPS)
    first_two = [name for name, r in module.ROUND.items() if r == 2][:2]
    ran = []
    monkeypatch.setattr(matching, "_isolated", lambda name, device: ran.append(name))  # a check that did not answer
    summary = matching.fresh_steps("cpu", entries=[], steps={first_two[0]})
    assert ran == [first_two[0]] and list(summary["rows"]) == [first_two[0]]
    before = {"note": "earlier", "benchmarks": {"matching": {"rows": {
        name: {**_row(module.FAMILY[name], [], None, 2)} for name in first_two}}}}
    merged, note = matching.merged_rows(before, summary, "after a change")
    assert note.startswith("1 of the steps of rounds 2 measured now (after a change)") and set(merged["rows"]) == set(first_two)
    whole, note = matching.merged_rows({"note": "earlier", "benchmarks": {"matching": {"rows": {}}}}, summary, "")
    assert note.startswith("rounds 2 measured now")


def test_two_readers_answers_are_compared_step_by_step_and_rendered(tmp_path, monkeypatch):
    """tools/reader_agreement.py: a step counts for the family where both name the same, for the entry
    where both name the same or both none; docs/harness.md renders the counts from the file."""
    import importlib.util
    import json

    from leaklab_lab import catalog

    spec = importlib.util.spec_from_file_location("reader_agreement", Path(__file__).parents[1] / "tools" / "reader_agreement.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    answer = lambda family, entry: {"family": family, "entry": entry}  # noqa: E731
    rows = {"same": {"first": answer("f", "e"), "second": answer("f", "e")},
            "other_entry": {"first": answer("f", "e"), "second": answer("f", "d")},
            "both_none": {"first": answer("g", None), "second": answer("g", None)},
            "one_none": {"first": answer("g", None), "second": answer("h", "c")}}
    assert tool._agree(rows, "first", "second") == {"family": 3, "entry": 2, "first_named": 2, "same_entry_where_named": 1,
                                                    "first_none": 2, "none_too": 1}
    assert tool._agree(rows, "second", "first") == {"family": 3, "entry": 2, "second_named": 3, "same_entry_where_named": 1,
                                                    "second_none": 1, "none_too": 1}
    checked = {name: {**row, "check": answer("g", None) if name == "one_none" else row["first"]} for name, row in rows.items()}
    assert tool._on_agreed(checked) == {"family_agreed": 3, "check_family": 3, "entry_agreed": 2, "check_entry": 2}
    checked["both_none"]["check"] = answer("f", "e")
    assert tool._on_agreed(checked) == {"family_agreed": 3, "check_family": 2, "entry_agreed": 2, "check_entry": 1}
    counts = {"steps": 4, "readers": tool._agree(rows, "first", "second"),
              "check_and_first": tool._agree(rows, "first", "second"), "check_and_second": tool._agree(rows, "second", "first"),
              "check_where_readers_agree": tool._on_agreed(checked)}
    (tmp_path / "reader-agreement-rounds9.json").write_text(json.dumps({"counts": counts, "rounds": [9, 9], "rules_at": "abc"}))
    (tmp_path / "reader-agreement-broken.json").write_text("{")
    monkeypatch.setattr(catalog, "READER_AGREEMENTS", tmp_path)
    table = catalog._reader_agreement()
    assert any("answered every step of round 9, 4 held-out steps" in line for line in table)
    assert "| the second reader and the first | 3 of 4 | 2 of 4 | 1 of 2 | 1 of 2 |" in table
    assert "| the check and the second reader | 3 of 4 | 2 of 4 | 1 of 3 | 1 of 1 |" in table
    assert "| the check (its rules at abc) and the first reader | 3 of 4 | 2 of 4 | 1 of 2 | 1 of 2 |" in table
    assert not any("answers of record" in line for line in table)
    assert any("the check named it on 2 of 3;" in line and "nothing close) on 1 of 2." in line for line in table)
    monkeypatch.setattr(catalog, "READER_AGREEMENTS", tmp_path / "none")
    assert catalog._reader_agreement() == []


def test_the_answers_of_record_are_the_readers_where_they_agree_and_the_adjudicators_where_not(tmp_path, monkeypatch):
    import importlib.util
    import json

    from leaklab_lab import catalog

    spec = importlib.util.spec_from_file_location("reader_agreement", Path(__file__).parents[1] / "tools" / "reader_agreement.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    answer = lambda family, entry: {"family": family, "entry": entry}  # noqa: E731
    rows = {"agreed": {"round": 1, "first": answer("f", "e"), "second": answer("f", "e"), "check": answer("f", None)},
            "split": {"round": 1, "first": answer("f", "e"), "second": answer("g", None), "check": answer("g", None)},
            "unjudged": {"round": 1, "first": answer("f", "e"), "second": answer("h", None), "check": answer("h", None)}}
    (tmp_path / "reader-agreement.json").write_text(json.dumps({"rows": rows}))
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "adjudicated.json").write_text(json.dumps({"split": {"family": "g", "entry": None}}))
    monkeypatch.setattr(tool, "RESULTS", tmp_path)
    tool.adjudicate(tmp_path / "work")
    document = json.loads((tmp_path / "adjudicated.json").read_text())
    assert sorted(document["rows"]) == ["agreed", "split"]  # a split the adjudicator did not answer is left out
    assert document["counts"] == {"steps": 2, "adjudicated": 1, "with_entry": 1,
                                  "first": {"family": 1, "entry_where_one": 1, "none_where_none": 0},
                                  "second": {"family": 2, "entry_where_one": 1, "none_where_none": 1},
                                  "check": {"family": 2, "entry_where_one": 0, "none_where_none": 1},
                                  "check_by_file": {"reader-agreement.json": {"steps": 2, "with_entry": 1, "family": 2,
                                                                              "entry_where_one": 0, "none_where_none": 1}}}
    monkeypatch.setattr(catalog, "READER_AGREEMENTS", tmp_path)
    table = catalog._adjudicated()
    assert "| the check (its answers in the tables above) | 2 of 2 | 0 of 1 | 1 of 1 |" in table
    assert "| the check, on the steps of [reader-agreement.json](results/held-out/reader-agreement.json) | 2 of 2 | 0 of 1 | 1 of 1 |" in table and "| the second reader | 2 of 2 | 1 of 1 | 1 of 1 |" in table


def test_the_text_a_second_reader_gets_leaves_out_the_sentences_that_name_an_answer():
    """tools/reader_agreement.py: a comment line that names an entry goes with the lines that finish its
    sentence; a part that begins anew stays, and so does "processes" as a plain word."""
    import ast
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("reader_agreement", Path(__file__).parents[1] / "tools" / "reader_agreement.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    lines = ["# https://example.org/issues/1 (\"a leak\", closed)",
             "# Seen: memory climbs in the worker processes.",
             "# Fix: close it. No entry fits: the closest is",
             "# the list of every batch, whose fix is a deque.",
             "# Here a pool of worker processes keeps its results.",
             "def make_step(device):",
             "    return None"]
    node = ast.parse("\n".join(lines)).body[0]
    banned = re.compile(r"\b(entry|feature_list)\b", re.I)
    assert tool._text(node, lines, banned).splitlines() == [lines[0], lines[1], lines[4], lines[5], lines[6]]
