"""Node child processes: the simulator transport's (``simulator/``), the search's leaf
process (``search/leaves.py``) and the managed Showdown server (``server.py``) are started
and ended through this module.

Every one runs in its own process group, so that killing it takes what it started too, and
gets SIGTERM when this Python process dies (:func:`own_group`). :class:`NodeProcess` is a
child on pipes, driven by the event loop: its first stdout record says it is ready (within
a start timeout), its later records go to :meth:`NodeProcess.received` a read at a time,
its error output is kept (the last lines, or a log file), :meth:`NodeProcess.why` tells
its exit in one line, and :meth:`NodeProcess.close` ends its stdin, waits, then kills its
group (one that never said ready, or whose close is cancelled, is killed at once).
:class:`RestartBudget` bounds restarts within a window. :func:`kill_group` and the ``/proc``
readers (:func:`group_processes`, :func:`group_cpu_s`) serve any process group, a server
started by another command included.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import time
from typing import Callable, Iterable, Optional

from .procs import die_with_parent

CLOSE_TIMEOUT_S = 5.0  # from the end of its stdin to the kill, then from the kill to giving up
LAST_WORDS_S = 1.0  # after an exit: how long its pipes may take to deliver what it wrote
TAIL_LINES = 20  # of error output kept
ERR_LINE_MAX = 8192  # bytes of one error line kept while its end has not come


class NodeProcessError(RuntimeError):
    """A Node child process did not start."""


def own_group(attached: bool = True) -> dict:
    """A subprocess start's keyword arguments: its own process group (session), and SIGTERM
    when this process dies unless not ``attached`` (a server that outlives the command)."""
    return {"start_new_session": True, "preexec_fn": die_with_parent if attached else None}


def kill_group(pgid: int, grace: float = 0.0) -> None:
    """End process group ``pgid``: where ``grace`` > 0, SIGTERM and up to ``grace`` seconds
    for it to go; then SIGKILL. With a grace it reaps a leader that is this process's
    ``Popen`` child; the event loop reaps its own children, so kill those with no grace."""
    if grace > 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            # Reap our direct child if it exited, else the group keeps a zombie leader.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pgid, os.WNOHANG)
            time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def exit_line(name: str, pid, code, tail: Iterable[str] = (), log_path=None) -> str:
    """A child's exit in one line: its code (negative: the signal that ended it), then its
    last error output, and the log its error output went to."""
    why = f"{name} (pid {pid}) exited with code {code}"
    tail = [line for line in tail if line]
    if tail:
        why += f"; its last error output: {' | '.join(tail[-5:])}"
    return why + (f"; log {log_path}" if log_path is not None else "")


class NodeProcess(asyncio.SubprocessProtocol):
    """One Node child on pipes. Its stdout is records ended by :attr:`separator`; the first
    that starts with :attr:`ready_record` says it is ready and is left out, the others go to
    ``received`` (or a subclass's :meth:`received`) one list per read; :meth:`on_exit` hears
    the exit. ``name`` (the script) names it in messages; ``error`` is what a failed start
    raises."""

    separator = b"\n"
    ready_record = b'{"ready":true}'

    def __init__(self, name: str = "node", received: Optional[Callable[[list], None]] = None,
                 error: type = NodeProcessError, tail_lines: int = TAIL_LINES):
        loop = asyncio.get_running_loop()
        self.name = name
        self.error = error
        if received is not None:
            self.received = received
        self.transport: Optional[asyncio.SubprocessTransport] = None
        self.stdin = None
        self.pgid: Optional[int] = None  # its pid, and its process group's id
        self.log_path = None
        self.ready = loop.create_future()
        self.gone = loop.create_future()  # exited
        self.drained = loop.create_future()  # exited, and every pipe read to its end
        self.started = False  # said ready
        self.exited = False
        self.closed = False  # close() was called: a start under way is given up
        self._spawning: Optional[asyncio.Future] = None  # done once spawn() returned or failed
        self.last_heard = time.monotonic()  # its last stdout
        self.tail: collections.deque = collections.deque(maxlen=tail_lines)
        self._partial: list[bytes] = []  # the start of a record whose end has not come
        self._err = b""
        self._write_paused = False
        self._resumed: Optional[asyncio.Future] = None

    # -- start -------------------------------------------------------------------------------
    async def spawn(self, *argv: str, log=None) -> None:
        """Start ``argv`` with stdin and stdout on pipes; its error output goes to ``log`` (an
        open file) or, without one, to :attr:`tail`."""
        if self.closed:
            raise self.error(f"{self.name} was closed before it started")
        self.log_path = getattr(log, "name", None)
        loop = asyncio.get_running_loop()
        self._spawning = loop.create_future()
        try:
            await loop.subprocess_exec(
                lambda: self, *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=log if log is not None else asyncio.subprocess.PIPE, **own_group())
        finally:
            self._spawning.set_result(None)
        if self.closed:  # closed while its child was being created: close() saw no child
            self.discard()
            raise self.error(f"{self.name} was closed while it started")

    async def wait_ready(self, timeout: float) -> None:
        """Wait for the ready record; :attr:`error` when the child exits first, when it is
        closed meanwhile, or when the record does not come within ``timeout`` seconds (the
        child is killed). A failed start leaves no transport open."""
        await asyncio.wait([self.ready, self.gone], timeout=timeout,
                           return_when=asyncio.FIRST_COMPLETED)
        if self.started:
            return
        if self.ready.cancelled():  # closed meanwhile (close() ends the child)
            raise self.error(f"{self.name} was closed before it was ready")
        if self.exited:
            why = await self.exit_reason()
            self.discard()  # its transport is closed: nothing is left of it
            raise self.error(f"{self.name} did not start: {why}")
        self.ready.cancel()
        self.discard()
        await asyncio.wait([self.gone], timeout=CLOSE_TIMEOUT_S)  # gone before it is given up
        where = f"; log {self.log_path}" if self.log_path is not None else ""
        raise self.error(f"{self.name} did not start within {timeout:.0f}s{where}") from None

    async def start(self, *argv: str, timeout: float, log=None) -> "NodeProcess":
        await self.spawn(*argv, log=log)
        await self.wait_ready(timeout)
        return self

    # -- the protocol (asyncio.SubprocessProtocol) -------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.stdin = transport.get_pipe_transport(0)
        self.pgid = transport.get_pid()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            self._error_output(data)
            return
        self.last_heard = time.monotonic()
        # Split the bytes first: a read may end inside a character (Pokémon), never a record.
        records = data.split(self.separator)
        if len(records) == 1:  # inside one record: joined once its end comes
            self._partial.append(data)
            return
        if self._partial:
            self._partial.append(records[0])
            records[0] = b"".join(self._partial)
            self._partial = []
        last = records.pop()
        if last:
            self._partial.append(last)
        if not self.started:
            self._find_ready(records)
        if records:
            self.received(records)

    def received(self, records: list) -> None:
        """The records of one read, the ready record left out."""

    def on_exit(self) -> None:
        """The child exited (its pipes may still hold what it wrote last: :attr:`drained`)."""

    def pipe_connection_lost(self, fd: int, exc) -> None:
        if fd == 0:
            self.resume_writing()  # nothing will drain now
        elif fd == 2 and self._err:
            self.tail.append(self._err.decode(errors="replace").rstrip())
            self._err = b""

    def process_exited(self) -> None:
        self.exited = True
        if not self.gone.done():
            self.gone.set_result(None)
        self.on_exit()

    def connection_lost(self, exc) -> None:
        # asyncio calls this once the process exited and every pipe closed: all read.
        if not self.drained.done():
            self.drained.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)
        self._resumed = None

    def _find_ready(self, records: list) -> None:
        """Take the ready record out of ``records``, if it is there (what comes before it
        goes on to :meth:`received` all the same)."""
        for i, rec in enumerate(records):
            if rec.startswith(self.ready_record):
                del records[i]
                if not self.ready.done():  # (done: its start was given up on)
                    self.started = True
                    self.ready.set_result(None)
                return

    def _error_output(self, data: bytes) -> None:
        lines = (self._err + data).split(b"\n")
        self._err = lines.pop()[-ERR_LINE_MAX:]
        self.tail.extend(line.decode(errors="replace").rstrip() for line in lines)

    # -- running ------------------------------------------------------------------------------
    @property
    def returncode(self) -> Optional[int]:
        return self.transport.get_returncode() if self.transport is not None else None

    async def drain(self) -> None:
        """Wait while its stdin holds more than the pipe's high-water mark (not past its exit)."""
        if self._write_paused and not self.exited:
            if self._resumed is None:
                self._resumed = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._resumed, self.gone], return_when=asyncio.FIRST_COMPLETED)

    def why(self) -> str:
        """Its exit in one line (see :func:`exit_line`)."""
        return exit_line(self.name, self.pgid, self.returncode, self.tail, self.log_path)

    async def exit_reason(self) -> str:
        """Once it exited and its pipes delivered its last words (a bounded wait): :meth:`why`."""
        await self.gone
        await asyncio.wait([self.drained], timeout=LAST_WORDS_S)
        return self.why()

    def kill(self) -> None:
        """SIGKILL its process group (it and whatever it started)."""
        if self.pgid is not None and self.pgid > 0 and not self.exited:
            kill_group(self.pgid)

    def discard(self) -> None:
        """Kill its group and close its transport once the exit is reaped, waiting for nothing
        (closed before the reaping, the transport would reap it behind the child watcher's back)."""
        self.kill()
        transport = self.transport
        if transport is None:
            return
        if self.exited:
            transport.close()
        else:
            self.gone.add_done_callback(lambda _: transport.close())

    async def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """End its stdin (the child exits when it ends), wait up to ``timeout`` seconds for
        the exit, then kill its group; nobody waits for its start any more. A child that has
        not said ready (its start may be under way) holds nothing: it is killed at once, and
        so is one whose close is cancelled. Idempotent."""
        self.closed = True
        if not self.ready.done():
            self.ready.cancel()
        try:
            if self._spawning is not None and not self._spawning.done():
                await asyncio.wait([self._spawning])  # its child is killed there
            if self.transport is None:
                return
            if not self.exited:
                if self.started:
                    self.stdin.close()  # what it was sent is written first
                    await asyncio.wait([self.gone], timeout=timeout)
                if not self.exited:
                    self.kill()
                    await asyncio.wait([self.gone], timeout=timeout)
        except BaseException:  # cancelled: ended without waiting
            self.discard()
            raise
        self.transport.close()


