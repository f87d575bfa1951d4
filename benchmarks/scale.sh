#!/usr/bin/env bash
# Shard-scaling curve: short self-play training runs at several shard counts, each
# summarised over its steady state (updates after the first 20 s).
#   SHARDS="1 2 4 8" MINUTES=1 DEVICE=cuda bash benchmarks/scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
M="${MAPLE_VENV:-.venv}/bin/maple-async"
OUT=${OUT:-runs/scale}
mkdir -p "$OUT"
for N in ${SHARDS:-1 2}; do
  rm -rf "$OUT/s$N"
  "$M" train --config "${CONFIG:-gpu}" --device "${DEVICE:-auto}" --train.shards "$N" \
    --train.worker_device cpu --train.opponents self:1.0 --concurrency "${CONCURRENCY:-64}" \
    --train.sides_per_update 128 --train.max_minutes "${MINUTES:-1}" --train.total_sides 10000000 \
    --train.eval_battles 0 --train.tensorboard false --train.checkpoint_every_updates 1000 \
    --train.run_dir "$OUT/s$N" > "$OUT.s$N.log" 2>&1 || { echo "shards=$N failed: see $OUT.s$N.log"; continue; }
  "${MAPLE_VENV:-.venv}/bin/python" benchmarks/scale_summary.py "$OUT/s$N/metrics.csv" "$N"
done
