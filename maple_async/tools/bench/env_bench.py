"""``bench --env``: maple-async's pool driven by a random-legal consumer, beside the
RandomPlayer ceiling and poke-env's own environment set-ups, every phase on one server in
one run."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Callable, Optional

import numpy as np

from .phases import measure_ceiling_for, measure_rounds
from .pokeenv_setups import SETUPS, measure_pokeenv
from .stats import Window, pooled_figures, round_ratios


def _random_legal(masks: np.ndarray, rng) -> np.ndarray:
    """A uniform legal action per row (the argmax of uniform noise over the legal ones)."""
    return np.argmax(rng.random(masks.shape) * masks, axis=1)


def measure_pool(url: str, cfg, num_battles: int, seconds: float, warmup_s: float = 3.0,
                 face: str = "async", server_pgid: Optional[int] = None, shards: int = 1,
                 opponent: str = "self") -> dict:
    """maple-async's battle pool (:func:`~maple_async.env.make_pool`) in self-play, stepped by a
    random-legal consumer in this thread through the async API (``face="async"``: ``recv``
    what is pending, ``send`` it back) or the synchronous Gymnasium face (``"sync"``: every
    slot, every step, on the decision clock; ``"sync-flush"``: on the flush clock). Decisions are Showdown requests answered (both sides); the window
    starts after ``warmup_s`` and once as many battle sides as there are slots have ended.
    ``shards`` > 1: the pool's shards (worker processes), all on the server at ``url``.
    ``opponent``: a baseline instead of self-play, whose decisions are not counted (as
    poke-env's single-agent set-ups count only the learning side's)."""
    from ...env import make_pool
    from ...env.gym import BattleVectorEnv
    from ...nodeproc import group_cpu_s
    rng = np.random.default_rng(0)
    kwargs = dict(battle_format=cfg.runner.battle_format, num_battles=num_battles, config=cfg,
                  server=url, shards=shards, opponent=opponent)
    env = BattleVectorEnv(clock="flush" if face == "sync-flush" else None, **kwargs) if face != "async" else None
    pool = env.pool if env is not None else make_pool(**kwargs)
    try:
        if env is not None:
            obs, _info = env.reset()
            step = lambda: env.step(_random_legal(obs["action_mask"], rng))  # noqa: E731
        else:
            pool.async_reset()

        def snap() -> tuple:
            s = pool.stats
            cpu = group_cpu_s(server_pgid) if server_pgid else None
            return s["decisions"], s["battles"], time.perf_counter(), time.process_time(), cpu

        t0 = t_check = time.perf_counter()
        start = None
        while True:
            if env is not None:
                obs, _r, _t, _u, _i = step()
            else:
                o, _r, _t, _u, info = pool.recv()
                pool.send(_random_legal(o["action_mask"], rng), info["env_id"])
            now = time.perf_counter()
            if start is None:
                if now - t0 >= warmup_s and now - t_check >= 0.5:  # (a sharded pool's stats cost a round trip)
                    t_check = now
                    if pool.stats["battles"] >= pool.num_envs:
                        start = snap()
            elif now - start[2] >= seconds:
                end = snap()
                break
    finally:
        (env or pool).close()
    sides = 2 if opponent == "self" else 1
    d, b, dt = end[0] - start[0], (end[1] - start[1]) / sides, end[2] - start[2]
    out = {"setup": f"maple-async pool, {face}" + (f", {shards} shards" if shards > 1 else "")
           + ("" if opponent == "self" else f", vs {opponent}"),
           "envs": pool.num_envs, "battles_in_flight": num_battles,
           "decisions": d, "battles": b, "seconds": dt, "decisions_per_s": d / dt, "battles_per_s": b / dt,
           "cpu_us_per_decision": 1e6 * (end[3] - start[3]) / d if d else float("nan")}
    if start[4] is not None and end[4] is not None:
        out["server_cpu_us_per_decision"] = 1e6 * (end[4] - start[4]) / d if d else float("nan")
    return out


def _ceiling_figures(w: Window, concurrency: int, server_pgid: Optional[int]) -> dict:
    """A ceiling window as the figures every ``bench --env`` phase has."""
    out = {"setup": "ceiling (RandomPlayer vs RandomPlayer)", "battles_in_flight": concurrency,
           "decisions": w.decisions, "battles": w.battles, "seconds": w.seconds,
           "decisions_per_s": w.decisions_per_s, "battles_per_s": w.battles_per_s,
           "cpu_us_per_decision": w.us_per_decision(w.cpu_s)}
    if server_pgid:
        out["server_cpu_us_per_decision"] = w.us_per_decision(w.server_cpu_s)
    return out


async def run_env_bench(cfg, url: str, seconds: float, warmup_s: float, repeats: int = 1,
                        concurrencies=(64, 128), setups=tuple(SETUPS), sync_concurrency: Optional[int] = None,
                        server_pgid: Optional[int] = None, progress=print, shards: int = 1,
                        opponent: Optional[str] = None) -> dict:
    """One run on one server: per round, the RandomPlayer ceiling and the pool's async API
    at each concurrency, the synchronous face at ``sync_concurrency`` (default the first),
    and poke-env's own environment set-ups; rounds alternate their order (a machine that
    drifts biases no phase). ``shards`` > 1 adds the async API at the first concurrency
    with that many shards (worker processes on the same server);
    ``opponent`` (a baseline) adds it against that baseline, the learner's side alone counted.
    Returns the pooled windows and the ratios."""
    sync_c = sync_concurrency or concurrencies[0]
    phases: list[tuple[str, Callable]] = []
    for c in concurrencies:
        async def ceiling(c=c):
            w = await measure_ceiling_for(cfg, url, seconds, warmup_s, server_pgid, concurrency=c)
            return _ceiling_figures(w, c, server_pgid)
        phases.append((f"ceiling@{c}", ceiling))
        phases.append((f"async@{c}", functools.partial(asyncio.to_thread, measure_pool, url, cfg, c, seconds,
                                                       warmup_s, "async", server_pgid)))
    for face in ("sync", "sync-flush"):
        phases.append((f"{face}@{sync_c}", functools.partial(asyncio.to_thread, measure_pool, url, cfg, sync_c,
                                                             seconds, warmup_s, face, server_pgid)))
    if shards > 1:
        c = concurrencies[0]
        phases.append((f"async@{c} shards={shards}", functools.partial(
            asyncio.to_thread, measure_pool, url, cfg, c, seconds, warmup_s, "async", server_pgid, shards)))
    if opponent:
        c = concurrencies[0]
        phases.append((f"async@{c} vs {opponent}", functools.partial(
            asyncio.to_thread, measure_pool, url, cfg, c, seconds, warmup_s, "async", server_pgid, 1, opponent)))
    for s in setups:
        phases.append((f"poke-env {s}", functools.partial(asyncio.to_thread, measure_pokeenv, url, s, seconds,
                                                          warmup_s, cfg.runner.battle_format)))
    windows = await measure_rounds(phases, repeats,
                                   on_phase=lambda r, name: progress(f"round {r + 1}/{repeats}: {name}"))
    out = {"phases": {name: pooled_figures(ws) for name, ws in windows.items()}, "repeats": repeats,
           "seconds": seconds, "warmup_s": warmup_s, "battle_format": cfg.runner.battle_format}
    ph = out["phases"]
    best = max((w for n, w in ph.items() if n.startswith("poke-env") and "error" not in w),
               key=lambda w: w["decisions_per_s"], default=None)
    out["best_pokeenv"] = best["setup"] if best else None
    if opponent and best and "error" not in ph[f"async@{concurrencies[0]} vs {opponent}"]:
        a = ph[f"async@{concurrencies[0]} vs {opponent}"]
        a["x_best_pokeenv"] = a["decisions_per_s"] / best["decisions_per_s"]
    for c in concurrencies:
        a, ceil = ph[f"async@{c}"], ph[f"ceiling@{c}"]
        if "error" in a or "error" in ceil:
            continue
        a["ratio_to_ceiling"] = a["decisions_per_s"] / ceil["decisions_per_s"]
        a["ratio_rounds"], a["ratio_mean"], a["ratio_ci95"] = round_ratios(a["rounds"], ceil["rounds"])
        if best:
            a["x_best_pokeenv"] = a["decisions_per_s"] / best["decisions_per_s"]
    for name in (f"sync@{sync_c}", f"sync-flush@{sync_c}", f"async@{concurrencies[0]} shards={shards}"):
        s, a = ph.get(name), ph.get(f"async@{name.split('@')[1].split()[0]}")
        if s and a and "error" not in s and "error" not in a:
            s["ratio_to_async"] = s["decisions_per_s"] / a["decisions_per_s"]
    return out
