#!/usr/bin/env bash
# Benchmark: maple-async self-play vs the RandomPlayer ceiling on one managed server.
#   bash scripts/bench.sh --seconds 60 --concurrency 64
#   bash scripts/bench.sh --sweep "concurrency=8,32,128 max_wait_ms=0,2,10" --seconds 20
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${MAPLE_VENV:-.venv}/bin/maple-async" bench "$@"
