"""The Python side of one ``leafhub.js`` process: build a decision's states, play its leaves.

One Node process, newline-delimited JSON over its pipes (the format is documented at the top
of ``leafhub.js``), requests answered in order and matched by id. The process gets SIGTERM
when this Python process dies (as the simulator transport's processes do). A request the
process refuses raises :class:`LeafRequestError` and the process goes on; a process that
exits while requests wait fails them with :class:`LeafHubDied`, and :meth:`LeafHub.start`
starts a fresh one (the decisions built in the dead one are gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from ..nodeproc import NodeProcess
from ..server import install, which

log = logging.getLogger("maple_async.search")

HUB_JS = Path(__file__).with_name("leafhub.js")
START_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 5.0
STDERR_TAIL = 20

Seed = Union[str, Sequence[int]]

# The leaf process's own milliseconds for the requests of one task (a decision's search) are
# added to the list this holds: its compute, whatever other decisions it also served meanwhile.
NODE_MS: contextvars.ContextVar[Optional[list]] = contextvars.ContextVar("maple_leafhub_ms", default=None)


@contextlib.contextmanager
def metered():
    """``with metered() as ms:``: the leaf process's milliseconds of each request made inside."""
    meter: list = []
    token = NODE_MS.set(meter)
    try:
        yield meter
    finally:
        NODE_MS.reset(token)


class LeafHubError(RuntimeError):
    """The leaf process could not serve a request."""


class LeafRequestError(LeafHubError):
    """The process refused a request (the reason is its own); it still answers others."""


class LeafHubDied(LeafHubError):
    """The process exited, or was not running, while a request waited."""


@dataclass
class BuiltState:
    """One sampled state as built: our side's request and each side's legal choices."""
    request: dict
    ours: list[str]
    theirs: list[str]
    attack: str = ""  # their strongest attack on our active (the later turns' reply model)
    snapshot: Optional[dict] = None  # asked to describe it: the battle in plain terms (describe.js)


@dataclass
class Leaf:
    """One turn of a joint action from a built state. ``error`` set: nothing else is."""
    lines: str = ""
    request: Optional[dict] = None
    ended: bool = False
    winner: Optional[str] = None  # "us", "them" or "tie" once ended
    value: float = 0.0  # network-free: HP and Pokémon left, in [-1, 1]; ±1 (0 a tie) at an end
    error: Optional[str] = None
    kept: Optional[int] = None  # asked to keep it (a live leaf): its number for :meth:`LeafHub.next`
    fallback: Optional[str] = None  # a later turn: why our choice was refused (our strongest attack played)
    brief: Optional[list] = None  # asked for it: per side, name -> [hp, maxhp, fainted] after the turn


