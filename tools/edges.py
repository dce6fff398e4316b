"""The edge steps (tests/data/edge_steps.py) on one device: the smallest leaks and the tricky
bounded steps, each run once under the default check; writes a JSON summary.
Usage: python3 tools/edges.py DEVICE OUT.json"""

import json
import sys
from pathlib import Path

import torch

from leaklab.runner import RunOptions, run_script

EDGES = Path(__file__).resolve().parent.parent / "tests" / "data" / "edge_steps.py"
LEAKS = ["block_512", "tensor_4b", "every_third_1k", "starts_late", "mlp_leak_512", "resnet18_leak_512", "bytes_512",
         "opens_files", "small_strings", "cyclic_garbage_kept"]
BOUNDED = ["noop", "mlp", "resnet18", "first_torch_call_late", "lazy_init_late", "cache_fills", "periodic_spike",
           "variable_batch", "decreasing", "random_temporaries", "cyclic_garbage"]

device, out = sys.argv[1], sys.argv[2]
rows = {}
for name in LEAKS + BOUNDED:
    report = run_script(EDGES, name, device, RunOptions())
    rows[name] = {"expected": "grows" if name in LEAKS else "bounded", "verdict": report.verdict,
                  "resource": report.resource, "per_step": report.per_step_bytes, "summary": report.summary(),
                  "restarts": report.restarts, "uncertain": report.uncertain, "confirmed_steps": report.confirmed_steps,
                  "median_step_seconds": report.median_step_seconds}
    print(f"{name:22} {report.summary()}", flush=True)
document = {"torch": torch.__version__, "device": device,
            "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu", "runs": rows}
Path(out).write_text(json.dumps(document, indent=1) + "\n")
misses = [n for n in LEAKS if rows[n]["verdict"] != "grows"]
alarms = [n for n in BOUNDED if rows[n]["verdict"] == "grows"]
print(f"leaks missed: {len(misses)} {misses}; false alarms: {len(alarms)} {alarms}")
