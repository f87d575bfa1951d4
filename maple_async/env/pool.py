"""A pool of battle sides for an outside learner, with EnvPool's asynchronous API.

The battles run exactly as in training: a :class:`~maple_async.collect.collector.Collector`
plays lanes of matches on one event loop (uvloop, in a background thread), each decision
goes through an :class:`~maple_async.collect.agent.Agent` (encoding, masks, orders,
rewards, re-requests, clean-up) and its batcher's flush rule. The only difference is the
batcher: a flushed batch is handed to the caller (:meth:`BattlePool.recv`) instead of to a
forward pass, and the caller's :meth:`BattlePool.send` resolves it.

Slots: in self-play battle ``b`` has slots ``2b`` (player 1) and ``2b + 1`` (player 2);
against any other opponent slot ``b`` is battle ``b``. A slot comes back from ``recv``
when it has a decision to make or a terminal step to collect; the action sent for a
terminal step is ignored and frees the slot for its next battle (next-step autoreset).
``async_reset()`` may be called at any time: it ends the battles in flight (forfeited, never
handed back) and starts new ones. The caller's ``embed_battle`` and ``reward_fn`` run on the
caller's thread, inside ``recv``, so what they raise reaches the caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
import time
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from .. import config as config_mod
from ..collect.agent import Agent
from ..collect.collector import Collector
from ..inference.batcher import Decision, HandoffBatcher
from ..obs import encoding as enc
from ..obs import actions as act
from ..obs import games
from ..obs.features import derive
from ..pokeenv.players import BASELINES, request_round

OBS_DIM = enc.OBS_DIM  # singles; a pool's own: pool.obs_dim, pool.n_actions (doubles: obs/doubles.py)
N_ACTIONS = act.N_ACTIONS
_OUTCOMES = {1.0: "won", -1.0: "lost", 0.0: "tie"}
SETTLE_GRACE_S = 2.0  # a settled recv with slots in hand returns after this long with nothing new


def padding_mask(n_actions: int) -> np.ndarray:
    """The mask of a step whose action is ignored (a terminal step, an inactive slot): one
    legal action."""
    mask = np.zeros(n_actions, dtype=bool)
    mask[0] = True
    return mask


class _CallerPolicy:
    """The pool agent's policy: the caller, so no state and no forward pass here."""

    hidden_dim = 0
    version = 0


@dataclass(slots=True)
class _Item:
    kind: str  # "decide", "end" or "abandon"
    key: tuple
    request: Any = None  # the batcher's request (decide)
    live: Any = None  # the agent's bookkeeping of the side (end)
    reward: float = 0.0
    outcome: float = 0.0


@dataclass(slots=True)
class _Slot:
    env_id: int
    key: Optional[tuple] = None  # the battle side it plays now
    steps: int = 0  # elapsed steps in this battle
    current: Optional[_Item] = None  # the item with the caller
    queue: deque = field(default_factory=deque)
    last_obs: Any = None


@dataclass(slots=True)
class Record:
    """One slot's step as the caller receives it."""

    env_id: int
    obs: np.ndarray
    mask: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    elapsed_step: int
    kind: str  # preview / move / forced_switch / end
    battle_tag: str
    side: str
    opponent: str
    outcome: str  # won / lost / tie on a terminal step, else ""
    abandoned: bool
    retry: bool = False  # Showdown rejected this slot's previous action: this step replaces it
    battle: Any = None  # for the caller's embed_battle / reward_fn (None: an abandoned side)


def _flat(values) -> np.ndarray:
    """``send``'s arguments as 1-D arrays (a scalar: one slot)."""
    return np.asarray(values).reshape(-1)


def _other_side(key: tuple) -> tuple:
    return (key[0], "p2" if key[1] == "p1" else "p1")


def _side_index(key: tuple) -> int:
    return 1 if key[1] == "p2" else 0


