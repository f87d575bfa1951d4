"""The learning loop: the one place where trajectories become updates.

It gathers finished trajectories from a transport (:class:`~maple_async.run.transports.Transport`: the
collector in this process, in worker processes, or in Ray actors), updates the learner in a
worker thread every ``train.sides_per_update`` trajectories (the event loop keeps serving
websockets meanwhile), publishes the new weights, and applies the run's rules once, for
every backend: league snapshots, checkpoints, metrics, and when to stop. Each step records
the policy version that chose it, so policy lag is measured.
"""

from __future__ import annotations

import asyncio
import math
import signal
import time
from pathlib import Path
from typing import Optional

import numpy as np

from ..config import Config, formats, from_saved
from ..errors import UserError
from ..inference.league import league_probs
from ..learn import checkpoint as ckpt
from ..learn import networks as nets
from ..learn.learner import Learner
from ..learn.metrics import MetricsLog, policy_lag
from ..opponents import mix_at, parse_opponent_schedule

# Runs that learn well stay near 1; 8 shards whose weights came late reached 69 (docs/results.md#scale-out).
LAG_WARNING = 10.0


def battle_format_of(key, known: tuple = ()) -> str:
    """The format in a trajectory's key, ``("battle-<format>-<n>", side)`` on both transports:
    the longest of ``known`` the tag starts with, else the tag's second field."""
    tag = key[0]
    hits = [f for f in known if tag.startswith(f"battle-{f}-")]
    return max(hits, key=len) if hits else tag.split("-")[1]


