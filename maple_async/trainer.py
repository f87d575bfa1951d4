"""The collection/learning loop: battles keep running while the learner updates.

Lanes of battles (self-play, baselines, league) run concurrently on the event loop and
feed finished trajectories to a list; every ``battles_per_update`` trajectories the
learner updates in a worker thread (the loop keeps serving websockets meanwhile), and the
new weights are published to the batcher, which swaps them in between two batches.
Each step records the policy version that chose it, so policy lag is measured.
"""

from __future__ import annotations

import asyncio
import copy
import csv
import logging
import math
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from . import checkpoint as ckpt
from . import networks as nets
from .config import Config, parse_opponent_mix
from .learner import Learner, policy_lag, wilson_interval
from .runner import (Agent, PolicyPlayer, Trajectory, close_players, fast_kwargs,
                     forfeit_unfinished, make_baseline, player_kwargs, run_id, watchdog)

log = logging.getLogger("maple_async.trainer")
_WATCH_PERIOD_S = 2.0  # server health poll


@dataclass
class Lane:
    name: str
    me: PolicyPlayer
    opponent: object
    n_battles: int
    task: Optional[asyncio.Task] = None


def make_lanes(url: str, cfg: Config, mix: dict, agent: Agent,
               league_agent: Optional[Agent] = None) -> list[Lane]:
    """One pair of players per opponent kind, concurrency split by the mix's weights."""
    tag = run_id()
    conc, fmt = cfg.runner.concurrency, cfg.runner.battle_format
    lanes = []
    for i, (name, share) in enumerate(sorted(mix.items())):
        c = max(1, round(conc * share))
        # Enough battles never to run dry; the loop stops the lanes when done.
        n = max(2 * c, math.ceil(cfg.train.total_battles * share * 1.5) + c)
        fast = fast_kwargs(cfg.runner)
        me = PolicyPlayer(agent, name, **fast, **player_kwargs(url, f"mpl{tag}{i}a", c, fmt))
        if name == "self":
            opp = PolicyPlayer(agent, "self", **fast, **player_kwargs(url, f"mpl{tag}{i}b", c, fmt))
        elif name == "league":
            opp = PolicyPlayer(league_agent, "learner", **fast,
                               **player_kwargs(url, f"mpl{tag}{i}l", c, fmt))
        else:
            opp = make_baseline(name, url, f"mpl{tag}{i}o", c, fmt)
        lanes.append(Lane(name, me, opp, n))
    return lanes


class MetricsLog:
    """CSV always; TensorBoard scalars when the package is installed."""

    def __init__(self, run_dir: Path, tensorboard: bool):
        self.path = run_dir / "metrics.csv"
        self._fields: Optional[list] = None
        if self.path.exists():
            with open(self.path) as f:
                self._fields = next(csv.reader(f), None)
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.tb = SummaryWriter(str(run_dir / "tb"))
            except Exception:  # tensorboard not installed
                print("[train] tensorboard not installed (pip install 'maple-async[tensorboard]'): "
                      "logging to metrics.csv only", flush=True)

    def write(self, step: int, row: dict) -> None:
        if self._fields is None:
            self._fields = list(row)
            with open(self.path, "w", newline="") as f:
                csv.writer(f).writerow(self._fields)
        with open(self.path, "a", newline="") as f:
            csv.writer(f).writerow([row.get(k, "") for k in self._fields])
        if self.tb is not None:
            for k, v in row.items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


