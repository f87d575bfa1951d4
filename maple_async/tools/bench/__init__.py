"""``maple-async bench``: throughput against the RandomPlayer ceiling, same server, same run.

Each phase plays battles continuously and counts only a steady-state window (after a
warm-up, so ramp-up and the server's JIT warm-up are excluded):

* **ceiling**  poke-env RandomPlayer vs RandomPlayer at the same concurrency;
* **runner**   maple-async self-play with the chosen network and the full encoder (fresh
               weights, or a trained agent's with ``--checkpoint``: a trained policy plays
               shorter battles, so Showdown's per-battle work weighs more per decision);
* **learn**    (``--learn``) self-play through the training run's own learning loop and
               collector (:mod:`maple_async.run`), PPO updates running in a worker thread.

The package by job, lowest first: :mod:`.machine` (cores, Showdown's CPU, a throttled
server), :mod:`.stats` (windows, percentiles, confidence intervals, rounds pooled, the
summary), :mod:`.output` (what it prints and writes), :mod:`.phases` (the measured windows
and the rounds that alternate them), :mod:`.sweep` (``--sweep``'s combinations), :mod:`.command` (what the command runs: the sweep's steps and the output),
:mod:`.shards` (``--shards N``), and ``--env``: :mod:`.docs_env` (poke-env's docs
environment), :mod:`.pokeenv_setups` (it stepped alone or in SB3 vector envs) and
:mod:`.env_bench` (maple-async's pool beside them).
"""

from .env_bench import measure_pool, run_env_bench
from .machine import cpu_limit, server_cpu, throttled
from .phases import (bench_policy, measure_ceiling, measure_ceiling_for, measure_rounds, measure_runner,
                     round_order, run_bench)
from .output import (ROUND_SPREAD_WARN, check_finite_positive, env_report, problems, progress, report,
                     round_ci_text, shards_report, sweep_table, to_json)
from .shards import run_shards_bench
from .stats import Window, mean_ci95, percentile, pooled, pooled_figures, ratio, round_ratios, summarise
from .sweep import parse_sweep

__all__ = [
    "ROUND_SPREAD_WARN", "Window", "bench_policy", "check_finite_positive", "cpu_limit", "env_report",
    "mean_ci95", "measure_ceiling", "measure_ceiling_for", "measure_pool", "measure_rounds",
    "measure_runner", "parse_sweep", "percentile", "pooled", "pooled_figures", "problems", "progress",
    "ratio", "report", "round_ci_text", "round_order", "round_ratios", "run_bench", "run_env_bench",
    "run_shards_bench", "server_cpu", "shards_report", "summarise", "sweep_table", "throttled", "to_json",
]
