"""``BattlePool(..., shards=N)``: the battles in N spawned worker processes, one pool each.

Each worker runs an ordinary :class:`~maple_async.env.pool.BattlePool` (its own managed
loopback server with its share of the simulators, or a given server that all share; its
own event loop) behind one pipe: a
batch its pool gathers goes to the parent at once as one message of arrays (one pickle per
batch, not per slot), and the parent's answers come back as one message per worker and
``send``. Worker ``w``'s slot ``e`` is the parent's slot ``offset[w] + e``.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import signal
import threading
import time
from multiprocessing.connection import wait
from typing import Any, Optional

import numpy as np

from ..obs import games
from .pool import BattlePool

def _worker(conn, args: tuple, kwargs: dict) -> None:
    """A shard: its pool's batches go to the parent as soon as they are gathered (this
    thread blocks in ``recv``, no polling); a reader thread applies the parent's messages."""
    from ..server import _die_with_parent
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    try:
        pool = BattlePool(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    lock = threading.Lock()
    stop = threading.Event()

    def reply(msg) -> None:
        with lock:
            conn.send(msg)

    def read() -> None:
        try:
            while True:
                msg = conn.recv()
                op = msg[0]
                if op == "send":  # checked by the parent, which only answers what it received
                    pool.answer(msg[1], msg[2])
                elif op == "reset":
                    pool.async_reset()
                elif op == "opponent":
                    pool.set_opponent(msg[1])
                elif op == "stats":
                    reply(("stats", pool.stats))
                elif op == "close":
                    break
        except (EOFError, OSError):
            pass
        finally:
            stop.set()

    reply(("ready", pool.num_envs))
    reader = threading.Thread(target=read, name="maple-shard-reader", daemon=True)
    reader.start()
    try:
        while not stop.is_set():
            if not pool._started:
                stop.wait(0.05)
                continue
            out = pool.recv(timeout=0.2)
            if len(out[1]):
                reply(("batch", out))
    except (BrokenPipeError, OSError, KeyboardInterrupt):
        pass
    except RuntimeError:  # the pool stopped: the parent sees this shard exit
        pass
    finally:
        pool.close()


class ShardedPool(BattlePool):
    """The same API as :class:`BattlePool` over ``shards`` worker processes; ``num_battles``
    is split between them. Each starts its own managed server with its share of the
    simulators, or with ``server=URL`` all play on that one."""

    def __init__(self, battle_format: str = "gen9randombattle", num_battles: int = 64,
                 batch_size: Optional[int] = None, opponent: Any = "self", teams=None,
                 server: Optional[str] = None, *, shards: int = 2, seed: Optional[int] = None,
                 recv_timeout_s: float = 60.0, start_timeout_s: float = 300.0, **kwargs):
        if num_battles < shards:
            raise ValueError(f"num_battles ({num_battles}) must be at least shards ({shards})")
        if kwargs.get("embed_battle") is not None or kwargs.get("reward_fn") is not None:
            _picklable(kwargs.get("embed_battle"), kwargs.get("reward_fn"))
        from ..run.process import shard_seed
        from ..server import resolve_simulators
        self.shards = shards
        self.batch_size = batch_size
        self.recv_timeout_s = recv_timeout_s
        self.embed_battle = kwargs.get("embed_battle")
        self.observation_space = kwargs.get("observation_space")
        self.game = games.of_format(battle_format)
        self.n_actions = self.game.n_actions
        self.obs_dim = self.game.obs_dim if self.embed_battle is None else None
        self._closed = False
        self._error = None
        self._started = False
        self._outstanding: dict[int, Optional[np.ndarray]] = {}
        self._carry: list = []
        self.opponent_name = opponent if isinstance(opponent, str) else getattr(opponent, "__name__", "policy")
        self.self_play = opponent == "self"
        ctx = mp.get_context("spawn")
        sims = kwargs.pop("simulators", None) or resolve_simulators(0, shards)
        self._conns, self._procs = [], []
        for i in range(shards):
            n = num_battles // shards + (i < num_battles % shards)
            kw = dict(kwargs, battle_format=battle_format, num_battles=n, batch_size=None, server=server,
                      opponent=opponent, teams=teams, simulators=sims, recv_timeout_s=recv_timeout_s,
                      start_timeout_s=start_timeout_s, seed=None if seed is None else shard_seed(seed, i))
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, (), kw), name=f"maple-pool-shard{i}", daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self._offsets, self._sizes = [], []
        offset = 0
        try:
            for i, conn in enumerate(self._conns):
                if not conn.poll(start_timeout_s):
                    raise TimeoutError(f"shard {i} did not start in {start_timeout_s:.0f}s")
                kind, value = conn.recv()
                if kind == "error":
                    raise RuntimeError(f"shard {i} failed to start: {value}")
                self._offsets.append(offset)
                self._sizes.append(value)
                offset += value
        except BaseException:
            self.close()
            raise
        self.num_envs = offset
        self.num_battles = num_battles
        if batch_size is not None and not 1 <= batch_size <= self.num_envs:
            self.close()
            raise ValueError(f"batch_size must be between 1 and the {self.num_envs} slots (or None)")
        self._stats: list = [None] * shards
        atexit.register(self.close)

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("the battle pool is closed")
        dead = [i for i, p in enumerate(self._procs) if not p.is_alive()]
        if dead:
            raise RuntimeError(f"the battle pool stopped: shard {dead[0]} exited "
                               f"(code {self._procs[dead[0]].exitcode})")

    def async_reset(self) -> None:
        self._check()
        if not self._started:
            self._started = True
            for conn in self._conns:
                conn.send(("reset",))

    def _forward(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        shard = np.searchsorted(self._offsets, env_ids, side="right") - 1
        for s in np.unique(shard):
            rows = shard == s
            self._conns[s].send(("send", actions[rows].astype(np.int64),
                                 (env_ids[rows] - self._offsets[s]).astype(np.int64)))

    def recv(self, timeout: Optional[float] = None):
        self._check()
        if not self._started:
            self.async_reset()
        timeout = self.recv_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        parts, self._carry = self._carry, []
        want = self.batch_size
        timed_out = False
        while True:
            parts += self._take(0.0)  # everything the shards have sent by now
            have = sum(len(p[1]) for p in parts)
            if (want is None and have) or (want is not None and have >= want):
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            parts += self._take(min(remaining, 1.0))
        obs, rew, term, trunc, info = _concat(parts, self.n_actions)
        if want is not None and len(rew) > want:
            self._carry = [_take(obs, rew, term, trunc, info, slice(want, None))]
            obs, rew, term, trunc, info = _take(obs, rew, term, trunc, info, slice(0, want))
        info["timed_out"] = timed_out
        for e, m, t, u in zip(info["env_id"].tolist(), obs["action_mask"], term, trunc):
            self._outstanding[e] = None if (t or u) else m
        return obs, rew, term, trunc, info

    def _take(self, timeout: float, want_stats: bool = False) -> list:
        """Batches the shards have sent, waiting up to ``timeout`` for the first."""
        parts = []
        for conn in wait(self._conns, timeout):
            i = self._conns.index(conn)
            while conn.poll():
                try:
                    kind, out = conn.recv()
                except EOFError:
                    self._check()
                    raise
                if kind == "stats":
                    self._stats[i] = out
                    continue
                out[4]["env_id"] = out[4]["env_id"] + self._offsets[i]
                parts.append(out)
        self._check()
        return parts

    def set_opponent(self, opponent: Any) -> None:
        self._check()
        self._same_slots(opponent)
        for conn in self._conns:
            conn.send(("opponent", opponent))

    @property
    def stats(self) -> dict:
        """Every shard's counters, summed (one round trip to each)."""
        self._stats = [None] * self.shards
        for conn in self._conns:
            conn.send(("stats",))
        deadline = time.monotonic() + 30.0
        while any(st is None for st in self._stats) and time.monotonic() < deadline:
            self._carry += self._take(1.0)  # batches on their way stay for recv
        total: dict = {}
        for st in self._stats:
            for k, v in (st or {}).items():
                total[k] = total.get(k, 0) + v
        batches = total.get("batches", 0)
        total["mean_batch"] = total.get("decisions", 0) / batches if batches else 0.0
        return total

    def close(self, timeout: float = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        for conn in getattr(self, "_conns", []):
            try:
                conn.send(("close",))
            except (BrokenPipeError, OSError):
                pass
        for p in getattr(self, "_procs", []):
            p.join(timeout)
            if p.is_alive():
                p.terminate()
                p.join(5)
        for conn in getattr(self, "_conns", []):
            conn.close()



def _picklable(*objs) -> None:
    import pickle
    for o in objs:
        if o is not None:
            try:
                pickle.dumps(o)
            except Exception as e:
                raise ValueError(f"with shards, embed_battle and reward_fn must be picklable "
                                 f"(module-level functions): {e}") from None


def _concat(parts: list, n_actions: int):
    if len(parts) == 1:
        return parts[0]
    if not parts:
        obs = {"observation": np.zeros((0, 0), np.float32), "action_mask": np.zeros((0, n_actions), bool)}
        info = {"env_id": np.zeros(0, np.int32), "elapsed_step": np.zeros(0, np.int32),
                "action_mask": obs["action_mask"]}
        return obs, np.zeros(0, np.float32), np.zeros(0, bool), np.zeros(0, bool), info
    obs = {k: np.concatenate([p[0][k] for p in parts]) for k in parts[0][0]}
    cat = [np.concatenate([p[i] for p in parts]) for i in (1, 2, 3)]
    info = {k: (np.concatenate([p[4][k] for p in parts]) if isinstance(v, np.ndarray) else v)
            for k, v in parts[0][4].items()}
    return obs, *cat, info


def _take(obs, rew, term, trunc, info, rows):
    return ({k: v[rows] for k, v in obs.items()}, rew[rows], term[rows], trunc[rows],
            {k: (v[rows] if isinstance(v, np.ndarray) else v) for k, v in info.items()})


BattlePool.sharded = ShardedPool
