"""``maple-async bench``: throughput against the RandomPlayer ceiling, same server, same run.

Each phase plays battles continuously and counts only a steady-state window (after a
warm-up, so ramp-up and the server's JIT warm-up are excluded):

* **ceiling**  poke-env RandomPlayer vs RandomPlayer at the same concurrency;
* **runner**   maple-async self-play with the chosen network and the full encoder (fresh
               weights, or a trained agent's with ``--checkpoint``: a trained policy plays
               shorter battles, so Showdown's per-battle work weighs more per decision);
* **learn**    (``--learn``) self-play through the training run's own learning loop and
               collector (:mod:`maple_async.run`), PPO updates running in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import math
import operator
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..collect.agent import Agent
from ..collect.match import Match, Rates
from ..inference.policy import InferencePolicy
from ..pokeenv.players import fast_kwargs
from ..run.process import tune_gc
from ..server import group_cpu_s, process_groups
from ..teams import Teams, for_config


def percentile(values, q: float) -> float:
    """``q``-th percentile (0-100) with linear interpolation; NaN for no values."""
    if len(values) == 0:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


@dataclass
class Window(Rates):
    """Counts over one steady-state window."""

    seconds: float = 0.0
    battles: int = 0
    decisions: int = 0
    cpu_s: float = 0.0  # process CPU time (all Python threads)
    batch_sizes: list = field(default_factory=list)
    latencies: list = field(default_factory=list)
    timed: int = 0  # decisions whose encode / bookkeeping CPU was measured (a sample)
    encode_s: float = 0.0
    forward_s: float = 0.0
    bookkeeping_s: float = 0.0
    in_flight: float = 0.0  # mean battles in flight during the window
    batches: int = 0  # inference batches flushed in the window
    wait_limit_s: float = 0.0  # sum over those batches of the batcher's max wait at the flush
    server_cpu_s: float = float("nan")  # CPU time of the managed Showdown's processes (NaN: unknown)
    updates: int = 0  # learning windows: updates, and those that held collection (learner behind)
    held_updates: int = 0

    def us_per_decision(self, seconds: float) -> float:
        return 1e6 * seconds / self.decisions if self.decisions else float("nan")

    def us_per_timed(self, seconds: float) -> float:
        """Per decision, for the times measured on the sampled decisions only."""
        return 1e6 * seconds / self.timed if self.timed else float("nan")

    @classmethod
    def side_by_side(cls, windows: list["Window"]) -> "Window":
        """Windows measured at the same time in several processes, as one machine's: counts
        and CPU summed over the mean window length, samples joined."""
        n = len(windows)
        return cls(
            seconds=sum(w.seconds for w in windows) / n, battles=sum(w.battles for w in windows),
            decisions=sum(w.decisions for w in windows), cpu_s=sum(w.cpu_s for w in windows),
            timed=sum(w.timed for w in windows),
            batch_sizes=[b for w in windows for b in w.batch_sizes],
            latencies=[t for w in windows for t in w.latencies],
            encode_s=sum(w.encode_s for w in windows), forward_s=sum(w.forward_s for w in windows),
            bookkeeping_s=sum(w.bookkeeping_s for w in windows), batches=sum(w.batches for w in windows),
            wait_limit_s=sum(w.wait_limit_s for w in windows),
            server_cpu_s=sum(w.server_cpu_s for w in windows), in_flight=sum(w.in_flight for w in windows))

    def __add__(self, other: "Window") -> "Window":
        """Two windows as one (counts and times summed, samples joined)."""
        total = self.seconds + other.seconds
        return Window(
            seconds=total, battles=self.battles + other.battles,
            decisions=self.decisions + other.decisions, cpu_s=self.cpu_s + other.cpu_s,
            timed=self.timed + other.timed,
            batch_sizes=self.batch_sizes + other.batch_sizes,
            latencies=self.latencies + other.latencies,
            encode_s=self.encode_s + other.encode_s, forward_s=self.forward_s + other.forward_s,
            bookkeeping_s=self.bookkeeping_s + other.bookkeeping_s,
            batches=self.batches + other.batches, wait_limit_s=self.wait_limit_s + other.wait_limit_s,
            server_cpu_s=self.server_cpu_s + other.server_cpu_s,
            in_flight=(self.in_flight * self.seconds + other.in_flight * other.seconds) / total
            if total > 0 else 0.0,
            updates=self.updates + other.updates, held_updates=self.held_updates + other.held_updates)


async def _run_window(match: Match, snapshot, warmup_s: float, seconds: float,
                      max_warmup_s: float = 120.0, server_pgid: Optional[int] = None
                      ) -> tuple[dict, dict, float, float]:
    """Measure a running match: return snapshots at the window's start and end, its length
    and the mean battles in flight. Each snapshot also holds this process's CPU time
    ("cpu") and the Showdown server's ("server", NaN when ``server_pgid`` is None or its
    processes can't be read).

    The warm-up lasts ``warmup_s`` and at least until one full generation of battles (as
    many as run at once) has finished: all battles start together, so before that the
    finish rate is a burst, not the steady state (at 256 in flight a battle lasts ~20 s).
    """
    in_flight = []
    t_warm = time.perf_counter()
    await asyncio.sleep(warmup_s)
    while (snapshot()["b"] < match.concurrency and time.perf_counter() - t_warm < max_warmup_s
           and not (match.task is not None and match.task.done())):
        await asyncio.sleep(0.5)
    s0, t0, c0, v0 = snapshot(), time.perf_counter(), time.process_time(), _server_cpu(server_pgid)
    end = t0 + seconds
    while time.perf_counter() < end:
        await asyncio.sleep(min(0.5, max(end - time.perf_counter(), 0)))
        in_flight.append(sum(not b.finished for b in match.me.battles.values()))
    s1, t1, c1, v1 = snapshot(), time.perf_counter(), time.process_time(), _server_cpu(server_pgid)
    s0["cpu"], s1["cpu"] = c0, c1
    s0["server"], s1["server"] = v0, v1
    return s0, s1, t1 - t0, float(np.mean(in_flight)) if in_flight else 0.0


@contextlib.contextmanager
def throttled(pgid: Optional[int], fraction: float, period_s: float = 0.02):
    """Slow a managed server down on purpose: its process group is stopped (SIGSTOP) for
    ``fraction`` of every ``period_s`` while the block runs, so a bench shows how the flush
    rule does on a slower simulator on the same day. ``fraction`` 0: no throttle."""
    if not fraction or not pgid:
        yield
        return
    done = threading.Event()

    def signal_all(sig):
        for g in process_groups(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(g, sig)

    def cycle():
        while not done.is_set():
            signal_all(signal.SIGSTOP)
            done.wait(fraction * period_s)
            signal_all(signal.SIGCONT)
            done.wait((1 - fraction) * period_s)

    thread = threading.Thread(target=cycle, name="maple-throttle", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        signal_all(signal.SIGCONT)


def _server_cpu(pgid: Optional[int]) -> float:
    v = group_cpu_s(pgid)
    return float("nan") if v is None else v


_FOREVER = 10 ** 7  # battles: a phase plays until its window ends


async def measure_ceiling(url: str, concurrency: int, seconds: float, warmup_s: float,
                          battle_format: str, server_pgid: Optional[int] = None,
                          teams: Optional[Teams] = None) -> Window:
    """RandomPlayer against RandomPlayer at the same concurrency, on the same server (in a
    team format, with teams from the same pools as maple-async's)."""
    match = Match(url, "random", "random", concurrency=concurrency, battle_format=battle_format,
                  account="ceil", teams=teams)
    snap = lambda: {"b": match.me.n_finished,  # noqa: E731
                    "d": match.me.n_decisions + match.opponent.n_decisions}
    match.start(_FOREVER)
    try:
        s0, s1, dt, inflight = await _run_window(match, snap, warmup_s, seconds, server_pgid=server_pgid)
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
        from .evaluate import policy_from_checkpoint
        return policy_from_checkpoint(cfg.train.init, device, battle_format=cfg.runner.battle_format)[0]
    from ..learn import networks as nets
    return InferencePolicy(nets.for_config(cfg), device)


async def measure_runner(url: str, cfg, device, seconds: float, warmup_s: float,
                         learn: bool = False, server_pgid: Optional[int] = None) -> Window:
    """maple-async self-play (one agent drives both sides); with ``learn``, the training
    run's own learning loop and collector, learning from self-play on this server."""
    if learn:
        return await _measure_learning(url, cfg, device, seconds, warmup_s, server_pgid)
    agent = Agent(bench_policy(cfg, device), cfg.batcher, reward_cfg=cfg.reward)
    match = Match(url, agent, agent, concurrency=cfg.runner.concurrency, account="bench",
                  battle_format=cfg.runner.battle_format, battle_options=fast_kwargs(cfg.runner),
                  teams=for_config(cfg))
    snap = _runner_snapshot(lambda: match, agent)
    match.start(_FOREVER)
    try:
        s0, s1, dt, inflight = await _run_window(match, snap, warmup_s, seconds, server_pgid=server_pgid)
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
        c.train.opponents, c.train.total_battles, c.train.max_minutes = "self:1", 10 ** 9, 0.0
        c.train.run_dir, c.train.tensorboard, c.train.checkpoint_every_updates = run_dir, False, 10 ** 9
        yield c


async def _measure_learning(url: str, cfg, device, seconds: float, warmup_s: float,
                            server_pgid: Optional[int]) -> Window:
    from ..run.loop import LearningLoop
    from ..run.transports import LocalTransport
    with _training_cfg(cfg) as c:
        loop = LearningLoop(c, device, quiet=True, handle_signals=False)
        transport = LocalTransport(c, device, url, quiet=True)
        task = asyncio.get_running_loop().create_task(loop.run(transport))
        col = transport.collector
        try:
            while not col.lanes or col.lanes[0].task is None:
                await asyncio.sleep(0.05)
            match = col.lanes[0].match
            runner_snap = _runner_snapshot(lambda: col.lanes[0].match, col.agent)

            def snap():
                return {**runner_snap(), "upd": loop.learner.updates, "held": loop.held_updates}
            s0, s1, dt, inflight = await _run_window(match, snap, warmup_s, seconds, server_pgid=server_pgid)
        finally:
            loop.request_stop("bench window over")
            await task
    w = _runner_window(match, col.agent, s0, s1, dt, inflight)
    w.updates, w.held_updates = s1["upd"] - s0["upd"], s1["held"] - s0["held"]
    return w


def cpu_limit(cores: int, us_per_decision: float) -> float:
    """Decisions/s the machine's cores allow at a CPU cost of ``us_per_decision`` (Showdown's
    and this process's together); NaN when the cost is unknown."""
    return cores * 1e6 / us_per_decision if us_per_decision > 0 else float("nan")


def summarise(ceiling: Window, runner: Window, learn: Optional[Window] = None,
              cores: Optional[int] = None) -> dict:
    from ..server import cores as machine_cores
    cores = cores or machine_cores()
    mean_batch = float(np.mean(runner.batch_sizes)) if runner.batch_sizes else 0.0
    cost = runner.us_per_decision(runner.server_cpu_s) + runner.us_per_decision(runner.cpu_s)
    out = {
        "ceiling_battles_per_s": ceiling.battles_per_s,
        "ceiling_decisions_per_s": ceiling.decisions_per_s,
        "runner_battles_per_s": runner.battles_per_s,
        "ratio": ratio(runner.battles_per_s, ceiling.battles_per_s),
        "decisions_per_s": runner.decisions_per_s,
        "decisions_ratio": ratio(runner.decisions_per_s, ceiling.decisions_per_s),
        # a battle's length sets how Showdown's per-battle work (team generation, rooms) weighs
        "decisions_per_battle": ratio(runner.decisions, runner.battles),
        "ceiling_decisions_per_battle": ratio(ceiling.decisions, ceiling.battles),
        "mean_batch_size": mean_batch,
        "p50_batch_size": percentile(runner.batch_sizes, 50),
        "p95_batch_size": percentile(runner.batch_sizes, 95),
        "battles_in_flight": runner.in_flight,
        # mean batch as a share of the battles in flight (a battle has two sides here)
        "batch_share_of_in_flight": ratio(mean_batch, runner.in_flight),
        # the batcher's max wait after a batch's first request, averaged over batches
        "mean_wait_limit_ms": 1e3 * runner.wait_limit_s / runner.batches if runner.batches else float("nan"),
        "p50_latency_ms": 1e3 * percentile(runner.latencies, 50),
        "p99_latency_ms": 1e3 * percentile(runner.latencies, 99),
        # encode + bookkeeping: the Python work maple-async adds per decision
        "cpu_us_per_decision": runner.us_per_timed(runner.encode_s + runner.bookkeeping_s),
        "encode_us_per_decision": runner.us_per_timed(runner.encode_s),
        "forward_us_per_decision": runner.us_per_decision(runner.forward_s),
        "bookkeeping_us_per_decision": runner.us_per_timed(runner.bookkeeping_s),
        "process_cpu_us_per_decision": runner.us_per_decision(runner.cpu_s),
        "ceiling_process_cpu_us_per_decision": ceiling.us_per_decision(ceiling.cpu_s),
        # the managed Showdown's CPU (node: server and simulators) per decision (NaN: --server)
        "server_cpu_us_per_decision": runner.us_per_decision(runner.server_cpu_s),
        "ceiling_server_cpu_us_per_decision": ceiling.us_per_decision(ceiling.server_cpu_s),
        "window_s": runner.seconds,
        # what the cores allow at maple-async's CPU per decision (Showdown's + this process's),
        # and maple-async's decisions/s as a share of it (NaN without the server's CPU)
        "cores": cores,
        "cpu_limit_decisions_per_s": cpu_limit(cores, cost),
        "decisions_share_of_cpu_limit": ratio(runner.decisions_per_s, cpu_limit(cores, cost)),
    }
    if learn is not None:
        out["learn_battles_per_s"] = learn.battles_per_s
        out["learn_ratio"] = ratio(learn.battles_per_s, ceiling.battles_per_s)
        out["learn_decisions_per_s"] = learn.decisions_per_s
        # what learning costs per decision, and how much of the cores the window kept busy
        out["learn_process_cpu_us_per_decision"] = learn.us_per_decision(learn.cpu_s)
        out["learn_server_cpu_us_per_decision"] = learn.us_per_decision(learn.server_cpu_s)
        out["learn_cpu_busy_share"] = ratio(learn.cpu_s + learn.server_cpu_s, cores * learn.seconds)
        out["learn_updates"], out["learn_held_updates"] = learn.updates, learn.held_updates
    return out


def report(s: dict, label: str = "") -> str:
    lines = [
        f"== maple-async bench {label}".rstrip(),
        f"ceiling (RandomPlayer vs RandomPlayer): {s['ceiling_battles_per_s']:.2f} battles/s, "
        f"{s['ceiling_decisions_per_s']:.0f} decisions/s",
        f"maple-async self-play:                  {s['runner_battles_per_s']:.2f} battles/s, "
        f"{s['decisions_per_s']:.0f} decisions/s",
        f"decisions per battle:                   {s.get('decisions_per_battle', math.nan):.1f} "
        f"(ceiling: {s.get('ceiling_decisions_per_battle', math.nan):.1f})",
        f"ratio to ceiling:                       {s['ratio']:.3f} (battles), "
        f"{s['decisions_ratio']:.3f} (decisions)",
        f"inference batch size:                   mean {s['mean_batch_size']:.1f}, "
        f"p50 {s['p50_batch_size']:.0f}, p95 {s['p95_batch_size']:.0f} "
        f"(battles in flight {s['battles_in_flight']:.0f}: {100 * s.get('batch_share_of_in_flight', float('nan')):.0f}%; "
        f"max wait {s.get('mean_wait_limit_ms', float('nan')):.1f} ms)",
        f"decision latency (request -> order):    p50 {s['p50_latency_ms']:.1f} ms, "
        f"p99 {s['p99_latency_ms']:.1f} ms",
        f"CPU per decision:                       encode {s['encode_us_per_decision']:.0f} us, "
        f"batch+forward {s['forward_us_per_decision']:.0f} us, "
        f"bookkeeping {s['bookkeeping_us_per_decision']:.0f} us "
        f"(encode+bookkeeping {s['cpu_us_per_decision']:.0f} us)",
        f"whole process CPU per decision:         {s['process_cpu_us_per_decision']:.0f} us "
        f"(ceiling: {s['ceiling_process_cpu_us_per_decision']:.0f} us, poke-env parsing included)",
    ]
    srv, srv_c = s.get("server_cpu_us_per_decision", math.nan), s.get("ceiling_server_cpu_us_per_decision", math.nan)
    if math.isfinite(srv) and math.isfinite(srv_c):
        lines.append(f"Showdown CPU per decision:              {srv:.0f} us (ceiling: {srv_c:.0f} us)")
        lines.append(f"machine CPU limit:                      {s['cpu_limit_decisions_per_s']:.0f} decisions/s "
                     f"({s['cores']} cores at Showdown's + this process's CPU per decision); "
                     f"maple-async at {s['decisions_share_of_cpu_limit']:.3f} of it")
    if "round_ratios" in s:
        lines.append(f"rounds (ceiling and maple-async interleaved): {len(s['round_ratios'])}, ratio per round "
                     + " ".join(f"{r:.3f}" for r in s["round_ratios"]))
        if round_ci_text(s):
            lines.append(f"ratio per round, mean and 95% CI:       {round_ci_text(s, 3)}")
    if "learn_battles_per_s" in s:
        lines.append(f"with learning on:                       {s['learn_battles_per_s']:.2f} battles/s "
                     f"(ratio {s['learn_ratio']:.3f})")
        lsrv = s.get("learn_server_cpu_us_per_decision", math.nan)
        if math.isfinite(lsrv):
            lines.append(f"  CPU per decision while learning:      this process {s['learn_process_cpu_us_per_decision']:.0f} us "
                         f"(learner included), Showdown {lsrv:.0f} us; cores busy {s['learn_cpu_busy_share']:.3f}")
        if s.get("learn_updates"):
            lines.append(f"  updates in the window:                {s['learn_updates']}, "
                         f"{s['learn_held_updates']} holding collection (the learner behind)")
    return "\n".join(lines)


def parse_sweep(spec: str) -> list[dict]:
    """``"concurrency=8,32 max_wait_ms=0,2"`` -> every combination as override dicts."""
    from ..config import ConfigError
    aliases = {"concurrency": "runner.concurrency", "max_wait_ms": "batcher.max_wait_ms",
               "wait_per_side_ms": "batcher.wait_per_side_ms",
               "max_batch_size": "batcher.max_batch_size", "network": "network.kind",
               "quiet_gaps": "batcher.quiet_gaps", "simulators": "server.simulators",
               "transport": "server.transport"}
    axes = []
    for part in spec.split():
        name, _, values = part.partition("=")
        if not values:
            raise ConfigError(f"--sweep: expected name=v1,v2,... got {part!r}")
        key = aliases.get(name, name)
        vals = [v for v in values.split(",") if v]
        axes.append([(key, v) for v in vals])
    return [dict(combo) for combo in itertools.product(*axes)]


def progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


async def _measure_round(cfg, device, seconds: float, warmup_s: float, learn: bool, url: str,
                         ceiling: Optional[Window], runner_first: bool = False,
                         server_pgid: Optional[int] = None
                         ) -> tuple[Window, Window, Optional[Window]]:
    """One round: the ceiling (unless given), the runner and (``learn``) the runner learning;
    ``runner_first`` measures the runner before the ceiling. Every phase starts with the same
    garbage-collector setting (``runner.gc_young_threshold``): the ceiling runs in this
    process too."""
    async def ceiling_phase():
        tune_gc(cfg.runner.gc_young_threshold)
        progress(f"ceiling: RandomPlayer vs RandomPlayer, concurrency {cfg.runner.concurrency}, "
                 f"{seconds:.0f}s window after {warmup_s:.0f}s warm-up")
        return await measure_ceiling(url, cfg.runner.concurrency, seconds, warmup_s,
                                     cfg.runner.battle_format, server_pgid, for_config(cfg))

    if ceiling is None and not runner_first:
        ceiling = await ceiling_phase()
    progress(f"maple-async self-play ({cfg.network.kind}, {device}, concurrency "
             f"{cfg.runner.concurrency}, max_wait_ms {cfg.batcher.max_wait_ms}, wait_per_side_ms "
             f"{cfg.batcher.wait_per_side_ms}), same server")
    tune_gc(cfg.runner.gc_young_threshold)
    runner = await measure_runner(url, cfg, device, seconds, warmup_s, server_pgid=server_pgid)
    if ceiling is None:
        ceiling = await ceiling_phase()
    learn_w = None
    if learn:
        progress("maple-async self-play with learning on")
        tune_gc(cfg.runner.gc_young_threshold)
        learn_w = await measure_runner(url, cfg, device, seconds, warmup_s, learn=True,
                                       server_pgid=server_pgid)
    return ceiling, runner, learn_w


async def run_bench(cfg, device, seconds: float, warmup_s: float, learn: bool, url: str,
                    ceiling: Optional[Window] = None, repeats: int = 1,
                    server_pgid: Optional[int] = None) -> tuple[dict, Window]:
    """Ceiling, runner (and learn) windows. With ``repeats > 1`` the rounds are measured
    that many times, each with its own ceiling (a given ``ceiling`` is not reused), in
    alternating order (ceiling first in rounds 1, 3, ..., maple-async first in rounds 2, 4,
    ...: a machine that speeds up or slows down during the run then biases neither side),
    and the windows are pooled (the box's own drift between phases averages out); the
    per-round ratios, their mean and its 95% confidence interval are reported too.
    ``server_pgid``: the process group of a managed Showdown, whose CPU is then measured."""
    rounds = []
    for i in range(repeats):
        if repeats > 1:
            progress(f"round {i + 1}/{repeats}")
        rounds.append(await _measure_round(cfg, device, seconds, warmup_s, learn, url,
                                           ceiling if repeats == 1 else None,
                                           runner_first=repeats > 1 and i % 2 == 1,
                                           server_pgid=server_pgid))
    pooled = [functools.reduce(operator.add, ws) if ws[0] is not None else None
              for ws in zip(*rounds)]
    out = summarise(*pooled)
    if repeats > 1:
        out["round_ratios"] = [ratio(r.battles_per_s, c.battles_per_s) for c, r, _ in rounds]
        out["round_ratio_mean"], out["round_ratio_ci95"] = mean_ci95(out["round_ratios"])
    return out, pooled[0]


# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (beyond: 1.96).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean_ci95(values) -> tuple[float, float]:
    """Mean of ``values`` and the half-width of its 95% confidence interval (Student's t;
    NaN for fewer than two finite values)."""
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=np.float64)
    if len(v) == 0:
        return float("nan"), float("nan")
    if len(v) < 2:
        return float(v.mean()), float("nan")
    t = _T95[len(v) - 2] if len(v) - 1 <= len(_T95) else 1.96
    return float(v.mean()), float(t * v.std(ddof=1) / math.sqrt(len(v)))


