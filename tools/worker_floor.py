"""worker_memory's floor against what held-out worker leaks and the catalog's bounded runs measured.

The held-out leaks of DataLoader workers that the check calls bounded (rows of
results/cpu-matching-torch2.14.1.json, family dataloader_workers, verdict not grows) are checked
again here with the default settings, and each one's worker_memory rate is kept beside the floor
(leaklab/resources.py) and beside the rates of the catalog's bounded runs that read workers
(results/cpu-torch2.14.1.json). Written to results/worker-floor/cpu-torch<version>.json.

With ``--steps N`` (N measured steps instead of the default), the same held-out leaks and the
catalog's scripts whose workers' memory stays under the floor (the bounded runs above that read
workers) are checked with that many steps, each one's worker_memory rate and readings kept, to
see whether a longer series tells them apart: results/worker-floor/cpu-torch<version>-steps<N>.json.
With ``--only-workers`` as well, worker_memory is the only resource watched (``--resource
worker_memory``), to see whether the other readings in this process change how fast a bounded
run's workers rise: ...-steps<N>-worker_memory-only.json.

Each check keeps the rate over the first and the second half of its readings too (a leak keeps its
rate; workers that settle slow down).

With ``--repeat K``, each target is checked K times and every check is kept (``checks``): one
check per target showed a separation that a repeat did not hold (a bounded run's workers rise at
very different rates from one run to the next): ...-repeat<K>.json.

usage: python3 tools/worker_floor.py [--steps N [--only-workers] [--repeat K]]
"""

import json
import subprocess
import sys
from pathlib import Path

import torch

from leaklab import resources as known
from leaklab.verdict import theil_sen_slope
from leaklab_lab.cases import discover, run_name

ROOT = Path(__file__).resolve().parents[1]
STEPS = "tests/data/fresh_steps.py"


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _worker_memory(target: str, steps: int | None, only_workers: bool = False) -> dict:
    """The default check of ``target`` (with ``steps`` measured steps, if given): its verdict and
    worker_memory's verdict, rate, scatter and readings."""
    command = [sys.executable, "-m", "leaklab", "check", target, "--json", "--quiet"]
    if steps:
        command += ["--steps", str(steps)]
    if only_workers:
        command += ["--resource", "worker_memory"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout)
    if "worker_memory" not in (report.get("resources") or {}):  # the step failed before a series was read
        return {"verdict": report["verdict"], "error": report.get("error")}
    worker = report["resources"]["worker_memory"]
    samples = worker["samples"]
    half = len(samples) // 2
    return {"verdict": report["verdict"], "worker_memory": worker["verdict"], "per_step_bytes": worker["per_step_bytes"],
            "scatter_bytes": worker["scatter_bytes"], "readings": len(samples),
            "rise_bytes": samples[-1] - samples[0],
            # whether the rise holds: a leak keeps its rate, workers that settle slow down
            "first_half_per_step_bytes": theil_sen_slope(samples[:half + 1]),
            "second_half_per_step_bytes": theil_sen_slope(samples[half:])}


def longer(steps: int, only_workers: bool, repeat: int = 1) -> None:
    """Held-out worker leaks called bounded and the catalog's bounded worker runs, ``steps`` steps each."""
    floor = json.loads((ROOT / "results/worker-floor" / f"cpu-torch{torch.__version__.split('+')[0]}.json").read_text())
    targets = {name: f"{STEPS}:{name}" for name in floor["held_out_leaks_called_bounded"]}
    for case in discover():
        for role in ("leak", "fix"):
            for script in case.scripts(role):
                name = f"cpu/{run_name(case, role, script)}"  # as results files key runs
                if floor["catalog_runs"].get(name, {}).get("worker_memory") == "bounded":
                    targets[name] = str(script.relative_to(ROOT))
    found = {}
    for name, target in targets.items():
        leak = name in floor["held_out_leaks_called_bounded"]
        if repeat > 1:
            found[name] = {"held_out_leak": leak, "checks": [_worker_memory(target, steps, only_workers) for _ in range(repeat)]}
        else:
            found[name] = {"held_out_leak": leak, **_worker_memory(target, steps, only_workers)}
        print(name, found[name], flush=True)
    out = ROOT / "results" / "worker-floor" / f"cpu-torch{torch.__version__.split('+')[0]}-steps{steps}{'-worker_memory-only' if only_workers else ''}{f'-repeat{repeat}' if repeat > 1 else ''}.json"
    out.write_text(json.dumps({"commit": _commit(), "torch": torch.__version__, "steps": steps, "repeat": repeat,
                               "resources": ["worker_memory"] if only_workers else "all (the default)",
                               "floor_bytes_per_step": known.get("worker_memory").floor, "runs": found}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


def main() -> None:
    if "--steps" in sys.argv:
        repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
        longer(int(sys.argv[sys.argv.index("--steps") + 1]), "--only-workers" in sys.argv, repeat)
        return
    rows = json.loads((ROOT / "results/cpu-matching-torch2.14.1.json").read_text())["benchmarks"]["matching"]["rows"]
    missed = sorted(name for name, row in rows.items()
                    if row["family"] == "dataloader_workers" and row.get("verdict") != "grows")
    leaks = {}
    for name in missed:
        done = subprocess.run([sys.executable, "-m", "leaklab", "check", f"{STEPS}:{name}", "--json", "--quiet"],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        report = json.loads(done.stdout)
        worker = report["resources"]["worker_memory"]
        leaks[name] = {"round": rows[name].get("round"), "verdict": report["verdict"],
                       "worker_memory": worker["verdict"], "per_step_bytes": worker["per_step_bytes"],
                       "scatter_bytes": worker["scatter_bytes"], "readings": len(worker["samples"])}
        print(name, leaks[name], flush=True)
    runs = json.loads((ROOT / "results/cpu-torch2.14.1.json").read_text())["runs"]
    catalog = {name: {"verdict": run["verdict"], "worker_memory": run["resources"]["worker_memory"]["verdict"],
                      "per_step_bytes": run["resources"]["worker_memory"]["per_step_bytes"]}
               for name, run in runs.items()
               if "worker_memory" in (run.get("resources") or {}) and max(run["resources"]["worker_memory"]["samples"]) > 0}
    out = ROOT / "results" / "worker-floor" / f"cpu-torch{torch.__version__.split('+')[0]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": _commit(), "torch": torch.__version__,
                               "floor_bytes_per_step": known.get("worker_memory").floor,
                               "held_out_leaks_called_bounded": leaks, "catalog_runs": catalog}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