class _Slots:
    """The slots on the event loop's thread: battle sides in, records out.

    It is the pool agent's listener (battle sides that end or are abandoned) and its
    batcher's sink (flushed decisions). A battle takes a free battle index at its first
    decision (waiting for one while every index is held, which is what holds the next
    battle back until the caller collects the last one's terminal steps); a slot
    delivers one item at a time, in order."""

    def __init__(self, num_battles: int, sides: int, deliver: Callable[[Record], None],
                 settle: Callable[[int], None], game: games.Game = games.SINGLES):
        self.num_battles = num_battles
        self.sides = sides
        self.preview, self.n_actions = game.preview, game.n_actions
        self.deliver = deliver
        self.settle = settle
        self.agent: Optional[Agent] = None
        self.players: Callable[[], list] = list  # the players whose battles the slots hold
        self.answered = 0  # the caller's latest send applied here (its sequence number)
        self.clear()

    def clear(self) -> None:
        """Every slot free, nothing delivered or waiting (a new pool, or a reset)."""
        self.slots = [_Slot(i) for i in range(self.num_battles * self.sides)]
        self.free = deque(range(self.num_battles))
        self.battle_of: dict[str, int] = {}
        self.released: dict[int, set] = {}
        self.ended_early: OrderedDict = OrderedDict()  # tag -> sides that ended with no slot
        self.slot_of: dict[tuple, int] = {}
        self.waiting: deque = deque()  # first items of battles without an index yet
        self.with_caller = 0  # decisions flushed and not answered
        self.closing = False

    # -- from the agent and its batcher --------------------------------------------------
    def handoff(self, batch: list) -> None:
        self.with_caller += len(batch)
        for r in batch:
            self._route(_Item("decide", r.key, request=r))
        self.check_settled()

    def ended(self, key: tuple, live, outcome: float, reward: float) -> None:
        if live is None:
            self._no_slot_end(key)
        else:
            self._route(_Item("end", key, live=live, reward=reward, outcome=outcome))
        self.check_settled()

    def abandoned(self, key: tuple, live) -> None:
        self._route(_Item("abandon", key, live=live))
        self.check_settled()

    def side_waits(self) -> None:
        """A battle side waits on Showdown: its request asked nothing, or it answered."""
        self.check_settled()

    def check_settled(self) -> None:
        """Tell the caller when nothing more can come before it answers: every live battle
        side is with the caller (or queued behind a slot it holds), or answered its latest
        request (or was told to wait) while its opponent's side is with the caller: Showdown
        goes on once both sides chose."""
        if self.closing or self.agent is None:
            return
        agent, live, slots, slot_of = self.agent, self.agent.live, self.slots, self.slot_of
        queued = {item.key for item in self.waiting}

        def held(key) -> bool:
            env_id = slot_of.get(key)
            return key in queued if env_id is None else slots[env_id].current is not None

        for key, side in live.items():
            if held(key):
                continue
            battle = side.battle
            if battle is None:
                return
            done = request_round(battle)  # the round it answered, or waits in
            if not battle._wait and side.answered != done:
                return  # a decision of this side is on its way
            other_key = _other_side(key)
            other = live.get(other_key)
            if other is None or not held(other_key) or request_round(other.battle) > done:
                return  # Showdown goes on without us, or has begun a new round
        known = []
        for player in self.players():  # battles begun whose sides have not asked yet
            if getattr(player, "agent", None) is not agent:
                continue
            battles = player._battles
            for battle in battles.values():
                if not battle.finished and request_round(battle) == 0:
                    return
            known.append(battles)
        if len(known) == 2:  # self-play: a side that has not seen its battle begin yet
            for key in live:
                tag = key[0]
                if _other_side(key) not in live and not (tag in known[0] and tag in known[1]):
                    return
        self.settle(self.answered)

    # -- routing ---------------------------------------------------------------------------
    def _route(self, item: _Item) -> None:
        if self.closing or self._stale(item):  # a stale decision's battle is gone: it must not hold an index
            self._drop(item)
            return
        env_id = self.slot_of.get(item.key)
        if env_id is None:
            if item.kind != "decide":  # it never reached the caller: nothing to end
                kept: deque = deque()
                for w in self.waiting:
                    if w.key == item.key:
                        self._drop(w)
                    else:
                        kept.append(w)
                self.waiting = kept
                self._no_slot_end(item.key)
                return
            tag = item.key[0]
            b = self.battle_of.get(tag)
            if b is None:
                if not self.free:
                    self.waiting.append(item)
                    return
                b = self.battle_of[tag] = self.free.popleft()
                self.released[b] = set(self.ended_early.pop(tag, ()))
            env_id = b * self.sides + (_side_index(item.key) if self.sides == 2 else 0)
            slot = self.slots[env_id]
            slot.key, slot.steps = item.key, 0
            self.slot_of[item.key] = env_id
        slot = self.slots[env_id]
        slot.queue.append(item)
        if slot.current is None:
            self._next(slot)

    def _no_slot_end(self, key: tuple) -> None:
        b = self.battle_of.get(key[0])
        if b is None:
            self.ended_early.setdefault(key[0], set()).add(_side_index(key))
            while len(self.ended_early) > 4096:
                self.ended_early.popitem(last=False)
        else:
            self._side_released(key[0], b, _side_index(key))

    def _drop(self, item: _Item) -> None:
        """An item that will never reach the caller: its decision (if any) is released."""
        if item.kind == "decide":
            self.with_caller -= 1
            fut = item.request.future
            if not fut.done():
                fut.set_result(Decision(-1, 0.0, 0.0, 0))

    def _stale(self, item: _Item) -> bool:
        if item.kind != "decide":
            return False
        live = self.agent.live.get(item.key)
        return live is None or live.generation != item.request.generation

    def _next(self, slot: _Slot) -> None:
        while slot.queue:
            item = slot.queue.popleft()
            if self._stale(item):
                self._drop(item)
                continue
            slot.current = item
            self.deliver(self._record(slot, item))
            return

    def _record(self, slot: _Slot, item: _Item) -> Record:
        """The item as the caller receives it (its ``embed_battle`` / ``reward_fn`` run
        on the caller's thread, on ``battle``)."""
        key = item.key
        if item.kind == "decide":
            r = item.request
            live = self.agent.live[key]
            battle = live.battle
            reward = 0.0 if slot.steps == 0 else live.reward  # a battle's first step follows no action
            live.reward = 0.0  # (doubles: a turn's second step has none of its own)
            if r.mask[self.preview:].any():
                kind = "preview"
            else:
                fs = battle.force_switch
                kind = "forced_switch" if (any(fs) if isinstance(fs, list) else fs) else "move"
            slot.last_obs = r.obs
            return Record(slot.env_id, r.obs, r.mask, reward, False, False, slot.steps, kind, key[0], key[1],
                          live.opponent, "", False, live.retry and slot.steps > 0, battle)
        mask = padding_mask(self.n_actions)  # whatever is sent for a terminal step is ignored
        live = item.live
        if item.kind == "end":
            return Record(slot.env_id, slot.last_obs, mask, item.reward, True, False, slot.steps, "end", key[0],
                          key[1], live.opponent, _OUTCOMES.get(item.outcome, "tie"), False, False, live.battle)
        return Record(slot.env_id, slot.last_obs, mask, 0.0, False, True, slot.steps, "end", key[0], key[1],
                      live.opponent, "", True)

    # -- from the caller -------------------------------------------------------------------
    def answer(self, pairs: list, seq: int = 0) -> None:
        if self.closing:
            return  # a reset or close dropped these slots' items already
        self.answered = max(self.answered, seq)
        for env_id, action in pairs:
            slot = self.slots[env_id]
            item, slot.current = slot.current, None
            if item is None:
                continue
            if item.kind == "decide":
                self.with_caller -= 1
                if not item.request.future.done():
                    item.request.future.set_result(Decision(int(action), 0.0, 0.0, 0))
                slot.steps += 1
            else:
                self._release(slot)
            self._next(slot)
        self.check_settled()

    def _release(self, slot: _Slot) -> None:
        key, slot.key, slot.steps = slot.key, None, 0
        self.slot_of.pop(key, None)
        b = self.battle_of.get(key[0])
        if b is not None:
            self._side_released(key[0], b, _side_index(key))

    def _side_released(self, tag: str, b: int, side: int) -> None:
        done = self.released.setdefault(b, set())
        done.add(side if self.sides == 2 else 0)
        if len(done) < self.sides:
            return
        del self.battle_of[tag]
        del self.released[b]
        self.free.append(b)
        waiting, self.waiting = self.waiting, deque()
        for item in waiting:
            self._route(item)

    def close(self) -> None:
        self.closing = True
        for slot in self.slots:
            for item in [slot.current, *slot.queue]:
                if item is not None:
                    self._drop(item)
            slot.current = None
            slot.queue.clear()
        for item in self.waiting:
            self._drop(item)
        self.waiting.clear()


