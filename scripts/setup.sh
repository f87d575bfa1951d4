#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: Python venv + deps, and the pinned Showdown.
#   MAPLE_PYTHON   python to build the venv with (default: python3)
#   MAPLE_VENV     venv folder (default: .venv in the repo)
#   MAPLE_TORCH    torch requirement installed first (default: torch==2.13.0, the CPU
#                  wheel on these machines; GPU users: MAPLE_TORCH=skip and bring their own)
#   MAPLE_EXTRAS   optional extras (default: test; the test command adds ray)
#   MAPLE_ENGINE_GENS  generations poke-engine (search's fast engine) is built for, once, when
#                  cargo is present (default: 4,9; none: skip it)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${MAPLE_PYTHON:-python3}
VENV=${MAPLE_VENV:-.venv}
TORCH=${MAPLE_TORCH:-torch==2.13.0}
EXTRAS=${MAPLE_EXTRAS:-test}
ENGINE_GENS=${MAPLE_ENGINE_GENS:-4,9}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
step() { echo "[setup] $1 ..."; T0=$SECONDS; }
done_() { echo "[setup]   done in $((SECONDS - T0)) s"; }
if [ "$TORCH" != "skip" ] && ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  step "installing $TORCH (the largest download, once)"
  $PIP install -q "$TORCH"
  done_
fi
step "installing maple-async [$EXTRAS] and its dependencies (TensorBoard, matplotlib, poke-env)"
$PIP install -q -e ".[$EXTRAS]"
done_
# Prints its own steps: npm install of the pinned Showdown, then its build (both once).
"$VENV/bin/maple-async" server install
# poke-engine, compiled by cargo per generation (each once; about 2 minutes each on 2 cores).
if [ "$ENGINE_GENS" != "none" ]; then
  if command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ]; then
    "$VENV/bin/maple-async" engine install --gens "$ENGINE_GENS"
  else
    echo "[setup] cargo not found: poke-engine not built (search plays on Showdown's simulator; install Rust's cargo for the fast engine)"
  fi
fi
echo "[setup] ready: $VENV/bin/maple-async"
