#!/usr/bin/env bash
# The test command (README and CI): set up, then run every test. Integration tests start
# their own loopback Showdown in a fixture and stop it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
MAPLE_EXTRAS=${MAPLE_EXTRAS:-test,ray,sb3} MAPLE_ENGINE_GENS=${MAPLE_ENGINE_GENS:-1,4,9} bash scripts/setup.sh
exec "${MAPLE_VENV:-.venv}/bin/python" -m pytest -q -ra "$@"
