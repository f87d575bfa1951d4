"""How trajectories reach the learning loop and weights reach the collectors.

Every transport offers the loop the same five calls: ``start(weights_msg)``,
``wait(want, stop)`` (finished trajectories since the last call), ``publish(weights_msg)``,
``stop()`` (the trajectories that arrived meanwhile), and ``throughput_counters()``. They
differ only in where the :class:`~maple_async.collect.collector.Collector` runs:

* :class:`LocalTransport`   one collector on this event loop (``train.shards: 1``);
* :class:`ProcessTransport` one worker process per shard (spawn), each with its own managed
  Showdown server, event loop, batcher and battles; finished trajectories come back over
  one pipe per worker, weights go out as one pickle of numpy arrays per broadcast. A
  worker that dies is replaced; its in-flight battles are lost, never half-recorded,
  because only finished battles are ever sent. Workers run inference on
  ``train.worker_device`` (CPU by default: CUDA is then initialised only in the learner);
* :class:`RayTransport`     one async Ray actor per shard, spread across a cluster; weights
  travel through the object store.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import pickle
import queue
import signal
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_connections
from typing import Any, Awaitable, Callable, Optional

from ..collect.collector import Collector
from ..config import Config
from ..errors import UserError
from ..server import resolve_simulators
from .process import run_async, setup_battle_process, shard_seed


def _each_state_dict(msg: dict, convert: Callable[[Any], Any]) -> dict:
    """``msg`` with ``convert`` applied to every tensor of its weights and league snapshots."""
    def sd(weights: dict) -> dict:
        return {k: convert(v) for k, v in weights.items()}

    out = {**msg, "weights": sd(msg["weights"])}
    league = msg.get("league")
    if league:
        out["league"] = {**league, "snapshots": {k: sd(v) for k, v in league["snapshots"].items()}}
    return out


def pack_weights_msg(msg: dict) -> bytes:
    """A weights message as one pickle of numpy arrays, made once per broadcast. Torch
    tensors put in a multiprocessing queue travel as shared-memory file descriptors, each
    fetched from the learner's one resource-sharer thread, which a busy learner starves
    (8 shards on 16 cores fell 69 updates behind: docs/benchmarks.md)."""
    return pickle.dumps(_each_state_dict(msg, lambda v: v.detach().cpu().numpy()),
                        protocol=pickle.HIGHEST_PROTOCOL)


def unpack_weights_msg(blob: bytes) -> dict:
    """:func:`pack_weights_msg`'s message again, with CPU tensors."""
    import torch
    return _each_state_dict(pickle.loads(blob), torch.from_numpy)


def _counters(agent) -> dict:
    """Cumulative decisions, inference batches and batched decisions (for rates)."""
    bs = agent.batcher.stats
    return {"dec": agent.stats.decisions, "bat": bs.batches, "bdec": bs.decisions}


