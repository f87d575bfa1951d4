#!/usr/bin/env bash
# A lever's A/B: each arm trains CONFIG once per seed, one run at a time (two at
# once would halve each other's speed), then evaluates against the held-out heuristics bot
# (train.eval_*), and the table of every run's figures is printed from the eval.json files.
#
#   benchmarks/ab.sh CONFIG OUT "NAME|WORKTREE|EXTRA ARGS" "NAME|WORKTREE|EXTRA ARGS" [SEEDS]
#
# CONFIG: a YAML file (both arms read this one) or a preset by name (each arm reads its own).
# WORKTREE: the code the arm runs (a git worktree of a branch, or . for this one); EXTRA
# ARGS: config overrides of that arm. SEEDS: default "1 2". Runs go to OUT/NAME-sSEED;
# a run whose eval.json exists is not run again (an interrupted A/B continues).
# e.g. benchmarks/ab.sh gen4random /tmp/ab "base|.|" "sets|../sets|"
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${MAPLE_VENV:-$PWD/.venv}/bin/python
CONFIG=$1 A=$3 B=$4 SEEDS=${5:-1 2}
[ -f "$CONFIG" ] && CONFIG=$(realpath "$CONFIG")
mkdir -p "$2" && OUT=$(realpath "$2")
for seed in $SEEDS; do
  for arm in "$A" "$B"; do
    IFS='|' read -r name tree extra <<<"$arm"
    run="$OUT/$name-s$seed"
    [ -f "$run/eval.json" ] && { echo "[ab] $run: done before"; continue; }
    echo "[ab] $(date -u +%H:%M) $name seed $seed -> $run"
    # shellcheck disable=SC2086
    (cd "$tree" && PYTHONPATH="$PWD" "$PY" -m maple_async.cli train --config "$CONFIG" \
        --runner.seed "$seed" --train.run_dir "$run" --train.eval_opponents heuristics \
        --train.eval_battles 1000 $extra) > "$OUT/$name-s$seed.log" 2>&1
  done
done
"$PY" - "$OUT" <<'EOF'
import json, pathlib, sys
print(f"{'run':<16} {'win rate vs heuristics (held out)':<34} {'battles':>8} {'decisions':>10} {'minutes':>8}")
for run in sorted(pathlib.Path(sys.argv[1]).glob("*-s*/eval.json")):
    r = next(x for x in json.loads(run.read_text())["results"] if x["opponent"] == "heuristics")
    rows = (run.parent / "metrics.csv").read_text().splitlines()
    head, last = rows[0].split(","), rows[-1].split(",")
    get = dict(zip(head, last))
    print(f"{run.parent.name:<16} {r['win_rate']:.3f} ({r['ci95'][0]:.3f}-{r['ci95'][1]:.3f}){'':<17} "
          f"{r['battles']:>8} {int(float(get['decisions'])):>10} {float(get['time_s']) / 60:>8.1f}")
EOF
