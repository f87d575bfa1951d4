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
for ``runner.battle_timeout_s`` while battles wait is killed and restarted: its battles
that ended in what it had already written count as ended, the others are abandoned (their
hidden states freed, partial trajectories dropped), other battles play on. A battle whose
handling fails before a side's first decision is dropped (nothing would ever ask again).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Optional

from .errors import UserError
from .procs import die_with_parent
from .server import SHOWDOWN_VERSION, install, which

log = logging.getLogger("maple_async.simulator")

HUB_JS = Path(__file__).with_name("simhub.js")
RS = b"\x1e"
# Bytes waiting in a process's stdin beyond which no new battle goes to it; choices still
# do (at most two per battle in flight), so what waits stays bounded by the battles.
BUSY_BYTES = 256 * 1024
MAX_RESTARTS = 5  # within RESTART_WINDOW_S: then the transport gives up with the last error
RESTART_WINDOW_S = 60.0
# After a process exited: how long its pipes may take to deliver what it wrote (asyncio may
# report the exit first), then how long its battles' players may take to handle what they hold.
EXIT_DRAIN_S = 5.0
INBOX_DRAIN_S = 5.0


class SimulatorError(UserError, RuntimeError):
    pass


def battle_seed(seed: Optional[int], key: str, index: int) -> str:
    """Showdown seed string of battle ``index`` of player pair ``key`` in a run seeded
    ``seed`` (None: fresh randomness)."""
    if seed is None:
        return "sodium," + secrets.token_hex(16)
    return "sodium," + hashlib.sha256(f"{seed}/{key}/{index}".encode()).hexdigest()[:32]


class _Inbox:
    """One player's messages of one battle, handled in order by one task at a time (the
    websocket path takes a per-battle lock for the same reason)."""

    __slots__ = ("player", "queue", "task", "battle", "answered")

    def __init__(self, player, battle: "_Battle"):
        self.player = player
        self.queue: collections.deque = collections.deque()
        self.task: Optional[asyncio.Task] = None
        self.battle = battle
        self.answered = False  # this side has sent a command (a choice, a team, a forfeit)

    def put(self, item) -> None:
        self.queue.append(item)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self.queue:
                item = self.queue.popleft()
                if item is None:  # the battle ended: everything before was handled
                    self.battle.side_done()
                    continue
                try:
                    await self.player._handle_battle_message([m.split("|") for m in item.split("\n")])
                except Exception:
                    self.player.logger.exception("handling a simulator message")
                    if self._stuck(item):
                        b = self.battle
                        log.warning("battle %s dropped: its handling failed before %s's first decision",
                                    b.tag, self.player.username)
                        b.proc.sims._drop(b.tag)
        finally:
            self.task = None

    def _stuck(self, item: str) -> bool:
        """A failure on ``item`` left a battle that no decision of this side ever moved
        (and no watchdog watches yet) waiting forever: its first request unanswered, or
        the battle never made."""
        b = self.battle
        return (b is not None and not self.answered
                and ("|request|" in item or b.tag not in self.player._battles))


class _Battle:
    __slots__ = ("tag", "proc", "inboxes", "future", "open_sides", "roles")

    def __init__(self, tag: str, proc: "_Process", p1, p2, future: asyncio.Future):
        self.tag = tag
        self.proc = proc
        self.inboxes = {"1": _Inbox(p1, self), "2": _Inbox(p2, self)}
        self.roles = ((p1, "p1"), (p2, "p2"))
        self.future = future
        self.open_sides = 2

    def side_done(self) -> None:
        self.open_sides -= 1
        if self.open_sides == 0 and not self.future.done():
            self.future.set_result(True)

    def ended(self) -> bool:
        """Both players have handled the battle's end (``|win|`` or ``|tie|``)."""
        for player, _role in self.roles:
            battle = player._battles.get(self.tag)
            if battle is None or not battle.finished:
                return False
        return True


