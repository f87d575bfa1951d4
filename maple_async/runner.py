"""Battles as coroutines on one event loop, decisions through the batcher.

An :class:`Agent` is one policy in play: its batcher, its per-battle hidden states, its
trajectory recording and its statistics. :class:`PolicyPlayer` is a poke-env ``Player``
whose ``choose_move`` is a coroutine that asks the agent. Several players (self-play's two
sides, or a player per opponent lane) may share one agent, so all their battles batch
together.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional

import numpy as np
from poke_env.player import MaxBasePowerPlayer, Player, RandomPlayer, SimpleHeuristicsPlayer
from poke_env.player.battle_order import DefaultBattleOrder
from poke_env.ps_client import AccountConfiguration, ServerConfiguration

from . import encoding as enc
from .batcher import InferenceBatcher
from .coalesce import coalesce_sends, fair_receive
from .config import BatcherConfig, RewardConfig
from .fastbattle import FastBattles
from .hidden import HiddenStates
from .rewards import RewardTracker

log = logging.getLogger("maple_async.runner")

BASELINES = {"random": RandomPlayer, "max_power": MaxBasePowerPlayer,
             "heuristics": SimpleHeuristicsPlayer}
# Finished battles are dropped from poke-env's ``Player.battles`` (which otherwise keeps
# them forever) after this delay, once no late message can still ask for them.
FORGET_FINISHED_AFTER_S = 10.0
CPU_SAMPLE = 8  # the encode / bookkeeping CPU split is measured on one decision in this many


@dataclass
class Trajectory:
    """One side of one battle, in decision order."""

    key: Hashable
    obs: list = field(default_factory=list)
    masks: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    logps: list = field(default_factory=list)
    values: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    versions: list = field(default_factory=list)
    outcome: float = 0.0  # +1 won, -1 lost, 0 tie
    opponent: str = "self"
    reward_totals: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.actions)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "obs": np.stack(self.obs).astype(np.float32),
            "masks": np.stack(self.masks).astype(bool),
            "actions": np.asarray(self.actions, dtype=np.int64),
            "logps": np.asarray(self.logps, dtype=np.float32),
            "values": np.asarray(self.values, dtype=np.float32),
            "rewards": np.asarray(self.rewards, dtype=np.float32),
            "versions": np.asarray(self.versions, dtype=np.int64),
        }


class NoOrder:
    """An order that sends nothing: for battles abandoned while a decision was pending
    (poke-env sends an order only when its message is non-empty)."""

    message = ""


NO_ORDER = NoOrder()


@dataclass
class _Live:
    """Bookkeeping for one live battle side."""

    generation: int
    rewards: RewardTracker
    traj: Optional[Trajectory]
    opponent: str
    last_rqid: object = None
    tried: set = field(default_factory=set)
    hidden_before: object = None
    last_active: float = 0.0


@dataclass
class AgentStats:
    decisions: int = 0
    fallbacks: int = 0  # default orders after a failed forward or no legal action
    retries: int = 0  # re-decisions after [Invalid choice]
    battles: int = 0
    wins: int = 0
    losses: int = 0
    ties: int = 0
    abandoned: int = 0
    invalid_choices: int = 0  # |error|[Invalid choice]: our order was malformed/illegal
    unavailable_choices: int = 0  # |error|[Unavailable choice]: hidden info (e.g. trapping)
    other_server_errors: int = 0
    # Python CPU of encode and of the rest of a decision, on every CPU_SAMPLE-th decision
    # (``timed`` of them): each CPU-clock read is a system call (~2 us on a VM).
    timed: int = 0
    encode_s: float = 0.0
    bookkeeping_s: float = 0.0
    latencies: list = field(default_factory=list)  # request -> order, seconds (bounded)
    by_opponent: dict = field(default_factory=dict)  # name -> [wins, battles]

    @property
    def win_rate(self) -> float:
        return self.wins / self.battles if self.battles else 0.0


class Agent:
    """A policy in play: batcher + per-battle hidden states + trajectories + stats."""

    def __init__(self, policy, batcher_cfg: BatcherConfig, *, reward_cfg: Optional[RewardConfig] = None,
                 record: bool = False,
                 on_trajectory: Optional[Callable[[Trajectory], None]] = None,
                 name: str = "agent"):
        self.policy = policy
        self.name = name
        self.hidden = HiddenStates(policy.hidden_dim)
        self.batcher = InferenceBatcher(
            policy, self.hidden, max_batch_size=batcher_cfg.max_batch_size,
            max_wait_ms=batcher_cfg.max_wait_ms, wait_per_side_ms=batcher_cfg.wait_per_side_ms,
            offload_min_batch=batcher_cfg.offload_min_batch)
        self.reward_cfg = reward_cfg or RewardConfig()
        self.record = record
        self.on_trajectory = on_trajectory
        self.live: dict[Hashable, _Live] = {}
        self.stats = AgentStats()
        self._tick = 0
        self.closing = False  # set at shutdown: no new decisions

    @staticmethod
    def key(battle) -> tuple[str, str]:
        return (battle.battle_tag, battle.player_role or battle.player_username)

    async def choose(self, battle, opponent: str):
        # Wall clock for latency and inactivity; this thread's CPU time for the cost split
        # on a sample of decisions (each read of it is a system call: five per decision).
        t_start = time.perf_counter()
        if self.closing:
            return NO_ORDER  # shutting down: the battle is being forfeited
        self._tick += 1
        timed = self._tick % CPU_SAMPLE == 0
        c0 = time.thread_time() if timed else 0.0
        # Observation, action mask and move choices first: they read only the battle.
        state: list = []
        moves: list = []
        mask = np.zeros(enc.N_ACTIONS, dtype=bool)
        obs = enc.encode(battle, side_state=state, mask=mask, moves=moves)
        c1 = time.thread_time() if timed else 0.0
        key = self.key(battle)
        live = self.live.get(key)
        if live is None:
            gen = self.hidden.start(key)
            live = _Live(gen, RewardTracker(self.reward_cfg),
                         Trajectory(key, opponent=opponent) if self.record else None, opponent)
            self.live[key] = live
        live.last_active = t_start

        # Being asked again for the same decision point means Showdown rejected our order:
        # [Invalid choice] (poke-env re-asks with the same request, same rqid) or
        # [Unavailable choice] when a hidden trapping ability is revealed (Showdown sends
        # the request again, marked ``update``). Undo that step and decide again without
        # the rejected action(s), on the refreshed request.
        request = battle.last_request or {}
        rqid = request.get("rqid")
        retry = live.last_rqid is not None and (rqid == live.last_rqid or bool(request.get("update")))
        if retry:
            self.stats.retries += 1
            if live.hidden_before is not None:
                self.hidden.put(key, live.generation, live.hidden_before)
            if live.traj is not None and len(live.traj):
                for lst in (live.traj.obs, live.traj.masks, live.traj.actions, live.traj.logps,
                            live.traj.values, live.traj.rewards, live.traj.versions):
                    lst.pop()
        else:
            live.tried = set()
            live.last_rqid = rqid
        for a in live.tried:
            mask[a] = False
        if not enc.any_legal(mask):
            self.stats.fallbacks += 1
            return DefaultBattleOrder()
        reward = 0.0 if retry else live.rewards.step(battle, state)
        if live.traj is not None and len(live.traj) and not retry:
            live.traj.rewards[-1] += reward
        if self.hidden.hidden_dim:
            live.hidden_before = self.hidden.get(key)
        c2 = time.thread_time() if timed else 0.0

        decision = await self.batcher.decide(key, live.generation, obs, mask)

        c3 = time.thread_time() if timed else 0.0
        stats = self.stats
        if self.live.get(key) is not live or self.closing:
            # Abandoned while we waited, or shutting down (the battle is being forfeited:
            # an order now would only earn "[Invalid choice] There's nothing to choose").
            return NO_ORDER
        if decision.action < 0 or not mask[decision.action]:
            stats.fallbacks += 1
            legal = np.flatnonzero(mask)
            order = enc.action_to_order(battle, int(random.choice(legal)), moves)
        else:
            live.tried.add(decision.action)
            order = enc.action_to_order(battle, decision.action, moves)
            if live.traj is not None:
                tr = live.traj
                tr.obs.append(obs)
                tr.masks.append(mask)
                tr.actions.append(decision.action)
                tr.logps.append(decision.logp)
                tr.values.append(decision.value)
                tr.rewards.append(0.0)
                tr.versions.append(decision.version)
        stats.decisions += 1
        if timed:
            c4 = time.thread_time()
            stats.timed += 1
            stats.encode_s += c1 - c0
            stats.bookkeeping_s += (c2 - c1) + (c4 - c3)
        if len(stats.latencies) < 200_000:
            stats.latencies.append(time.perf_counter() - t_start)
        return order

    def finished(self, battle) -> None:
        key = self.key(battle)
        live = self.live.pop(key, None)
        self.hidden.end(key)
        self.batcher.notify()
        if live is None:
            return  # the battle ended before we were ever asked to decide
        s = self.stats
        s.battles += 1
        outcome = 1.0 if battle.won else (-1.0 if battle.lost else 0.0)
        s.wins += outcome > 0
        s.losses += outcome < 0
        s.ties += outcome == 0
        w_b = s.by_opponent.setdefault(live.opponent, [0, 0])
        w_b[0] += outcome > 0
        w_b[1] += 1
        traj = live.traj
        if traj is not None and len(traj):
            traj.rewards[-1] += live.rewards.final(battle)
            traj.outcome = outcome
            traj.reward_totals = dict(live.rewards.totals)
            if self.on_trajectory is not None:
                self.on_trajectory(traj)

    def abandon(self, key: Hashable) -> None:
        """Forget a battle side without training on it (its partial trajectory is dropped)."""
        if self.live.pop(key, None) is not None:
            self.stats.abandoned += 1
        self.hidden.end(key)
        self.batcher.notify()

    def stale_keys(self, older_than_s: float) -> list:
        now = time.perf_counter()
        return [k for k, v in self.live.items() if now - v.last_active > older_than_s]


class _ServerErrorCounter(logging.Filter):
    """poke-env reports Showdown's ``|error|`` lines only through its logger (level 25).

    Counts them by kind; the expected [Unavailable choice] lines are not printed.
    """

    def __init__(self, stats: AgentStats):
        super().__init__()
        self.stats = stats

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != SERVER_ERROR_LEVEL or not str(record.msg).startswith("Error message"):
            return True
        text = str(record.args[0]) if record.args else ""
        if "[Unavailable choice]" in text:
            self.stats.unavailable_choices += 1
            return False
        if "[Invalid choice]" in text:
            self.stats.invalid_choices += 1
        else:
            self.stats.other_server_errors += 1
        return True


SERVER_ERROR_LEVEL = 25


class PolicyPlayer(FastBattles, Player):
    """A poke-env Player whose decisions come from an :class:`Agent`'s batcher. Its battles
    parse requests faster than stock poke-env, to the same state (see :mod:`.fastbattle`)."""

    def __init__(self, agent: Agent, opponent_name: str = "self", fast_battles: bool = True,
                 track_changes: bool = True, coalesce: bool = True, fair: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.fast_battles = fast_battles
        self.track_changes = track_changes
        quiet_logger(self)
        if coalesce:
            coalesce_sends(self.ps_client)
        if fair:
            fair_receive(self.ps_client)
        self.agent = agent
        self.opponent_name = opponent_name
        # Let |error| records reach the logger so they are counted (and shown).
        if self.logger.getEffectiveLevel() > SERVER_ERROR_LEVEL:
            self.logger.setLevel(SERVER_ERROR_LEVEL)
        self.logger.addFilter(_ServerErrorCounter(agent.stats))
        self.results = {"won": 0, "lost": 0, "tied": 0}  # survives forgetting battles

    def choose_move(self, battle):
        return self.agent.choose(battle, self.opponent_name)

    def _battle_finished_callback(self, battle) -> None:
        self.results["won" if battle.won else "lost" if battle.lost else "tied"] += 1
        self.agent.finished(battle)
        forget_later(self, battle)


class ForgetfulBaseline:
    """Mixin for baseline players: drop finished battles so long runs stay bounded."""

    def _battle_finished_callback(self, battle) -> None:
        forget_later(self, battle)


def forget_later(player: Player, battle) -> None:
    loop = asyncio.get_running_loop()
    loop.call_later(FORGET_FINISHED_AFTER_S, player.battles.pop, battle.battle_tag, None)


class _ReapingTaskSet(set):
    """poke-env's set of message-handler tasks. A handler that fails has already logged its
    error through poke-env's logger; marking the exception retrieved here stops asyncio from
    printing it again as "Task exception was never retrieved" (e.g. every ``/leave`` that
    meets a websocket we closed at shutdown)."""

    def discard(self, task) -> None:
        if task.done() and not task.cancelled():
            task.exception()
        super().discard(task)


def quiet_logger(player: Player) -> None:
    """poke-env gives each player its own stream handler; don't print twice via root, and
    don't print handler errors twice via asyncio."""
    player.logger.propagate = False
    client = player.ps_client
    if isinstance(getattr(client, "_active_tasks", None), set):
        client._active_tasks = _ReapingTaskSet(client._active_tasks)


