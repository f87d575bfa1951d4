"""Process-per-server sharding on one machine (``maple-async train --train.shards N``).

One event loop saturates one core and one Showdown simulator another, so N shards run N
worker processes (spawn start method), each with its own managed Showdown server, event
loop, batcher and battles. Workers send *finished* trajectories (numpy arrays plus the
policy version of every step) to the learner in the main process, which updates and
broadcasts CPU state_dicts back. Workers run inference on ``train.worker_device`` (CPU by
default: CUDA is then initialised only in the learner). A worker that dies is replaced;
its in-flight battles are lost, never half-recorded, because only finished battles are
ever sent. ``shards: 1`` does not come here: it is the single-process trainer.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from multiprocessing.connection import wait as wait_connections
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

from .config import Config
from .runner import setup_battle_process
from .trainer import Trainer


@dataclass
class PackedTrajectory:
    """A finished trajectory as it crosses the process boundary."""

    data: dict
    outcome: float
    opponent: str
    reward_totals: dict
    shard: int

    def arrays(self) -> dict:
        return self.data

    @property
    def versions(self):
        return self.data["versions"]

    def __len__(self) -> int:
        return len(self.data["actions"])


def weights_checksum(state_dict: dict) -> float:
    return float(sum(float(v.double().sum()) for v in state_dict.values()))


# -- worker side ---------------------------------------------------------------------------

class _Collector(Trainer):
    """A Trainer that only collects: trajectories go to the learner, weights come from it."""

    def __init__(self, cfg: Config, shard: int, send: Callable[[tuple], None]):
        super().__init__(cfg, cfg.runner.device, quiet=True)
        self.shard, self.send = shard, send

    def _on_trajectory(self, traj) -> None:
        self.collected_trajectories += 1
        self.send(("traj", self.shard, PackedTrajectory(
            traj.arrays(), traj.outcome, traj.opponent, dict(traj.reward_totals), self.shard)))

    def save_checkpoint(self, final: bool = False):
        return None  # the learner checkpoints

    def _refresh_league(self) -> None:
        pass  # league weights arrive with the broadcasts

    def apply(self, msg: dict) -> None:
        self.agent.batcher.set_weights(msg["weights"], msg["version"])
        if self.league_agent is not None and msg.get("league") is not None:
            self.league_agent.batcher.set_weights(msg["league"])

    def stats(self, server) -> dict:
        a, bs = self.agent, self.agent.batcher.stats
        pol = a.policy
        return {"battles": a.stats.battles, "decisions": a.stats.decisions, "batches": bs.batches,
                "bdec": bs.decisions, "version": pol.version,
                "checksum": weights_checksum(pol.network.state_dict()),
                "server_restarts": server.restarts, "url": server.url, "faults": self.faults}


async def run_shard(shard: int, cfg: Config, send: Callable[[tuple], None],
                    recv: Callable[[], Awaitable[Optional[dict]]],
                    alive: Callable[[], bool] = lambda: True) -> None:
    """One shard: its own server, battles and batcher; talks to the learner by messages.

    ``send(msg)`` ships ``("traj" | "stats" | "done", shard, payload)``; ``await recv()``
    returns the next weights message, or None to stop. The same body runs in a spawned
    process (queues) and in a Ray actor (actor method calls).
    """
    from .server import server_for

    col = _Collector(cfg, shard, send)
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
            col.apply(msg)

    async with server_for(cfg.server, quiet=True) as server:
        async def report():
            while True:
                send(("stats", shard, col.stats(server)))
                if not alive():  # the learner is gone: don't outlive it
                    col.request_stop("learner process is gone")
                await asyncio.sleep(1.0)

        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(listen()), loop.create_task(report())]
        try:
            await col.run(server)
        finally:
            for t in tasks:
                t.cancel()
            send(("stats", shard, col.stats(server)))
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
        self.thread = threading.Thread(target=self._run, name="maple-shard-sender", daemon=True)
        self.thread.start()

    def __call__(self, msg) -> None:
        self.q.put(msg)

    def _run(self) -> None:
        while True:
            msg = self.q.get()
            if msg is self._CLOSE:
                return
            try:
                self.conn.send(msg)
            except (OSError, ValueError):
                return  # the learner is gone

    def close(self, timeout: float = 60.0) -> None:
        """Flush what is queued (the last trajectories, "done"), then close."""
        self.q.put(self._CLOSE)
        self.thread.join(timeout)
        self.conn.close()


def _worker_main(shard: int, cfg_dict: dict, conn, in_q) -> None:
    from .cli import run_async
    from .config import from_saved

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner decides when workers stop
    cfg = from_saved(cfg_dict)
    setup_battle_process(cfg)
    parent = os.getppid()
    send = _PipeSender(conn)
    try:
        run_async(run_shard(shard, cfg, send, lambda: asyncio.to_thread(in_q.get),
                            alive=lambda: os.getppid() == parent))
    finally:
        send.close()


# -- learner side ----------------------------------------------------------------------------

@dataclass
class _Shard:
    index: int
    proc: Any
    in_q: Any
    stats: dict = field(default_factory=dict)
    retired: dict = field(default_factory=dict)  # counters of replaced processes
    restarts: int = 0
    done: bool = False


class ShardedTrainer(Trainer):
    """Central learner for N worker processes (one Showdown server each)."""

    COUNTERS = ("battles", "decisions", "batches", "bdec")

    def __init__(self, cfg: Config, device, resume: Optional[str] = None, quiet: bool = False):
        super().__init__(cfg, device, resume=resume, quiet=quiet)
        self.ctx = mp.get_context("spawn")
        # Read ends of the workers' pipes, a replaced worker's until its EOF (so what it
        # sent before dying is still read). Only the polling thread removes entries.
        self._readers: list = []
        self.shards: list[_Shard] = []
        self.checksums: dict[int, float] = {}
        self.worker_restarts = 0
        self.by_shard: dict[int, int] = {}  # finished trajectories received per shard

    def _worker_cfg(self, i: int) -> dict:
        d = self.cfg.to_dict()
        d["runner"]["device"] = self.cfg.train.worker_device
        d["server"]["port"] = 0  # each shard its own free port
        d["train"].update(shards=1, tensorboard=False, run_dir=str(self.run_dir / f"shard{i}"),
                          total_battles=max(self.cfg.train.total_battles, 1) * 4)
        return d

    # -- transport hooks (local processes here; Ray actors in RayShardedTrainer) ----------
    def _spawn(self, i: int) -> tuple[Any, Any]:
        in_q = self.ctx.Queue()
        reader, writer = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_worker_main, args=(i, self._worker_cfg(i), writer, in_q),
                                name=f"maple-shard-{i}", daemon=True)
        proc.start()
        writer.close()  # the worker holds the only write end: its death reads as EOF here
        self._readers.append(reader)
        in_q.put(self._broadcast_msg(league=True))
        return proc, in_q

    def _alive(self, sh: "_Shard") -> bool:
        return sh.proc.is_alive()

    def _send(self, sh: "_Shard", msg: Optional[dict]) -> None:
        sh.in_q.put(msg)

    async def _poll(self, timeout: float) -> list:
        return await asyncio.to_thread(self._drain, timeout)

    def _exit_code(self, sh: "_Shard"):
        return sh.proc.exitcode

    def _reap(self, sh: "_Shard") -> None:
        if sh.proc.is_alive():
            sh.proc.terminate()
        sh.proc.join(timeout=10)

    def _broadcast_msg(self, league: bool = False) -> dict:
        weights = self.learner.weights_cpu()
        version = self.counters["version"]
        self.checksums[version] = weights_checksum(weights)
        msg = {"weights": weights, "version": version, "league": None}
        if league and "league" in self.mix:
            msg["league"] = self.league[-1] if self.league else weights
        return msg

    def _broadcast(self) -> None:
        send_league = "league" in self.mix and self.learner.updates % self.cfg.train.league_every_updates == 0
        if send_league:
            self.league.append(self.learner.weights_cpu())
            self.league = self.league[-max(self.cfg.train.league_size, 1):]
        msg = self._broadcast_msg(league=send_league)
        for sh in self.shards:
            if self._alive(sh):
                self._send(sh, msg)

    def throughput_counters(self) -> dict:
        tot = {k: 0 for k in self.COUNTERS}
        for sh in self.shards:
            for k in self.COUNTERS:
                tot[k] += sh.stats.get(k, 0) + sh.retired.get(k, 0)
        return {"dec": tot["decisions"], "bat": tot["batches"], "bdec": tot["bdec"]}

    def _handle(self, msg) -> None:
        kind, i, payload = msg
        if kind == "traj":
            self.by_shard[i] = self.by_shard.get(i, 0) + 1
            self._on_trajectory(payload)
        elif kind == "stats":
            self.shards[i].stats = payload
        elif kind == "done":
            self.shards[i].done = True

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

    def _replace_dead_workers(self) -> None:
        for sh in self.shards:
            if not self._alive(sh) and not sh.done:
                self._print(f"[train] shard {sh.index} worker died (exit {self._exit_code(sh)}); its "
                            f"in-flight battles are dropped; starting a replacement")
                for k in self.COUNTERS:
                    sh.retired[k] = sh.retired.get(k, 0) + sh.stats.get(k, 0)
                sh.stats = {}
                sh.proc, sh.in_q = self._spawn(sh.index)
                sh.restarts += 1
                self.worker_restarts += 1

    async def run(self, server=None) -> dict:
        cfg = self.cfg
        loop = asyncio.get_running_loop()
        self._handle_signals(loop, True)
        for i in range(cfg.train.shards):
            proc, in_q = self._spawn(i)
            self.shards.append(_Shard(i, proc, in_q))
        self._print(f"[train] {cfg.train.shards} shards ({cfg.train.backend}): one Showdown server + "
                    f"event loop per worker "
                    f"(worker device {cfg.train.worker_device}, learner device {self.device})")
        t_start = time.perf_counter()
        seconds_before = self.counters["seconds"]
        last = {"t": t_start, **self.throughput_counters()}
        summary: dict = {}
        try:
            while not self._stop.is_set():
                for msg in await self._poll(0.5):
                    self._handle(msg)
                self._replace_dead_workers()
                if len(self._trajs) < cfg.train.battles_per_update:
                    continue
                batch, self._trajs = self._trajs, []
                summary = await self._update(batch, last, t_start, seconds_before)
                self._broadcast()
                if self.learner.updates % cfg.train.checkpoint_every_updates == 0:
                    self.save_checkpoint()
                now = time.perf_counter()
                if self.counters["battles"] >= cfg.train.total_battles:
                    self.request_stop(f"reached {cfg.train.total_battles} battles")
                elif cfg.train.max_minutes and (now - t_start) / 60 >= cfg.train.max_minutes:
                    self.request_stop(f"reached {cfg.train.max_minutes} minutes")
        finally:
            await self._stop_workers()
            summary = await self._finish(loop, last, t_start, seconds_before) or summary
            self._print(self.shard_report(time.perf_counter() - t_start))
        return summary

    async def _stop_workers(self, timeout: float = 60.0) -> None:
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

    def _close_readers(self) -> None:
        """After the workers are gone: read what is left in their pipes, then close them."""
        for msg in self._drain(0):
            self._handle(msg)
        for conn in self._readers:
            conn.close()
        self._readers.clear()

    def shard_report(self, seconds: float) -> str:
        lines = ["[train] per shard:"]
        tb = td = 0
        for sh in self.shards:
            b = sh.stats.get("battles", 0) + sh.retired.get("battles", 0)
            d = sh.stats.get("decisions", 0) + sh.retired.get("decisions", 0)
            nb = sh.stats.get("batches", 0) + sh.retired.get("batches", 0)
            bd = sh.stats.get("bdec", 0) + sh.retired.get("bdec", 0)
            tb, td = tb + b, td + d
            lines.append(f"  shard {sh.index}: {b / seconds:.2f} battle sides/s, {d / seconds:.0f} decisions/s, "
                         f"mean batch {bd / nb if nb else 0:.1f}, worker restarts {sh.restarts}, "
                         f"server restarts {sh.stats.get('server_restarts', 0)}")
        lines.append(f"  total:   {tb / seconds:.2f} battle sides/s, {td / seconds:.0f} decisions/s")
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
        from .config import from_saved
        cfg = from_saved(self.cfg_dict)
        setup_battle_process(cfg)
        await run_shard(self.shard, cfg, self.outbox.append, self._q().get)
        return True


class RayShardedTrainer(ShardedTrainer):
    """``--train.backend ray``: shards are Ray actors; weights travel through the object store."""

    def __init__(self, cfg: Config, device, resume: Optional[str] = None, quiet: bool = False):
        try:
            import ray
        except ImportError:
            from .cli import UserError
            raise UserError("train.backend ray needs Ray: pip install 'maple-async[ray]'") from None
        super().__init__(cfg, device, resume=resume, quiet=quiet)
        self.ray = ray
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            ray.init(address=cfg.train.ray_address, include_dashboard=False, log_to_driver=False,
                     ignore_reinit_error=True)
        self.actor_cls = ray.remote(num_cpus=cfg.train.ray_cpus_per_shard, max_restarts=0)(_ShardActor)

    def _spawn(self, i: int) -> tuple[Any, Any]:
        actor = self.actor_cls.options(name=None, scheduling_strategy="SPREAD").remote(i, self._worker_cfg(i))
        actor.push.remote(self.ray.put(self._broadcast_msg(league=True)))
        return actor, actor.run.remote()  # (proc, in_q) slots: the actor and its run() ref

    def _alive(self, sh: "_Shard") -> bool:
        if sh.done:
            return False
        ready, _ = self.ray.wait([sh.in_q], timeout=0)
        return not ready

    def _send(self, sh: "_Shard", msg: Optional[dict]) -> None:
        sh.proc.push.remote(self.ray.put(msg) if msg is not None else None)

    async def _poll(self, timeout: float) -> list:
        await asyncio.sleep(timeout)
        results = await asyncio.gather(*(sh.proc.drain.remote() for sh in self.shards), return_exceptions=True)
        msgs = []
        for sh, r in zip(self.shards, results):
            if isinstance(r, BaseException):
                continue  # the actor died; _alive() reports it and it is replaced
            msgs.extend(r)
        return msgs

    def _exit_code(self, sh: "_Shard"):
        try:
            self.ray.get(sh.in_q, timeout=0)
            return "finished"
        except Exception as e:
            return type(e).__name__

    def _reap(self, sh: "_Shard") -> None:
        try:
            self.ray.kill(sh.proc)
        except Exception:
            pass

    async def run(self, server=None) -> dict:
        try:
            return await super().run(server)
        finally:
            if self._started_ray:
                self.ray.shutdown()
