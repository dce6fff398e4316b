"""Each held-out round's matching counts as first measured, while it was still held out.

The matching table in docs/harness.md rematches every committed row against the rules as they are
now, so a round whose misses the rules were later fixed on reads better there than it did held
out. This reads the git history of the matching results files and keeps, for each round, the
counts of the first commit whose file has that round (as `leaklab bench --matching` wrote them),
in results/held-out/rounds.json, which the catalog renders beside the table.

usage: python3 tools/held_out_rounds.py
"""

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Each file and the rounds it first measured while they were still held out: the H100's first
# matching run (2026-12-05) came after the rules had been fixed on rounds 1 to 8, and its next
# (2026-12-06) after rules had been fixed on rounds 10 to 12 as the CPU measured them; the H200 did
# not measure rounds 10 to 12. Round 13 was written after the rules of 2026-12-06 (68320ed); the H100
# first measured it (and round 11) at 7ed6b15, after the collector-off reading was fixed on misses of both.
# Round 14 was written after that reading (d4821f8) and the full CPU rerun, and measured held out on the
# CPU and the H100 (64b9df3). Round 15 was written after the graph shapes were read (353ad32) and measured
# held out at 98fe38d on the H100 (an H200 was asked for; the entries were that H100's own suite run's, read
# in the same call by tools/gpu_round.sh) and on the CPU. Round 16 was written after round 15's fixes (5a25e68)
# and measured held out on the CPU at a37e3f5; round 17 after the linecache fix (8435fdb), measured held out on the
# CPU at e1b0fc6; round 18 blind to the rules at 20fedaa, measured held out on the CPU at ef99561 (rules unchanged).
# The H100 measured rounds 17 and 18 held out at 22183f6 (naming rules unchanged since 8435fdb; an H200 was
# asked for), round 16 after the linecache fix made on its misses (not held out). The H200 measured rounds 17 and 18
# held out at ed2e2f8 (naming rules still unchanged since 8435fdb; the holder walk's roots changed to free the step,
# not to fix a miss). Round 19 was written blind to the rules at e1638ad and measured held out on the CPU at 34cda9b,
# after the collector-off entry (558b2cd), which was made on earlier rounds' misses while it was being written.
# Round 20 was written blind to the rules at e438a86 and measured held out on the CPU at 4d338c6, after the rule
# for tensors that only autograd graphs hold (89c199e), made on earlier rounds' rows while it was being written.
# The H200 measured round 20 held out at 60d3e77, and round 19 after it: no H200 had measured round 19 before
# the autograd-graph rule (89c199e), made on seen CPU rows two of which are round 19's (on the CPU one of them
# changed from no family to another wrong one, the other not at all), so its first H200 measurement is counted
# with that said here. Round 21 was written blind to the rules at 220829a and measured held out on the CPU after
# the judging of workers' own memory (555b04f), made on earlier rounds' rows while it was being written; that
# judging was reverted (ec4720b) and the round's three worker and process steps measured again (7d6f4c4): the
# first measurement below is the one made with it. Round 22 was written blind to the rules at e22f364 and
# measured held out on the CPU at bbdd95f, whose naming (joined-onto tensors, what gains in most steps, default
# arguments) was made on earlier rounds' rows while it was being written; one of its steps read "the walk failed"
# there (a census of mappings alone, mended at 8fd2f61), its family right from the mappings.
# On a lent H100 (an H200 was asked for), round 21 was measured held out from a copy of d8b3dc3's tree (its
# rules those of e22f364, before the naming made on its rows at bbdd95f), and round 22 at 21a24bb, in one call.
# Round 23 was written blind to the rules at 12a60e1 and measured held out at c8ccc12 (those rules, with the opt-in
# worker_objects not watched by default) on the CPU and on a lent H100.
# Round 24 was written blind to the rules and measured held out on the CPU at dbcfc8c (the rules of 0703c15, whose
# walk and one rule were made on earlier rounds' misses while it was being written); one of its steps raised there
# (torch.jit.trace under the tensor counter), mended after.
# On a lent H100 (torch 2.11.0), round 24 was measured held out from a copy of d7486b5's tree (those rules and the
# trace mend, before the two rules fixed on its misses at 0c5f3a5).
# Round 25 was written blind to the rules of 4c2392e (the census's growing containers read as evidence, the walk's
# unboxed chains replaced by them) and measured held out on the CPU at those rules.
FILES = {"results/cpu-matching-torch2.14.1.json": frozenset(range(2, 30)),
         "results/h200-matching-torch2.11.0.json": frozenset(range(2, 10)) | {13, 17, 18, 19, 20},
         "results/h100-matching-torch2.11.0.json": frozenset({9, 14, 15, 17, 18, 21, 22, 23, 24})}
# Measurements not counted, with why: (file, round) -> the commits whose rows of that round are skipped.
MERGE_ERRORS = {("results/cpu-matching-torch2.14.1.json", "17"): {"01345ff"}}  # a step lost two lines when merged (e1b0fc6): measured again
OUT = ROOT / "results" / "held-out" / "rounds.json"
KEPT = ("counted", "first", "top3", "none_close", "entry_counted", "entry_first", "no_entry_counted", "no_entry_none")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def first_measured(name: str, held_out: frozenset[int] | set[int]) -> dict[str, dict]:
    rounds: dict[str, dict] = {}
    for commit in git("log", "--format=%H", "--reverse", "--", name).split():
        try:
            summary = json.loads(git("show", f"{commit}:{name}"))["benchmarks"]["matching"]
        except (subprocess.CalledProcessError, ValueError, KeyError):
            continue
        for number, counts in summary.get("rounds", {}).items():
            if commit[:7] in MERGE_ERRORS.get((name, number), ()):
                continue
            if int(number) in held_out and number not in rounds:  # round 1 was never measured held out
                rounds[number] = {"commit": commit[:7], **{key: counts[key] for key in KEPT}}
    return rounds


def main() -> None:
    document = {"about": __doc__.split("\n\n")[0], "files": {name.removeprefix("results/"): first_measured(name, rounds) for name, rounds in FILES.items()}}
    OUT.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