def round_ci_text(s: dict, digits: int = 2) -> str:
    """``"mean (low to high)"`` of a summary's per-round ratios; "" without a finite CI."""
    m, h = s.get("round_ratio_mean", float("nan")), s.get("round_ratio_ci95", float("nan"))
    if not math.isfinite(h):
        return ""
    return f"{m:.{digits}f} ({m - h:.{digits}f} to {m + h:.{digits}f})"


# Rounds whose ratios differ by more than this factor are reported (see problems()).
ROUND_SPREAD_WARN = 1.2


def problems(summary: dict) -> tuple[list[str], list[str]]:
    """(errors, warnings) about a summary's figures: a phase that made no decisions did
    not run (its figures are not a measurement); one with no finished battle measured too
    short a window for battles/s; rounds (``--repeats``) whose ratios disagree show that
    the machine's speed moved during the run."""
    errors, warnings = [], []
    for key, name in (("ceiling_decisions_per_s", "the ceiling (RandomPlayer)"),
                      ("decisions_per_s", "maple-async self-play")):
        if not summary.get(key, 0) > 0:
            errors.append(f"{name} made no decisions in its window: it failed to play "
                          "(see the errors above)")
    for key, name in (("ceiling_battles_per_s", "the ceiling"), ("runner_battles_per_s", "maple-async")):
        if not summary.get(key, 0) > 0 and not errors:
            warnings.append(f"no battle of {name} finished in the window: battles/s needs a "
                            "longer --seconds")
    rounds = [r for r in summary.get("round_ratios", ()) if r > 0]
    if len(rounds) > 1 and max(rounds) > ROUND_SPREAD_WARN * min(rounds):
        warnings.append(f"the rounds disagree (ratio {min(rounds):.3f} to {max(rounds):.3f}): "
                        "the machine's speed changed during the run (other processes, or "
                        "other tenants of a shared VM); the pooled figures average it out "
                        "only over more --repeats or longer --seconds")
    return errors, warnings


