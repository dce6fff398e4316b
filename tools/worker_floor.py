"""worker_memory's floor against what held-out worker leaks and the catalog's bounded runs measured.

The held-out leaks of DataLoader workers that the check calls bounded (rows of
results/cpu-matching-torch2.14.1.json, family dataloader_workers, verdict not grows) are checked
again here with the default settings, and each one's worker_memory rate is kept beside the floor
(leaklab/resources.py) and beside the rates of the catalog's bounded runs that read workers
(results/cpu-torch2.14.1.json). Written to results/worker-floor/cpu-torch<version>.json.

usage: python3 tools/worker_floor.py
"""

import json
import subprocess
import sys
from pathlib import Path

import torch

from leaklab import resources as known

ROOT = Path(__file__).resolve().parents[1]
STEPS = "tests/data/fresh_steps.py"


def main() -> None:
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
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    out = ROOT / "results" / "worker-floor" / f"cpu-torch{torch.__version__.split('+')[0]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": commit, "torch": torch.__version__,
                               "floor_bytes_per_step": known.get("worker_memory").floor,
                               "held_out_leaks_called_bounded": leaks, "catalog_runs": catalog}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