class _Process(asyncio.SubprocessProtocol):
    """One Node process of simhub.js and what flows through its pipes."""

    def __init__(self, sims: "Simulators", index: int):
        self.sims = sims
        self.index = index
        self.transport: Optional[asyncio.SubprocessTransport] = None
        self.stdin = None
        self.battles: dict[str, _Battle] = {}
        self.ready = asyncio.get_running_loop().create_future()
        self.gone = asyncio.get_running_loop().create_future()
        self.drained = asyncio.get_running_loop().create_future()  # exited, all its pipes read
        self.exited = False
        self.last_heard = time.monotonic()
        self.pgid: Optional[int] = None
        self._buf = b""
        self._out: list[str] = []
        self._flush_scheduled = False

    # -- the protocol (asyncio.SubprocessProtocol) -------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.stdin = transport.get_pipe_transport(0)
        self.pgid = transport.get_pid()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.last_heard = time.monotonic()
        # Split the bytes first: a read may end inside a character (Pokémon), never a record.
        records = (self._buf + data).split(RS)
        self._buf = records.pop()
        route = self.sims._route
        for rec in records:
            route(self, rec.decode())

    def pipe_connection_lost(self, fd, exc) -> None:
        pass

    def connection_lost(self, exc) -> None:
        # asyncio calls this once the process exited and every pipe closed: all read.
        if not self.drained.done():
            self.drained.set_result(None)

    def process_exited(self) -> None:
        self.exited = True
        if not self.gone.done():
            self.gone.set_result(None)
        if not self.ready.done():
            self.ready.set_exception(SimulatorError(
                f"a Showdown simulator process exited during start (code "
                f"{self.transport.get_returncode()}); log {self.sims.log_path}"))
        self.sims._on_exit(self)

    # -- writes ------------------------------------------------------------------------------
    def write(self, line: str) -> None:
        self._out.append(line)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and not self.exited and self.stdin is not None and not self.stdin.is_closing():
            self.stdin.write(("\n".join(self._out) + "\n").encode())
        self._out = []

    @property
    def started(self) -> bool:
        """Said ready (and has not failed to start)."""
        r = self.ready
        return r.done() and not r.cancelled() and r.exception() is None

    def busy(self) -> bool:
        return self.stdin is None or self.stdin.get_write_buffer_size() > BUSY_BYTES

    def kill(self) -> None:
        if self.transport is not None and not self.exited:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)


