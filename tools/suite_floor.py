"""Issues 27 and 31: what sets the pace of the README's two commands on this CPU machine, and the
least time the test command can take here while it runs the catalog's cases as it does now,
measured, not estimated.

    python3 tools/suite_floor.py [--out results/suite-floor/cpu-torch<version>.json] [--note TEXT]

Three measurements, one after another on this machine:
1. ``import torch`` and ``import torch._dynamo`` (which torch.optim imports at the first optimizer
   a step builds) in fresh interpreters, the median of three: what every worker process pays once.
2. Every case script ``leaklab run`` runs by default, one after another in one fresh process with
   one torch thread (what each of ``leaklab run``'s two workers is on a 2-core machine), each
   timed: wall seconds, CPU seconds of the process and its children (DataLoader workers, the
   fresh interpreters of a case that isolates its scripts), the seconds its measured steps took
   (the report's ``step_seconds``) and the rest, which is the check's own work (warm-up, readings,
   passes, naming, release).
3. ``python3 -m pytest -n 2`` (the README's test command), ``--rounds`` times (3; its time varies
   from run to run on this machine), with ``tools/pytest_timeline.py``: its wall time, each
   worker's busy time, and the part of it spent in tests that run case scripts.

The least time of the test command (leaklab_lab/suite_floor.py renders it) is, in the run where
it is smallest, the workers' start-up plus the busier worker's time in tests that run case scripts:
the command with every other test left out, the case tests spread as they were. CPU seconds are no
floor here: the case runs' CPU time counts threads that spin while they wait (a fresh
interpreter's, a DataLoader's), which yield under load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE_FILES = ("tests/test_cases.py", "tests/test_attribution.py")  # the tests that run case scripts

_CASES = r"""
import json, resource, sys, time, warnings
warnings.filterwarnings("ignore")
import torch, torch._dynamo  # paid once per worker, measured apart
torch.set_num_threads(1)
from leaklab_lab.cases import discover, isolated, run_case

def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

rows = []
for case in discover():
    if "cpu" not in case.devices or {"slow", "distributed"} & set(case.markers("cpu")):
        continue
    for role in ("leak", "fix"):
        for script in case.scripts(role):
            wall, used = time.perf_counter(), cpu()
            report = run_case(case, role, "cpu", script).to_json()
            rows.append({"case": case.slug, "script": f"{role}/{script.stem}",
                         "seconds": round(time.perf_counter() - wall, 3), "cpu_seconds": round(cpu() - used, 3),
                         "step_seconds": round(sum(report.get("step_seconds") or []), 3),
                         "isolated": isolated(case, script)})
json.dump(rows, sys.stdout)
"""


def _load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def _import_seconds(statement: str, times: int = 3) -> float:
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True, cwd=ROOT)
        taken.append(time.perf_counter() - started)
    return round(statistics.median(taken), 2)


def _cases() -> list[dict]:
    done = subprocess.run([sys.executable, "-c", _CASES], check=True, cwd=ROOT, capture_output=True, text=True)
    return json.loads(done.stdout)


def _suite() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "tools"), "TIMELINE_DIR": folder}
        started = time.time()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                               "-p", "pytest_timeline"], cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.time() - started
        workers = {}
        for path in sorted(Path(folder).glob("timeline-*.jsonl")):
            runs = [json.loads(line) for line in path.read_text().splitlines()]
            workers[path.stem.removeprefix("timeline-")] = {
                "tests": len(runs),
                "first_test_at": round(min(begin for _, begin, _ in runs) - started, 1),
                "busy": round(sum(end - begin for _, begin, end in runs), 1),
                "busy_running_cases": round(sum(end - begin for name, begin, end in runs
                                                if name.startswith(CASE_FILES)), 1)}
    return {"command": "python3 -m pytest -n 2", "exit": done.returncode, "seconds": round(wall, 1),
            "last_line": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "", "workers": workers}


def main() -> int:
    import torch

    from leaklab.report import device_name
    from leaklab_lab.pool import cores

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "suite-floor" / f"cpu-torch{torch.__version__.split('+')[0]}.json")
    parser.add_argument("--note", default="")
    parser.add_argument("--rounds", type=int, default=3, help="runs of the test command (its time varies run to run)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    load_before = _load()
    result = {
        "commit": commit, "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "machine": {"cpu": device_name("cpu").removeprefix("CPU: "), "cores": cores(),
                    "python": platform.python_version()},
        "torch": torch.__version__, "load_before": load_before,
        "idle": load_before[0] < 0.25 * cores(),  # tools/fresh_clone_timing.sh's rule
        "import_seconds": {"torch": _import_seconds("import torch"),
                           "torch and torch._dynamo": _import_seconds("import torch, torch._dynamo")},
    }
    print("imports timed", file=sys.stderr)
    result["case_scripts"] = _cases()
    print(f"{len(result['case_scripts'])} case scripts timed", file=sys.stderr)
    result["suite_runs"] = []
    for done in range(args.rounds):
        result["suite_runs"].append(_suite())
        print(f"test command run {done + 1} of {args.rounds}: {result['suite_runs'][-1]['seconds']} s", file=sys.stderr)
    result["load_after"] = _load()
    if args.note:
        result["note"] = args.note
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if all(run["exit"] == 0 for run in result["suite_runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
