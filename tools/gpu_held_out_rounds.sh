#!/usr/bin/env bash
# Held-out rounds on the lent GPU measured with the rules they were first measured with on the CPU, in one
# device call, then the cuda suite at this tree. The device copies the working tree, not git, so each round's
# tree travels as an archive made here first (ignored by git; pass it with the run tool's carry):
#   git archive d8b3dc3 | gzip -1 > held-out-d8b3dc3.tgz; git archive 21a24bb | gzip -1 > held-out-21a24bb.tgz
# Usage (device tool): TREES="21a24bb:22 d8b3dc3:21" bash tools/gpu_held_out_rounds.sh
# (round 22 from 21a24bb's tree, round 21 from d8b3dc3's: the rules of e22f364, before the naming made on its rows).
# SUITE=0 leaves the suite out. Everything written goes into $OUT/held-out-rounds.tgz, packed after every part.
set -u
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; WORK=$(mktemp -d)
TORCH=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case $GPU in *H200*) CARD=h200 ;; *H100*) CARD=h100 ;; *) CARD=gpu ;; esac  # files named for the card lent
echo "card $CARD $GPU" | tee "$WORK/parts.log"
WHEN=$(date -u +%Y-%m-%dT%H:%MZ)
MATCHING=$WORK/$CARD-matching-torch$TORCH.json
cp "results/$CARD-matching-torch$TORCH.json" "$MATCHING" 2>/dev/null  # the rows measured now replace theirs
part() { echo "$1: exit $2 in ${SECONDS}s" | tee -a "$WORK/parts.log"; tar czf "$FINAL/held-out-rounds.tgz" -C "$WORK" .; SECONDS=0; }
SECONDS=0
for tree in ${TREES:?which commit:round pairs}; do
  commit=${tree%%:*}; round=${tree##*:}; copy=$(mktemp -d)
  tar xzf "held-out-$commit.tgz" -C "$copy" || { part "round $round" 1; continue; }
  (cd "$copy" && timeout 200 python3 -m leaklab bench --device cuda --matching --rounds "$round" --results "$MATCHING" \
    --note "round $round held out from a copy of $commit's tree on the lent $GPU (device tool), $WHEN") > "$WORK/round$round.log" 2>&1
  part "round $round" $?; tail -2 "$WORK/round$round.log"
done
if [[ ${SUITE:-1} != 0 ]]; then
  OUT=$WORK WORKERS=8 SENSITIVITY=0 BENCH=0 bash tools/h200_full.sh > "$WORK/suite.log" 2>&1
  part suite $?; tail -3 "$WORK/suite.log"
fi
