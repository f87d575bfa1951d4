"""Throughput of poke-env's OWN gym environments beside maple-async's pool (``bench --env``):
now in :mod:`maple_async.tools.bench` (:mod:`~.bench.docs_env`, :mod:`~.bench.pokeenv_setups`,
:mod:`~.bench.env_bench`); this module keeps the old import path."""

from __future__ import annotations

from .bench.docs_env import DocsExampleEnv, ProbedEnv, close_pokeenv, make_env
from .bench.env_bench import measure_pool, run_env_bench
from .bench.pokeenv_setups import SETUPS, measure_pokeenv, pick_legal
from .bench.output import env_report

__all__ = ["SETUPS", "measure_pokeenv", "make_env", "DocsExampleEnv", "ProbedEnv", "pick_legal",
           "close_pokeenv", "measure_pool", "run_env_bench", "env_report"]


if __name__ == "__main__":  # pragma: no cover - quick manual run: python -m maple_async.tools.envbench URL
    import json
    import logging
    import sys

    logging.basicConfig(level=logging.WARNING)
    target = sys.argv[1]
    for name in sys.argv[2:] or list(SETUPS):
        print(json.dumps(measure_pokeenv(target, name, seconds=15.0)), flush=True)
