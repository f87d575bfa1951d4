"""The simulator transport: battles in Showdown's own ``sim`` package, no server between.

``server.transport: simulator`` starts ``server.simulators`` Node processes, each running
many battles (``simhub.js``: Showdown's ``Battle`` objects, fed choices and read through
pipes, writes batched once per event-loop iteration on both ends). There is no login,
no challenge and no room: :class:`Simulators` starts each battle itself, sends each
player what a room would have sent it (``>battle-…``, ``|init|battle``, ``|title|``, the
battle's lines split per side, numbered requests), and hands it to the player's own
poke-env handling (:meth:`Player._handle_battle_message`), so the decision path is the
websocket one. Open team sheets are decided at the start (shown when both players accept).

Every battle's seed derives from ``runner.seed`` (the run's, the player pair's key and the
battle's index within it), random teams included. A process that exits or sends nothing
for ``runner.battle_timeout_s`` while battles wait is killed and restarted (more than
MAX_RESTARTS within RESTART_WINDOW_S and the transport fails with the last error): its
battles that ended in what it had already written count as ended, the others are abandoned
(their hidden states freed, partial trajectories dropped), other battles play on. A battle
whose handling fails before a side's first decision is dropped (nothing would ever ask again).

This module is the facade (:class:`Simulators`: the processes' supervision, starting
battles); :mod:`.pipes` is one process and its pipes (started through
:mod:`maple_async.nodeproc`), :mod:`.battles` the battles and the routing of records and
commands, :mod:`.client` the poke-env client shim.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Optional

from ..nodeproc import RestartBudget
from ..server import SHOWDOWN_VERSION, default_home, install, resolve_simulators, which
from .battles import Router, battle_options, battle_seed
from .client import Client
from .pipes import HUB_JS, SimProcess, SimulatorError

__all__ = ["Simulators", "SimulatorError", "battle_seed", "simulators_for"]

log = logging.getLogger("maple_async.simulator")

MAX_RESTARTS = 5  # within RESTART_WINDOW_S: then the transport gives up with the last error
RESTART_WINDOW_S = 60.0
# After a process exited: how long its pipes may take to deliver what it wrote (asyncio may
# report the exit first), then how long its battles' players may take to handle what they hold.
EXIT_DRAIN_S = 5.0
INBOX_DRAIN_S = 5.0


class Simulators:
    """``n`` simulator processes and the battles in them. Stands where a
    :class:`~maple_async.server.ServerHandle` stands (``url``, ``managed``, ``healthy``,
    ``recover``): the run's "server URL" is this object, which :class:`Match` recognises."""

    def __init__(self, n: int, home: Optional[Path] = None, seed: Optional[int] = None,
                 battle_timeout_s: float = 300.0, start_timeout_s: float = 180.0,
                 log_path: Optional[Path] = None):
        self.n = n
        self.home = home
        self.seed = seed
        self.battle_timeout_s = battle_timeout_s
        self.start_timeout_s = start_timeout_s
        self.log_path = log_path
        self.procs: list[SimProcess] = []
        self.pgids: list[int] = []  # live: the CPU readers hold this list
        self.router = Router()
        self.restarts = 0
        self._budget = RestartBudget(MAX_RESTARTS, RESTART_WINDOW_S)
        self._failed: Optional[BaseException] = None
        self._counts: collections.Counter = collections.Counter()
        self._run = secrets.token_hex(3)
        self._serial = 0
        self._log_file = None
        self._pkg: Optional[Path] = None
        self._node = None
        self._watch: Optional[asyncio.Task] = None
        self._restarts: set = set()  # restart and settle tasks under way (close() cancels them)
        self._exiting: set = set()  # exited processes whose battles are being settled
        self._slot_free = asyncio.Event()
        self.closed = False

    # -- the handle API ----------------------------------------------------------------------
    @property
    def url(self) -> "Simulators":
        return self

    @property
    def managed(self) -> "Simulators":
        return self

    @property
    def simulators(self) -> int:
        return self.n

    @property
    def pid(self) -> list[int]:
        return self.pgids

    def alive(self) -> bool:
        return self._failed is None

    async def healthy(self) -> bool:
        return self._failed is None

    async def recover(self, timeout: float = 120.0) -> None:
        if self._failed is not None:
            raise self._failed

    def __str__(self) -> str:
        pids = ", ".join(map(str, self.pgids))
        return f"Showdown {SHOWDOWN_VERSION} simulator ({self.n} processes: pids {pids}; no server)"

    # -- processes ---------------------------------------------------------------------------
    async def start(self) -> "Simulators":
        self._pkg = await asyncio.to_thread(install, self.home)
        self._node = which("node")
        if self.log_path is None:
            log_dir = (Path(self.home) if self.home else default_home()) / "logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            self.log_path = log_dir / f"simulator-{os.getpid()}-{self._run}.log"
        self._log_file = open(self.log_path, "ab")
        self.procs = [None] * self.n  # type: ignore[list-item]
        try:
            await asyncio.gather(*(self._spawn(i) for i in range(self.n)))
        except BaseException:
            await self.close()
            raise
        self._watch = asyncio.get_running_loop().create_task(self._watchdog(), name="maple-sim-watch")
        return self

    async def _spawn(self, i: int) -> SimProcess:
        proc = SimProcess(self, i)
        self.procs[i] = proc
        await proc.spawn(self._node, str(HUB_JS), str(self._pkg), log=self._log_file)
        if self.closed:  # closed while it was being started
            proc.discard()  # killed; its transport closed once the exit is reaped
            return proc
        self.pgids.append(proc.pgid)
        await proc.wait_ready(self.start_timeout_s)
        return proc

    def exited(self, proc: SimProcess) -> None:
        """``proc`` exited: its battles are settled, and it is restarted if it had started."""
        with contextlib.suppress(ValueError):
            self.pgids.remove(proc.pgid)
        if self.closed:
            return  # close() abandoned its battles
        loop = asyncio.get_running_loop()
        if proc.battles:
            self._exiting.add(proc)
            self._track(loop.create_task(self._settle(proc)))
        if not proc.started:
            return
        log.warning("simulator process %d exited (code %s) with %d battles; restarting it",
                    proc.index, proc.returncode, len(proc.battles))
        self._budget.last_error = proc.why()
        self._track(loop.create_task(self._restart(proc.index)))

    def _track(self, task: asyncio.Task) -> None:
        self._restarts.add(task)
        task.add_done_callback(self._restarts.discard)

    async def _settle(self, proc: SimProcess) -> None:
        """The battles of a process that exited: what its pipe still held is routed first
        (an exit may be reported before the last read), then their players handle what
        they hold (bounded); the battles that ended count as ended, the rest are abandoned."""
        try:
            await asyncio.wait([proc.drained], timeout=EXIT_DRAIN_S)
            busy = [i.task for b in proc.battles.values() for i in b.inboxes.values() if i.task is not None]
            if busy:
                await asyncio.wait(busy, timeout=INBOX_DRAIN_S)
            lost = 0
            for b in list(proc.battles.values()):
                if b.ended():
                    self.router.end(b)
                else:
                    self.router.abandon(b)
                    lost += 1
            if lost:
                log.warning("simulator process %d: %d battles abandoned", proc.index, lost)
        finally:
            self._exiting.discard(proc)

    async def _restart(self, i: int) -> None:
        """Start process ``i`` again; a start that fails counts as another exit."""
        async def again() -> None:
            self.restarts += 1
            await self._spawn(i)

        started = await self._budget.start_again(
            again, lambda: self.closed, lambda e: log.warning("simulator process %d did not restart: %s", i, e))
        if not started and not self.closed:
            self._failed = SimulatorError(self._budget.exhausted("simulator processes"))
        self._slot_free.set()

    async def _watchdog(self) -> None:
        """Kill a process that has battles and answered no ping for the battle timeout (a
        hung simulator; one whose battles all wait on us still answers); its exit abandons
        them and restarts it."""
        while True:
            await asyncio.sleep(min(5.0, self.battle_timeout_s / 4))
            now = time.monotonic()
            for p in self.procs:
                if p is None or p.exited or not p.started:
                    continue
                if p.battles and now - p.last_heard > self.battle_timeout_s:
                    log.warning("simulator process %d silent for %.0fs with %d battles: killing it",
                                p.index, now - p.last_heard, len(p.battles))
                    p.kill()
                else:
                    p.write("P")

    async def close(self) -> None:
        self.closed = True
        for t in [self._watch, *self._restarts]:
            if t is not None:
                t.cancel()
        procs = list(dict.fromkeys(p for p in [*self.procs, *self._exiting] if p is not None))
        for p in procs:
            for b in list(p.battles.values()):
                self.router.abandon(b)
            # Killed before the first await: their battles are abandoned, nothing they hold is
            # worth a graceful exit, and a close cancelled from here on leaves none running.
            p.discard()
        await asyncio.gather(*(p.close() for p in procs))  # a restart under way: given up
        self.procs = []
        self._exiting.clear()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    # -- battles -----------------------------------------------------------------------------
    def reseed(self, seed: Optional[int]) -> None:
        """Battles started from now on are seeded ``seed``, counted from the first again."""
        self.seed = seed
        self._counts.clear()

    def attach(self, player) -> None:
        """Give a poke-env Player built with ``start_listening=False`` a client of these
        processes instead of a websocket."""
        player.ps_client = Client(self.router, player.ps_client)

    def _pick(self) -> Optional[SimProcess]:
        live = [p for p in self.procs if p is not None and not p.exited and p.started and not p.busy()]
        return min(live, key=lambda p: len(p.battles)) if live else None

    async def start_battle(self, p1, p2, key: str) -> asyncio.Future:
        """Start one battle of ``p1`` (first seat) against ``p2``; the future resolves True
        when both have handled its end, False when it was abandoned."""
        while True:
            if self._failed is not None:
                raise self._failed
            proc = self._pick()
            if proc is not None:
                break
            self._slot_free.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._slot_free.wait(), 0.05)
        index = self._counts[key]
        self._counts[key] += 1
        self._serial += 1
        tag = f"battle-{p1.format}-{self._run}{self._serial}"
        return self.router.open(proc, tag, p1, p2, battle_options(p1, p2, battle_seed(self.seed, key, index)))

    async def play(self, me, opponent, n_battles: int, concurrency: int, key: str) -> None:
        """``n_battles`` finished battles of ``me`` against ``opponent``, ``concurrency`` at
        a time (seats alternate; an abandoned battle is replaced)."""
        slots = asyncio.Semaphore(concurrency)
        pending: set = set()
        finished = 0
        i = 0
        try:
            while True:
                await slots.acquire()
                if finished + len(pending) >= n_battles:
                    slots.release()
                    if not pending:
                        return
                    await asyncio.wait(set(pending), return_when=asyncio.FIRST_COMPLETED)
                    continue
                seats = (me, opponent) if i % 2 == 0 else (opponent, me)
                i += 1
                fut = await self.start_battle(*seats, key)
                pending.add(fut)

                def done(f, pending=pending):
                    nonlocal finished
                    pending.discard(f)
                    slots.release()
                    if not f.cancelled() and f.result():
                        finished += 1
                fut.add_done_callback(done)
        finally:
            for f in list(pending):
                f.cancel()


@contextlib.asynccontextmanager
async def simulators_for(server_cfg, battle_timeout_s: float, seed: Optional[int], quiet: bool = False):
    """Yield started :class:`Simulators` for the ``server`` config section; closed after."""
    sims = Simulators(resolve_simulators(server_cfg.simulators),
                      home=Path(server_cfg.home) if server_cfg.home else None, seed=seed,
                      battle_timeout_s=battle_timeout_s, start_timeout_s=server_cfg.start_timeout_s)
    await sims.start()
    if not quiet:
        print(f"[maple-async] {sims} (log {sims.log_path})", flush=True)
    try:
        yield sims
    finally:
        await sims.close()
