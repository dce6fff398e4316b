#!/usr/bin/env bash
# The GPU figures of issue 29 (holder chains, family first) on the lent H200 (device tool), from
# the bare checkout: the cuda case suite again (its leak runs now carry holder chains, which the
# catalog's signatures and the leave-one-out rates are derived from) and the held-out steps
# matched to the catalog. Writes under $OUT: h200-torch<version>.json, h200-matching-torch<version>.json,
# pytest.log, matching.log. Then here: copy both JSON files into results/ and run
# `python3 -m leaklab catalog` (docs/harness.md renders the rates from them).
# Usage (device tool): bash tools/h200_holders.sh   (WORKERS=8 by default; about 8 min)
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
WORKERS=${WORKERS:-8} SENSITIVITY=0 BENCH=0 MATCHING=1 bash "$(dirname "$0")/h200_full.sh" "$@"
TORCH=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
# How long naming the holder took per growing run, from the reports' own clocks (the naming phase
# holds the extra steps, when there were any, and the walk).
python3 - "$OUT/h200-torch$TORCH.json" <<'PY' | tee "$OUT/holders.log"
import json, statistics, sys
doc = json.load(open(sys.argv[1]))
runs = [run for run in doc["runs"].values() if run.get("verdict") == "grows"]
chains = [run for run in runs if run.get("holder")]
naming = [run.get("phase_seconds", {}).get("naming", 0.0) for run in runs]
print(f"growing runs: {len(runs)}; with a holder chain: {len(chains)}; "
      f"naming phase median {statistics.median(naming) if naming else 0:.3f} s, max {max(naming, default=0):.3f} s")
for run in chains[:60]:
    print(f"  {run['name']}: " + " -> ".join(f"{l['name']} ({l['type']})" if l['name'] else l['type'] for l in run["holder"]))
PY