class _Client:
    """What a poke-env Player needs of its ``ps_client`` when its battles run in the
    simulator processes: a name, a logger, and ``send_message`` turned into choices."""

    websocket = None
    _listening_coroutine = None

    def __init__(self, sims: "Simulators", original):
        self.sims = sims
        self.username = original.username
        self.logger = original.logger
        self.loop = asyncio.get_running_loop()
        self.logged_in = asyncio.Event()
        self.logged_in.set()
        self._active_tasks: set = set()
        self.roles: dict[str, str] = {}  # battle tag -> p1 / p2

    async def send_message(self, message: str, room: str = "", message_2: Optional[str] = None) -> None:
        role = self.roles.get(room)
        if role is None:
            return
        if message.startswith("/choose "):
            self.sims._command(room, role, f"C {room} {role} {message[8:]}")
        elif message.startswith("/team "):
            self.sims._command(room, role, f"C {room} {role} team {message[6:]}")
        elif message == "/forfeit":
            self.sims._command(room, role, f"F {room} {role}")
        elif message == "/undo":
            self.sims._command(room, role, f"C {room} {role} undo")
        # /timer, /leave and the open-team-sheet answers: decided at the start, no room

    async def stop_listening(self) -> None:
        """Drop this player's battles that still run (their opponents' sides too)."""
        for tag in list(self.roles):
            self.sims._drop(tag)


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
        self.procs: list[_Process] = []
        self.pgids: list[int] = []  # live: the CPU readers hold this list
        self.restarts = 0
        self._restart_times: collections.deque = collections.deque()
        self._failed: Optional[BaseException] = None
        self._owner: dict[str, _Battle] = {}
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
            from .server import default_home
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

    async def _spawn(self, i: int) -> _Process:
        loop = asyncio.get_running_loop()
        proc = _Process(self, i)
        self.procs[i] = proc
        await loop.subprocess_exec(
            lambda: proc, self._node, str(HUB_JS), str(self._pkg),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=self._log_file,
            start_new_session=True, preexec_fn=die_with_parent)
        if self.closed:  # closed while it was being started
            proc.kill()
            return proc
        self.pgids.append(proc.pgid)
        try:
            await asyncio.wait_for(asyncio.shield(proc.ready), self.start_timeout_s)
        except asyncio.TimeoutError:
            proc.ready.cancel()
            proc.kill()
            raise SimulatorError(f"a Showdown simulator process did not start within "
                                 f"{self.start_timeout_s:.0f}s; log {self.log_path}") from None
        return proc

    def _on_exit(self, proc: _Process) -> None:
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
                    proc.index, proc.transport.get_returncode(), len(proc.battles))
        self._track(loop.create_task(self._restart(proc.index)))

    def _track(self, task: asyncio.Task) -> None:
        self._restarts.add(task)
        task.add_done_callback(self._restarts.discard)

    async def _settle(self, proc: _Process) -> None:
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
                    self._end(b)
                else:
                    self._abandon(b)
                    lost += 1
            if lost:
                log.warning("simulator process %d: %d battles abandoned", proc.index, lost)
        finally:
            self._exiting.discard(proc)

    async def _restart(self, i: int) -> None:
        """Start process ``i`` again; a start that fails counts as another exit."""
        while not self.closed:
            now = time.monotonic()
            self._restart_times.append(now)
            while self._restart_times and now - self._restart_times[0] > RESTART_WINDOW_S:
                self._restart_times.popleft()
            if len(self._restart_times) > MAX_RESTARTS:
                self._failed = SimulatorError(
                    f"simulator processes exited {len(self._restart_times)} times within "
                    f"{RESTART_WINDOW_S:.0f}s; log {self.log_path}")
                break
            self.restarts += 1
            try:
                await self._spawn(i)
                break
            except Exception as e:  # noqa: BLE001 - counted, then tried again
                log.warning("simulator process %d did not restart: %s", i, e)
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
        for p in [*self.procs, *self._exiting]:
            if p is None:
                continue
            if not p.ready.done():  # a restart under way: nobody waits for its start now
                p.ready.cancel()
            for b in list(p.battles.values()):
                self._abandon(b)
            if p.transport is not None:
                p.kill()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(p.gone), 5.0)
                p.transport.close()
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
        player.ps_client = _Client(self, player.ps_client)

    def _pick(self) -> Optional[_Process]:
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
        fmt = p1.format
        index = self._counts[key]
        self._counts[key] += 1
        self._serial += 1
        tag = f"battle-{fmt}-{self._run}{self._serial}"
        seed = battle_seed(self.seed, key, index)
        digest = hashlib.sha256(seed.encode()).hexdigest()
        opts: dict = {"format": fmt, "seed": seed}
        for role, player, salt in (("p1", p1, 0), ("p2", p2, 1)):
            side = {"name": player.username, "seed": "sodium," + digest[32 * salt:32 * salt + 32]}
            team = player.next_team
            if team:
                side["team"] = team
            opts[role] = side
        opts["ots"] = ""
        if "vgc" in fmt:  # poke-env answers open team sheets in these formats only
            accepts = (p1.accept_open_team_sheet, p2.accept_open_team_sheet)
            if all(accepts):
                opts["ots"] = "show"
            elif any(accepts):
                opts["ots"] = (p2 if accepts[0] else p1).username
        future = asyncio.get_running_loop().create_future()
        battle = _Battle(tag, proc, p1, p2, future)
        proc.battles[tag] = battle
        self._owner[tag] = battle
        p1.ps_client.roles[tag] = "p1"
        p2.ps_client.roles[tag] = "p2"
        proc.write(f"S {tag} {json.dumps(opts, separators=(',', ':'))}")
        return future

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

    # -- routing -----------------------------------------------------------------------------
    def _route(self, proc: _Process, rec: str) -> None:
        kind = rec[:1]
        if kind == "M":
            nl = rec.find("\n")
            b = proc.battles.get(rec[3:nl])
            if b is not None:
                b.inboxes[rec[1]].put(rec[2:])
        elif kind == "E":
            b = proc.battles.get(rec[1:])
            if b is not None:
                self._end(b)
        elif kind == "K":
            tag, _, why = rec[1:].partition("\t")
            b = proc.battles.get(tag)
            log.warning("simulator error in %s: %s", tag, why)
            if b is not None:
                self._abandon(b)
        elif kind == "R":
            if not proc.ready.done():
                proc.ready.set_result(True)
        # "P": the answer to a ping; hearing it was the point

    def _command(self, tag: str, role: str, line: str) -> None:
        b = self._owner.get(tag)
        if b is not None:
            b.inboxes[role[1]].answered = True
            b.proc.write(line)

    def _end(self, b: _Battle) -> None:
        """The battle ended: its players finish handling it, then its future is True."""
        b.proc.battles.pop(b.tag, None)
        self._owner.pop(b.tag, None)
        self._forget_roles(b)
        for inbox in b.inboxes.values():
            inbox.put(None)

    def _drop(self, tag: str) -> None:
        b = self._owner.get(tag)
        if b is not None:
            b.proc.write(f"X {tag}")
            self._abandon(b)

    @staticmethod
    def _forget_roles(b: _Battle) -> None:
        for player, _role in b.roles:
            player.ps_client.roles.pop(b.tag, None)

    def _abandon(self, b: _Battle) -> None:
        """Forget a battle that will not end: its sides' agents drop the partial trajectory
        and hidden state, the players forget it, its seat in the match is freed."""
        b.proc.battles.pop(b.tag, None)
        self._owner.pop(b.tag, None)
        self._forget_roles(b)
        for (player, role), inbox in zip(b.roles, b.inboxes.values()):
            inbox.queue.clear()
            if inbox.task is not None:
                inbox.task.cancel()
            agent = getattr(player, "agent", None)
            if agent is not None:
                agent.abandon((b.tag, role))
            battle = player._battles.pop(b.tag, None)
            if battle is not None and not battle.finished:  # (a finished one gave its count back)
                with contextlib.suppress(asyncio.QueueEmpty, ValueError):
                    player._battle_count_queue.get_nowait()
                    player._battle_count_queue.task_done()
        if not b.future.done():
            b.future.set_result(False)


@contextlib.asynccontextmanager
async def simulators_for(server_cfg, battle_timeout_s: float, seed: Optional[int], quiet: bool = False):
    """Yield started :class:`Simulators` for the ``server`` config section; closed after."""
    from .server import resolve_simulators
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
