"""One process's battle pool (:class:`BattlePool`): the caller's side of the slots, with
EnvPool's asynchronous API.

The battles run exactly as in training: a :class:`~maple_async.collect.collector.Collector`
plays lanes of matches on one event loop (uvloop, in a background thread: the
:class:`~.engine._Engine`), each decision goes through an
:class:`~maple_async.collect.agent.Agent` (encoding, masks, orders, rewards, re-requests,
clean-up) and its batcher's flush rule. The only difference is the batcher: a flushed
batch is handed to the caller (:meth:`BattlePool.recv`) instead of to a forward pass, and
the caller's :meth:`~.api.PoolAPI.send` resolves it (:mod:`.slots`).

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
import threading
import time
import weakref
from typing import Any, Callable, Optional

import numpy as np

from .. import config as config_mod
from ..collect.agent import Agent
from ..collect.collector import Collector
from ..obs import games
from ..obs.features import derive
from .api import PoolAPI
from .engine import _Engine, _opponent
from .slots import Record

SETTLE_GRACE_S = 2.0  # a settled recv with slots in hand returns after this long with nothing new


class BattlePool(PoolAPI):
    """``num_battles`` battles in flight in this process, their sides handed to the caller
    in batches. A subclass may override its methods (``recv``, ...); to run the battles in
    worker processes, :func:`~.pool.make_pool` with ``shards=N`` builds a
    :class:`~.shards.ShardedPool` of these instead.

    ``opponent``: ``"self"`` (both sides are slots: ``2 * num_battles`` slots), a baseline
    (``random``, ``max_power``, ``heuristics``), a checkpoint file, or a policy (an object
    or ``"module:attr"``; see :mod:`maple_async.inference.outside`): ``num_battles`` slots.
    ``batch_size``: ``recv`` returns exactly this many slots (fewer only on its timeout);
    None: whatever the batcher's flush rule gathered (at least one slot).
    ``teams``: a team file or folder (team formats). ``server``: a running server's URL
    (default: a managed loopback server, started here and stopped by ``close()``).
    ``embed_battle(battle) -> np.ndarray`` and ``observation_space``: your observation
    instead of the encoder's; ``reward_fn(battle) -> float``: your reward of the step that
    led to this state (default: the config's composite reward, by default win 1, hp 0.1,
    faint 0.05). Both run on your thread, inside ``recv``.
    ``config``: a preset (a name such as ``"bss"``, a YAML path or a Config; default: the
    defaults, which are the ``default`` preset's); ``**options``: its keys (``max_wait_ms=5``,
    ``"runner.seed"=1``, ...). ``shards``: 1 only (the battles run in this process).
    """

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
        if shards != 1:
            raise TypeError(f"{type(self).__name__} runs its battles in one process: "
                            f"make_pool(..., shards={shards}) runs them in {shards} worker processes")
        if num_battles < 1:
            raise ValueError("num_battles must be >= 1")
        self.cfg = cfg = config_mod.for_pool(battle_format, num_battles, teams, server, seed, config, options)
        cfg.train.total_sides = 10 ** 12  # the lanes never run dry; close() stops them
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

    def _forward(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        """Checked answers on their way to the battles."""
        self._sent += 1
        self._engine.call(self._engine.slots.answer, list(zip(env_ids.tolist(), actions.tolist())), self._sent)

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
                    done = eng.settled_after >= self._sent  # (slots.py: the counters)
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
