#!/usr/bin/env bash
# The check under torchrun on the lent H200 (device tool): one rank on CUDA with NCCL, through
# torchrun and through --nproc, a step with an all_reduce that keeps 1 MiB of device memory a step
# (tests/data/rank_steps.py:device_leak_on_last_rank), and the same with a bounded step. Writes
# under $OUT: torchrun.txt, nproc.json, bounded.json and codes.txt (each command's exit code).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
ARGS=(--device cuda --steps 10 --warmup 3 --quiet --timeout 60)
timeout 240 python3 -m torch.distributed.run --nproc-per-node 1 -m leaklab check \
  tests/data/rank_steps.py:device_leak_on_last_rank "${ARGS[@]}" >"$OUT/torchrun.txt" 2>"$OUT/torchrun.err"
echo "torchrun leak: $?" | tee "$OUT/codes.txt"
timeout 240 python3 -m leaklab check --nproc 1 tests/data/rank_steps.py:device_leak_on_last_rank "${ARGS[@]}" --json \
  >"$OUT/nproc.json" 2>"$OUT/nproc.err"
echo "--nproc leak: $?" | tee -a "$OUT/codes.txt"
LEAKLAB_TEST_FAIL=none timeout 240 python3 -m leaklab check --nproc 1 tests/data/rank_steps.py:fails_on_rank1 \
  "${ARGS[@]}" --json >"$OUT/bounded.json" 2>"$OUT/bounded.err"
echo "--nproc bounded: $?" | tee -a "$OUT/codes.txt"
head -c 600 "$OUT/torchrun.txt"; echo
tail -n 3 "$OUT"/*.err