class LocalTransport:
    """The collector in this process, on this event loop. ``server``: a
    :class:`~maple_async.server.ServerHandle` or a URL."""

    def __init__(self, cfg: Config, device, server, quiet: bool = False):
        from ..server import ServerHandle
        self.server = ServerHandle(server) if isinstance(server, str) else server
        self.collector = Collector(cfg, device, self._arrived, quiet=quiet)
        self._inbox: list = []
        self._want = 1
        self._enough = asyncio.Event()
        self._task: Optional[asyncio.Task] = None

    def _arrived(self, traj) -> None:
        self._inbox.append(traj)
        if len(self._inbox) >= self._want:
            self._enough.set()

    async def start(self, msg: dict) -> None:
        self.collector.apply(msg)
        self._task = asyncio.get_running_loop().create_task(self.collector.run(self.server),
                                                            name="maple-collector")

    async def wait(self, want: int, stop: asyncio.Event, timeout: Optional[float] = None) -> list:
        self._want = max(want, 1)
        if len(self._inbox) < self._want and not self._task.done() and not stop.is_set():
            self._enough.clear()
            waiters = [asyncio.ensure_future(e.wait()) for e in (self._enough, stop)]
            try:
                await asyncio.wait([*waiters, self._task], timeout=timeout,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
        if self._task.done() and not self._task.cancelled() and self._task.exception():
            raise self._task.exception()
        out, self._inbox = self._inbox, []
        return out

    @property
    def ended(self) -> str:
        """Why the collector stopped by itself ("" while it runs)."""
        return self.collector.stop_reason if self._task is not None and self._task.done() else ""

    def publish(self, msg: dict) -> None:
        self.collector.apply(msg)

    def pause(self, paused: bool) -> None:
        self.collector.pause(paused)

    async def stop(self) -> list:
        self.collector.request_stop("the learner asked to stop")
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        out, self._inbox = self._inbox, []
        return out

    def throughput_counters(self) -> dict:
        return _counters(self.collector.agent)

    def report(self, seconds: float) -> str:
        return ""


# -- shards: the worker side ---------------------------------------------------------------

@dataclass
class PackedTrajectory:
    """A finished trajectory as it crosses the process boundary."""

    data: dict
    outcome: float
    opponent: str
    reward_totals: dict
    shard: int
    key: tuple = ()  # (battle tag, side): a multi-format run reads the format off the tag

    def arrays(self) -> dict:
        return self.data

    @property
    def versions(self):
        return self.data["versions"]

    def __len__(self) -> int:
        return len(self.data["actions"])


def weights_checksum(state_dict: dict) -> float:
    return float(sum(float(v.double().sum()) for v in state_dict.values()))


def shard_share(battles_per_update: int, shards: int) -> int:
    """A shard's share of an update's trajectories (at least 8, so small updates still batch)."""
    return max(battles_per_update // max(shards, 1), 8)


class ShardHold:
    """Holds a shard's decisions for either of two reasons: the learner asked (it is behind
    with what it already has), or the shard's own trajectories not yet taken by the learner
    reached ``limit``; that hold ends when they fall to half of it. Without the second, a
    learner slower than its shards leaves them queueing finished battles without bound:
    memory grows and every update learns from older and older play."""

    def __init__(self, pause: Callable[[bool], None], queued: Callable[[], int], limit: int):
        self._pause, self._queued, self.limit = pause, queued, max(int(limit), 1)
        self.by_learner = self.by_backlog = self._held = False
        self.backlog_s = 0.0  # seconds of finished backlog holds
        self._since = 0.0  # when the current backlog hold began

    def learner(self, paused: bool) -> None:
        self.by_learner = paused
        self._apply()

    def check(self, now: Optional[float] = None) -> None:
        n = self._queued()
        if not self.by_backlog and n >= self.limit:
            self.by_backlog, self._since = True, time.perf_counter() if now is None else now
        elif self.by_backlog and n <= self.limit // 2:
            self.by_backlog = False
            self.backlog_s += (time.perf_counter() if now is None else now) - self._since
        self._apply()

    def held_s(self, now: Optional[float] = None) -> float:
        if not self.by_backlog:
            return self.backlog_s
        return self.backlog_s + (time.perf_counter() if now is None else now) - self._since

    def _apply(self) -> None:
        held = self.by_learner or self.by_backlog
        if held != self._held:
            self._held = held
            self._pause(held)


async def run_shard(shard: int, cfg: Config, send: Callable[[tuple], None],
                    recv: Callable[[], Awaitable[Optional[dict]]],
                    alive: Callable[[], bool] = lambda: True,
                    queued: Callable[[], int] = lambda: 0) -> None:
    """One shard: a collector on its own server, talking to the learner by messages.

    ``send(msg)`` ships ``("traj" | "stats" | "done", shard, payload)``; ``await recv()``
    returns the next weights message, or None to stop; ``queued()`` counts the trajectories
    sent but not yet taken by the learner. The same body runs in a spawned process
    (pipes) and in a Ray actor (actor method calls).
    """
    from ..server import group_cpu_s
    from ..showdown import showdown_for

    def on_trajectory(traj) -> None:
        send(("traj", shard, PackedTrajectory(traj.arrays(), traj.outcome, traj.opponent,
                                              dict(traj.reward_totals), shard, tuple(traj.key))))
        hold.check()

    col = Collector(cfg, cfg.runner.device, on_trajectory, quiet=True, replay_subdir=f"shard{shard}")
    # One update's share (set by the learner side's worker config) may wait; past it, hold.
    hold = ShardHold(col.pause, queued, cfg.train.battles_per_update)
    first = await recv()  # initial weights before any battle
    if first is None:
        return
    col.apply(first)

    async def listen():
        while True:
            msg = await recv()
            if msg is None:
                col.request_stop("learner asked to stop")
                return
            if "pause" in msg:
                hold.learner(msg["pause"])
            else:
                col.apply(msg)

    async def release():
        while True:
            await asyncio.sleep(0.05)
            if hold.by_backlog:
                hold.check()

    async with showdown_for(cfg.server, quiet=True, runner=cfg.runner) as server:
        def stats() -> dict:
            a = col.agent
            c = _counters(a)
            return {"battles": a.stats.battles, "decisions": c["dec"], "batches": c["bat"], "bdec": c["bdec"],
                    "version": a.policy.version, "checksum": weights_checksum(a.policy.network.state_dict()),
                    "server_restarts": server.restarts, "url": str(server.url), "faults": col.faults,
                    "cpu_s": time.process_time(), "backlog_held_s": hold.held_s(), "queued": queued(),
                    "server_cpu_s": group_cpu_s(server.managed.pid if server.managed else None)}

        async def report():
            while True:
                send(("stats", shard, stats()))
                if not alive():  # the learner is gone: don't outlive it
                    col.request_stop("learner process is gone")
                await asyncio.sleep(1.0)

        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(listen()), loop.create_task(report()), loop.create_task(release())]
        try:
            await col.run(server)
        finally:
            for t in tasks:
                t.cancel()
            send(("stats", shard, stats()))
            send(("done", shard, None))


class _PipeSender:
    """Sends a worker's messages to the learner over the worker's *own* pipe, from a thread
    (the event loop never blocks on a full pipe).

    One pipe per worker, not one queue shared by all: a worker killed in the middle of a
    write would otherwise die holding the shared queue's write lock and leave a partial
    message in it, and every other worker and the learner would block forever. With its
    own pipe, the learner reads what it sent completely, then gets EOF.
    """

    _CLOSE = object()

    def __init__(self, conn):
        self.conn = conn
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self._put = self._sent = 0  # trajectories; each counter written by one thread only
        self.thread = threading.Thread(target=self._run, name="maple-shard-sender", daemon=True)
        self.thread.start()

    def __call__(self, msg) -> None:
        self._put += msg[0] == "traj"
        self.q.put(msg)

    def queued(self) -> int:
        """Trajectories handed to this sender and not yet written to the pipe."""
        return self._put - self._sent

    def _run(self) -> None:
        while True:
            msg = self.q.get()
            if msg is self._CLOSE:
                return
            try:
                self.conn.send(msg)
            except (OSError, ValueError):
                return  # the learner is gone
            self._sent += msg[0] == "traj"

    def close(self, timeout: float = 60.0) -> None:
        """Flush what is queued (the last trajectories, "done"), then close."""
        self.q.put(self._CLOSE)
        self.thread.join(timeout)
        self.conn.close()


class _Inbox:
    """The learner's messages to a worker, read by a daemon thread: a thread blocked in the
    queue's ``get`` would hold up the event loop's shutdown (an executor's thread does), and
    a learner that is gone reads as None (stop)."""

    def __init__(self, q, alive: Callable[[], bool]):
        self.q, self.alive = q, alive
        self.items: Optional[asyncio.Queue] = None

    async def get(self) -> Optional[dict]:
        if self.items is None:
            self.items = asyncio.Queue()
            threading.Thread(target=self._run, args=(asyncio.get_running_loop(),),
                             name="maple-shard-inbox", daemon=True).start()
        return await self.items.get()

    def _run(self, loop) -> None:
        while True:
            try:
                msg = self.q.get(timeout=1.0)
            except queue.Empty:
                if self.alive():
                    continue
                msg = None
            except (EOFError, OSError):
                msg = None
            if isinstance(msg, bytes):
                msg = unpack_weights_msg(msg)
            stop = msg is None
            try:
                loop.call_soon_threadsafe(self.items.put_nowait, msg)
            except RuntimeError:  # the loop is closed
                return
            # Hold no tensor here: a daemon thread that drops one while the interpreter
            # exits aborts the process ("terminate called", exit 134).
            del msg
            if stop:
                return


def _worker_main(shard: int, cfg_dict: dict, conn, in_q) -> None:
    """A shard worker: :func:`run_shard` over its pipe and queue. It dies with the learner
    (even a SIGKILLed one), and an error ends it with code 1 after it sent the learner
    ``("error", shard, traceback)``."""
    import sys
    import traceback

    from ..config import from_saved
    from ..server import _die_with_parent

    _die_with_parent()
    parent = mp.parent_process().pid
    if os.getppid() != parent:  # the learner died before the line above
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner decides when workers stop
    send = _PipeSender(conn)
    alive = lambda: os.getppid() == parent  # noqa: E731
    try:
        cfg = from_saved(cfg_dict)
        setup_battle_process(cfg, seed=True)
        run_async(run_shard(shard, cfg, send, _Inbox(in_q, alive).get, alive=alive, queued=send.queued))
    except BaseException:  # noqa: BLE001 - the learner reports it when it replaces this worker
        send(("error", shard, traceback.format_exc()))
        send.close()
        sys.exit(1)
    send.close()


# -- shards: the learner side --------------------------------------------------------------

@dataclass
class _Shard:
    index: int
    worker: Any  # a Process, or a Ray actor handle
    inbox: Any  # the worker's message queue (processes); the actor's run() reference (Ray)
    stats: dict = field(default_factory=dict)
    retired: dict = field(default_factory=dict)  # counters of replaced workers
    restarts: int = 0
    done: bool = False
    cause: str = ""  # the traceback a failed worker sent


class ProcessTransport:
    """Collectors in ``train.shards`` spawned worker processes, one Showdown server each."""

    COUNTERS = ("battles", "decisions", "batches", "bdec")
    kind = "processes"

    def __init__(self, cfg: Config, quiet: bool = False):
        self.cfg = cfg
        self.quiet = quiet
        self.ctx = mp.get_context("spawn")
        # Read ends of the workers' pipes, a replaced worker's until its EOF (so what it
        # sent before dying is still read). Only _drain removes entries, one call at a time.
        self._readers: list = []
        self.shards: list[_Shard] = []
        self.checksums: dict[int, float] = {}
        self.worker_restarts = 0
        self.by_shard: dict[int, int] = {}  # finished trajectories received per shard
        self._inbox: list = []
        self._last_msg: Optional[dict] = None
        self.ended = ""  # shards stop only when told to

    def _print(self, msg: str) -> None:
        if not self.quiet:
            print(msg, flush=True)

    def _worker_cfg(self, shard: int) -> dict:
        d = self.cfg.to_dict()
        if self.cfg.runner.seed is not None:  # each worker its own stream, all from the one seed
            d["runner"]["seed"] = shard_seed(self.cfg.runner.seed, shard)
        d["runner"]["device"] = self.cfg.train.worker_device
        d["server"]["port"] = 0  # each shard its own free port
        d["server"]["simulators"] = resolve_simulators(self.cfg.server.simulators, self.cfg.train.shards)
        # The worker sees one shard, so it gets its share of an update here: the most of
        # its trajectories that may wait for the learner before it holds (ShardHold).
        d["train"].update(shards=1, total_battles=max(self.cfg.train.total_battles, 1) * 4,
                          battles_per_update=shard_share(self.cfg.train.battles_per_update,
                                                         self.cfg.train.shards))
        return d

    # -- what differs between processes and Ray actors -------------------------------------
    def _spawn(self, i: int, msg: dict) -> tuple[Any, Any]:
        in_q = self.ctx.Queue()
        reader, writer = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_worker_main, args=(i, self._worker_cfg(i), writer, in_q),
                                name=f"maple-shard-{i}", daemon=True)
        proc.start()
        writer.close()  # the worker holds the only write end: its death reads as EOF here
        self._readers.append(reader)
        in_q.put(self._wire(msg))
        return proc, in_q

    def _wire(self, msg: dict) -> Any:
        """A weights message as it travels to a worker (packed once for every shard)."""
        return pack_weights_msg(msg)

    def _alive(self, sh: _Shard) -> bool:
        return sh.worker.is_alive()

    def _send(self, sh: _Shard, msg: Optional[dict]) -> None:
        sh.inbox.put(msg)

    async def _poll(self, timeout: float) -> list:
        return await asyncio.to_thread(self._drain, timeout)

    def _exit_code(self, sh: _Shard):
        return sh.worker.exitcode

    def _reap(self, sh: _Shard) -> None:
        if sh.worker.is_alive():
            sh.worker.terminate()
        sh.worker.join(timeout=10)

    def _drain(self, timeout: float) -> list:
        msgs: list = []
        readers = list(self._readers)
        if not readers:
            time.sleep(timeout)
            return msgs
        for conn in wait_connections(readers, timeout):
            try:
                while conn.poll():
                    msgs.append(conn.recv())
            except (EOFError, OSError):  # the worker exited (or died): all it sent is read
                conn.close()
                self._readers.remove(conn)
        return msgs

    # -- the transport -------------------------------------------------------------------
    def _record(self, msg: dict) -> dict:
        self.checksums[msg["version"]] = weights_checksum(msg["weights"])
        self._last_msg = msg
        return msg

    @staticmethod
    def _delta(before: Optional[dict], msg: dict) -> dict:
        """``msg`` without the league snapshots that ``before`` (the last message, which
        every shard holds: a replaced worker starts from it whole) already carried; ~2 MB
        each at the default size, and a worker keeps those in ``probs``."""
        league = msg.get("league")
        if not league:
            return msg
        sent = (before or {}).get("league") or {"snapshots": {}}
        return {**msg, "league": {**league, "snapshots": {k: v for k, v in league["snapshots"].items()
                                                          if k not in sent["snapshots"]}}}

    async def start(self, msg: dict) -> None:
        self._record(msg)
        for i in range(self.cfg.train.shards):
            worker, inbox = self._spawn(i, msg)
            self.shards.append(_Shard(i, worker, inbox))
        self._print(f"[train] {self.cfg.train.shards} shards ({self.kind}): one Showdown server + "
                    f"event loop each (worker device {self.cfg.train.worker_device})")

    async def wait(self, want: int, stop: asyncio.Event, timeout: float = 0.5) -> list:
        for msg in await self._poll(timeout):
            self._handle(msg)
        self._replace_dead_workers()
        out, self._inbox = self._inbox, []
        return out

    def publish(self, msg: dict) -> None:
        out = self._wire(self._delta(self._last_msg, msg))
        self._record(msg)
        for sh in self.shards:
            if self._alive(sh):
                self._send(sh, out)

    def pause(self, paused: bool) -> None:
        """Hold (or release) every shard's decisions; a replaced worker starts released."""
        for sh in self.shards:
            if self._alive(sh):
                self._send(sh, {"pause": paused})

    def _handle(self, msg) -> None:
        kind, i, payload = msg
        if kind == "traj":
            self.by_shard[i] = self.by_shard.get(i, 0) + 1
            self._inbox.append(payload)
        elif kind == "stats":
            self.shards[i].stats = payload
        elif kind == "done":
            self.shards[i].done = True
        elif kind == "error":
            self.shards[i].cause = payload

    def _replace_dead_workers(self) -> None:
        dead = [sh for sh in self.shards if not self._alive(sh) and not sh.done]
        if dead:
            for msg in self._drain(0):  # what a worker sent just before it died: its cause
                self._handle(msg)
        for sh in dead:
            if not sh.done:
                cause = sh.cause.strip()
                why = f": {cause.splitlines()[-1]}" if cause else ""
                self._print(f"[train] shard {sh.index} worker died (exit {self._exit_code(sh)}){why}; its "
                            f"in-flight battles are dropped; starting a replacement"
                            + (f"\n{cause}" if cause else ""))
                sh.cause = ""
                for k in (*self.COUNTERS, "backlog_held_s"):
                    sh.retired[k] = sh.retired.get(k, 0) + sh.stats.get(k, 0)
                sh.stats = {}
                sh.worker, sh.inbox = self._spawn(sh.index, self._last_msg)
                sh.restarts += 1
                self.worker_restarts += 1

    async def stop(self, timeout: float = 60.0) -> list:
        """Ask every worker to stop; keep draining so finished trajectories are not lost."""
        for sh in self.shards:
            if self._alive(sh):
                self._send(sh, None)
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline and any(self._alive(sh) and not sh.done for sh in self.shards):
            for msg in await self._poll(0.2):
                self._handle(msg)
        for msg in await self._poll(0.1):
            self._handle(msg)
        for sh in self.shards:
            self._reap(sh)
        self._close_readers()
        out, self._inbox = self._inbox, []
        return out

    def _close_readers(self) -> None:
        """After the workers are gone: read what is left in their pipes, then close them."""
        for msg in self._drain(0):
            self._handle(msg)
        for conn in self._readers:
            conn.close()
        self._readers.clear()

    def _total(self, sh: _Shard, key: str) -> int:
        return sh.stats.get(key, 0) + sh.retired.get(key, 0)

    def throughput_counters(self) -> dict:
        tot = {k: sum(self._total(sh, k) for sh in self.shards) for k in self.COUNTERS}
        return {"dec": tot["decisions"], "bat": tot["batches"], "bdec": tot["bdec"]}

    def report(self, seconds: float) -> str:
        lines = ["[train] per shard:"]
        tb = td = held = 0
        for sh in self.shards:
            b, d = self._total(sh, "battles"), self._total(sh, "decisions")
            nb, bd = self._total(sh, "batches"), self._total(sh, "bdec")
            h = self._total(sh, "backlog_held_s") / max(seconds, 1e-9)
            tb, td, held = tb + b, td + d, held + h
            lines.append(f"  shard {sh.index}: {b / seconds:.2f} battle sides/s, {d / seconds:.0f} decisions/s, "
                         f"mean batch {bd / nb if nb else 0:.1f}, held for the learner {h:.0%}, "
                         f"worker restarts {sh.restarts}, server restarts {sh.stats.get('server_restarts', 0)}")
        lines.append(f"  total:   {tb / seconds:.2f} battle sides/s, {td / seconds:.0f} decisions/s")
        if self.shards and held / len(self.shards) >= 0.1:
            lines.append(f"  the shards waited {held / len(self.shards):.0%} of the time for the learner to take "
                         f"their battles: a larger train.battles_per_update makes fewer, larger updates")
        return "\n".join(lines)


