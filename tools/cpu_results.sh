#!/usr/bin/env bash
# The committed CPU results: the whole test suite on this 2-core CI machine, writing the file
# the catalog reads. Usage: bash tools/cpu_results.sh [pytest options]
set -eu
cd "$(dirname "$0")/.."
TORCH=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
OUT="results/cpu-torch$TORCH.json"
SECONDS=0
python3 -m pytest -q -p no:cacheprovider -m "(slow or not slow) and not models" --leaklab-results "$OUT" --benchmark-json /tmp/leaklab-cpu-bench.json "$@" \
  --deselect tests/test_catalog.py::test_catalog_is_not_stale || true
echo "cpu suite wall time: ${SECONDS}s"
python3 - "$OUT" "$*" <<'PY'
import datetime, json, sys
from leaklab.files import atomic_write
path = sys.argv[1]
doc = json.load(open(path))
when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
args = f" {sys.argv[2]}" if sys.argv[2] else ""
doc["note"] = f"python3 -m pytest{args} --leaklab-results on the 2-core CI machine (no GPU), {when}"
atomic_write(path, json.dumps(doc, indent=1))  # the file stays whole if this fails
PY