def check_finite_positive(summary: dict) -> list[str]:
    keys = ("ceiling_battles_per_s", "runner_battles_per_s", "ratio", "decisions_per_s",
            "mean_batch_size", "cpu_us_per_decision")
    return [k for k in keys if not (isinstance(summary.get(k), (int, float))
                                    and math.isfinite(summary[k]) and summary[k] > 0)]


def sweep_table(rows: list[tuple[dict, dict]]) -> str:
    """One row per combination: the swept settings (every key that was swept), then the
    figures."""
    short = {"runner.concurrency": "concurrency", "batcher.max_wait_ms": "max_wait_ms",
             "batcher.wait_per_side_ms": "wait_per_side_ms", "batcher.quiet_gaps": "quiet_gaps",
             "server.simulators": "simulators"}
    keys = list(dict.fromkeys(k for over, _ in rows for k in over)) or ["runner.concurrency"]
    names = [short.get(k, k) for k in keys]
    ci = any(round_ci_text(s) for _, s in rows)
    learn = any("learn_decisions_per_s" in s for _, s in rows)
    head = " ".join(f"{n:>11}" for n in names) + f" {'ceiling b/s':>11} {'maple b/s':>9} {'ratio':>6} " \
        f"{'dec/s':>6} {'batch':>6} {'wait ms':>7} {'p99 ms':>7} {'enc+book us':>11}" + (f" {'rounds: mean, 95% CI':>24}" if ci else "") \
        + (f" {'learn dec/s':>11} {'held/upd':>8} {'busy':>5}" if learn else "")
    out = [head]
    for over, s in rows:
        line = (" ".join(f"{str(over.get(k, '-')):>{max(11, len(n))}}" for k, n in zip(keys, names))
                + f" {s['ceiling_battles_per_s']:>11.2f} {s['runner_battles_per_s']:>9.2f} {s['ratio']:>6.2f} "
                f"{s['decisions_per_s']:>6.0f} {s['mean_batch_size']:>6.1f} "
                f"{s.get('mean_wait_limit_ms', float('nan')):>7.1f} {s['p99_latency_ms']:>7.1f} "
                f"{s['cpu_us_per_decision']:>11.0f}")
        if ci:
            line += f" {round_ci_text(s) or '-':>24}"
        if learn:
            line += (f" {s.get('learn_decisions_per_s', float('nan')):>11.0f} "
                     f"{str(s.get('learn_held_updates', '-')) + '/' + str(s.get('learn_updates', '-')):>8} "
                     f"{s.get('learn_cpu_busy_share', float('nan')):>5.2f}")
        out.append(line)
    return "\n".join(out)