class Trainer:
    def __init__(self, cfg: Config, device, resume: Optional[str] = None, quiet: bool = False):
        self.cfg = cfg
        self.device = device
        self.quiet = quiet
        self.run_dir = Path(cfg.train.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(cfg.to_yaml())
        self.mix = parse_opponent_mix(cfg.train.opponents)
        est_updates = max(1, cfg.train.total_battles // cfg.train.battles_per_update)

        self.learner = Learner(nets.from_config(cfg.network), cfg.ppo, device, total_updates=est_updates)
        self.counters = {"battles": 0, "decisions": 0, "version": 0, "seconds": 0.0}
        self.league: list[dict] = []
        if resume:
            self._resume(resume)
        policy = nets.InferencePolicy(copy.deepcopy(self.learner.network), device)
        policy.version = self.counters["version"]
        self.agent = Agent(policy, cfg.batcher, reward_cfg=cfg.reward, record=True,
                           on_trajectory=self._on_trajectory, name="learner")
        self.league_agent: Optional[Agent] = None
        if "league" in self.mix:
            lp = nets.InferencePolicy(copy.deepcopy(self.learner.network), device)
            self.league_agent = Agent(lp, cfg.batcher, name="league")
        self._trajs: list[Trajectory] = []
        self._wake = asyncio.Event()  # enough trajectories, a stop request, or a fault
        self._stop = asyncio.Event()
        self._fault = asyncio.Event()
        self.faults = 0
        self.stop_reason = ""
        self.metrics = MetricsLog(self.run_dir, cfg.train.tensorboard)
        self.trained_trajectories = 0
        self.collected_trajectories = 0  # finished ones; all must be trained on

    # -- checkpoints -----------------------------------------------------------------------
    def _resume(self, path: str) -> None:
        data = ckpt.load(path)
        ckpt.load_weights(self.learner.network, data["learner"]["network"], path)
        self.learner.load_state_dict(data["learner"])
        self.counters.update(data["counters"])
        self.league = list(data.get("league", []))
        self._print(f"[train] resumed from {path}: update {self.learner.updates}, "
                    f"battles {self.counters['battles']}, version {self.counters['version']}")

    def save_checkpoint(self, final: bool = False) -> Path:
        payload = {"config": self.cfg.to_dict(), "learner": self.learner.state_dict(),
                   "counters": dict(self.counters), "league": self.league}
        upd = self.learner.updates
        path = ckpt.save(self.run_dir / "checkpoints" / f"ckpt_{upd:06d}.pt", payload)
        ckpt.save(self.run_dir / "latest.pt", payload)
        if final:
            self._print(f"[train] final checkpoint: {self.run_dir / 'latest.pt'} (update {upd})")
        return path

    # -- trajectories ------------------------------------------------------------------------
    def _on_trajectory(self, traj: Trajectory) -> None:
        self.collected_trajectories += 1
        self._trajs.append(traj)
        if len(self._trajs) >= self.cfg.train.battles_per_update:
            self._wake.set()

    # -- lanes -------------------------------------------------------------------------------
    def _make_lanes(self, url: str) -> list[Lane]:
        return make_lanes(url, self.cfg, self.mix, self.agent, self.league_agent)

    def _refresh_league(self) -> None:
        if self.league_agent is None:
            return
        if self.learner.updates % self.cfg.train.league_every_updates == 0 or not self.league:
            self.league.append(self.learner.weights_cpu())
            self.league = self.league[-max(self.cfg.train.league_size, 1):]
        self.league_agent.batcher.set_weights(random.choice(self.league))

    # -- the loop --------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        if not self._stop.is_set():
            self.stop_reason = reason
            self._print(f"[train] stopping: {reason}")
            self._stop.set()
            self._wake.set()

    def _print(self, msg: str) -> None:
        if not self.quiet:
            print(msg, flush=True)

    async def _watch_server(self, server, period_s: float = _WATCH_PERIOD_S) -> None:
        """Flag a fault when the server process dies or stops answering twice in a row."""
        misses = 0
        while True:
            await asyncio.sleep(period_s)
            if server.managed is not None and not server.managed.alive():
                misses = 2
            else:
                misses = 0 if await server.healthy() else misses + 1
            if misses >= 2:
                self._fault.set()
                self._wake.set()
                return

    async def _watch_logins(self, players: list, timeout_s: float = 60.0) -> None:
        """A player that never logs in would leave its lane idle forever (seen with 8 servers
        starting at once): treat it as a server fault, so the lanes restart with new accounts."""
        try:
            await asyncio.wait_for(asyncio.gather(*(p.ps_client.logged_in.wait() for p in players)),
                                   timeout_s)
        except asyncio.TimeoutError:
            missing = [p.username for p in players if not p.ps_client.logged_in.is_set()]
            self._print(f"[train] not logged in after {timeout_s:.0f}s: {', '.join(missing)}")
            self._fault.set()
            self._wake.set()

    def _start_lanes(self, url: str, agents: list) -> tuple[list, list, list]:
        loop = asyncio.get_running_loop()
        for a in agents:
            a.closing = False
        lanes = self._make_lanes(url)
        players = [p for ln in lanes for p in (ln.me, ln.opponent)]
        tasks = [loop.create_task(watchdog(a, players, self.cfg.runner.battle_timeout_s)) for a in agents]
        tasks.append(loop.create_task(self._watch_logins(players)))
        for ln in lanes:
            ln.task = loop.create_task(ln.me.battle_against(ln.opponent, n_battles=ln.n_battles),
                                       name=f"lane-{ln.name}")
            tasks.append(ln.task)
        self._print("[train] lanes: " + ", ".join(
            f"{ln.name} (concurrency {ln.me._max_concurrent_battles})" for ln in lanes))
        return lanes, players, tasks

    async def run(self, server) -> dict:
        """Train until done or stopped; survive server faults. ``server``: a ServerHandle or URL."""
        from .server import ServerHandle
        if isinstance(server, str):
            server = ServerHandle(server)
        loop = asyncio.get_running_loop()
        self._handle_signals(loop, True)
        agents = [a for a in (self.agent, self.league_agent) if a is not None]
        for a in agents:
            a.batcher.start()
        if self.league_agent is not None:
            self._refresh_league()
        t_start = time.perf_counter()
        seconds_before = self.counters["seconds"]
        last = {"t": t_start, **self.throughput_counters()}
        summary: dict = {}
        lanes, players, tasks = [], [], []
        try:
            while not self._stop.is_set():
                self._fault.clear()
                lanes, players, tasks = self._start_lanes(server.url, agents)
                monitor = loop.create_task(self._watch_server(server))
                tasks.append(monitor)
                summary = await self._train_until_stop_or_fault(lanes, last, t_start, seconds_before) or summary
                if not self._fault.is_set() or self._stop.is_set():
                    break
                in_flight = sum(len(a.live) for a in agents)
                self._print(f"[train] server fault: abandoning {in_flight} in-flight battle sides "
                            f"(partial trajectories dropped, {len(self._trajs)} finished ones kept); "
                            f"recovering the server")
                self.faults += 1
                await self._stop_lanes(tasks, agents, players, forfeit=False)
                lanes, players, tasks = [], [], []
                await server.recover()
                self._print(f"[train] server back at {server.url}; resuming")
        finally:
            await self._stop_lanes(tasks, agents, players, forfeit=True)
            for a in agents:
                await a.batcher.close()
            summary = await self._finish(loop, last, t_start, seconds_before) or summary
        return summary

    def _handle_signals(self, loop, install: bool) -> None:
        """Ctrl-C / SIGTERM request a graceful stop while the loop runs."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                if install:
                    loop.add_signal_handler(sig, self.request_stop, f"signal {sig.name}")
                else:
                    loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (e.g. a Ray actor's loop): the owner handles signals

    async def _finish(self, loop, last, t_start, seconds_before) -> Optional[dict]:
        """After collection stopped: train on what is left, write the final checkpoint."""
        self._handle_signals(loop, False)
        summary = None
        if self._trajs:
            # Finished battles are never thrown away: a last, smaller update uses them.
            batch, self._trajs = self._trajs, []
            self._print(f"[train] final update on the {len(batch)} remaining finished trajectories")
            summary = await self._update(batch, last, t_start, seconds_before)
        self.save_checkpoint(final=True)
        self.metrics.close()
        return summary

    async def _train_until_stop_or_fault(self, lanes, last, t_start, seconds_before) -> dict:
        cfg = self.cfg
        summary: dict = {}
        while not self._stop.is_set() and not self._fault.is_set():
            await self._wake.wait()
            self._wake.clear()
            if len(self._trajs) < cfg.train.battles_per_update:
                if all(ln.task.done() for ln in lanes):
                    failed = [ln for ln in lanes if not ln.task.cancelled() and ln.task.exception()]
                    if failed:
                        # A lane that died is not the end of the run. If the server died under
                        # it, the server watcher flags the fault within seconds; otherwise it is
                        # a bug: raise it (the finally block still saves a checkpoint).
                        try:
                            await asyncio.wait_for(self._fault.wait(), 3 * _WATCH_PERIOD_S)
                        except asyncio.TimeoutError:
                            raise RuntimeError(f"lane {failed[0].name} failed with the server up") \
                                from failed[0].task.exception()
                    else:
                        self.request_stop("all lanes finished")
                continue
            batch, self._trajs = self._trajs, []
            summary = await self._update(batch, last, t_start, seconds_before)
            now = time.perf_counter()
            if self.learner.updates % cfg.train.checkpoint_every_updates == 0:
                self.save_checkpoint()
            if self.league_agent is not None:
                self._refresh_league()
            if self.counters["battles"] >= cfg.train.total_battles:
                self.request_stop(f"reached {cfg.train.total_battles} battles")
            elif cfg.train.max_minutes and (now - t_start) / 60 >= cfg.train.max_minutes:
                self.request_stop(f"reached {cfg.train.max_minutes} minutes")
        return summary

    async def _stop_lanes(self, tasks, agents, players, forfeit: bool, grace_s: float = 10.0) -> None:
        """Stop new battles; abandon in-flight ones (never trained on); close sockets."""
        for t in tasks:
            t.cancel()
        # Abandon before forfeiting, so the forfeits' end messages make no trajectories.
        for a in agents:
            a.closing = True
            for key in list(a.live):
                a.abandon(key)
        if forfeit:
            await forfeit_unfinished(players)
            deadline = time.perf_counter() + grace_s
            while time.perf_counter() < deadline and any(
                    not b.finished for p in players for b in p.battles.values()):
                await asyncio.sleep(0.1)
        await close_players(*players)

    async def _update(self, batch, last: dict, t_start: float, seconds_before: float) -> dict:
        metrics = await asyncio.to_thread(self.learner.update, batch)
        self.counters["version"] += 1
        self.agent.batcher.set_weights(self.learner.weights_cpu(), self.counters["version"])
        self.counters["battles"] += len(batch)
        self.counters["decisions"] += sum(len(t) for t in batch)
        now = time.perf_counter()
        self.counters["seconds"] = seconds_before + (now - t_start)
        self.trained_trajectories += len(batch)
        return self._log_update(batch, metrics, last, now)

    def throughput_counters(self) -> dict:
        """Cumulative decisions, inference batches and batched decisions (for rates)."""
        bs = self.agent.batcher.stats
        return {"dec": self.agent.stats.decisions, "bat": bs.batches, "bdec": bs.decisions}

    def _log_update(self, batch, m: dict, last: dict, now: float) -> dict:
        c = self.throughput_counters()
        dt = now - last["t"]
        n_dec, n_bat = c["dec"] - last["dec"], c["bat"] - last["bat"]
        mean_batch = (c["bdec"] - last["bdec"]) / n_bat if n_bat else 0.0
        last.update(t=now, **c)
        versions = np.concatenate([np.asarray(t.versions) for t in batch])
        row = {"update": self.learner.updates, "battles": self.counters["battles"],
               "decisions": self.counters["decisions"], "time_s": round(self.counters["seconds"], 1),
               "battles_per_s": len(batch) / dt if dt else 0.0, "decisions_per_s": n_dec / dt if dt else 0.0,
               "mean_batch_size": mean_batch, "policy_lag": policy_lag(versions, self.counters["version"] - 1),
               **{k: m[k] for k in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "grad_norm",
                                    "explained_variance", "lr", "samples_per_s", "update_s")}}
        by_opp: dict[str, list] = {}
        for t in batch:
            by_opp.setdefault(t.opponent, []).append(t.outcome)
        for opp, outs in sorted(by_opp.items()):
            row[f"win_rate/{opp}"] = float(np.mean([o > 0 for o in outs]))
        for comp in ("win", "hp", "faint", "turn"):
            row[f"reward/{comp}"] = float(np.mean([t.reward_totals.get(comp, 0.0) for t in batch]))
        self.metrics.write(self.learner.updates, row)
        wins = " ".join(f"{k.split('/')[1]}={v:.2f}" for k, v in row.items() if k.startswith("win_rate/"))
        self._print(
            f"[train] upd {row['update']:4d} | battles {row['battles']}/{self.cfg.train.total_battles} | "
            f"{row['battles_per_s']:.2f} b/s {row['decisions_per_s']:.0f} dec/s batch {mean_batch:.1f} | "
            f"win {wins} | pg {m['pg_loss']:+.3f} v {m['v_loss']:.3f} ent {m['entropy']:.2f} "
            f"kl {m['approx_kl']:.4f} clip {m['clipfrac']:.2f} | lag {row['policy_lag']:.2f} "
            f"| upd {m['update_s']:.1f}s")
        return row


# -- evaluation ------------------------------------------------------------------------------

@dataclass
class EvalResult:
    opponent: str
    battles: int
    wins: int
    losses: int
    ties: int
    seconds: float

    @property
    def win_rate(self) -> float:
        return (self.wins + 0.5 * self.ties) / self.battles if self.battles else 0.0

    @property
    def ci95(self) -> tuple[float, float]:
        return wilson_interval(self.wins + 0.5 * self.ties, self.battles)

    def line(self) -> str:
        lo, hi = self.ci95
        return (f"[eval] vs {self.opponent}: win rate {self.win_rate:.3f} (95% CI {lo:.3f}-{hi:.3f}) "
                f"over {self.battles} battles ({self.wins}W/{self.losses}L/{self.ties}T) "
                f"in {self.seconds:.0f}s")


def policy_from_checkpoint(path: str, device, greedy: bool = False) -> tuple[nets.InferencePolicy, Config]:
    from .config import from_saved
    data = ckpt.load(path)
    cfg = from_saved(data["config"])
    net = nets.from_config(cfg.network)
    ckpt.load_weights(net, data["learner"]["network"], path)
    return nets.InferencePolicy(net, device, greedy=greedy), cfg


async def evaluate(policy: nets.InferencePolicy, url: str, opponent: str, n_battles: int, *,
                   batcher_cfg, concurrency: int = 32, battle_format: str = "gen9randombattle",
                   device="cpu", opponent_label: Optional[str] = None,
                   battle_options: Optional[dict] = None) -> EvalResult:
    """Play ``n_battles`` against a baseline name or another checkpoint's policy.
    ``battle_options``: :func:`~maple_async.runner.fast_kwargs` of the config."""
    from .runner import BASELINES
    tag = run_id()
    fast = battle_options or {}
    agent = Agent(policy, batcher_cfg, name="eval")
    me = PolicyPlayer(agent, opponent, **fast, **player_kwargs(url, f"evl{tag}a", concurrency, battle_format))
    opp_agent = None
    if opponent in BASELINES:
        opp = make_baseline(opponent, url, f"evl{tag}b", concurrency, battle_format)
    else:
        opp_policy, _ = policy_from_checkpoint(opponent, device, greedy=policy.greedy)
        opp_agent = Agent(opp_policy, batcher_cfg, name="eval-opponent")
        opp = PolicyPlayer(opp_agent, "eval", **fast,
                           **player_kwargs(url, f"evl{tag}b", concurrency, battle_format))
        opp_agent.batcher.start()
    agent.batcher.start()
    t0 = time.perf_counter()
    try:
        await me.battle_against(opp, n_battles=n_battles)
    finally:
        await close_players(me, opp)
        await agent.batcher.close()
        if opp_agent is not None:
            await opp_agent.batcher.close()
    r = me.results
    return EvalResult(opponent_label or opponent, r["won"] + r["lost"] + r["tied"], r["won"], r["lost"],
                      r["tied"], time.perf_counter() - t0)
