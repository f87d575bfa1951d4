"""Engine workers of one generation, kept alive and off the event loop.

:class:`EnginePool` starts ``workers`` processes of :mod:`.worker` (one per core by default) and
hands each request to the one with the least waiting; replies are read by the event loop's own
reader on each pipe, so battles keep moving while the engine thinks. What can go wrong costs
that request, never the battle:

* a Rust panic: the request raises :class:`EnginePanic`; the worker goes on;
* a request past its deadline (twice its budget and a margin): the worker is killed, its
  requests raise :class:`EngineHang` and it is started again;
* a worker that dies: its requests raise :class:`EngineDied` and it is started again;
* more than ``MAX_RESTARTS`` starts within ``RESTART_WINDOW_S``: the pool gives up and every
  request raises :class:`EngineDied` with the last reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
from pathlib import Path
from typing import Optional

from ... import procs
from ...nodeproc import RestartBudget
from ...server import default_home
from . import build

log = logging.getLogger("maple_async.search.engine")

START_TIMEOUT_S = 60.0
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
# A request's deadline beyond twice its own budget: a loaded machine's scheduling, pickling.
DEADLINE_MARGIN_S = 2.0


class EngineError(RuntimeError):
    """A request the engine could not serve; ``kind`` names why (the counters group by it)."""

    kind = "engine_error"


class EnginePanic(EngineError):
    kind = "engine_panic"


class EngineHang(EngineError):
    kind = "engine_hang"


class EngineDied(EngineError):
    kind = "engine_died"


class _Worker:
    def __init__(self, index: int):
        self.index = index
        self.proc = None
        self.conn = None
        self.pending: dict[int, asyncio.Future] = {}
        self.ready: Optional[asyncio.Future] = None
        self.starting: Optional[asyncio.Task] = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive() and self.ready is not None and self.ready.done() \
            and not self.ready.cancelled() and self.ready.exception() is None


class EnginePool:
    """``workers`` engine processes of generation ``gen``. ``async with EnginePool(4) as pool``."""

    def __init__(self, gen: int, workers: Optional[int] = None, home: Optional[Path] = None,
                 quiet: bool = False):
        self.gen = gen
        self.n = workers or max(1, min(os.cpu_count() or 1, 8))
        self.home = Path(home) if home else default_home()
        self.quiet = quiet
        self.workers = [_Worker(i) for i in range(self.n)]
        self.path: Optional[Path] = None
        self.restarts = 0
        self._budget = RestartBudget(MAX_RESTARTS, RESTART_WINDOW_S)
        self._ids = itertools.count(1)
        self._failed: Optional[str] = None
        self.closed = False
        log_dir = self.home / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"engine-gen{gen}-{os.getpid()}.log"

    async def __aenter__(self) -> "EnginePool":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def start(self) -> "EnginePool":
        """Build the generation's engine if needed (in a thread), then start every worker."""
        self.path = await asyncio.to_thread(build.ensure, self.gen, self.home, self.quiet)
        try:
            await asyncio.gather(*(self._spawn(w) for w in self.workers))
        except BaseException:
            await self.close()
            raise
        return self

    async def _spawn(self, w: _Worker) -> None:
        loop = asyncio.get_running_loop()
        w.proc, w.conn = procs.spawn(_worker_main, (str(self.path), str(self.log_path)),
                                     name=f"maple-engine-gen{self.gen}-{w.index}")
        w.ready = loop.create_future()
        loop.add_reader(w.conn.fileno(), self._readable, w)
        # uvloop makes a watched descriptor non-blocking, and a Connection then fails on a message
        # larger than the socket's buffer (a gen 1 turn's outcomes) as on a closed pipe: blocking,
        # a read that the loop saw begin waits for the message's end.
        os.set_blocking(w.conn.fileno(), True)
        try:
            await asyncio.wait_for(asyncio.shield(w.ready), START_TIMEOUT_S)
        except asyncio.TimeoutError:
            self._kill(w)
            raise EngineDied(f"an engine worker of generation {self.gen} did not start within "
                             f"{START_TIMEOUT_S:.0f}s; log {self.log_path}") from None

    def _readable(self, w: _Worker) -> None:
        conn = w.conn
        try:
            while conn is not None and conn.poll():
                msg = conn.recv()
                if isinstance(msg, procs.Failed):
                    why = f"the engine worker failed to start: {msg.last_line}"
                    if w.ready is not None and not w.ready.done():
                        w.ready.set_exception(EngineDied(why))
                    continue
                if msg.get("ready"):
                    if w.ready is not None and not w.ready.done():
                        w.ready.set_result(True)
                    continue
                fut = w.pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (EOFError, OSError):
            self._gone(w, "exited")

    def _exit_reason(self, w: _Worker, why: str) -> str:
        code = None
        if w.proc is not None:
            w.proc.join(0.5)
            code = w.proc.exitcode
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                code = signal.Signals(-code).name
        return f"engine worker {w.index} of generation {self.gen} {why} (exit {code}); log {self.log_path}"

    def _gone(self, w: _Worker, why: str, error: type = EngineDied) -> None:
        """A worker is dead or killed: fail what it held, start it again (within the budget)."""
        if w.conn is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(w.conn.fileno())
            with contextlib.suppress(Exception):
                w.conn.close()
            w.conn = None
        reason = self._exit_reason(w, why)
        if w.ready is not None and not w.ready.done():
            w.ready.set_exception(EngineDied(reason))
        for fut in w.pending.values():
            if not fut.done():
                fut.set_exception(error(reason))
        w.pending.clear()
        self._budget.last_error = reason
        if self.closed or w.starting is not None:
            return  # (a start under way that fails tries again itself)
        log.warning("%s; starting it again", reason)
        w.starting = asyncio.get_running_loop().create_task(self._restart(w))

    async def _restart(self, w: _Worker) -> None:
        """Start worker ``w`` again, each try spending the restart budget; past the budget the
        pool gives up (every request then fails with the last reason)."""
        async def again() -> None:
            self.restarts += 1
            await self._spawn(w)

        try:
            started = await self._budget.start_again(
                again, lambda: self.closed,
                lambda e: log.warning("engine worker %d did not start again: %s", w.index, e))
            if not started and not self.closed:
                self._failed = self._budget.exhausted(f"engine workers of generation {self.gen}")
                log.warning("engine pool gives up: %s", self._failed)
        finally:
            w.starting = None

    def _kill(self, w: _Worker) -> None:
        if w.proc is not None and w.proc.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.proc.pid, signal.SIGKILL)

    def _pick(self) -> _Worker:
        live = [w for w in self.workers if w.alive]
        if not live:
            raise EngineDied(self._failed or f"no engine worker of generation {self.gen} is running")
        return min(live, key=lambda w: len(w.pending))

    async def request(self, msg: dict, budget_s: float, worker: Optional[int] = None) -> dict:
        """Send ``msg`` to a worker (the least busy, or ``worker`` mod the pool's size) and await
        its answer; raises an :class:`EngineError` by kind."""
        if self.closed:
            raise EngineDied("the engine pool is closed")
        starting = [w.starting for w in self.workers if w.starting is not None]
        if starting and not any(w.alive for w in self.workers):
            await asyncio.wait(starting)
        w = self.workers[worker % self.n] if worker is not None else self._pick()
        if not w.alive:
            w = self._pick()
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        w.pending[rid] = fut
        try:
            w.conn.send({"id": rid, **msg})
        except (OSError, ValueError):
            self._gone(w, "closed its pipe")
        # Its deadline counts the requests queued before it on that worker.
        queued = len(w.pending)
        try:
            reply = await asyncio.wait_for(asyncio.shield(fut), queued * 2 * budget_s + DEADLINE_MARGIN_S)
        except asyncio.TimeoutError:
            log.warning("engine worker %d of generation %d: no answer within %.1fs: killing it",
                        w.index, self.gen, queued * 2 * budget_s + DEADLINE_MARGIN_S)
            w.pending.pop(rid, None)
            fut.cancel()
            self._kill(w)
            self._gone(w, "hung", EngineHang)
            raise EngineHang(f"engine worker {w.index} of generation {self.gen} passed its deadline") from None
        finally:
            w.pending.pop(rid, None)
        if not reply.get("ok"):
            err = EnginePanic if reply.get("kind") == "panic" else EngineError
            raise err(reply.get("error", "the engine refused the request"))
        return reply

    async def close(self) -> None:
        self.closed = True
        for w in self.workers:
            if w.starting is not None:
                w.starting.cancel()
            if w.conn is not None:
                with contextlib.suppress(Exception):
                    asyncio.get_running_loop().remove_reader(w.conn.fileno())
                with contextlib.suppress(Exception):
                    w.conn.send(None)
        procs_ = [w.proc for w in self.workers if w.proc is not None]
        await asyncio.to_thread(procs.stop_all, procs_, 2.0, 1.0)
        for w in self.workers:
            for fut in w.pending.values():
                if not fut.done():
                    fut.set_exception(EngineDied("the engine pool was closed"))
            w.pending.clear()
            if w.conn is not None:
                with contextlib.suppress(Exception):
                    w.conn.close()
                w.conn = None


def _worker_main(conn, engine_path: str, log_path: str) -> None:
    from .worker import main
    main(conn, engine_path, log_path)
