"""``--train.backend ray``: one async Ray actor per shard, placed across a cluster; weights
travel through the object store. Ray is imported only when this backend is used."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Optional

from ..config import Config
from ..errors import UserError
from .process import setup_battle_process
from .shards import ShardedTransport
from .wire import PackedTrajectory
from .worker import run_shard


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

    async def push(self, msg: Any) -> None:
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
                        queued=lambda: sum(isinstance(m, PackedTrajectory) for m in self.outbox))
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


class RayWorker:
    """A shard's actor and the reference of its ``run()``: ready means the actor ended."""

    def __init__(self, ray, actor, run_ref):
        self.ray, self.actor, self.run_ref = ray, actor, run_ref

    def send(self, msg: Any) -> None:
        self.actor.push.remote(self.ray.put(msg) if msg is not None else None)

    def is_alive(self) -> bool:
        ready, _ = self.ray.wait([self.run_ref], timeout=0)
        return not ready

    def exit_code(self) -> Any:
        try:
            self.ray.get(self.run_ref, timeout=0)
            return "finished"
        except Exception as e:
            return type(e).__name__

    def reap(self) -> None:
        try:
            self.ray.kill(self.actor)
        except Exception:
            pass


class RayTransport(ShardedTransport):
    """Shards are Ray actors; weights travel through the object store, which carries
    tensors itself."""

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

    def launch(self, i: int, msg: dict) -> RayWorker:
        actor = self.actor_cls.options(name=None, scheduling_strategy="SPREAD").remote(i, self._worker_cfg(i))
        actor.push.remote(self.ray.put(msg))
        return RayWorker(self.ray, actor, actor.run.remote())

    async def receive(self, timeout: float) -> list:
        await asyncio.sleep(timeout)
        results = await asyncio.gather(*(sh.worker.actor.drain.remote() for sh in self.shards),
                                       return_exceptions=True)
        msgs = []
        for r in results:
            if not isinstance(r, BaseException):  # a dead actor: is_alive() reports it, it is replaced
                msgs.extend(r)
        return msgs

    def close(self) -> None:
        if self._started_ray:
            self.ray.shutdown()
