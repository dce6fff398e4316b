import glob
import json
import os

import numpy as np
from analyze import fit

rows = []
for p in sorted(glob.glob("/tmp/workerobj/raw/*.json")):
    res = json.load(open(p))
    r = fit(res)
    r["role"] = "leak" if res["spec"].startswith("fresh:") else "bounded"
    r["raw_file"] = os.path.basename(p)
    r["raw"] = {k: res[k] for k in ("ends", "durs", "uss", "steps", "warmup", "interval", "collect_every", "freeze")}
    r["raw"]["samples"] = {pid: s for pid, s in res["samples"].items()}
    rows.append(r)

ovh = []
for p in sorted(glob.glob("/tmp/workerobj/ovh/*.json")):
    res = json.load(open(p))
    d = res["durs"][res["warmup"]:]
    ovh.append({"file": os.path.basename(p), "spec": res["spec"], "probe": res["probe"], "freeze": res.get("freeze"),
                "interval": res["interval"], "median_ms": 1000 * float(np.median(d)) if d else None,
                "mean_ms": 1000 * float(np.mean(d)) if d else None, "n": len(d)})

json.dump({"runs": rows, "overhead": ovh}, open("/tmp/workerobj/results.json", "w"))


def f(v, nd=1):
    return "–" if v is None else f"{v:.{nd}f}"


lines = ["| step | role | children (scored) | step ms | objs/step/worker (mean) | h1 → h2 | blocks/step/worker (mean) | h1 → h2 "
         "| max-worker min(h1,h2) objs | total-live objs min(h1,h2) | USS KiB/step (mean / max) | rule A |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for r in sorted(rows, key=lambda r: (r["role"], r["spec"])):
    lines.append(
        f"| {r['spec']} | {r['role']} | {r['n_children']} ({r['n_scored']}) | {f(r['step_ms_median'],0)} "
        f"| {f(r['mean_objs_slope'],2)} | {f(r['mean_objs_h1'],2)} → {f(r['mean_objs_h2'],2)} "
        f"| {f(r['mean_blocks_slope'],1)} | {f(r['mean_blocks_h1'],1)} → {f(r['mean_blocks_h2'],1)} "
        f"| {f(r['max_min_half_objs'],2)} | {f(r['min_half_total_objs'],2)} "
        f"| {f(r['mean_uss_kib_slope'],1)} / {f(r['max_uss_kib_slope'],1)} | {'LEAK' if r['rule_objs_worker'] else 'bounded'} |"
        + (f" err: {r['error'][:40]}" if r["error"] else ""))
open("/tmp/workerobj/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
print()
for o in ovh:
    print(o)