def _baseline_class(name: str) -> type:
    base = BASELINES[name]
    return type(f"Forgetful{base.__name__}", (ForgetfulBaseline, base), {})


def run_id() -> str:
    """Short random tag: account names are unique per run, so runs never collide."""
    return secrets.token_hex(3)


def fast_kwargs(runner_cfg) -> dict:
    """PolicyPlayer's battle-state options from the ``runner`` config section."""
    return dict(fast_battles=runner_cfg.fast_battles, track_changes=runner_cfg.incremental_encode,
                coalesce=runner_cfg.coalesce_sends, fair=runner_cfg.fair_receive)


def player_kwargs(server_url: str, name: str, concurrency: int, battle_format: str) -> dict:
    from .server import websocket_url
    return dict(
        account_configuration=AccountConfiguration(name[:18], None),
        server_configuration=ServerConfiguration(websocket_url(server_url), None),
        battle_format=battle_format,
        max_concurrent_battles=concurrency,
        loop=asyncio.get_running_loop(),
        log_level=logging.ERROR,
    )


def make_baseline(name: str, server_url: str, account: str, concurrency: int,
                  battle_format: str) -> Player:
    if name not in BASELINES:
        raise ValueError(f"unknown baseline '{name}' (known: {', '.join(BASELINES)})")
    player = _baseline_class(name)(**player_kwargs(server_url, account, concurrency, battle_format))
    quiet_logger(player)
    return player