class RestartBudget:
    """At most ``limit`` restarts within any ``window_s`` seconds; one more and the caller
    gives up, naming :attr:`last_error` (what ended the last process, or failed its start)."""

    def __init__(self, limit: int, window_s: float):
        self.limit = limit
        self.window_s = window_s
        self.times: collections.deque = collections.deque()
        self.last_error = ""

    def spend(self) -> bool:
        """Count one restart; False when it is one too many."""
        now = time.monotonic()
        self.times.append(now)
        while now - self.times[0] > self.window_s:
            self.times.popleft()
        return len(self.times) <= self.limit

    async def start_again(self, start: Callable, closed: Callable[[], bool],
                          failed: Callable[[Exception], None]) -> bool:
        """Await ``start()`` until it returns, while ``closed()`` is false, each try spending one
        restart: True once started; False when closed or past the budget (:meth:`exhausted` says
        why). A start that raises is :attr:`last_error`, told to ``failed``, and tried again."""
        while not closed():
            if not self.spend():
                return False
            try:
                await start()
                return True
            except Exception as e:  # noqa: BLE001 - counted, then tried again
                self.last_error = str(e)
                failed(e)
        return False

    def exhausted(self, what: str) -> str:
        """Giving up, in words: how often ``what`` exited within the window, and the last error."""
        last = f"; the last: {self.last_error}" if self.last_error else ""
        return f"{what} exited {len(self.times)} times within {self.window_s:.0f}s{last}"