def to_json(summary: dict) -> str:
    return json.dumps(summary, indent=2, sort_keys=True)


# -- machine scale: `bench --shards N` -----------------------------------------------------

def _shard_main(conn, shard: int, cfg_dict: dict, seconds: float, warmup_s: float, barrier) -> None:
    """One shard of the machine-scale bench, in its own process with its own server: its
    figures, or its error, go to the parent over its pipe."""
    from .. import procs
    from ..config import from_saved
    from ..run.process import run_async, setup_process
    if procs.enter_worker() is None:
        return
    try:
        cfg = from_saved(cfg_dict)
        out = run_async(_shard_phases(cfg, setup_process(cfg), seconds, warmup_s, barrier))
    except BaseException:  # the parent reports it; a broken barrier frees the others
        barrier.abort()
        out = procs.Failed.now(shard)
    conn.send(out)


async def _shard_phases(cfg, device, seconds: float, warmup_s: float, barrier) -> dict:
    from ..showdown import showdown_for
    async with showdown_for(cfg.server, quiet=True, runner=cfg.runner) as server:
        pgid = server.managed.pid if server.managed is not None else None
        await asyncio.to_thread(barrier.wait)  # every shard's server is up
        ceiling = await measure_ceiling(server.url, cfg.runner.concurrency, seconds, warmup_s,
                                        cfg.runner.battle_format, pgid, for_config(cfg))
        await asyncio.to_thread(barrier.wait)
        runner = await measure_runner(server.url, cfg, device, seconds, warmup_s, server_pgid=pgid)
    return {"ceiling": ceiling, "runner": runner}


