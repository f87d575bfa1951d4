"""A shard: a collector on its own server that talks to the learner only by messages
(:mod:`.wire`). :func:`run_shard` is the body; :func:`worker_main` runs it in a spawned
process, :class:`~maple_async.run.ray._ShardActor` in a Ray actor."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Optional

from .. import procs
from ..collect.collector import Collector
from ..config import Config
from .process import run_async, setup_battle_process
from .wire import PackedTrajectory, Pause, ShardDone, ShardStats, unpack_weights_msg, weights_checksum


def counters(agent) -> dict:
    """Cumulative decisions, inference batches and batched decisions (for rates)."""
    bs = agent.batcher.stats
    return {"dec": agent.stats.decisions, "bat": bs.batches, "bdec": bs.decisions}


def shard_share(sides_per_update: int, shards: int) -> int:
    """A shard's share of an update's trajectories (at least 8, so small updates still batch)."""
    return max(sides_per_update // max(shards, 1), 8)


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


async def run_shard(shard: int, cfg: Config, send: Callable[[Any], None],
                    recv: Callable[[], Awaitable[Any]],
                    alive: Callable[[], bool] = lambda: True,
                    queued: Callable[[], int] = lambda: 0) -> None:
    """One shard: a collector on its own server, talking to the learner by messages.

    ``send(msg)`` ships a :class:`PackedTrajectory`, :class:`ShardStats` or
    :class:`ShardDone`; ``await recv()`` returns the next weights message, a :class:`Pause`,
    or None to stop; ``queued()`` counts the trajectories sent but not yet taken by the
    learner. The same body runs in a spawned process (pipes) and in a Ray actor (actor
    method calls).
    """
    from ..nodeproc import group_cpu_s
    from ..showdown import showdown_for

    def on_trajectory(traj) -> None:
        send(PackedTrajectory(traj.arrays(), traj.outcome, traj.opponent,
                              dict(traj.reward_totals), shard, tuple(traj.key)))
        hold.check()

    col = Collector(cfg, on_trajectory, quiet=True, replay_subdir=f"shard{shard}")
    # One update's share (set by the learner side's worker config) may wait; past it, hold.
    hold = ShardHold(col.pause, queued, cfg.train.sides_per_update)
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
            if isinstance(msg, Pause):
                hold.learner(msg.paused)
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
            c = counters(a)
            return {"battles": a.stats.battles, "decisions": c["dec"], "batches": c["bat"], "bdec": c["bdec"],
                    "version": a.policy.version, "checksum": weights_checksum(a.policy.network.state_dict()),
                    "server_restarts": server.restarts, "url": str(server.url), "faults": col.faults,
                    "cpu_s": time.process_time(), "backlog_held_s": hold.held_s(), "queued": queued(),
                    "server_cpu_s": group_cpu_s(server.managed.pid if server.managed else None)}

        async def report():
            while True:
                send(ShardStats(shard, stats()))
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
            send(ShardStats(shard, stats()))
            send(ShardDone(shard))


class WeightsInbox(procs.Inbox):
    """The learner's messages to a shard worker, each broadcast's weights unpacked."""

    def decode(self, msg: Any) -> Any:
        return unpack_weights_msg(msg) if isinstance(msg, bytes) else msg


def worker_main(conn, shard: int, cfg_dict: dict, in_q) -> None:
    """A shard worker process: :func:`run_shard` over its own pipe (out) and queue (in). An
    error ends it with code 1 after it sent the learner its traceback."""
    from ..config import from_saved

    alive = procs.enter_worker()
    if alive is None:
        return
    send = procs.Outbox(conn, counted=lambda msg: isinstance(msg, PackedTrajectory))
    try:
        cfg = from_saved(cfg_dict)
        setup_battle_process(cfg, seed=True)
        run_async(run_shard(shard, cfg, send, WeightsInbox(in_q, alive).get, alive=alive, queued=send.queued))
    except BaseException:  # noqa: BLE001 - the learner reports it when it replaces this worker
        send.fail(shard)
    send.close()
