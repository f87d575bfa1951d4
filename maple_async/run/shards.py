"""The learner's side of sharded collection: ``train.shards`` workers, each a collector on
its own server (:func:`~maple_async.run.worker.run_shard`), fed weights and read for
trajectories; a worker that dies is replaced. Its in-flight battles are lost, never
half-recorded, because only finished battles are ever sent.

:class:`ShardedTransport` is that logic once; a backend supplies how a worker is started and
how its messages travel: :meth:`~ShardedTransport.launch` (one :class:`ShardWorker`),
:meth:`~ShardedTransport.wire`, :meth:`~ShardedTransport.receive` and
:meth:`~ShardedTransport.close`. :class:`ProcessTransport` is the spawned-process backend;
:class:`~maple_async.run.ray.RayTransport` the Ray one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_connections
from typing import Any, Optional, Protocol

from .. import procs
from ..config import Config
from ..server import resolve_simulators
from .process import shard_seed
from .wire import PackedTrajectory, Pause, ShardDone, ShardStats, pack_weights_msg, weights_checksum
from .worker import shard_share, worker_main


class ShardWorker(Protocol):
    """One shard's worker as the learner holds it: a process or a Ray actor."""

    def send(self, msg: Any) -> None:
        """A wired weights message, a :class:`Pause`, or None (stop)."""

    def is_alive(self) -> bool: ...

    def exit_code(self) -> Any:
        """How it ended, for the line that reports its replacement."""

    def reap(self) -> None:
        """End it, if it still runs, and wait for it."""


@dataclass
class _Shard:
    index: int
    worker: ShardWorker
    stats: dict = field(default_factory=dict)
    retired: dict = field(default_factory=dict)  # counters of replaced workers
    restarts: int = 0
    done: bool = False
    cause: str = ""  # the traceback a failed worker sent


class ShardedTransport:
    """Collectors in ``train.shards`` workers, one Showdown server each."""

    COUNTERS = ("battles", "decisions", "batches", "bdec")
    kind = "shards"

    def __init__(self, cfg: Config, quiet: bool = False):
        self.cfg = cfg
        self.quiet = quiet
        self.shards: list[_Shard] = []
        self.checksums: dict[int, float] = {}
        self.worker_restarts = 0
        self.by_shard: dict[int, int] = {}  # finished trajectories received per shard
        self._inbox: list = []
        self._last_msg: Optional[dict] = None
        self.ended = ""  # shards stop only when told to

    # -- what a backend supplies -----------------------------------------------------------
    def launch(self, i: int, msg: dict) -> ShardWorker:
        """Start shard ``i``'s worker with ``msg``, the weights it plays first."""
        raise NotImplementedError

    def wire(self, msg: dict) -> Any:
        """A weights message as it travels to the workers (made once for every shard)."""
        return msg

    async def receive(self, timeout: float) -> list:
        """The workers' messages that arrived, waiting up to ``timeout`` for the first."""
        raise NotImplementedError

    def close(self) -> None:
        """After the workers are gone."""

    # -- the transport -------------------------------------------------------------------
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
        d["train"].update(shards=1, total_sides=max(self.cfg.train.total_sides, 1) * 4,
                          sides_per_update=shard_share(self.cfg.train.sides_per_update,
                                                         self.cfg.train.shards))
        return d

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

    def _broadcast(self, msg: Any) -> None:
        for sh in self.shards:
            if sh.worker.is_alive():
                sh.worker.send(msg)

    async def start(self, msg: dict) -> None:
        self._record(msg)
        for i in range(self.cfg.train.shards):
            self.shards.append(_Shard(i, self.launch(i, msg)))
        self._print(f"[train] {self.cfg.train.shards} shards ({self.kind}): one Showdown server + "
                    f"event loop each (worker device {self.cfg.train.worker_device})")

    async def wait(self, want: int, stop: asyncio.Event, timeout: float = 0.5) -> list:
        for msg in await self.receive(timeout):
            self._handle(msg)
        await self._replace_dead_workers()
        out, self._inbox = self._inbox, []
        return out

    def publish(self, msg: dict) -> None:
        out = self.wire(self._delta(self._last_msg, msg))
        self._record(msg)
        self._broadcast(out)

    def pause(self, paused: bool) -> None:
        """Hold (or release) every shard's decisions; a replaced worker starts released."""
        self._broadcast(Pause(paused))

    def _handle(self, msg) -> None:
        if isinstance(msg, PackedTrajectory):
            self.by_shard[msg.shard] = self.by_shard.get(msg.shard, 0) + 1
            self._inbox.append(msg)
        elif isinstance(msg, ShardStats):
            self.shards[msg.shard].stats = msg.stats
        elif isinstance(msg, ShardDone):
            self.shards[msg.shard].done = True
        elif isinstance(msg, procs.Failed):
            self.shards[msg.who].cause = msg.traceback

    async def _replace_dead_workers(self) -> None:
        dead = [sh for sh in self.shards if not sh.worker.is_alive() and not sh.done]
        if dead:
            for msg in await self.receive(0):  # what a worker sent just before it died: its cause
                self._handle(msg)
        for sh in dead:
            if not sh.done:
                cause = sh.cause.strip()
                why = f": {cause.splitlines()[-1]}" if cause else ""
                self._print(f"[train] shard {sh.index} worker died (exit {sh.worker.exit_code()}){why}; its "
                            f"in-flight battles are dropped; starting a replacement"
                            + (f"\n{cause}" if cause else ""))
                sh.cause = ""
                for k in (*self.COUNTERS, "backlog_held_s"):
                    sh.retired[k] = sh.retired.get(k, 0) + sh.stats.get(k, 0)
                sh.stats = {}
                sh.worker = self.launch(sh.index, self._last_msg)
                sh.restarts += 1
                self.worker_restarts += 1

    async def stop(self, timeout: float = 60.0) -> list:
        """Ask every worker to stop; keep draining so finished trajectories are not lost."""
        self._broadcast(None)
        deadline = time.perf_counter() + timeout
        try:
            while time.perf_counter() < deadline and any(sh.worker.is_alive() and not sh.done
                                                         for sh in self.shards):
                for msg in await self.receive(0.2):
                    self._handle(msg)
            for msg in await self.receive(0.1):
                self._handle(msg)
            for sh in self.shards:
                sh.worker.reap()
            for msg in await self.receive(0):  # what is left in the pipes of workers now gone
                self._handle(msg)
        finally:
            self.close()
        out, self._inbox = self._inbox, []
        return out

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
                         f"their battles: a larger train.sides_per_update makes fewer, larger updates")
        return "\n".join(lines)


