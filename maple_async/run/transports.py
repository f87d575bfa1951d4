"""How trajectories reach the learning loop and weights reach the collectors.

Every transport offers the loop the calls of :class:`Transport`. They differ only in where
the :class:`~maple_async.collect.collector.Collector` runs:

* :class:`LocalTransport`   one collector on this event loop (``train.shards: 1``);
* :class:`~maple_async.run.shards.ProcessTransport` one spawned worker process per shard,
  each with its own managed Showdown server, event loop, batcher and battles;
* :class:`~maple_async.run.ray.RayTransport` one async Ray actor per shard, spread across a
  cluster.

The shard worker is :mod:`.worker`, what crosses to it :mod:`.wire`.
"""

from __future__ import annotations

import asyncio
from typing import Optional, Protocol

from ..collect.collector import Collector
from ..config import Config
from .ray import RayTransport
from .shards import ProcessTransport
from .worker import counters


class Transport(Protocol):
    """What the learning loop (:mod:`.loop`) asks of a transport."""

    @property
    def ended(self) -> str:
        """Why the collectors stopped by themselves ("" while they run)."""

    async def start(self, msg: dict) -> None:
        """Start collecting with the weights message ``msg``."""

    async def wait(self, want: int, stop: asyncio.Event, timeout: Optional[float] = None) -> list:
        """Finished trajectories since the last call: once ``want`` arrived, ``stop`` is set,
        the collectors ended or ``timeout`` passed."""

    def publish(self, msg: dict) -> None:
        """New weights (and league) for every collector."""

    def pause(self, paused: bool) -> None:
        """Hold (or release) every collector's decisions while the learner catches up."""

    async def stop(self) -> list:
        """Stop every collector; the trajectories that arrived meanwhile."""

    def throughput_counters(self) -> dict:
        """Cumulative ``dec`` (decisions), ``bat`` (inference batches), ``bdec`` (batched decisions)."""

    def report(self, seconds: float) -> str:
        """Lines for the end of the run ("" for none)."""


class LocalTransport:
    """The collector in this process, on this event loop. ``server``: a
    :class:`~maple_async.server.ServerHandle` or a URL."""

    def __init__(self, cfg: Config, server, quiet: bool = False):
        from ..server import ServerHandle
        self.server = ServerHandle(server) if isinstance(server, str) else server
        self.collector = Collector(cfg, self._arrived, quiet=quiet)
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
        return counters(self.collector.agent)

    def report(self, seconds: float) -> str:
        return ""


def make_transport(cfg: Config, server=None, quiet: bool = False) -> Transport:
    """The transport ``train.backend`` and ``train.shards`` ask for (``server``: the local
    collector's server; shards start their own)."""
    if cfg.train.backend == "ray":
        return RayTransport(cfg, quiet=quiet)
    if cfg.train.shards > 1:
        return ProcessTransport(cfg, quiet=quiet)
    return LocalTransport(cfg, server, quiet=quiet)