async def forfeit_unfinished(players) -> None:
    """Forfeit every battle still running for these players (best effort)."""
    for p in players:
        for tag, battle in list(p.battles.items()):
            if not battle.finished:
                try:
                    await p.ps_client.send_message("/forfeit", tag)
                except Exception:  # connection already gone
                    pass


async def close_players(*players: Player) -> None:
    """Close the websockets, then cancel message handlers still waiting on a battle lock
    (otherwise they are garbage-collected while pending, with a warning each)."""
    me = asyncio.current_task()
    for p in players:
        # Handlers still running would log every send to the closed socket and every
        # cancellation ("CancelledError intercepted"); nothing useful is said after this point.
        p.logger.disabled = True
        try:
            await asyncio.wait_for(p.ps_client.stop_listening(), 5.0)
        except Exception:  # already closed / never connected
            pass
        # The listen loop still hands out frames that were buffered before the close (with
        # fair_receive, one per loop iteration), each as a new handler task: wait for it to
        # end, so no handler is created after the ones cancelled below.
        listening = getattr(p.ps_client, "_listening_coroutine", None)
        if listening is not None:  # (wait, not wait_for: how it ended is not ours to raise)
            await asyncio.wait([asyncio.wrap_future(listening)], timeout=5.0)
        handlers = [t for t in getattr(p.ps_client, "_active_tasks", ()) if t is not me]
        for t in handlers:
            t.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


