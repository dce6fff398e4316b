#!/usr/bin/env python3
"""Repeated runs of the real-model corpus: keep the first as the results file the catalog reads
(with a note saying how it was made) and print every flip between the runs (a verdict, or a
per-resource verdict, that differs), as tools/flake_gate.py finds them.

    python3 tools/models_runs.py --keep results/cpu-models-torch2.14.1.json --note "..." run1.json run2.json ...
    python3 tools/models_runs.py --json results/models-gate/cpu.json serial=run1.json "-n 2"=run6.json ...

A run may be given as LABEL=PATH (how it was made: serial, -n 2, beside load); ``--json`` keeps the
comparison (runs, verdicts compared, flips), which docs/harness.md renders under Real models.
The last line gives the counts; exit 0 when nothing flipped, 1 otherwise."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flake_gate import find_flips, verdicts  # noqa: E402

from leaklab.files import atomic_write  # noqa: E402


def wrong(document: dict) -> list[str]:
    """The run's wrong answers: a bounded idiom called grows, a mistake not."""
    return sorted(key for key, run in document["runs"].items()
                  if run.get("twin") and (run["verdict"] == "grows") != (run["twin"] == "mistake"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="PATH", help="write the first run here, with --note")
    parser.add_argument("--note", default="", help="how the runs were made")
    parser.add_argument("--json", metavar="PATH", help="write the comparison here")
    parser.add_argument("runs", nargs="+", help="the runs' results files (--leaklab-results), each PATH or LABEL=PATH")
    args = parser.parse_args(argv)
    labelled = [run.rsplit("=", 1) if "=" in run else ["", run] for run in args.runs]
    paths = [Path(path) for _, path in labelled]
    documents = [json.loads(path.read_text()) for path in paths]
    if args.keep:
        first = dict(documents[0], note=f"{args.note}, run 1 of {len(documents)}" if args.note else documents[0]["note"])
        atomic_write(args.keep, json.dumps(first, indent=1) + "\n")
    flips = find_flips([(path.name, "suite", document) for path, document in zip(paths, documents, strict=True)])
    for flip in flips:
        print(f"FLIP {flip['what']}: "
              + "; ".join(f"{verdict} in {', '.join(labels)}" for verdict, labels in flip["verdicts"].items()))
    compared = len(set().union(*(verdicts(document) for document in documents)))
    print(f"{len(documents)} runs, {len(flips)} flips, {compared} verdicts compared")
    if args.json:
        atomic_write(args.json, json.dumps({
            "runs": [{"file": path.name, "how": label or "", "created": document.get("created", ""), "wrong": wrong(document),
                      "torch": document["environment"]["torch"], "device_name": document["environment"]["device_name"]}
                     for (label, _), path, document in zip(labelled, paths, documents, strict=True)],
            "compared": compared, "flips": flips}, indent=1) + "\n")
    return 1 if flips else 0


if __name__ == "__main__":
    sys.exit(main())