# -- spawned processes ---------------------------------------------------------------------

class ProcessWorker:
    """A shard's spawned process and the queue of the learner's messages to it."""

    def __init__(self, proc, inbox):
        self.proc, self.inbox = proc, inbox

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, msg: Any) -> None:
        self.inbox.put(msg)

    def is_alive(self) -> bool:
        return self.proc.is_alive()

    def exit_code(self) -> Any:
        return self.proc.exitcode

    def reap(self) -> None:
        procs.stop_all([self.proc], timeout=0)


class ProcessTransport(ShardedTransport):
    """One spawned worker process per shard: trajectories come back over one pipe per
    worker, weights go out as one pickle of numpy arrays per broadcast through each
    worker's queue. Workers run inference on ``train.worker_device`` (CPU by default: CUDA
    is then initialised only in the learner)."""

    kind = "processes"

    def __init__(self, cfg: Config, quiet: bool = False):
        super().__init__(cfg, quiet=quiet)
        # Read ends of the workers' pipes, a replaced worker's until its EOF (so what it
        # sent before dying is still read). Only _drain removes entries, one call at a time.
        self._readers: list = []

    def launch(self, i: int, msg: dict) -> ProcessWorker:
        inbox = procs.CTX.Queue()
        proc, reader = procs.spawn(worker_main, (i, self._worker_cfg(i), inbox), name=f"maple-shard-{i}",
                                   duplex=False)
        self._readers.append(reader)
        inbox.put(self.wire(msg))
        return ProcessWorker(proc, inbox)

    def wire(self, msg: dict) -> bytes:
        return pack_weights_msg(msg)

    async def receive(self, timeout: float) -> list:
        return await asyncio.to_thread(self._drain, timeout)

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
                if conn in self._readers:  # close() may have emptied the list meanwhile
                    self._readers.remove(conn)
        return msgs

    def close(self) -> None:
        for conn in self._readers:
            conn.close()
        self._readers.clear()