_GC_DEFAULT_THRESHOLD = gc.get_threshold()


def tune_gc(young_threshold: int) -> None:
    """Fit Python's cyclic garbage collector to a battle process.

    Such a process holds a few hundred thousand long-lived objects (poke-env's data tables,
    torch, the network) and allocates short-lived ones at a high rate (messages, requests,
    orders). With Python's defaults every 700 allocations start a young collection and the
    full ones re-scan everything (measured at concurrency 64 on 2 cores: ~2 s of GC per
    30 s, full collections of ~270 ms each). With ``young_threshold`` > 0 what is alive now
    is collected once and frozen out of later collections, and young collections run every
    ``young_threshold`` allocations. Reference cycles are still collected, only later.
    0 restores Python's defaults. Safe to call again (the bench does, per phase)."""
    gc.unfreeze()
    if young_threshold <= 0:
        gc.set_threshold(*_GC_DEFAULT_THRESHOLD)
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(young_threshold, *_GC_DEFAULT_THRESHOLD[1:])


def setup_battle_process(cfg) -> None:
    """What every process that plays battles sets first: torch's CPU threads and the GC."""
    import torch
    torch.set_num_threads(cfg.runner.torch_threads)
    tune_gc(cfg.runner.gc_young_threshold)


class Rates:
    """battles/s and decisions/s from ``battles``, ``decisions`` and ``seconds``."""

    @property
    def battles_per_s(self) -> float:
        return self.battles / self.seconds if self.seconds else 0.0

    @property
    def decisions_per_s(self) -> float:
        return self.decisions / self.seconds if self.seconds else 0.0


