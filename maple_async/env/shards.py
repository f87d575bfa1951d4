"""``make_pool(..., shards=N)``: the battles in N spawned worker processes, one pool each.

Each worker runs an ordinary :class:`~maple_async.env.local.BattlePool` (its own managed
loopback server with its share of the simulators, or a given server that all share; its
own event loop) behind one pipe: a
batch its pool gathers goes to the parent at once as one message of arrays (one pickle per
batch, not per slot), and the parent's answers come back as one message per worker and
``send``. Worker ``w``'s slot ``e`` is the parent's slot ``offset[w] + e``.

Every reset starts a new epoch: a worker tags each batch with the epoch it was gathered
in, and the parent drops a batch of an earlier one, so ``recv`` after ``async_reset``
returns only the new battles' steps. A worker whose pool stops sends its traceback
(:class:`~maple_async.procs.Failed`) before it exits (code 1); the parent raises it, naming
the shard, from every call after.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Optional

import numpy as np

from .. import procs
from ..obs import games
from .api import PoolAPI
from .local import BattlePool  # a shard's own pool: one process (tests put a stand-in here)


def _stopped(pool) -> bool:
    """Whether ``pool`` itself stopped (its server or loop failed, or it was closed), as
    opposed to a caller's callback raising in its ``recv``."""
    try:
        pool._check()
    except RuntimeError:
        return True
    return False


def _worker(conn, args: tuple, kwargs: dict) -> None:
    """A shard: its pool's batches go to the parent as soon as they are gathered (this
    thread blocks in ``recv``, no polling); a reader thread applies the parent's messages.

    To the parent: ``("ready", num_envs, server_url, opponent_name)``, then
    ``("batch", arrays, epoch)``, ``("reset", epoch)`` (done), ``("stats", dict)``,
    ``("opponent", name, error)``, ``("error", traceback, epoch)`` (the caller's
    ``embed_battle`` or ``reward_fn`` raised: no batches until the next reset) and
    :class:`~maple_async.procs.Failed` (the pool stopped; the worker then exits with code 1)."""
    if procs.enter_worker() is None:
        return
    send_lock = threading.Lock()
    stop = threading.Event()
    fatal: list = []

    def reply(msg) -> None:
        try:
            with send_lock:
                conn.send(msg)
        except (OSError, EOFError, ValueError):  # the parent is gone
            stop.set()

    try:
        pool = BattlePool(*args, **kwargs)
    except BaseException:  # noqa: BLE001 - reported to the parent
        reply(procs.Failed.now())
        sys.exit(1)
    # One pool.recv or reset at a time, so a batch's epoch is the one it was gathered in.
    pool_lock = threading.Lock()
    # epoch 0: not started; failed: a callback raised; resetting: the main loop lets the reader
    # take the lock (a Lock is not fair: a loop re-taking it can starve the reset)
    state = {"epoch": 0, "failed": False, "resetting": False}

    def read() -> None:
        try:
            while True:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    return  # the parent is gone
                op = msg[0]
                if op == "send":  # checked by the parent, which only answers what it received
                    pool.answer(msg[1], msg[2])
                elif op == "reset":
                    state["resetting"] = True
                    try:
                        with pool_lock:
                            pool.async_reset(msg[1])
                            state.update(epoch=msg[2], failed=False)
                    finally:
                        state["resetting"] = False
                    reply(("reset", msg[2]))
                elif op == "opponent":
                    try:
                        pool.set_opponent(msg[1])
                        reply(("opponent", pool.opponent_name, None))
                    except Exception as e:  # noqa: BLE001 - the parent raises it
                        reply(("opponent", None, f"{type(e).__name__}: {e}"))
                elif op == "stats":
                    reply(("stats", pool.stats))
                elif op == "close":
                    return
        except BaseException:  # noqa: BLE001 - reported to the parent
            fatal.append(procs.Failed.now())
        finally:
            stop.set()

    reply(("ready", pool.num_envs, pool.server_url, pool.opponent_name))
    reader = threading.Thread(target=read, name="maple-shard-reader", daemon=True)
    reader.start()
    try:
        while not stop.is_set():
            out = None
            if state["resetting"]:
                stop.wait(0.001)
                continue
            with pool_lock:
                epoch = state["epoch"]
                if epoch and not state["failed"]:
                    try:
                        out = pool.recv(timeout=0.2)
                    except Exception:
                        if _stopped(pool):
                            raise
                        state["failed"] = True  # the same records would raise again: wait for a reset
                        out = traceback.format_exc()
            if out is None:
                stop.wait(0.05)
            elif isinstance(out, str):
                reply(("error", out, epoch))
            elif len(out[1]):
                reply(("batch", out, epoch))
    except BaseException:  # noqa: BLE001 - reported to the parent
        fatal.append(procs.Failed.now())
    finally:
        if fatal:
            reply(fatal[0])
        pool.close()
    if fatal:
        sys.exit(1)


