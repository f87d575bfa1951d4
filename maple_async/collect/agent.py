"""One policy in play: its batcher, its battles' hidden states, trajectories and statistics.

:meth:`Agent.choose` is a decision: encode the battle, ask the batcher, turn the action into
an order, record the step. Several players (self-play's two sides, or a player per opponent
lane) may share one agent, so all their battles batch together.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional

import numpy as np
from poke_env.battle import DoubleBattle
from poke_env.player.battle_order import DefaultBattleOrder

from ..config import BatcherConfig, RewardConfig
from ..inference.batcher import Decision, InferenceBatcher
from ..inference.hidden import HiddenStates
from ..obs import doubles as dbl
from ..obs import encoding as enc
from ..obs import actions as act
from ..obs.rewards import RewardTracker
from ..pokeenv.players import request_round

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

    def append(self, obs, mask, action: int, decision) -> None:
        """Record one step (its reward starts at 0; the next decision adds to it)."""
        self.obs.append(obs)
        self.masks.append(mask)
        self.actions.append(action)
        self.logps.append(decision.logp)
        self.values.append(decision.value)
        self.rewards.append(0.0)
        self.versions.append(decision.version)

    def pop(self) -> None:
        """Undo the last step."""
        for lst in (self.obs, self.masks, self.actions, self.logps, self.values, self.rewards,
                    self.versions):
            lst.pop()

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
    recorded: int = 0  # steps the last order sent added to the trajectory (doubles: up to 2)
    last_active: float = 0.0  # its latest request, or our latest answer to one
    pending: int = 0  # decisions of this side waiting on our batcher now: not Showdown's silence
    battle: object = None  # the battle object of the latest decision (a pool reads it)
    reward: float = 0.0  # the reward credited at the latest decision (0 on a retry)
    retry: bool = False  # the latest decision replaces one Showdown rejected
    answered: int = 0  # the round of requests last answered (the latest: we wait on Showdown)

    def rounds(self) -> int:
        """How many rounds of requests this side has had."""
        return request_round(self.battle)

    def waits_in(self) -> Optional[int]:
        """The round of requests this side waits on Showdown in: it answered that round's
        request, or the request asked nothing. None: a decision of this side is on its way
        (or it has not been asked yet)."""
        battle = self.battle
        if battle is None:
            return None
        done = request_round(battle)
        return done if battle.wait or self.answered == done else None


@dataclass
class AgentStats:
    decisions: int = 0
    previews: int = 0  # team previews decided
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
                 name: str = "agent", gamma: float = 0.99, listener=None,
                 batcher_cls: type = InferenceBatcher, batcher_kwargs: Optional[dict] = None):
        """``reward_cfg``: the reward of what it records (None: win/loss alone, not the
        config's default shaping: an opponent's rewards teach nobody, and shaping them would
        read both teams at every decision). ``listener``: told of every battle side that ends (``ended(key, live, outcome,
        reward)``, the final reward) or is abandoned (``abandoned(key, live)``); a pool of
        battles for an outside learner listens. ``batcher_cls``/``batcher_kwargs``: the
        batcher (a pool's hands each batch to its caller instead of a forward pass)."""
        self.policy = policy
        self._release = getattr(policy, "release", None)  # a policy that fixed something per battle
        self.name = name
        self.listener = listener
        self.hidden = HiddenStates(policy.hidden_dim)
        self.batcher = batcher_cls(
            policy, self.hidden, max_batch_size=batcher_cfg.max_batch_size,
            max_wait_ms=batcher_cfg.max_wait_ms, wait_per_side_ms=batcher_cfg.wait_per_side_ms,
            offload_min_batch=batcher_cfg.offload_min_batch, quiet_gaps=batcher_cfg.quiet_gaps,
            min_quiet_ms=batcher_cfg.min_quiet_ms, **(batcher_kwargs or {}))
        self.reward_cfg = reward_cfg or RewardConfig(hp=0.0, faint=0.0)
        self.gamma = gamma  # potential-based shaping discounts with the learner's gamma
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
        """The order for the battle's request (an awaitable ``choose_move``)."""
        if isinstance(battle, DoubleBattle):
            order = await self._choose_doubles(battle, opponent, time.perf_counter())
        else:
            order = await self._choose_singles(battle, opponent)
        self._answered(battle)
        return order

    def _answered(self, battle) -> None:
        """The side answered its latest request: it waits on Showdown (a pool reads it)."""
        live = self.live.get(self.key(battle))
        if live is not None:
            live.answered = request_round(battle)
            if self.listener is not None:  # it may have answered without the listener's caller
                self.listener.side_waits()

    async def _choose_singles(self, battle, opponent: str):
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
        mask = np.zeros(act.N_ACTIONS, dtype=bool)
        obs = enc.encode(battle, side_state=state, mask=mask, moves=moves)
        c1 = time.thread_time() if timed else 0.0
        key, live, retry = self._arrive(battle, opponent, t_start)
        for a in live.tried:
            mask[a] = False
        if not act.any_legal(mask):
            self.stats.fallbacks += 1
            return DefaultBattleOrder()
        if not retry:
            self._credit(live, battle, state)
        if self.hidden.hidden_dim:
            live.hidden_before = self.hidden.get(key)
        c2 = time.thread_time() if timed else 0.0

        decision = await self._decide(key, live, obs, mask)

        c3 = time.thread_time() if timed else 0.0
        stats = self.stats
        if self.live.get(key) is not live or self.closing:
            # Abandoned while we waited, or shutting down (the battle is being forfeited:
            # an order now would only earn "[Invalid choice] There's nothing to choose").
            return NO_ORDER
        live.recorded = 0
        if decision.action < 0 or not mask[decision.action]:
            stats.fallbacks += 1
            legal = np.flatnonzero(mask)
            order = act.action_to_order(battle, int(random.choice(legal)), moves)
        else:
            live.tried.add(decision.action)
            order = act.action_to_order(battle, decision.action, moves)
            if live.traj is not None:
                live.traj.append(obs, mask, decision.action, decision)
                live.recorded = 1
        stats.decisions += 1
        if timed:
            c4 = time.thread_time()
            stats.timed += 1
            stats.encode_s += c1 - c0
            stats.bookkeeping_s += (c2 - c1) + (c4 - c3)
        if len(stats.latencies) < 200_000:
            stats.latencies.append(time.perf_counter() - t_start)
        return order

    def _arrive(self, battle, opponent: str, t_start: float) -> tuple:
        """A request of a battle side: its bookkeeping (begun at its first decision), and
        whether the request asks again for the decision point of the last order. Showdown
        rejected it with [Invalid choice] (poke-env re-asks with the same request, same
        rqid) or [Unavailable choice] when a hidden trapping ability is revealed (the request
        comes again, marked ``update``). Then the steps and hidden state of that order are
        undone, to decide again without the rejected action(s) on the refreshed request."""
        key = self.key(battle)
        live = self.live.get(key) or self._begin(key, opponent)
        live.last_active = t_start
        live.battle = battle
        request = battle.last_request or {}
        rqid = request.get("rqid")
        retry = live.retry = live.last_rqid is not None and (rqid == live.last_rqid
                                                             or bool(request.get("update")))
        if retry:
            self.stats.retries += 1
            live.reward = 0.0
            if live.hidden_before is not None:
                self.hidden.put(key, live.generation, live.hidden_before)
            for _ in range(live.recorded):  # a rejected fallback order was never recorded
                live.traj.pop()
            live.recorded = 0
        else:
            live.tried = set()
            live.last_rqid = rqid
        return key, live, retry

    async def _choose_doubles(self, battle, opponent: str, t_start: float):
        """A doubles request (the same shutdown rule as singles): slot 1 decides, then slot 2 seeing slot 1's action, each a
        batcher step recorded in the trajectory (a slot with one legal action is filled in
        without asking); both make the turn's one order (:mod:`maple_async.obs.doubles`)."""
        if self.closing:
            return NO_ORDER
        self._tick += 1
        timed = self._tick % CPU_SAMPLE == 0
        c0 = time.thread_time() if timed else 0.0
        state: list = []
        turn = dbl.Turn(battle, side_state=state)
        c1 = time.thread_time() if timed else 0.0
        key, live, retry = self._arrive(battle, opponent, t_start)
        live.recorded = 0
        if turn.wait():
            return DefaultBattleOrder()
        if not retry:
            self._credit(live, battle, state)
        if self.hidden.hidden_dim:
            live.hidden_before = self.hidden.get(key)
        stats = self.stats
        actions: list = []
        first = -1
        mark, busy = c1, 0.0  # this decision's own CPU, without what other battles did meanwhile
        for s in (0, 1):
            mask = turn.mask(s, first)
            if s == 0 and live.tried:  # slot 1's actions of orders Showdown refused
                untried = mask.copy()
                untried[list(live.tried)] = False
                if untried.any():  # (else slot 2 was the refused part: slot 1 may choose again)
                    mask = untried
            legal = np.flatnonzero(mask)
            if len(legal) == 0:
                stats.fallbacks += 1
                return DefaultBattleOrder()
            if len(legal) == 1:
                action = int(legal[0])
            else:
                obs = turn.obs(s, first)
                if timed:
                    busy += time.thread_time() - mark
                decision = await self._decide(key, live, obs, mask)
                if timed:
                    mark = time.thread_time()
                if self.live.get(key) is not live or self.closing:
                    return NO_ORDER
                action = decision.action
                if action < 0 or not mask[action]:
                    stats.fallbacks += 1
                    action = int(random.choice(legal))
                elif live.traj is not None:
                    live.traj.append(obs, mask, action, decision)
                    live.recorded += 1
            if s == 0:
                first = action
                live.tried.add(action)
            actions.append(action)
        stats.decisions += 1
        if timed:  # (reading the battle counts as encoding, each slot's copy as bookkeeping)
            stats.timed += 1
            stats.encode_s += c1 - c0
            stats.bookkeeping_s += busy + time.thread_time() - mark
        if len(stats.latencies) < 200_000:
            stats.latencies.append(time.perf_counter() - t_start)
        return turn.order(actions)

    async def _decide(self, key: Hashable, live: _Live, obs, mask) -> Decision:
        """The batcher's decision; the time it takes (a paused batcher, an outside learner
        thinking) is ours, so the battle side is marked pending meanwhile."""
        live.pending += 1
        try:
            return await self.batcher.decide(key, live.generation, obs, mask)
        finally:
            live.pending -= 1
            live.last_active = time.perf_counter()

    def imitate(self, battle, opponent: str, order):
        """Record another player's ``order`` (a teacher's) as this battle side's step, with
        the same observation, mask and reward as :meth:`choose`; returns the order. An
        order with no action index (``/choose default``) is played but not recorded."""
        mask = np.zeros(act.N_ACTIONS, dtype=bool)
        state: list = []
        moves: list = []
        obs = enc.encode(battle, side_state=state, mask=mask, moves=moves)
        key = self.key(battle)
        live = self.live.get(key) or self._begin(key, opponent)
        live.last_active = time.perf_counter()
        rqid = (battle.last_request or {}).get("rqid")
        retry = live.last_rqid is not None and rqid == live.last_rqid
        if retry and live.recorded:  # the teacher's order was refused: keep its second try
            live.traj.pop()
        live.last_rqid, live.recorded = rqid, 0
        if not retry:
            self._credit(live, battle, state)
        action = act.order_to_action(battle, order, moves)
        if action is None or not mask[action]:
            self.stats.fallbacks += 1  # played, not recorded
        elif live.traj is not None:
            live.traj.append(obs, mask, action, Decision(action, 0.0, 0.0, 0))
            live.recorded = 1
        self.stats.decisions += 1
        return order

    @staticmethod
    def _credit(live: _Live, battle, state: list) -> None:
        """The reward since the battle side's previous decision, added to that step."""
        reward = live.reward = live.rewards.step(battle, state)
        if live.traj is not None and len(live.traj):
            live.traj.rewards[-1] += reward

    def _begin(self, key: Hashable, opponent: str) -> _Live:
        """A battle side's first decision: its hidden state, reward tracker and (when
        recording) trajectory start here."""
        live = self.live[key] = _Live(self.hidden.start(key), RewardTracker(self.reward_cfg, self.gamma),
                                      Trajectory(key, opponent=opponent) if self.record else None,
                                      opponent)
        return live

    async def preview(self, battle, opponent: str) -> str:
        order = await self._preview(battle, opponent)
        self._answered(battle)
        return order

    async def _preview(self, battle, opponent: str) -> str:
        """The team preview as decisions: one pick at a time through the batcher (BSS: 3,
        the first leads; a full-team format: the order, its forced last pick not asked),
        each recorded as a step of the battle's trajectory with the preview mask. The
        battle's hidden state starts here."""
        if self.closing:
            return ""
        key = self.key(battle)
        if key in self.live:  # asked again: Showdown refused the order, start the battle over
            self.live.pop(key)
            self.hidden.end(key)
        live = self._begin(key, opponent)
        live.last_active = time.perf_counter()
        live.battle = battle
        live.last_rqid = (battle.last_request or {}).get("rqid")
        n = act.preview_picks(battle)
        if isinstance(battle, DoubleBattle):
            encode_preview, n_actions, first = dbl.encode_preview, dbl.N_ACTIONS, dbl.PREVIEW
        else:
            encode_preview, n_actions, first = enc.encode_preview, act.N_ACTIONS, act.PREVIEW
        picks: list = []
        while len(picks) < n:
            mask = np.zeros(n_actions, dtype=bool)
            obs = encode_preview(battle, picks, n, mask)
            legal = np.flatnonzero(mask)
            if len(legal) == 1:
                picks.append(int(legal[0]) - first)
                continue
            decision = await self._decide(key, live, obs, mask)
            if self.live.get(key) is not live or self.closing:
                return ""
            action = decision.action
            if action < 0 or not mask[action]:
                self.stats.fallbacks += 1
                action = int(random.choice(legal))
            elif live.traj is not None:
                live.traj.append(obs, mask, action, decision)
            picks.append(action - first)
        self.stats.decisions += 1  # one request answered, however many picks it took
        self.stats.previews += 1
        return act.preview_order(battle, picks)

    def finished(self, battle) -> None:
        key = self.key(battle)
        live = self.live.pop(key, None)
        self._end(key)
        outcome = 1.0 if battle.won else (-1.0 if battle.lost else 0.0)
        if live is None:  # the battle ended before we were ever asked to decide
            if self.listener is not None:
                self.listener.ended(key, None, outcome, 0.0)
            return
        s = self.stats
        s.battles += 1
        s.wins += outcome > 0
        s.losses += outcome < 0
        s.ties += outcome == 0
        w_b = s.by_opponent.setdefault(live.opponent, [0, 0])
        w_b[0] += outcome > 0
        w_b[1] += 1
        traj = live.traj
        recorded = traj is not None and len(traj) > 0
        if recorded or self.listener is not None:
            final = live.rewards.final(battle)
        if recorded:
            traj.rewards[-1] += final
            traj.outcome = outcome
            traj.reward_totals = dict(live.rewards.totals)
            if self.on_trajectory is not None:
                self.on_trajectory(traj)
        if self.listener is not None:
            self.listener.ended(key, live, outcome, final)

    def abandon(self, key: Hashable) -> None:
        """Forget a battle side without training on it (its partial trajectory is dropped)."""
        live = self.live.pop(key, None)
        if live is not None:
            self.stats.abandoned += 1
        self._end(key)
        if live is not None and self.listener is not None:
            self.listener.abandoned(key, live)

    def _end(self, key: Hashable) -> None:
        self.hidden.end(key)
        if self._release is not None:
            self._release(key)
        self.batcher.notify()

    def touch_live(self) -> None:
        """Every live battle side counts as active now (after a pause that held them)."""
        now = time.perf_counter()
        for live in self.live.values():
            live.last_active = now