class LearningLoop:
    """Learner, counters, league and run folder of one training run."""

    def __init__(self, cfg: Config, device, resume: Optional[str] = None, quiet: bool = False,
                 handle_signals: bool = True):
        self.cfg = cfg
        self.device = device
        self.quiet = quiet
        self.handle_signals = handle_signals
        self.run_dir = Path(cfg.train.run_dir)
        self.schedule = parse_opponent_schedule(cfg.train.opponents)  # [(first decision, mix)]
        est_updates = max(1, cfg.train.total_sides // cfg.train.sides_per_update)
        self.learner = Learner(nets.for_config(cfg), cfg.ppo, device, total_updates=est_updates)
        if cfg.train.init and not resume:
            self._init(cfg.train.init)
        self.counters = {"battles": 0, "decisions": 0, "version": 0, "seconds": 0.0}
        self.formats = tuple(formats(cfg.runner.battle_format))
        if len(self.formats) > 1:
            self.counters["format_decisions"] = {}  # one agent over several formats: each one's share
        self.league: list[dict] = []  # {"id": update it was taken at, "weights"}, oldest first
        self.league_results: dict[int, list] = {}  # snapshot id -> [learner's wins, battles]
        if resume:
            self._resume(resume)
        self.run_dir.mkdir(parents=True, exist_ok=True)  # only once the checkpoint it starts from fits
        (self.run_dir / "config.yaml").write_text(cfg.to_yaml())  # after a resume's checks
        # the training-time slot of the last weights-only snapshot (one per snapshot_minutes)
        period = cfg.train.snapshot_minutes * 60.0
        self._snapshot_slot = int(self.counters["seconds"] // period) if resume and period > 0 else -1
        self.metrics = MetricsLog(self.run_dir, cfg.train.tensorboard, quiet=quiet)
        self.transport = None
        self.backlog: list = []  # finished trajectories not trained on yet
        self._stop = asyncio.Event()
        self.stop_reason = ""
        self.collected_trajectories = 0  # finished ones received; all must be trained on
        self.trained_trajectories = 0
        self.held_updates = 0  # updates that held collection (the learner was behind)
        self.lag_warned = False

    def _print(self, msg: str) -> None:
        if not self.quiet:
            print(msg, flush=True)

    # -- checkpoints -----------------------------------------------------------------------
    def _resume(self, path: str) -> None:
        data = ckpt.load(path, self.cfg.runner.battle_format)
        if "optimizer" not in data["learner"]:
            raise ckpt.CheckpointError(f"{path} is a weights-only snapshot (no optimiser or league): "
                                       f"start a new run from its weights with --train.init {path}")
        ckpt.load_weights(self.learner.network, data["learner"]["network"], path)
        self.learner.load_state_dict(data["learner"])
        if "format_decisions" in self.counters and "format_decisions" not in data["counters"]:
            had = formats(from_saved(data["config"]).runner.battle_format)
            if len(had) == 1:  # a single-format run goes on over several: what it trained was that one's
                self.counters["format_decisions"] = {had[0]: int(data["counters"]["decisions"])}
        self.counters.update(data["counters"])
        league = list(data.get("league", []))
        # Checkpoints before per-battle league opponents kept bare state dicts.
        self.league = [e if "weights" in e else {"id": -len(league) + i, "weights": e} for i, e in enumerate(league)]
        self.league_results = {int(k): list(v) for k, v in data.get("league_results", {}).items()}
        c = self.counters
        spent = self._spent(c["seconds"])
        if spent:
            def shown(key, x):
                return f"{round(x, 2):g}" if key == "max_minutes" else str(int(x))
            what = " and ".join(f"{shown(k, have)} {name} of train.{k} {shown(k, want)}" for name, k, have, want in spent)
            # enough to train on: twice the limit, or the limit again beyond what is trained
            more = " ".join(f"--train.{k} {math.ceil(max(2 * want, have + want))}" for _, k, have, want in spent)
            raise UserError(f"{path} has already trained {what} (the limits count the whole run): "
                            f"raise {'it' if len(spent) == 1 else 'them'} to train on, e.g. {more}")
        self._print(f"[train] resumed from {path}: update {self.learner.updates}, "
                    f"battle sides {c['battles']}, decisions {c['decisions']}, "
                    f"{c['seconds'] / 60:.1f} of the run's minutes, version {c['version']}")

    def _init(self, path: str) -> None:
        """Weights from ``path`` (a pretrain or training checkpoint); counters, optimiser and
        league start fresh. The teacher it was cloned from is recorded (``train.teacher``)."""
        data = ckpt.load(path, self.cfg.runner.battle_format)
        ckpt.load_weights(self.learner.network, data["learner"]["network"], path)
        teacher = data.get("pretrain", {}).get("teacher") or from_saved(data["config"]).train.teacher
        self.cfg.train.teacher = teacher
        self._print(f"[train] initial weights from {path}" + (f" (cloned from {teacher})" if teacher else ""))

    def save_checkpoint(self, final: bool = False) -> Path:
        """``latest.pt`` and ``checkpoints/ckpt_N.pt`` (the newest ``train.keep_checkpoints``
        kept), and a weights-only ``checkpoints/weights_N.pt`` once per
        ``train.snapshot_minutes`` of training and at the end (all kept: the run's history)."""
        state = self.learner.state_dict()
        payload = {"config": self.cfg.to_dict(), "learner": state, "counters": dict(self.counters),
                   "league": self.league, "league_results": self.league_results}
        upd = self.learner.updates
        folder = self.run_dir / "checkpoints"
        path = ckpt.save(folder / f"ckpt_{upd:06d}.pt", payload)
        ckpt.save(self.run_dir / "latest.pt", payload)
        period = self.cfg.train.snapshot_minutes * 60.0
        if period > 0:
            slot = int(self.counters["seconds"] // period)
            if final or slot > self._snapshot_slot:
                self._snapshot_slot = slot
                ckpt.save(folder / f"weights_{upd:06d}.pt",
                          {"config": payload["config"], "counters": payload["counters"],
                           "learner": {"network": state["network"], "updates": upd}})
        for old in sorted(folder.glob("ckpt_*.pt"))[:-self.cfg.train.keep_checkpoints]:
            old.unlink(missing_ok=True)
        if final:
            self._print(f"[train] final checkpoint: {self.run_dir / 'latest.pt'} (update {upd})")
        return path

    # -- what the collectors get ---------------------------------------------------------
    def _league_rule(self) -> None:
        """Every ``league_every_updates`` updates (and when empty) the league gets a snapshot
        of the learner; it keeps the newest ``league_size``."""
        if not any("league" in mix for _, mix in self.schedule):
            return
        sid = self.learner.updates
        due = sid % self.cfg.train.league_every_updates == 0 or not self.league
        if due and not any(e["id"] == sid for e in self.league):
            self.league.append({"id": sid, "weights": self.learner.weights_cpu()})
            self.league = self.league[-max(self.cfg.train.league_size, 1):]
            kept = {e["id"] for e in self.league}
            self.league_results = {k: v for k, v in self.league_results.items() if k in kept}

    def weights_msg(self) -> dict:
        """The broadcast: the learner's weights and version, and (with a league lane) every
        snapshot with the probability that a league battle draws it
        (:class:`~maple_async.inference.league.LeaguePolicy` draws once per battle)."""
        league = None
        if self.league:
            ids = [e["id"] for e in self.league]
            league = {"snapshots": {e["id"]: e["weights"] for e in self.league},
                      "probs": league_probs(ids, self.league_results, self.cfg.train.league_sampling)}
        msg = {"weights": self.learner.weights_cpu(), "version": self.counters["version"], "league": league}
        if len(self.schedule) > 1:
            msg["mix"] = mix_at(self.schedule, self.counters["decisions"])
        return msg

    # -- the loop --------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        if not self._stop.is_set():
            self.stop_reason = reason
            self._print(f"[train] stopping: {reason}")
            self._stop.set()

    def _receive(self, trajectories: list) -> None:
        self.collected_trajectories += len(trajectories)
        self.backlog.extend(trajectories)

    async def run(self, transport) -> dict:
        """Train until done or stopped; returns the last update's metrics row."""
        self.transport = transport
        loop = asyncio.get_running_loop()
        self._signals(loop, True)
        cfg = self.cfg
        t_start = time.perf_counter()
        seconds_before = self.counters["seconds"]
        last = {"t": t_start, **transport.throughput_counters()}
        summary: dict = {}
        try:
            self._league_rule()
            await transport.start(self.weights_msg())
            while not self._stop.is_set():
                self._receive(await transport.wait(cfg.train.sides_per_update - len(self.backlog), self._stop))
                if transport.ended:
                    self.request_stop(transport.ended)
                if len(self.backlog) < cfg.train.sides_per_update:
                    continue
                batch, self.backlog = self.backlog, []
                # A batch twice the size asked for: the learner is behind. Collection holds
                # still during this update, leaving the CPU to the learner (without it, on a
                # few cores, updates grow without bound: docs/experiments.md#the-learner-and-the-shards).
                hold = cfg.train.hold_when_behind and len(batch) >= 2 * cfg.train.sides_per_update
                if hold:
                    transport.pause(True)
                    self.held_updates += 1
                try:
                    summary = await self._update(batch, last, t_start, seconds_before)
                finally:
                    if hold:
                        transport.pause(False)
                self._league_rule()
                transport.publish(self.weights_msg())
                if self.learner.updates % cfg.train.checkpoint_every_updates == 0:
                    self.save_checkpoint()
                reached = self._spent(self.counters["seconds"])
                if reached:
                    name, _, _, want = reached[0]
                    self.request_stop(f"reached {want} {name}")
        finally:
            self._receive(await transport.stop())
            self._signals(loop, False)
            if self.backlog:
                # Finished battles are never thrown away: a last, smaller update uses them.
                batch, self.backlog = self.backlog, []
                # A handful of them would get a full step: the step shrinks with the batch.
                scale = min(1.0, len(batch) / cfg.train.sides_per_update)
                self._print(f"[train] final update on the {len(batch)} remaining finished trajectories "
                            f"(learning rate x {scale:.2f})")
                summary = await self._update(batch, last, t_start, seconds_before, scale)
            self.save_checkpoint(final=True)
            self.metrics.close()
            if self.counters.get("format_decisions"):
                self._print("[train] decisions by format: " + ", ".join(
                    f"{fmt} {n}" for fmt, n in sorted(self.counters["format_decisions"].items())))
            report = transport.report(time.perf_counter() - t_start)
            if report:
                self._print(report)
        return summary

    def _signals(self, loop, install: bool) -> None:
        """Ctrl-C / SIGTERM request a graceful stop while the loop runs."""
        if not self.handle_signals:
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                if install:
                    loop.add_signal_handler(sig, self.request_stop, f"signal {sig.name}")
                else:
                    loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (e.g. a Ray actor's loop): the owner handles signals

    def _limits(self, seconds: float) -> list[tuple[str, str, float, float]]:
        """The run's limits that are set, as (name, config key, spent, limit), each counted over
        the whole run (``seconds``: its training time): the stop rule, the schedule's progress
        and a resume's check read the same ones."""
        t, c = self.cfg.train, self.counters
        return [(name, key, have, want) for name, key, have, want in (
            ("battle sides", "total_sides", c["battles"], t.total_sides),
            ("decisions", "total_decisions", c["decisions"], t.total_decisions),
            ("minutes", "max_minutes", seconds / 60, t.max_minutes)) if want]

    def _spent(self, seconds: float) -> list[tuple[str, str, float, float]]:
        """The limits of :meth:`_limits` the run has reached: the stop rule's and a resume's."""
        return [limit for limit in self._limits(seconds) if limit[2] >= limit[3]]

    def progress(self, seconds: float) -> float:
        """How much of the run's budget is spent: battle sides, decisions or minutes, whichever
        ends first."""
        return min(max(have / want for _, _, have, want in self._limits(seconds)), 1.0)

    async def _update(self, batch, last: dict, t_start: float, seconds_before: float,
                      lr_scale: float = 1.0) -> dict:
        progress = self.progress(seconds_before + time.perf_counter() - t_start)
        metrics = await asyncio.to_thread(self.learner.update, batch, progress, lr_scale)
        self.counters["version"] += 1
        self.counters["battles"] += len(batch)
        before = self.counters["decisions"]
        self.counters["decisions"] += sum(len(t) for t in batch)
        for start, mix in self.schedule[1:]:
            if before < start <= self.counters["decisions"]:
                self._print(f"[train] opponents from {start} decisions: "
                            + ",".join(f"{k}:{v:g}" for k, v in mix.items()))
        if "format_decisions" in self.counters:
            by_format = self.counters["format_decisions"]
            for t in batch:
                fmt = battle_format_of(t.key, self.formats)
                by_format[fmt] = by_format.get(fmt, 0) + len(t)
        now = time.perf_counter()
        self.counters["seconds"] = seconds_before + (now - t_start)
        self.trained_trajectories += len(batch)
        return self._log_update(batch, metrics, last, now)

    def _log_update(self, batch, m: dict, last: dict, now: float) -> dict:
        c = self.transport.throughput_counters()
        dt = now - last["t"]
        n_dec, n_bat = c["dec"] - last["dec"], c["bat"] - last["bat"]
        mean_batch = (c["bdec"] - last["bdec"]) / n_bat if n_bat else 0.0
        last.update(t=now, **c)
        versions = np.concatenate([np.asarray(t.versions) for t in batch])
        # "battles" counts battle sides (one trajectory each): a self-play battle gives two.
        row = {"update": self.learner.updates, "battles": self.counters["battles"],
               "decisions": self.counters["decisions"], "time_s": round(self.counters["seconds"], 1),
               "battles_per_s": len(batch) / dt if dt else 0.0, "decisions_per_s": n_dec / dt if dt else 0.0,
               "mean_batch_size": mean_batch, "held_updates": self.held_updates,
               "policy_lag": policy_lag(versions, self.counters["version"] - 1),
               **{k: m[k] for k in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "grad_norm",
                                    "explained_variance", "lr", "entropy_coef", "samples_per_s",
                                    "update_s")}}
        for fmt, n in sorted(self.counters.get("format_decisions", {}).items()):
            row[f"decisions/{fmt}"] = n
        by_opp: dict[str, list] = {}
        for t in batch:
            kind, _, snapshot = t.opponent.partition("#")  # league#<id>: the snapshot it played
            by_opp.setdefault(kind, []).append(t.outcome)
            if snapshot and any(e["id"] == int(snapshot) for e in self.league):
                r = self.league_results.setdefault(int(snapshot), [0.0, 0])
                r[0] += (t.outcome > 0) + 0.5 * (t.outcome == 0)
                r[1] += 1
        for opp, outs in sorted(by_opp.items()):
            row[f"win_rate/{opp}"] = float(np.mean([o > 0 for o in outs]))
            row[f"games/{opp}"] = len(outs)  # so a report can put intervals on the win rates
        for comp in ("win", "hp", "faint", "turn"):
            row[f"reward/{comp}"] = float(np.mean([t.reward_totals.get(comp, 0.0) for t in batch]))
        self.metrics.write(self.learner.updates, row)
        wins = " ".join(f"{k.split('/')[1]}={v:.2f}" for k, v in row.items() if k.startswith("win_rate/"))
        self._print(
            f"[train] upd {row['update']:4d} | sides {row['battles']}/{self.cfg.train.total_sides} | "
            f"dec {row['decisions'] / 1e6:.2f}M | "
            f"{row['battles_per_s']:.2f} sides/s {row['decisions_per_s']:.0f} dec/s batch {mean_batch:.1f} | "
            f"win {wins} | pg {m['pg_loss']:+.3f} v {m['v_loss']:.3f} ent {m['entropy']:.2f} "
            f"kl {m['approx_kl']:.4f} clip {m['clipfrac']:.2f} | lag {row['policy_lag']:.2f} "
            f"| upd {m['update_s']:.1f}s")
        if row["policy_lag"] >= LAG_WARNING and not self.lag_warned:
            self.lag_warned = True
            self._print(f"[train] warning: update {row['update']} learned from battles played by weights "
                        f"{row['policy_lag']:.0f} updates older than the learner's (policy lag): new weights "
                        f"reach the collectors late, or battles span many updates; PPO learns little from such play")
        return row