def _opponent(spec: Any, cfg: config_mod.Config, device) -> tuple[str, Optional[Agent]]:
    """The opponent's name in the mix and its agent (None: self or a baseline)."""
    from ..inference.outside import is_checkpoint, policy_for
    if isinstance(spec, str) and (spec == "self" or spec in BASELINES):
        return spec, None
    if isinstance(spec, str) and ":" not in spec and not is_checkpoint(spec):
        raise ValueError(f"opponent {spec!r}: expected self, {', '.join(BASELINES)}, a checkpoint file, "
                         f"a policy object or module:attr")
    policy, _ = policy_for(spec, device, battle_format=cfg.runner.battle_format)
    name = Path(spec).name if is_checkpoint(spec) else policy.name
    return name, Agent(policy, cfg.batcher, name="opponent")


class _Engine:
    """What runs on the pool's event loop thread: the server, the agent, the collector and
    the slots. It holds no reference to its :class:`BattlePool`, so a pool its caller
    forgot is collected, and its finalizer stops this."""

    def __init__(self, cfg: config_mod.Config, device, opp: tuple, num_battles: int, sides: int,
                 game: games.Game, quiet: bool):
        self.cfg, self.device, self.opp, self.quiet = cfg, device, opp, quiet
        self.out: deque = deque()  # records delivered, not yet received
        self.cv = threading.Condition()
        self.settled = -1  # the caller's latest send after which nothing more could come
        self.error: Optional[BaseException] = None
        self.ready = threading.Event()
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.server = self.agent = self.collector = None
        self.slots = _Slots(num_battles, sides, self.deliver, self.settle, game)
        self.thread = threading.Thread(target=self.thread_main, name="maple-pool", daemon=True)

    def thread_main(self) -> None:
        from ..run.process import run_async
        try:
            run_async(self.main())
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            self.error = self.error or e
        finally:
            self.ready.set()
            with self.cv:
                self.cv.notify_all()

    async def main(self) -> None:
        from ..showdown import showdown_for
        self.loop = asyncio.get_running_loop()
        self.started = asyncio.Event()
        self.stop = asyncio.Event()
        cfg = self.cfg
        async with showdown_for(cfg.server, quiet=self.quiet, runner=cfg.runner) as server:
            self.server = server
            slots = self.slots
            self.agent = Agent(_CallerPolicy(), cfg.batcher, reward_cfg=cfg.reward, listener=slots,
                               batcher_cls=HandoffBatcher, name="pool",
                               batcher_kwargs={"sink": slots.handoff, "held": lambda: slots.with_caller})
            slots.agent = self.agent
            name, opp_agent = self.opp
            self.opp = None  # the collector holds it from now on (set_opponent may retire it)
            self.collector = collector = Collector(cfg, self.device, quiet=self.quiet, agent=self.agent,
                                                   mix={name: 1.0}, opponents={name: opp_agent} if opp_agent else {},
                                                   label="pool")
            slots.players = lambda: [p for ln in collector.lanes for p in ln.match.players]
            self.ready.set()
            await asyncio.wait([asyncio.ensure_future(self.started.wait()),
                                asyncio.ensure_future(self.stop.wait())], return_when=asyncio.FIRST_COMPLETED)
            if self.stop.is_set():
                return
            run = asyncio.ensure_future(self.collector.run(server))
            stop = asyncio.ensure_future(self.stop.wait())
            await asyncio.wait([run, stop], return_when=asyncio.FIRST_COMPLETED)
            slots.close()
            self.collector.request_stop("closed")
            await run

    def deliver(self, record: Record) -> None:
        with self.cv:
            self.out.append(record)
            # a mark stands for what was delivered when it was set: check_settled sets it again
            self.settled = min(self.settled, self.slots.answered - 1)
            self.cv.notify()

    def settle(self, seq: int) -> None:
        with self.cv:
            if seq > self.settled:
                self.settled = seq
                self.cv.notify()

    def call(self, fn, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    async def reset(self, seed: Optional[int]) -> None:
        """End the battles in flight (forfeited, never handed back) and start new ones."""
        slots = self.slots
        self.agent.closing = True  # the pending decisions released below send nothing
        slots.close()

        def between() -> None:  # the old battles are gone, the new ones not started
            with self.cv:
                self.out.clear()
                self.settled = -1
            slots.clear()
            if seed is not None:
                self.reseed(seed)
        await self.collector.restart(between)

    def reseed(self, seed: int) -> None:
        """New battles seeded ``seed`` (the simulator transport's battles and the team
        draws): the same seed, teams and policy give the same battles."""
        reseed = getattr(self.server, "reseed", None)
        if reseed is not None:
            reseed(seed)
        formats = self.collector.formats
        for fmt, teams in formats.items():
            if teams.mine is not None:
                mine = dataclasses.replace(teams.mine, seed=seed)
                theirs = mine if teams.theirs is teams.mine else dataclasses.replace(teams.theirs, seed=seed + 7919)
                formats[fmt] = dataclasses.replace(teams, mine=mine, theirs=theirs)

    def shutdown(self, timeout: float = 60.0) -> None:
        """Stop every battle, the loop's thread and the managed server (idempotent)."""
        loop = self.loop
        if self.thread.is_alive() and loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.stop.set)
            except RuntimeError:  # the loop closed meanwhile
                pass
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)
        with self.cv:
            self.cv.notify_all()