@dataclass
class PlayResult(Rates):
    battles: int
    seconds: float
    decisions: int
    mean_batch_size: float
    wins: int
    losses: int
    ties: int


async def watchdog(agent: Agent, players: list[Player], timeout_s: float, period_s: float = 5.0):
    """Abandon battles that stopped receiving requests: forfeit them and free their state."""
    while True:
        await asyncio.sleep(period_s)
        for key in agent.stale_keys(timeout_s):
            tag = key[0]
            log.warning("battle %s silent for %.0fs: forfeiting and abandoning it", tag, timeout_s)
            agent.abandon(key)
            for p in players:
                if tag in p.battles:
                    try:
                        await p.ps_client.send_message("/forfeit", tag)
                    except Exception:
                        pass


async def play(agent: Agent, server_url: str, n_battles: int, *, opponent: str = "self",
               concurrency: int = 64, battle_format: str = "gen9randombattle",
               battle_timeout_s: float = 300.0, battle_options: Optional[dict] = None) -> PlayResult:
    """Play ``n_battles`` with ``agent`` against itself or a poke-env baseline.
    ``battle_options``: :func:`fast_kwargs` of the config (default: both on)."""
    tag = run_id()
    fast = battle_options or {}
    p1 = PolicyPlayer(agent, opponent, **fast,
                      **player_kwargs(server_url, f"maple{tag}a", concurrency, battle_format))
    if opponent == "self":
        p2: Player = PolicyPlayer(agent, "self", **fast,
                                  **player_kwargs(server_url, f"maple{tag}b", concurrency, battle_format))
    else:
        p2 = make_baseline(opponent, server_url, f"base{tag}", concurrency, battle_format)
    agent.batcher.start()
    dog = asyncio.get_running_loop().create_task(watchdog(agent, [p1, p2], battle_timeout_s))
    d0, b0, s0 = agent.stats.decisions, agent.batcher.stats.batches, agent.batcher.stats.decisions
    t0 = time.perf_counter()
    try:
        await p1.battle_against(p2, n_battles=n_battles)
    finally:
        elapsed = time.perf_counter() - t0
        dog.cancel()
        await close_players(p1, p2)
    bstats = agent.batcher.stats
    nb = bstats.batches - b0
    # Results from p1's side (in self-play both sides are the agent).
    r = p1.results
    return PlayResult(r["won"] + r["lost"] + r["tied"], elapsed, agent.stats.decisions - d0,
                      (bstats.decisions - s0) / nb if nb else 0.0, r["won"], r["lost"], r["tied"])
