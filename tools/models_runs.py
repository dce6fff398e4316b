#!/usr/bin/env python3
"""Repeated runs of the real-model corpus: keep the first as the results file the catalog reads
(with a note saying how it was made) and print every flip between the runs (a verdict, or a
per-resource verdict, that differs), as tools/flake_gate.py finds them.

    python3 tools/models_runs.py --keep results/cpu-models-torch2.14.1.json --note "..." run1.json run2.json ...

The last line gives the counts; exit 0 when nothing flipped, 1 otherwise."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flake_gate import find_flips  # noqa: E402

from leaklab.files import atomic_write  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="PATH", help="write the first run here, with --note")
    parser.add_argument("--note", default="", help="how the runs were made")
    parser.add_argument("runs", nargs="+", type=Path, help="the runs' results files (--leaklab-results)")
    args = parser.parse_args(argv)
    documents = [json.loads(path.read_text()) for path in args.runs]
    if args.keep:
        first = dict(documents[0], note=f"{args.note}, run 1 of {len(documents)}" if args.note else documents[0]["note"])
        atomic_write(args.keep, json.dumps(first, indent=1) + "\n")
    flips = find_flips([(path.name, "suite", document) for path, document in zip(args.runs, documents, strict=True)])
    for flip in flips:
        print(f"FLIP {flip['what']}: "
              + "; ".join(f"{verdict} in {', '.join(labels)}" for verdict, labels in flip["verdicts"].items()))
    print(f"{len(documents)} runs, {len(flips)} flips")
    return 1 if flips else 0


if __name__ == "__main__":
    sys.exit(main())