class BattlePool:
    """``num_battles`` battles in flight, their sides handed to the caller in batches.

    ``opponent``: ``"self"`` (both sides are slots: ``2 * num_battles`` slots), a baseline
    (``random``, ``max_power``, ``heuristics``), a checkpoint file, or a policy (an object
    or ``"module:attr"``; see :mod:`maple_async.inference.outside`): ``num_battles`` slots.
    ``batch_size``: ``recv`` returns exactly this many slots (fewer only on its timeout);
    None: whatever the batcher's flush rule gathered (at least one slot).
    ``teams``: a team file or folder (team formats). ``server``: a running server's URL
    (default: a managed loopback server, started here and stopped by :meth:`close`).
    ``embed_battle(battle) -> np.ndarray`` and ``observation_space``: your observation
    instead of the encoder's; ``reward_fn(battle) -> float``: your reward of the step that
    led to this state (default: the config's composite reward; without ``config``, the
    presets' win 1, hp 0.1, faint 0.05). Both run on your thread, inside :meth:`recv`.
    ``config``: a preset (YAML path or Config); ``**options``: its keys (``max_wait_ms=5``,
    ``"runner.seed"=1``, ...). ``shards``: N > 1 runs the battles in N worker processes,
    each with its own server (:mod:`maple_async.env.shards`), behind the same API.
    """

    sharded: Optional[type] = None  # set by maple_async.env.shards: what shards=N builds

    def __new__(cls, *args, shards: int = 1, **kwargs):
        if cls is BattlePool and shards > 1:
            return super().__new__(BattlePool.sharded)
        return super().__new__(cls)

    def __init__(self, battle_format: str = "gen9randombattle", num_battles: int = 64,
                 batch_size: Optional[int] = None, opponent: Any = "self", teams=None,
                 server: Optional[str] = None, *, shards: int = 1, config=None,
                 embed_battle: Optional[Callable] = None,
                 observation_space=None, reward_fn: Optional[Callable] = None, seed: Optional[int] = None,
                 device: str = "cpu", recv_timeout_s: float = 60.0, start_timeout_s: float = 300.0,
                 quiet: bool = True, **options):
        from ..inference.policy import resolve_device
        from ..teams import for_config
        self._closed = False
        if num_battles < 1:
            raise ValueError("num_battles must be >= 1")
        self.cfg = cfg = config_mod.for_pool(battle_format, num_battles, teams, server, seed, config, options)
        cfg.train.total_battles = 10 ** 12  # the lanes never run dry; close() stops them
        cfg.train.replay_every = 0
        self.device = resolve_device(device)
        self.opponent_name, opp_agent = _opponent(opponent, cfg, self.device)
        self.self_play = self.opponent_name == "self"
        self.num_battles = num_battles
        self.num_envs = num_battles * (2 if self.self_play else 1)
        if batch_size is not None and not 1 <= batch_size <= self.num_envs:
            raise ValueError(f"batch_size must be between 1 and the {self.num_envs} slots (or None)")
        self.batch_size = batch_size
        self.recv_timeout_s = recv_timeout_s
        self.embed_battle = embed_battle
        self.reward_fn = reward_fn
        self.observation_space = observation_space
        self.game = games.of_format(cfg.runner.battle_format)
        if embed_battle is not None and self.game is games.DOUBLES:
            raise ValueError("embed_battle sees a battle, not which of its two slots decides: in doubles "
                             "the pool gives its own observation (maple_async.obs.doubles)")
        self.n_actions = self.game.n_actions
        self.obs_dim = self.game.obs_dim if embed_battle is None else None
        self.quiet = quiet
        for_config(cfg)  # an illegal team or format fails here, before any thread starts

        self._outstanding: dict[int, Optional[np.ndarray]] = {}  # with the caller: mask, None=terminal
        self._carry: list = []
        self._last_obs: dict[int, np.ndarray] = {}  # embed_battle's latest per slot (terminal steps)
        self._started = False
        self._sent = 0  # sends so far: a settle mark names the send it follows
        self._engine = eng = _Engine(cfg, self.device, (self.opponent_name, opp_agent), num_battles,
                                     2 if self.self_play else 1, self.game, quiet)
        self._finalizer = weakref.finalize(self, eng.shutdown)  # at close(), collection or exit
        eng.thread.start()
        if not eng.ready.wait(start_timeout_s) and eng.error is None:
            eng.error = TimeoutError(f"the pool's server did not start in {start_timeout_s:.0f}s")
        if eng.error is not None:
            error = eng.error
            self.close()
            raise error

    # -- what runs on the loop's thread, for tests and tools ----------------------------------
    @property
    def agent(self) -> Agent:
        return self._engine.agent

    @property
    def server(self):
        return self._engine.server

    @property
    def collector(self) -> Collector:
        return self._engine.collector

    @property
    def _thread(self) -> threading.Thread:
        return self._engine.thread

    # -- the caller's API ------------------------------------------------------------------
    @property
    def server_url(self) -> str:
        """The URL of the server the battles play on (the simulator transport: a label)."""
        return str(self.server.url)

    def async_reset(self, seed: Optional[int] = None, timeout: Optional[float] = None) -> None:
        """Start the battles; on a running pool, first end every battle in flight (each is
        forfeited and never comes back, as a terminal step or otherwise) and forget every
        slot's state. ``recv`` then returns the new battles' first steps. ``seed``: seed
        the new battles (the simulator transport and team draws: the same seed, teams and a
        deterministic policy play the same battles)."""
        self._check()
        eng = self._engine
        if not self._started:
            self._started = True
            if seed is not None:
                eng.call(eng.reseed, seed)
            eng.call(eng.started.set)
            return
        limit = self.recv_timeout_s if timeout is None else timeout
        future = asyncio.run_coroutine_threadsafe(eng.reset(seed), eng.loop)
        try:
            future.result(limit)
        except TimeoutError:  # the reset goes on on the loop; what the caller held is gone
            raise TimeoutError(f"the pool's reset did not finish in {limit:.3g}s (it goes on: recv returns "
                               f"the new battles)") from None
        except concurrent.futures.CancelledError:  # the loop stopped under it
            self._check()
            raise RuntimeError("the battle pool stopped during a reset") from None
        finally:
            self._outstanding.clear()
            self._carry = []
            self._last_obs.clear()
        self._check()

    def send(self, actions, env_ids) -> None:
        """Answer the slots ``env_ids`` (each returned by ``recv`` and not answered yet)."""
        self._check()
        actions, env_ids = _flat(actions), _flat(env_ids)
        for e in self._validate(actions, env_ids):
            del self._outstanding[e]
        self._forward(actions, env_ids)

    def answer(self, actions, env_ids) -> None:
        """:meth:`send` without its checks, for a caller that checked already (a shard's
        parent, which only answers what this pool returned)."""
        actions, env_ids = _flat(actions), _flat(env_ids)
        for e in env_ids.tolist():
            self._outstanding.pop(e, None)
        self._forward(actions, env_ids)

    def _forward(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        """Checked answers on their way to the battles."""
        self._sent += 1
        self._engine.call(self._engine.slots.answer, list(zip(env_ids.tolist(), actions.tolist())), self._sent)

    def _validate(self, actions: np.ndarray, env_ids: np.ndarray) -> set:
        """The answered slots; a ``ValueError`` naming every problem (nothing is sent)."""
        if len(actions) != len(env_ids):
            raise ValueError(f"send got {len(actions)} actions for {len(env_ids)} env_ids")
        if not np.issubdtype(actions.dtype, np.integer) or not np.issubdtype(env_ids.dtype, np.integer):
            raise ValueError(f"send needs integer actions and env_ids, got {actions.dtype} and {env_ids.dtype}")
        problems = []
        seen = set()
        for a, e in zip(actions.tolist(), env_ids.tolist()):
            if not 0 <= e < self.num_envs:
                problems.append(f"env_id {e} does not exist (0-{self.num_envs - 1})")
            elif e in seen:
                problems.append(f"env_id {e} twice")
            elif e not in self._outstanding:
                problems.append(f"env_id {e} is not pending (recv has not returned it, or it was answered)")
            else:
                mask = self._outstanding[e]
                if mask is not None and not (0 <= a < self.n_actions and mask[a]):
                    problems.append(f"env_id {e}: action {a} is not legal (legal: {np.flatnonzero(mask).tolist()})")
            seen.add(e)
        if problems:
            raise ValueError("send refused, nothing was sent: " + "; ".join(problems))
        return seen

    def recv(self, timeout: Optional[float] = None, *, settled: bool = False):
        """The next pending slots: ``(obs, reward, terminated, truncated, info)``.

        ``obs`` is ``{"observation": [n, D] float32, "action_mask": [n, A] bool}``; ``info``
        holds arrays ``env_id``, ``elapsed_step`` (0: a new battle), ``action_mask``,
        ``kind``, ``battle_tag``, ``side``, ``opponent``, ``outcome``, ``abandoned``,
        ``retry`` (Showdown rejected the slot's previous action, which this step replaces:
        rare, from hidden information such as a trapping ability) and the bools ``timed_out``
        (fewer than ``batch_size`` slots, or none, in ``timeout`` s) and ``settled``
        (nothing more can come before these are answered: every other live battle side
        waits on one of them, or on its opponent's choice).

        ``settled=True`` (the synchronous faces' decision clock): wait for that, not for
        the flush rule's batch (``batch_size`` is then ignored). A user's ``embed_battle``
        or ``reward_fn`` that raises does so here, with a note naming it and the battle;
        the same slots come back (and raise again) until :meth:`async_reset`."""
        self._check()
        if not self._started:
            self.async_reset()
        eng = self._engine
        timeout = self.recv_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        want = None if settled else self.batch_size
        records, self._carry = self._carry, []
        timed_out = done = False
        last = time.monotonic()  # (settled: the latest record; a step never stalls on a missed mark)
        with eng.cv:
            while True:
                self._check()
                out = eng.out
                if want is None:
                    if out:
                        last = time.monotonic()
                    while out:
                        records.append(out.popleft())
                    done = eng.settled >= self._sent
                    if records and (done or not settled or time.monotonic() - last >= SETTLE_GRACE_S):
                        break
                else:
                    while out and len(records) < want:
                        records.append(out.popleft())
                    if len(records) >= want:
                        break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                eng.cv.wait(min(remaining, SETTLE_GRACE_S) if settled and records else remaining)
        try:
            arrays = self._arrays(records, timed_out)
        except BaseException:
            self._carry = records  # back for the next recv: their slots stay consistent
            raise
        arrays[4]["settled"] = done
        for r in records:
            self._outstanding[r.env_id] = None if (r.terminated or r.truncated) else r.mask
        return arrays

    def step(self, actions, env_ids):
        """:meth:`send`, then :meth:`recv`."""
        self.send(actions, env_ids)
        return self.recv()

    def _call_user(self, fn: Callable, name: str, r: Record):
        try:
            return fn(r.battle)
        except Exception as e:
            e.add_note(f"raised by the battle pool's {name} on battle {r.battle_tag} ({r.side}, step "
                       f"{r.elapsed_step}); the pool goes on after async_reset() / reset()")
            raise

    def _arrays(self, records: list, timed_out: bool):
        n = len(records)
        embed, reward_fn = self.embed_battle, self.reward_fn
        if embed is None:
            obs = np.empty((n, self.game.obs_dim), dtype=np.float32)
            for i, r in enumerate(records):
                obs[i] = r.obs
            derive(obs)
        else:
            rows = []
            for r in records:
                if r.terminated or r.truncated:
                    row = self._last_obs.get(r.env_id)
                    if row is None:  # a side that ended before its first step reached us
                        row = np.zeros_like(rows[0]) if rows else None
                else:
                    row = self._last_obs[r.env_id] = np.asarray(self._call_user(embed, "embed_battle", r))
                rows.append(row)
            if rows and any(row is None for row in rows):
                like = next((row for row in rows if row is not None), np.zeros(1, np.float32))
                rows = [np.zeros_like(like) if row is None else row for row in rows]
            obs = np.stack(rows) if n else np.zeros((0,), np.float32)
        mask = np.zeros((n, self.n_actions), dtype=bool)
        for i, r in enumerate(records):
            mask[i] = r.mask
        if reward_fn is None:
            reward = np.fromiter((r.reward for r in records), np.float32, n)
        else:  # a battle's first step and an abandoned side's end follow no action of theirs
            reward = np.fromiter((float(self._call_user(reward_fn, "reward_fn", r))
                                  if (r.elapsed_step > 0 or r.terminated) and not r.truncated else 0.0
                                  for r in records), np.float32, n)
        terminated = np.fromiter((r.terminated for r in records), bool, n)
        truncated = np.fromiter((r.truncated for r in records), bool, n)
        info = {
            "env_id": np.fromiter((r.env_id for r in records), np.int32, n),
            "elapsed_step": np.fromiter((r.elapsed_step for r in records), np.int32, n),
            "action_mask": mask,
            "kind": np.array([r.kind for r in records], dtype=object),
            "battle_tag": np.array([r.battle_tag for r in records], dtype=object),
            "side": np.array([r.side for r in records], dtype=object),
            "opponent": np.array([r.opponent for r in records], dtype=object),
            "outcome": np.array([r.outcome for r in records], dtype=object),
            "abandoned": np.fromiter((r.abandoned for r in records), bool, n),
            "retry": np.fromiter((r.retry for r in records), bool, n),
            "timed_out": timed_out,
        }
        return {"observation": obs, "action_mask": mask}, reward, terminated, truncated, info

    def set_opponent(self, opponent: Any) -> None:
        """Battles that start from now on play ``opponent`` (those in flight play on); the
        previous opponent's agent is closed once its battles have ended.
        Self-play and the other opponents have different slot counts: no switch between them."""
        self._check()
        name, agent = _opponent(opponent, self.cfg, self.device)
        self._same_slots(name)
        self.opponent_name = name
        eng = self._engine
        eng.call(eng.collector.set_mix, {name: 1.0}, {name: agent} if agent else {})

    def _same_slots(self, opponent: Any) -> None:
        if (opponent == "self") != self.self_play:
            raise ValueError("set_opponent cannot switch between self-play and another opponent "
                             "(the number of slots differs); make another pool")

    @property
    def stats(self) -> dict:
        """Counters of the battles played so far (read from the loop's thread's objects)."""
        s = self.agent.stats
        b = self.agent.batcher.stats
        return {"decisions": s.decisions, "battles": s.battles, "wins": s.wins, "losses": s.losses,
                "ties": s.ties, "abandoned": s.abandoned, "invalid_choices": s.invalid_choices,
                "retries": s.retries, "batches": b.batches, "mean_batch": b.mean_batch_size,
                "faults": self.collector.faults}

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("the battle pool is closed")
        error = self._engine.error
        if error is not None:
            raise RuntimeError(f"the battle pool stopped: {error!r}") from error

    def close(self, timeout: float = 60.0) -> None:
        """Stop every battle, the event loop's thread and the managed server. A second call
        does nothing; any other call after it raises ``RuntimeError``."""
        if self._closed:
            return
        self._closed = True
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None and finalizer.alive:
            finalizer.detach()
            self._engine.shutdown(timeout)

    def __enter__(self) -> "BattlePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