# -- process groups, read from /proc ----------------------------------------------------------

def process_groups(pgid) -> list[int]:
    """``pgid`` as a list: a managed server's one process group, or the simulator
    transport's list of them (one per process)."""
    return [pgid] if isinstance(pgid, int) else list(pgid)


def group_processes(pgid) -> Optional[list[tuple[int, bytes, float]]]:
    """(pid, command line, CPU seconds used so far) of each live process in the process
    group(s) ``pgid`` (see :func:`process_groups`); None where ``/proc`` can't be read."""
    groups = set(process_groups(pgid))
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    out = []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            # after the command name (in parentheses, may hold spaces): state, ppid, pgrp, ...
            fields = stat[stat.rindex(b")") + 2:].split()
            if int(fields[2]) not in groups:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:  # exited meanwhile
            continue
        out.append((int(name), cmd, (int(fields[11]) + int(fields[12])) / tick))  # utime + stime
    return out


def group_cpu_s(pgid) -> Optional[float]:
    """CPU seconds (user + system) used so far by the live processes of process group(s)
    ``pgid``: a managed server's node processes (the server and its simulator workers run
    in the group its start made), or the simulator transport's processes. None where that
    can't be read (no ``/proc``, no group)."""
    procs = group_processes(pgid) if pgid else None
    return sum(cpu for _, _, cpu in procs) if procs else None
