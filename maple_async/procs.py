"""Worker processes: every kind is spawned, dies with its parent, leaves Ctrl-C to it and
reports an error with its traceback through this module.

Parent side: :func:`spawn` (a fresh interpreter and one pipe), :func:`replies`,
:func:`last_words`, :func:`stop_all`. Worker side: :func:`enter_worker` first, then
:class:`Outbox` (messages out, from a thread) and :class:`Inbox` (messages in, to an event
loop); an error travels as :class:`Failed`. The training shards (``run/``), the battle
pool's shards (``env/shards.py``) and the bench's shards (``tools/bench.py``) are such
workers; Node processes (Showdown, the simulator transport's, the search's leaf process) are
started through :mod:`maple_async.nodeproc`, which gives each :func:`die_with_parent`.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_connections
from traceback import format_exc
from typing import Any, Callable, Optional

# A fresh interpreter per worker: nothing of the parent's event loop, threads or CUDA state.
CTX = mp.get_context("spawn")


def die_with_parent() -> None:
    """In the child: get SIGTERM if the Python parent dies, even by SIGKILL (Linux)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


@dataclass(frozen=True)
class Failed:
    """A worker's error on its way to the parent, with its traceback; ``who`` names the
    worker where one pipe carries several (a shard index)."""

    traceback: str
    who: Any = None
    error: str = ""  # "Type: message" of the exception (its notes and module left out)

    @classmethod
    def now(cls, who: Any = None) -> "Failed":
        """The exception being handled."""
        e = sys.exc_info()[1]
        return cls(format_exc(), who, f"{type(e).__name__}: {e}" if e is not None else "")

    @property
    def last_line(self) -> str:
        """The error in one line: ``Type: message``."""
        if self.error:
            return self.error
        lines = self.traceback.strip().splitlines()
        return lines[-1] if lines else ""


# -- the parent's side ------------------------------------------------------------------------

def spawn(target: Callable, args: tuple, name: str, duplex: bool = True) -> tuple[Any, Any]:
    """Start ``target(conn, *args)`` in a spawned daemon process; returns the process and
    the parent's end of the pipe (``duplex=False``: the worker writes, the parent reads)."""
    ours, theirs = CTX.Pipe(duplex=duplex)  # Pipe(False) is (read end, write end)
    proc = CTX.Process(target=target, args=(theirs, *args), name=name, daemon=True)
    proc.start()
    theirs.close()  # the worker holds the only other end: its death reads as EOF here
    return proc, ours


def replies(conns: list, timeout: float) -> list:
    """One message from each worker's pipe, in order, waiting up to ``timeout`` in all; a
    worker that closed its pipe without one gives a :class:`Failed`."""
    got: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    while len(got) < len(conns):
        waiting = [c for i, c in enumerate(conns) if i not in got]
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"worker {conns.index(waiting[0])} did not answer in {timeout:.0f}s")
        for conn in wait_connections(waiting, left):
            i = conns.index(conn)
            try:
                got[i] = conn.recv()
            except (EOFError, OSError):
                got[i] = Failed("the worker exited without a word", i)
    return [got[i] for i in range(len(conns))]


def last_words(conn) -> Optional[Failed]:
    """The :class:`Failed` a dead worker sent before it exited, if it is still in its pipe."""
    try:
        while conn.poll(0):
            msg = conn.recv()
            if isinstance(msg, Failed):
                return msg
    except (EOFError, OSError):
        pass
    return None


def stop_all(procs: list, timeout: float, grace: float = 5.0) -> None:
    """Wait for every process together up to ``timeout``, then terminate the ones still
    running, then kill (``grace`` seconds each)."""
    for stage, wait_s in ((None, timeout), ("terminate", grace), ("kill", grace)):
        alive = [p for p in procs if p.is_alive()]
        if stage is not None:
            for p in alive:
                getattr(p, stage)()
        deadline = time.monotonic() + wait_s
        for p in alive:
            p.join(max(0.0, deadline - time.monotonic()))


# -- the worker's side ------------------------------------------------------------------------

def enter_worker() -> Optional[Callable[[], bool]]:
    """A worker's first call: die with the parent and leave Ctrl-C to it. Returns a test of
    whether the parent is still alive, or None if it died already."""
    die_with_parent()
    parent = mp.parent_process().pid
    if os.getppid() != parent:  # the parent died before die_with_parent
        return None
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    return lambda: os.getppid() == parent


class Outbox:
    """A worker's messages to its parent over the worker's *own* pipe, written by a thread
    so an event loop never blocks on a full pipe. One pipe per worker: a worker killed
    mid-write leaves half a message in its own pipe only, never in one all share.
    ``counted(msg)`` picks the messages :meth:`queued` counts."""

    _CLOSE = object()

    def __init__(self, conn, counted: Callable[[Any], bool] = lambda msg: True):
        self.conn, self.counted = conn, counted
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self._put = self._sent = 0  # counted messages; each counter written by one thread only
        self.thread = threading.Thread(target=self._run, name="maple-worker-outbox", daemon=True)
        self.thread.start()

    def __call__(self, msg) -> None:
        self._put += self.counted(msg)
        self.q.put(msg)

    def queued(self) -> int:
        """Counted messages handed to this outbox and not yet written to the pipe."""
        return self._put - self._sent

    def _run(self) -> None:
        while True:
            msg = self.q.get()
            if msg is self._CLOSE:
                return
            try:
                self.conn.send(msg)
            except (OSError, ValueError):
                return  # the parent is gone
            self._sent += self.counted(msg)

    def close(self, timeout: float = 60.0) -> None:
        """Flush what is queued, then close."""
        self.q.put(self._CLOSE)
        self.thread.join(timeout)
        self.conn.close()

    def fail(self, who: Any = None) -> None:
        """Send the exception being handled (after what is queued) and exit with code 1."""
        self(Failed.now(who))
        self.close()
        sys.exit(1)


class Inbox:
    """A parent's messages to a worker's event loop, read from a multiprocessing queue by a
    daemon thread (a thread blocked in the queue's ``get`` would hold up the loop's
    shutdown, as an executor's does); a parent that is gone reads as None (stop).
    :meth:`decode` turns a message as it travelled into what :meth:`get` returns."""

    def __init__(self, q, alive: Callable[[], bool]):
        self.q, self.alive = q, alive
        self.items: Optional[asyncio.Queue] = None

    def decode(self, msg: Any) -> Any:
        return msg

    async def get(self) -> Any:
        if self.items is None:
            self.items = asyncio.Queue()
            threading.Thread(target=self._run, args=(asyncio.get_running_loop(),),
                             name="maple-worker-inbox", daemon=True).start()
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
            if msg is not None:
                msg = self.decode(msg)
            stop = msg is None
            try:
                loop.call_soon_threadsafe(self.items.put_nowait, msg)
            except RuntimeError:  # the loop is closed
                return
            # Hold nothing here: a daemon thread that drops a tensor while the interpreter
            # exits aborts the process.
            del msg
            if stop:
                return