class ShardedPool(PoolAPI):
    """The same API as :class:`BattlePool` over ``shards`` worker processes; ``num_battles``
    is split between them. Each starts its own managed server with its share of the
    simulators, or with ``server=URL`` all play on that one. A shard that fails stops the
    pool: every later call raises ``RuntimeError`` naming the shard, its exit code and the
    worker's traceback."""

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
        self._error: Optional[str] = None  # why the pool stopped (a shard failed)
        self._user_error: Optional[str] = None  # a caller's callback raised in a shard: until async_reset
        self._started = False
        self._epoch = 0
        self._outstanding: dict[int, Optional[np.ndarray]] = {}
        self._carry: list = []
        self._server = server  # given: every shard plays there
        self.opponent_name = opponent if isinstance(opponent, str) else getattr(opponent, "__name__", "policy")
        self.self_play = opponent == "self"
        sims = kwargs.pop("simulators", None) or resolve_simulators(0, shards)
        self._conns, self._procs = [], []
        self._replies: list[dict] = [{} for _ in range(shards)]
        for i in range(shards):
            n = num_battles // shards + (i < num_battles % shards)
            kw = dict(kwargs, battle_format=battle_format, num_battles=n, batch_size=None, server=server,
                      opponent=opponent, teams=teams, simulators=sims, recv_timeout_s=recv_timeout_s,
                      start_timeout_s=start_timeout_s, seed=None if seed is None else shard_seed(seed, i))
            proc, conn = procs.spawn(_worker, ((), kw), name=f"maple-pool-shard{i}")
            self._conns.append(conn)
            self._procs.append(proc)
        self._offsets, self._sizes, self._urls = [], [], []
        offset = 0
        try:
            for i, conn in enumerate(self._conns):
                if not conn.poll(start_timeout_s):
                    raise TimeoutError(f"shard {i} did not start in {start_timeout_s:.0f}s")
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    self._died(i)
                if isinstance(msg, procs.Failed):
                    raise RuntimeError(f"shard {i} failed to start: {msg.traceback}")
                _, size, url, self.opponent_name = msg
                self._offsets.append(offset)
                self._sizes.append(size)
                self._urls.append(url)
                offset += size
        except BaseException:
            self.close()
            raise
        self.num_envs = offset
        self.num_battles = num_battles
        if batch_size is not None and not 1 <= batch_size <= self.num_envs:
            self.close()
            raise ValueError(f"batch_size must be between 1 and the {self.num_envs} slots (or None)")
        atexit.register(self.close)

    @property
    def server_url(self):
        """With ``server=URL``: that URL (every shard plays there). Otherwise each shard
        runs its own managed server and this is the list of their URLs, shard by shard
        (:attr:`server_urls` is always that list)."""
        return self._urls[0] if self._server is not None else list(self._urls)

    @property
    def server_urls(self) -> list:
        """Each shard's server URL, shard by shard."""
        return list(self._urls)

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("the battle pool is closed")
        if self._error is None:
            for i, p in enumerate(self._procs):
                if not p.is_alive():
                    self._died(i)
        if self._error is not None:
            raise RuntimeError(f"the battle pool stopped: {self._error}")

    def _died(self, i: int, cause: Optional[str] = None) -> None:
        """Shard ``i`` failed, exited or broke its pipe: the pool stops, naming it, its exit
        code and (when it sent one) its traceback."""
        if self._error is None:
            p = self._procs[i]
            cause = cause or self._last_words(i)
            p.join(10)  # a pipe closes a moment before its process has exited
            how = "failed" if p.exitcode is None else f"exited (code {p.exitcode})"
            self._error = f"shard {i} {how}" + (f":\n{cause}" if cause else "")
        raise RuntimeError(f"the battle pool stopped: {self._error}")

    def _last_words(self, i: int) -> Optional[str]:
        """The traceback a dead shard sent before it exited, if it is still in its pipe."""
        failed = procs.last_words(self._conns[i])
        return failed.traceback if failed else None

    def _post(self, i: int, msg: tuple) -> None:
        try:
            self._conns[i].send(msg)
        except (OSError, EOFError):
            self._died(i)

    def async_reset(self, seed: Optional[int] = None, timeout: Optional[float] = None) -> None:
        """Start the battles; on a running pool, end every battle in flight in every shard
        and forget every slot's state, as :meth:`BattlePool.async_reset`. ``seed``: shard
        ``i``'s new battles are seeded ``shard_seed(seed, i)``. Returns once every shard has
        reset; ``recv`` then returns only the new battles' steps."""
        from ..run.process import shard_seed
        self._check()
        self._started = True
        self._epoch += 1
        self._outstanding.clear()
        self._carry = []
        self._user_error = None
        for i in range(self.shards):
            self._replies[i].pop("reset", None)
            self._post(i, ("reset", None if seed is None else shard_seed(seed, i), self._epoch))
        self._gather("reset", self.recv_timeout_s if timeout is None else timeout)

    def _forward(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        shard = np.searchsorted(self._offsets, env_ids, side="right") - 1
        for s in np.unique(shard):
            rows = shard == s
            self._post(int(s), ("send", actions[rows].astype(np.int64),
                                (env_ids[rows] - self._offsets[s]).astype(np.int64)))

    def recv(self, timeout: Optional[float] = None, *, settled: bool = False):
        """As :meth:`BattlePool.recv`. A caller's ``embed_battle`` or ``reward_fn`` that
        raised in a shard raises here as ``RuntimeError`` naming the shard, with its
        traceback, until :meth:`async_reset`. ``settled=True`` is not supported here."""
        if settled:
            raise NotImplementedError("recv(settled=True) (the decision clock) needs one pool: "
                                      "use shards=1 or the batch clock")
        self._check()
        if not self._started:
            self.async_reset()
        if self._user_error is not None:
            raise RuntimeError(self._user_error)
        timeout = self.recv_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        parts, self._carry = self._carry, []
        want = self.batch_size
        timed_out = False
        while True:
            parts += self._take(0.0)  # everything the shards have sent by now
            if self._user_error is not None:
                self._carry = parts
                raise RuntimeError(self._user_error)
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
        info["settled"] = False  # the shards settle each on their own: no whole step is known here
        for e, m, t, u in zip(info["env_id"].tolist(), obs["action_mask"], term, trunc):
            self._outstanding[e] = None if (t or u) else m
        return obs, rew, term, trunc, info

    def _take(self, timeout: float) -> list:
        """Batches of the current epoch the shards have sent, waiting up to ``timeout`` for
        the first message; replies are kept in ``_replies``."""
        parts = []
        for conn in wait(self._conns, timeout):
            i = self._conns.index(conn)
            try:
                while conn.poll():
                    parts += self._handle(i, conn.recv())
            except (EOFError, OSError):  # the worker died (or closed its pipe) mid-message
                self._died(i)
        self._check()
        return parts

    def _handle(self, i: int, msg: tuple) -> list:
        if isinstance(msg, procs.Failed):
            self._died(i, msg.traceback)
        kind = msg[0]
        if kind == "batch":
            _, out, epoch = msg
            if epoch != self._epoch:  # gathered before the latest reset
                return []
            out[4]["env_id"] = out[4]["env_id"] + self._offsets[i]
            return [out]
        if kind == "error":
            if msg[2] == self._epoch and self._user_error is None:
                self._user_error = (f"shard {i}: the caller's embed_battle or reward_fn raised (the pool "
                                    f"goes on after async_reset()):\n{msg[1]}")
        elif kind != "reset" or msg[1] == self._epoch:
            self._replies[i][kind] = msg[1:]
        return []

    def _gather(self, kind: str, timeout: float) -> list:
        """Every shard's reply ``kind``; batches that arrive meanwhile stay for ``recv``."""
        deadline = time.monotonic() + timeout
        while True:
            missing = [i for i, r in enumerate(self._replies) if kind not in r]
            if not missing:
                return [r.pop(kind) for r in self._replies]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"shard {missing[0]} did not answer ({kind}) in {timeout:.0f}s")
            self._carry += self._take(min(remaining, 1.0))

    def set_opponent(self, opponent: Any) -> None:
        """As :meth:`BattlePool.set_opponent`, in every shard (``opponent`` must pickle)."""
        self._check()
        self._same_slots(opponent)
        for i in range(self.shards):
            self._replies[i].pop("opponent", None)
            self._post(i, ("opponent", opponent))
        replies = self._gather("opponent", self.recv_timeout_s)
        for i, (_, error) in enumerate(replies):
            if error:
                raise ValueError(f"set_opponent failed in shard {i}: {error}")
        self.opponent_name = replies[0][0]

    @property
    def stats(self) -> dict:
        """Every shard's counters, summed (one round trip to each)."""
        self._check()
        for i in range(self.shards):
            self._replies[i].pop("stats", None)
            self._post(i, ("stats",))
        total: dict = {}
        for (st,) in self._gather("stats", 30.0):
            for k, v in st.items():
                total[k] = total.get(k, 0) + v
        batches = total.get("batches", 0)
        total["mean_batch"] = total.get("decisions", 0) / batches if batches else 0.0
        return total

    def close(self, timeout: float = 30.0) -> None:
        """Ask every worker to stop, wait for all of them together up to ``timeout``,
        then terminate (and at last kill) the ones still running."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        conns, workers = getattr(self, "_conns", []), getattr(self, "_procs", [])
        for conn in conns:
            try:
                conn.send(("close",))
            except (BrokenPipeError, OSError):
                pass
        procs.stop_all(workers, timeout)
        for conn in conns:
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