async def _measure_sharded_learning(cfg, device, shards: int, seconds: float, warmup_s: float
                                    ) -> tuple[Window, int]:
    """The training run's loop with ``shards`` worker processes, self-play: a window over the
    shards' counters (battle sides / 2 = battles), and how many shards ran."""
    from ..run.loop import LearningLoop
    from ..run.transports import ProcessTransport
    with _training_cfg(cfg) as c:
        c.train.shards = shards
        loop = LearningLoop(c, device, quiet=True, handle_signals=False)
        tp = ProcessTransport(c, quiet=True)
        task = asyncio.get_running_loop().create_task(loop.run(tp))

        def snap() -> dict:
            tot = {k: sum(sh.stats.get(k) or 0 for sh in tp.shards)
                   for k in ("battles", "decisions", "cpu_s", "server_cpu_s", "batches", "bdec")}
            return {**tot, "learner_cpu_s": time.process_time(), "t": time.perf_counter()}
        try:
            t0 = time.perf_counter()
            while snap()["battles"] < 2 * c.runner.concurrency * len(tp.shards or [1]) \
                    and time.perf_counter() - t0 < 120 + warmup_s and not task.done():
                await asyncio.sleep(0.5)
            await asyncio.sleep(warmup_s)
            s0 = snap()
            await asyncio.sleep(seconds)
            s1 = snap()
        finally:
            loop.request_stop("bench window over")
            await task
    d = {k: s1[k] - s0[k] for k in s0}
    return Window(seconds=d["t"], battles=d["battles"] // 2, decisions=d["decisions"],
                  cpu_s=d["cpu_s"] + d["learner_cpu_s"], server_cpu_s=d["server_cpu_s"],
                  batches=d["batches"], batch_sizes=[d["bdec"] / d["batches"]] if d["batches"] else []
                  ), len(tp.shards)


