#!/usr/bin/env bash
# A held-out round on the lent GPU (device tool), in one call: the cuda suite (the results the
# catalog's CUDA entries are read from), the entries' signatures rendered from that run, then the
# round's steps checked and matched against them. Everything written goes into $OUT/gpu-round.tgz.
# Usage (device tool): MATCHING_ROUNDS=15 bash tools/gpu_round.sh
# On an H100 (the device may lend one for an H200 call) the entries are the H100's own run's, on
# this machine only: the committed catalog reads the H200's file, which the call does not replace.
set -u
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}
WORK=$(mktemp -d)
TORCH=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case $GPU in *H200*) CARD=h200 ;; *H100*) CARD=h100 ;; *) CARD=gpu ;; esac
SECONDS=0
OUT=$WORK WORKERS=${WORKERS:-8} SENSITIVITY=0 BENCH=0 bash tools/h200_full.sh > "$WORK/suite.log" 2>&1
echo "suite: ${SECONDS}s" | tee -a "$WORK/parts.log"; tail -3 "$WORK/suite.log"
tar czf "$FINAL/gpu-round.tgz" -C "$WORK" .
if [[ -f "$WORK/$CARD-torch$TORCH.json" ]]; then
  cp "$WORK/$CARD-torch$TORCH.json" "results/h200-torch$TORCH.json"  # this machine's copy only
  python3 -m leaklab catalog > "$WORK/catalog.log" 2>&1 || echo "catalog: failed (see catalog.log)" | tee -a "$WORK/parts.log"
  cp leaklab/catalog_signatures.json "$WORK/catalog_signatures-$CARD.json"
fi
SECONDS=0
OUT=$WORK SUITE=0 SENSITIVITY=0 BENCH=0 MATCHING=1 MATCHING_LIMIT=${MATCHING_LIMIT:-360} \
  MATCHING_ROUNDS=${MATCHING_ROUNDS:?which rounds} bash tools/h200_full.sh > "$WORK/matching.log" 2>&1
echo "matching: ${SECONDS}s" | tee -a "$WORK/parts.log"; tail -8 "$WORK/matching.log"
tar czf "$FINAL/gpu-round.tgz" -C "$WORK" .