class LeafHub:
    """One ``leafhub.js`` process. ``async with LeafHub() as hub:`` starts and closes it."""

    def __init__(self, home: Optional[Path] = None, start_timeout_s: float = START_TIMEOUT_S):
        self.home = home
        self.start_timeout_s = start_timeout_s
        self.proc: Optional[NodeProcess] = None
        self._pending: dict[int, tuple[str, asyncio.Future]] = {}
        self._ids = itertools.count(1)
        self._watch: Optional[asyncio.Task] = None  # waits for the exit
        self._exit: Optional[str] = None  # why the last process is gone

    async def __aenter__(self) -> "LeafHub":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pgid if self.proc else None

    @property
    def alive(self) -> bool:
        """Its process said ready and has not exited (one being started is not yet alive:
        it has no pipes to write to until its start returns)."""
        proc = self.proc
        return proc is not None and proc.started and not proc.exited and self._exit is None

    async def start(self) -> "LeafHub":
        """Start the process (again, after it died: built decisions are not carried over)."""
        if self.alive:
            return self
        await self.close()
        pkg = await asyncio.to_thread(install, self.home)
        self._exit = None
        self.proc = NodeProcess("leafhub.js", self._replies, LeafHubError, STDERR_TAIL)
        try:
            await self.proc.start(which("node"), str(HUB_JS), str(pkg), timeout=self.start_timeout_s)
        except BaseException:
            await self.close()
            raise
        self._watch = asyncio.get_running_loop().create_task(self._exited(self.proc))
        return self

    async def build(self, decision: str, format: str, states: Sequence[dict],
                    us: str = "p1", describe: bool = False) -> list[BuiltState]:
        """Build ``states`` (each a STATE of leafhub.js's format) under the name ``decision``;
        ``describe``: each also comes back in plain terms (``BuiltState.snapshot``)."""
        msg = {"op": "build", "decision": decision, "format": format, "us": us, "states": list(states)}
        if describe:
            msg["describe"] = True
        reply = await self._request(msg)
        return [BuiltState(s["request"], s["ours"], s["theirs"], s.get("attack", ""), s.get("snapshot"))
                for s in reply["states"]]

    async def leaves(self, decision: str, leaves: Sequence[tuple[int, str, str, Seed]],
                     keep: bool = False, brief: bool = False) -> list[Leaf]:
        """Play each (state index, our choice, their choice, seed) for one turn from a copy of
        the built state. A leaf the simulator refuses (a choice it does not allow) comes back
        with ``error`` set; the others are played. ``keep``: each live leaf's battle is kept
        (``Leaf.kept``) for :meth:`next`, until the decision is dropped; ``brief``: each says
        what the turn left (``Leaf.brief``)."""
        msg = {"op": "leaves", "decision": decision, "keep": bool(keep),
               "leaves": [[int(k), a, b, s] for k, a, b, s in leaves]}
        if brief:
            msg["brief"] = True
        reply = await self._request(msg)
        return [Leaf(**leaf) for leaf in reply["leaves"]]

    async def next(self, decision: str, leaves: Sequence[tuple[int, Optional[str], Seed]],
                   keep: bool = False) -> list[Leaf]:
        """Play the turn after each kept leaf (its ``kept`` number, our choice or None, a seed):
        the opponent plays its strongest attack on our active (leafhub.js's STRONGEST), and so do
        we where our choice is None or refused (a trap our view did not show: ``Leaf.fallback``
        says why). ``keep``: each live leaf is kept in turn, for a turn after it."""
        reply = await self._request({"op": "next", "decision": decision, "keep": bool(keep),
                                     "leaves": [[int(n), a, s] for n, a, s in leaves]})
        return [Leaf(**leaf) for leaf in reply["leaves"]]

    async def sample(self, format: str, known: Sequence[dict], k: int, size: int,
                     seed: Sequence[int], tries: int = 100,
                     pool: Optional[Sequence[dict]] = None,
                     level: Optional[int] = None) -> tuple[list[list[dict]], int]:
        """``k`` teams of ``size`` for the opponent: each ``known`` Pokémon's set drawn by the
        format's generator to agree with its revealed facts, the rest unseen species (from
        ``pool``, team preview's unseen species, first). Returns the teams and how many draws
        had to be made to agree (relaxed). ``level``: the unseen Pokémon's (a team format's)."""
        msg = {"op": "sample", "format": format, "known": list(known), "k": k,
               "size": size, "seed": list(seed), "tries": tries}
        if pool is not None:
            msg["pool"] = list(pool)
        if level is not None:
            msg["level"] = level
        reply = await self._request(msg)
        return reply["teams"], reply["relaxed"]

    async def drop(self, decision: str) -> None:
        await self._request({"op": "drop", "decision": decision})

    async def ping(self) -> None:
        await self._request({"op": "ping"})

    async def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            await proc.close(CLOSE_TIMEOUT_S)  # leafhub.js exits when its stdin ends
        task, self._watch = self._watch, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fail_pending("the leaf process was closed")

    # -- pipes -------------------------------------------------------------------------------
    async def _request(self, message: dict) -> dict:
        if not self.alive:
            raise LeafHubDied(f"the leaf process is not running ({self._exit or 'not started'}): "
                              f"call start()")
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = (message["op"], fut)
        try:  # its entry goes however it ends: cancelled while the pipe drains included
            # A pipe whose process died drops what it is given: the exit fails every waiting request.
            self.proc.stdin.write(json.dumps({"id": rid, **message}).encode() + b"\n")
            await self.proc.drain()
            reply = await fut
        finally:
            self._pending.pop(rid, None)
        meter = NODE_MS.get()
        if meter is not None:
            meter.append(float(reply.get("ms", 0.0)))
        if not reply.get("ok"):
            raise LeafRequestError(f"leafhub refused {message['op']}: {reply.get('error')}")
        return reply

    def _replies(self, lines: list[bytes]) -> None:
        for line in lines:
            try:
                reply = json.loads(line)
            except ValueError:
                log.warning("leafhub wrote a line that is not JSON: %r", line[:200])
                continue
            entry = self._pending.get(reply.get("id"))
            if entry is not None and not entry[1].done():
                entry[1].set_result(reply)

    async def _exited(self, proc: NodeProcess) -> None:
        self._exit = await proc.exit_reason()  # after its last replies and words
        self._fail_pending(self._exit)

    def _fail_pending(self, why: str) -> None:
        for op, fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(LeafHubDied(f"{why}, during a {op} request"))
