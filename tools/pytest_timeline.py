"""A pytest plugin that writes when each test ran, per xdist worker, to find a suite's critical path.

    PYTHONPATH=tools TIMELINE_DIR=/tmp/tl python3 -m pytest -n 8 -p pytest_timeline
    python3 tools/pytest_timeline.py /tmp/tl      # each worker: busy, idle, its last tests

Each worker appends ``[nodeid, start, end]`` (seconds since the epoch) to
``$TIMELINE_DIR/timeline-<worker>.jsonl``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_STARTED = "_timeline_started"


def pytest_runtest_setup(item: Any) -> None:
    setattr(item, _STARTED, time.time())


def pytest_runtest_makereport(item: Any, call: Any) -> None:
    folder = os.environ.get("TIMELINE_DIR")
    if call.when != "teardown" or not folder:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(folder).mkdir(parents=True, exist_ok=True)  # a folder not made yet crashed every worker
    with open(Path(folder) / f"timeline-{worker}.jsonl", "a") as out:
        out.write(json.dumps([item.nodeid, getattr(item, _STARTED, call.start), time.time()]) + "\n")


def summary(folder: Path) -> str:
    rows = {path.stem.removeprefix("timeline-"): [json.loads(line) for line in path.read_text().splitlines()]
            for path in sorted(folder.glob("timeline-*.jsonl"))}
    start = min(r[1] for runs in rows.values() for r in runs)
    lines = []
    for worker, runs in rows.items():
        runs.sort(key=lambda r: r[1])
        busy = sum(end - begin for _, begin, end in runs)
        longest = sorted(runs, key=lambda r: r[1] - r[2])[:3]
        lines.append(f"{worker}: {len(runs)} tests, first at {runs[0][1] - start:.1f} s, last done at "
                     f"{runs[-1][2] - start:.1f} s, busy {busy:.1f} s; longest: "
                     + ", ".join(f"{r[0].split('::')[-1][:70]} {r[2] - r[1]:.1f} s" for r in longest))
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
