#!/usr/bin/env bash
# First check of the harness on the lent H200 (device tool): CUDA warm-up, host-allocator stats,
# one case pair, the empty_cache benchmark, attribution with a snapshot, and the overheads.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 - <<'PY'
import torch
x = torch.empty(1 << 20, pin_memory=True); del x
print("host_memory_stats:", dict(torch.cuda.host_memory_stats()))
print("host cache functions:", [n for n in dir(torch.cuda.memory) if "host" in n.lower()], hasattr(torch._C, "_host_emptyCache"))
PY
timeout 400 python3 -m pytest -m cuda -q -p no:cacheprovider \
  "tests/test_cases.py::test_case[loss_accumulation-cuda-leak]" "tests/test_cases.py::test_case[loss_accumulation-cuda-fix]" \
  tests/test_empty_cache.py tests/test_plugin.py \
  --benchmark-json "$OUT/bench.json" --leaklab-results "$OUT/smoke.json" 2>&1 | tee "$OUT/pytest.log"
python3 -m leaklab check tests/data/user_steps.py:grows --device cuda --attribute --steps 8 --quiet --snapshot "$OUT/snap.pickle"
python3 -m leaklab bench --device cuda --results "$OUT/bench-h200.json"
