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
timeout 240 python3 -m leaklab check --nproc 1 tests/data/rank_steps.py:bounded_all_reduce \
  "${ARGS[@]}" --json >"$OUT/bounded.json" 2>"$OUT/bounded.err"
echo "--nproc bounded: $?" | tee -a "$OUT/codes.txt"
# The same with both flight-recorder names set by the user, and what one NCCL rank's heap does
# over thousands of bare all_reduces (tools/h200_nccl_heap.py: a ring buffer filling, or growth).
TORCH_FR_BUFFER_SIZE=0 TORCH_NCCL_TRACE_BUFFER_SIZE=0 timeout 240 python3 -m leaklab check --nproc 1 \
  tests/data/rank_steps.py:bounded_all_reduce "${ARGS[@]}" --json >"$OUT/bounded-fr-off.json" 2>"$OUT/bounded-fr-off.err"
echo "--nproc bounded, both names set: $?" | tee -a "$OUT/codes.txt"
timeout 300 python3 tools/h200_nccl_heap.py 3000 | tee "$OUT/nccl-heap.txt"
head -c 600 "$OUT/torchrun.txt"; echo
tail -n 3 "$OUT"/*.err
