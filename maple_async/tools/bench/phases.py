"""The measured phases: a steady-state window over a running match (the ceiling, maple-async
self-play, the training run's loop learning), and the rounds that alternate their order.

Each phase plays battles continuously and counts only a steady-state window (after a
warm-up, so ramp-up and the server's JIT warm-up are excluded).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from typing import Awaitable, Callable, Optional

import numpy as np

from ...collect.agent import Agent
from ...collect.match import Match
from ...inference.policy import InferencePolicy
from ...pokeenv.players import fast_kwargs
from ...run.process import tune_gc
from ...teams import Teams, for_config
from ..progress import Progress
from .machine import server_cpu
from .output import progress
from .stats import Window, pooled, round_ratios, summarise


async def _run_window(match: Match, snapshot, warmup_s: float, seconds: float,
                      max_warmup_s: float = 120.0, server_pgid: Optional[int] = None, progress=None,
                      name: str = "") -> tuple[dict, dict, float, float]:
    """Measure a running match: return snapshots at the window's start and end, its length
    and the mean battles in flight. Each snapshot also holds this process's CPU time
    ("cpu") and the Showdown server's ("server", NaN when ``server_pgid`` is None or its
    processes can't be read).

    The warm-up lasts ``warmup_s`` and at least until one full generation of battles (as
    many as run at once) has finished: all battles start together, so before that the
    finish rate is a burst, not the steady state (at 256 in flight a battle lasts ~20 s).
    ``progress``: a :class:`~maple_async.tools.progress.Progress` that follows the match, as ``name``.
    """
    if progress is not None:
        progress.follow(match.results, name, win_rate=False)
    in_flight = []
    t_warm = time.perf_counter()
    await asyncio.sleep(warmup_s)
    while (snapshot()["b"] < match.concurrency and time.perf_counter() - t_warm < max_warmup_s
           and not (match.task is not None and match.task.done())):
        await asyncio.sleep(0.5)
    s0, t0, c0, v0 = snapshot(), time.perf_counter(), time.process_time(), server_cpu(server_pgid)
    end = t0 + seconds
    while time.perf_counter() < end:
        await asyncio.sleep(min(0.5, max(end - time.perf_counter(), 0)))
        in_flight.append(sum(not b.finished for b in match.me.battles.values()))
    s1, t1, c1, v1 = snapshot(), time.perf_counter(), time.process_time(), server_cpu(server_pgid)
    s0["cpu"], s1["cpu"] = c0, c1
    s0["server"], s1["server"] = v0, v1
    return s0, s1, t1 - t0, float(np.mean(in_flight)) if in_flight else 0.0



_FOREVER = 10 ** 7  # battles: a phase plays until its window ends


async def measure_ceiling(url: str, concurrency: int, seconds: float, warmup_s: float,
                          battle_format: str, server_pgid: Optional[int] = None,
                          teams: Optional[Teams] = None, progress=None) -> Window:
    """RandomPlayer against RandomPlayer at the same concurrency, on the same server (in a
    team format, with teams from the same pools as maple-async's)."""
    match = Match(url, "random", "random", concurrency=concurrency, battle_format=battle_format,
                  account="ceil", teams=teams)
    snap = lambda: {"b": match.me.n_finished,  # noqa: E731
                    "d": match.me.n_decisions + match.opponent.n_decisions}
    match.start(_FOREVER)
    try:
        s0, s1, dt, inflight = await _run_window(match, snap, warmup_s, seconds, server_pgid=server_pgid,
                                                 progress=progress, name="ceiling")
    finally:
        await match.close()
    return Window(seconds=dt, battles=s1["b"] - s0["b"], decisions=s1["d"] - s0["d"],
                  cpu_s=s1["cpu"] - s0["cpu"], in_flight=inflight,
                  server_cpu_s=s1["server"] - s0["server"])


def _runner_window(match: Match, agent: Agent, s0: dict, s1: dict, dt: float, inflight: float) -> Window:
    st, bs = agent.stats, agent.batcher.stats
    return Window(seconds=dt, battles=s1["b"] - s0["b"], decisions=s1["d"] - s0["d"],
                  cpu_s=s1["cpu"] - s0["cpu"], batch_sizes=bs.batch_sizes[s0["nb"]:s1["nb"]],
                  latencies=st.latencies[s0["nl"]:s1["nl"]], timed=s1["t"] - s0["t"],
                  encode_s=s1["enc"] - s0["enc"],
                  forward_s=s1["fwd"] - s0["fwd"], bookkeeping_s=s1["book"] - s0["book"],
                  batches=s1["nbt"] - s0["nbt"], wait_limit_s=s1["wl"] - s0["wl"],
                  in_flight=inflight, server_cpu_s=s1["server"] - s0["server"])


def _runner_snapshot(match_of, agent: Agent):
    """Counts of the match ``match_of()`` returns now and of ``agent`` (see _run_window)."""
    st, bs = agent.stats, agent.batcher.stats

    def snap():
        r = match_of().results
        return {"b": r["won"] + r["lost"] + r["tied"], "d": st.decisions,
                "nb": len(bs.batch_sizes), "nl": len(st.latencies), "t": st.timed, "enc": st.encode_s,
                "fwd": bs.forward_s, "book": st.bookkeeping_s, "nbt": bs.batches, "wl": bs.wait_limit_s}
    return snap


def bench_policy(cfg, device) -> InferencePolicy:
    """The configured network with fresh weights, or ``train.init``'s agent (``bench --checkpoint``)."""
    if cfg.train.init:
        from ..evaluate import policy_from_checkpoint
        return policy_from_checkpoint(cfg.train.init, device, battle_format=cfg.runner.battle_format)[0]
    from ...learn import networks as nets
    return InferencePolicy(nets.for_config(cfg), device)


async def measure_runner(url: str, cfg, device, seconds: float, warmup_s: float,
                         learn: bool = False, server_pgid: Optional[int] = None, progress=None) -> Window:
    """maple-async self-play (one agent drives both sides); with ``learn``, the training
    run's own learning loop and collector, learning from self-play on this server."""
    if learn:
        return await _measure_learning(url, cfg, device, seconds, warmup_s, server_pgid, progress)
    agent = Agent(bench_policy(cfg, device), cfg.batcher, reward_cfg=cfg.reward)
    match = Match(url, agent, agent, concurrency=cfg.runner.concurrency, account="bench",
                  battle_format=cfg.runner.battle_format, battle_options=fast_kwargs(cfg.runner),
                  teams=for_config(cfg))
    snap = _runner_snapshot(lambda: match, agent)
    match.start(_FOREVER)
    try:
        s0, s1, dt, inflight = await _run_window(match, snap, warmup_s, seconds, server_pgid=server_pgid,
                                                 progress=progress, name="maple-async self-play")
    finally:
        await match.close(close_batchers=True)
    return _runner_window(match, agent, s0, s1, dt, inflight)


@contextlib.contextmanager
def _training_cfg(cfg):
    """The config of a training run the bench measures: self-play only, never done by
    itself, no checkpoints or TensorBoard, in a throwaway run folder."""
    import copy
    import tempfile
    c = copy.deepcopy(cfg)
    with tempfile.TemporaryDirectory(prefix="maple-bench-") as run_dir:
        c.train.opponents, c.train.total_sides, c.train.max_minutes = "self:1", 10 ** 9, 0.0
        c.train.run_dir, c.train.tensorboard, c.train.checkpoint_every_updates = run_dir, False, 10 ** 9
        yield c


async def _measure_learning(url: str, cfg, device, seconds: float, warmup_s: float,
                            server_pgid: Optional[int], progress=None) -> Window:
    from ...run.loop import LearningLoop
    from ...run.transports import LocalTransport
    with _training_cfg(cfg) as c:
        loop = LearningLoop(c, device, quiet=True, handle_signals=False)
        transport = LocalTransport(c, url, quiet=True)
        task = asyncio.get_running_loop().create_task(loop.run(transport))
        col = transport.collector
        try:
            while not col.lanes or col.lanes[0].task is None:
                await asyncio.sleep(0.05)
            match = col.lanes[0].match
            runner_snap = _runner_snapshot(lambda: col.lanes[0].match, col.agent)

            def snap():
                return {**runner_snap(), "upd": loop.learner.updates, "held": loop.held_updates}
            s0, s1, dt, inflight = await _run_window(match, snap, warmup_s, seconds, server_pgid=server_pgid,
                                                     progress=progress, name="learning")
        finally:
            loop.request_stop("bench window over")
            await task
    w = _runner_window(match, col.agent, s0, s1, dt, inflight)
    w.updates, w.held_updates = s1["upd"] - s0["upd"], s1["held"] - s0["held"]
    return w


async def measure_ceiling_for(cfg, url: str, seconds: float, warmup_s: float,
                              server_pgid: Optional[int] = None, concurrency: Optional[int] = None,
                              progress=None) -> Window:
    """The ceiling in the configured battle format and teams, at ``concurrency`` battles
    (default: the runner's)."""
    return await measure_ceiling(url, cfg.runner.concurrency if concurrency is None else concurrency,
                                 seconds, warmup_s, cfg.runner.battle_format, server_pgid, for_config(cfg),
                                 progress)


# -- rounds (`--repeats`) ------------------------------------------------------------------

Phase = tuple[str, Callable[[], Awaitable]]  # a name, and what measures one window of it


def round_order(phases: list, r: int) -> list:
    """The order round ``r`` (from 0) measures ``phases`` in: as listed in rounds 1, 3, ...,
    reversed in rounds 2, 4, ...: a machine that speeds up or slows down during the run then
    biases no phase."""
    return phases if r % 2 == 0 else phases[::-1]


async def measure_rounds(phases: list[Phase], repeats: int, then: list[Phase] = (),
                         on_round: Optional[Callable[[int], None]] = None,
                         on_phase: Optional[Callable[[int, str], None]] = None) -> dict[str, list]:
    """``repeats`` rounds of ``phases`` in :func:`round_order`, each round followed by
    ``then`` as listed; each phase's windows by name, round by round. ``on_round(r)`` and
    ``on_phase(r, name)`` are called as a round and a phase start."""
    windows: dict[str, list] = {name: [] for name, _ in [*phases, *then]}
    for r in range(repeats):
        if on_round is not None:
            on_round(r)
        for name, measure in [*round_order(phases, r), *then]:
            if on_phase is not None:
                on_phase(r, name)
            windows[name].append(await measure())
    return windows


async def run_bench(cfg, device, seconds: float, warmup_s: float, learn: bool, url: str,
                    ceiling: Optional[Window] = None, repeats: int = 1,
                    server_pgid: Optional[int] = None) -> tuple[dict, Window]:
    """Ceiling, runner (and learn) windows. With ``repeats > 1`` the rounds are measured
    that many times, each with its own ceiling (a given ``ceiling`` is not reused), in
    alternating order (ceiling first in rounds 1, 3, ..., maple-async first in rounds 2, 4,
    ...: a machine that speeds up or slows down during the run then biases neither side),
    and the windows are pooled (the box's own drift between phases averages out); the
    per-round ratios, their mean and its 95% confidence interval are reported too.
    ``server_pgid``: the process group of a managed Showdown, whose CPU is then measured.
    Every phase starts with the same garbage-collector setting (``runner.gc_young_threshold``):
    the ceiling runs in this process too. Learning, with ``learn``, ends each round.
    A progress line (stderr, with the phases') shows each window's battles and the time left."""
    given = ceiling is not None and repeats == 1
    windows_planned = repeats * ((1 if given else 2) + bool(learn))
    meter = Progress("bench", seconds=windows_planned * (warmup_s + seconds), stream=sys.stderr)

    def say(message: str) -> None:
        meter.clear()
        progress(message)

    async def ceiling_phase() -> Window:
        tune_gc(cfg.runner.gc_young_threshold)
        say(f"ceiling: RandomPlayer vs RandomPlayer, concurrency {cfg.runner.concurrency}, "
            f"{seconds:.0f}s window after {warmup_s:.0f}s warm-up")
        return await measure_ceiling_for(cfg, url, seconds, warmup_s, server_pgid, progress=meter)

    async def runner_phase() -> Window:
        say(f"maple-async self-play ({cfg.network.kind}, {device}, concurrency "
            f"{cfg.runner.concurrency}, max_wait_ms {cfg.batcher.max_wait_ms}, wait_per_side_ms "
            f"{cfg.batcher.wait_per_side_ms}), same server")
        tune_gc(cfg.runner.gc_young_threshold)
        return await measure_runner(url, cfg, device, seconds, warmup_s, server_pgid=server_pgid,
                                    progress=meter)

    async def learn_phase() -> Window:
        say("maple-async self-play with learning on")
        tune_gc(cfg.runner.gc_young_threshold)
        return await measure_runner(url, cfg, device, seconds, warmup_s, learn=True, server_pgid=server_pgid,
                                    progress=meter)

    def on_round(r: int) -> None:
        if repeats > 1:
            say(f"round {r + 1}/{repeats}")

    phases = [("runner", runner_phase)] if given else [("ceiling", ceiling_phase), ("runner", runner_phase)]
    async with meter.shown():
        windows = await measure_rounds(phases, repeats, then=[("learn", learn_phase)] if learn else [],
                                       on_round=on_round)
    if given:
        windows["ceiling"] = [ceiling]
    whole = {name: pooled(ws) for name, ws in windows.items()}
    out = summarise(whole["ceiling"], whole["runner"], whole.get("learn"))
    if repeats > 1:
        out["round_ratios"], out["round_ratio_mean"], out["round_ratio_ci95"] = round_ratios(
            [w.battles_per_s for w in windows["runner"]], [w.battles_per_s for w in windows["ceiling"]])
    return out, whole["ceiling"]