async def run_shards_bench(cfg, device, shards: int, seconds: float, warmup_s: float,
                           learn: bool) -> dict:
    """``shards`` processes, each with its own server, measure the ceiling (RandomPlayer
    pairs) in step, then maple-async self-play in step; with ``learn``, the training run's
    loop with that many shards. Totals are the machine's; ``per_shard`` lists each shard's."""
    from .. import procs
    from ..server import cores, resolve_simulators
    barrier = procs.CTX.Barrier(shards)
    cfg_dict = cfg.to_dict()
    cfg_dict["server"]["simulators"] = resolve_simulators(cfg.server.simulators, shards)
    progress(f"{shards} shards, each with its own server: ceiling, then maple-async self-play "
             f"(concurrency {cfg.runner.concurrency} each), {seconds:.0f}s windows")
    workers = [procs.spawn(_shard_main, (i, cfg_dict, seconds, warmup_s, barrier), name=f"maple-bench-shard-{i}",
                           duplex=False) for i in range(shards)]
    try:
        limit = 2 * (seconds + warmup_s + 120) + cfg.server.start_timeout_s
        per = await asyncio.to_thread(procs.replies, [conn for _, conn in workers], limit)
    except BaseException:
        procs.stop_all([p for p, _ in workers], timeout=0)  # its shards leave Ctrl-C to it
        raise
    procs.stop_all([p for p, _ in workers], timeout=30)
    failed = [r for r in per if isinstance(r, procs.Failed)]
    if failed:
        raise RuntimeError("bench shard(s) failed: " + "; ".join(f"{r.who}: {r.last_line}" for r in failed)
                           + "".join(f"\n{r.traceback}" for r in failed))
    n_cores = cores()
    out = summarise(Window.side_by_side([r["ceiling"] for r in per]),
                    Window.side_by_side([r["runner"] for r in per]), cores=n_cores)
    out["shards"] = shards
    out["per_shard"] = [summarise(r["ceiling"], r["runner"], cores=max(n_cores // shards, 1)) for r in per]
    runner_cpu = sum(r["runner"].cpu_s for r in per)
    out["cpu_split_us_per_decision"] = {
        "showdown": out["server_cpu_us_per_decision"],
        "shard_processes": 1e6 * runner_cpu / max(out["decisions_per_s"] * out["window_s"], 1)}
    if learn:
        progress(f"the training loop with {shards} shards, learning")
        lw, out["learn_shards"] = await _measure_sharded_learning(cfg, device, shards, seconds, warmup_s)
        out["learn_battles_per_s"] = lw.battles_per_s
        out["learn_ratio"] = ratio(lw.battles_per_s, out["ceiling_battles_per_s"])
        out["learn_decisions_per_s"] = lw.decisions_per_s
        out["learn_cpu_us_per_decision"] = {"showdown": lw.us_per_decision(lw.server_cpu_s),
                                            "shard_processes_and_learner": lw.us_per_decision(lw.cpu_s)}
    return out


def shards_report(s: dict) -> str:
    lines = [report(s, f"(machine: {s['shards']} shards, {s['cores']} cores)")]
    for i, p in enumerate(s["per_shard"]):
        lines.append(f"  shard {i}: ceiling {p['ceiling_battles_per_s']:.2f} b/s, maple-async "
                     f"{p['runner_battles_per_s']:.2f} b/s, ratio {p['ratio']:.3f}, "
                     f"{p['decisions_per_s']:.0f} decisions/s, mean batch {p['mean_batch_size']:.1f}")
    split = s["cpu_split_us_per_decision"]
    lines.append(f"CPU per decision by process kind:       Showdown {split['showdown']:.0f} us, "
                 f"shard processes {split['shard_processes']:.0f} us")
    return "\n".join(lines)