# -- Ray: one async actor per shard, placed across the cluster ---------------------------------

class _ShardActor:
    """Runs :func:`run_shard` inside a Ray async actor (its own event loop and server)."""

    def __init__(self, shard: int, cfg_dict: dict):
        self.shard, self.cfg_dict = shard, cfg_dict
        self.outbox: list = []
        self._inbox: Optional[asyncio.Queue] = None

    def _q(self) -> asyncio.Queue:
        if self._inbox is None:
            self._inbox = asyncio.Queue()
        return self._inbox

    async def push(self, msg: Optional[dict]) -> None:
        self._q().put_nowait(msg)

    async def drain(self) -> list:
        out = self.outbox[:]
        self.outbox.clear()  # in place: run_shard holds a bound reference to outbox.append
        return out

    async def run(self) -> bool:
        from ..config import from_saved
        cfg = from_saved(self.cfg_dict)
        setup_battle_process(cfg, seed=True)
        await run_shard(self.shard, cfg, self.outbox.append, self._q().get,
                        queued=lambda: sum(m[0] == "traj" for m in self.outbox))
        return True


def init_local_ray(ray) -> None:
    """Start a new single-machine Ray whose processes listen on loopback only.

    Ray binds its servers (GCS, raylet, object manager, core workers, agents) to its *node IP*,
    and on Linux ``ray.init()`` takes the machine's network address for it: even
    ``_node_ip_address="127.0.0.1"`` is rewritten to that address
    (``services.resolve_ip_for_localhost``). Only with ``ENABLE_RAY_CLUSTER`` off (the
    macOS/Windows default, env ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) does Ray use the
    loopback address as the node IP. That constant is read when ``ray`` is imported, so it is
    switched off here for the start-up (and the variable set for the processes Ray spawns),
    then both are restored. ``address="local"``: always a new Ray of our own, never one named
    by ``RAY_ADDRESS`` or started by ``ray start`` (join one with ``train.ray_address``)."""
    from ray._private import ray_constants
    var = getattr(ray_constants, "ENABLE_RAY_CLUSTERS_ENV_VAR", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    old_env, old_flag = os.environ.get(var), getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[var] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(address="local", include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    finally:
        if old_env is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = old_env
        if old_flag is None:
            del ray_constants.ENABLE_RAY_CLUSTER
        else:
            ray_constants.ENABLE_RAY_CLUSTER = old_flag
    ip = ray.util.get_node_ip_address()
    if ip not in ("127.0.0.1", "::1"):
        print(f"[train] warning: the local Ray took node address {ip}, not loopback: "
              "its servers may be reachable from the network", flush=True)


class RayTransport(ProcessTransport):
    """``--train.backend ray``: shards are Ray actors; weights travel through the object store.
    A shard's ``inbox`` is the reference of its actor's ``run()``: done means the actor ended."""

    kind = "ray"

    def __init__(self, cfg: Config, quiet: bool = False):
        try:
            import ray
        except ImportError:
            raise UserError("train.backend ray needs Ray: pip install 'maple-async[ray]'") from None
        super().__init__(cfg, quiet=quiet)
        self.ray = ray
        self._started_ray = False
        self.actor_cls = ray.remote(num_cpus=cfg.train.ray_cpus_per_shard, max_restarts=0)(_ShardActor)

    async def start(self, msg: dict) -> None:
        if not self.ray.is_initialized():
            if self.cfg.train.ray_address:
                self.ray.init(address=self.cfg.train.ray_address, include_dashboard=False,
                              log_to_driver=False, ignore_reinit_error=True)
            else:
                init_local_ray(self.ray)
            self._started_ray = True
        await super().start(msg)

    def _spawn(self, i: int, msg: dict) -> tuple[Any, Any]:
        actor = self.actor_cls.options(name=None, scheduling_strategy="SPREAD").remote(i, self._worker_cfg(i))
        actor.push.remote(self.ray.put(msg))
        return actor, actor.run.remote()

    def _alive(self, sh: _Shard) -> bool:
        if sh.done:
            return False
        ready, _ = self.ray.wait([sh.inbox], timeout=0)
        return not ready

    def _send(self, sh: _Shard, msg: Optional[dict]) -> None:
        sh.worker.push.remote(self.ray.put(msg) if msg is not None else None)

    def _wire(self, msg: dict) -> Any:
        return msg  # the object store carries tensors itself

    async def _poll(self, timeout: float) -> list:
        await asyncio.sleep(timeout)
        results = await asyncio.gather(*(sh.worker.drain.remote() for sh in self.shards), return_exceptions=True)
        msgs = []
        for r in results:
            if not isinstance(r, BaseException):  # a dead actor: _alive() reports it, it is replaced
                msgs.extend(r)
        return msgs

    def _exit_code(self, sh: _Shard):
        try:
            self.ray.get(sh.inbox, timeout=0)
            return "finished"
        except Exception as e:
            return type(e).__name__

    def _reap(self, sh: _Shard) -> None:
        try:
            self.ray.kill(sh.worker)
        except Exception:
            pass

    async def stop(self, timeout: float = 60.0) -> list:
        try:
            return await super().stop(timeout)
        finally:
            if self._started_ray:
                self.ray.shutdown()


def make_transport(cfg: Config, device, server=None, quiet: bool = False):
    """The transport ``train.backend`` and ``train.shards`` ask for (``server``: the local
    collector's server; shards start their own)."""
    if cfg.train.backend == "ray":
        return RayTransport(cfg, quiet=quiet)
    if cfg.train.shards > 1:
        return ProcessTransport(cfg, quiet=quiet)
    return LocalTransport(cfg, device, server, quiet=quiet)
