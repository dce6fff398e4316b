"""Does a forked worker's resident memory tell copy-on-write from a cache of its own? (an experiment)

A worker that writes to pages it shares with its parent (the reference counts of a dataset's
Python objects) copies them: its unique memory grows, its resident memory should not. A worker
that makes memory of its own (a cache) should grow both. Two readings of the same held-out steps:

- ``plain``: the step in a plain process (no check), the workers' smaps_rollup read every 5 steps;
- ``check``: the step under the check, as ``leaklab bench --matching`` runs it, with the
  ``worker_resident`` resource (the workers' RSS, read with ``worker_memory``).

Under the check as it was when this file was added (c1a09d0), the caches' workers reused free heap
pages they had inherited resident from the check's process, so their resident memory stayed flat as
copy-on-write's does; the check now gives those pages back before the factory forks anything
(leaklab.measure.release_free_heap). Each results file says the commit it was measured at.

usage: PYTHONPATH=. python3 tools/worker_objects/resident.py plain|check NAME[,NAME...] OUT.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPS = 60


def _rollup(pid: int) -> dict[str, int]:
    fields: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                    fields[parts[0][:-1]] = int(parts[1])
    except OSError:
        pass
    return fields


def plain_child(name: str) -> None:
    """Run in a fresh interpreter: the step's workers' memory, KiB per step after 10 steps."""
    import psutil

    sys.path.insert(0, str(ROOT))
    from tests.data import fresh_steps

    step = getattr(fresh_steps, name)("cpu")
    rows = []
    for index in range(STEPS):
        step()
        if index % 5 == 4:
            total = {"Rss": 0, "Private": 0}
            for child in psutil.Process().children(recursive=True):
                fields = _rollup(child.pid)
                total["Rss"] += fields.get("Rss", 0)
                total["Private"] += fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
            rows.append((index + 1, total))
    (first_step, first), (last_step, last) = rows[1], rows[-1]
    print(json.dumps({key: round((last[key] - first[key]) / (last_step - first_step), 1) for key in first}))
    sys.stdout.flush()
    os._exit(0)  # the step's workers go with the process


def plain(name: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "plain-child", name], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def check(name: str) -> dict[str, object]:
    from leaklab_lab import matching

    report = matching._isolated(name, "cpu")
    resources = report.resources
    return {"verdict": report.verdict,
            **{key: {"verdict": resources[key].verdict, "kib_per_step": round(resources[key].per_step_bytes / 1024, 1)}
               for key in ("worker_memory", "worker_resident")}}


def main() -> None:
    if sys.argv[1] == "plain-child":
        plain_child(sys.argv[2])
        return
    mode, names, out = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
    measure = plain if mode == "plain" else check
    with ThreadPoolExecutor(2) as pool:
        rows = dict(zip(names, pool.map(measure, names), strict=True))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    Path(out).write_text(json.dumps({"mode": mode, "commit": commit, "command": " ".join(sys.argv), "rows": rows},
                                    indent=1) + "\n")


if __name__ == "__main__":
    main()
