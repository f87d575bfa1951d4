"""The pool's engine: what runs on its event loop's thread (uvloop, in a background thread).

It starts the server, the pool's agent (whose batcher hands each batch to the slots), the
collector and the slots of :mod:`.slots`, carries the slots' records to the caller's thread
(``out`` and ``settled_after``, under ``cv``), resets the battles, and resolves the
opponent a caller names (:func:`_opponent`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections import deque
from typing import Any, Optional

from .. import config as config_mod
from .. import opponents
from ..collect.agent import Agent
from ..collect.collector import Collector
from ..inference.batcher import HandoffBatcher
from ..obs import games
from .slots import Record, _Slots


class _CallerPolicy:
    """The pool agent's policy: the caller, so no state and no forward pass here."""

    hidden_dim = 0
    version = 0


def _opponent(spec: Any, cfg: config_mod.Config, device) -> tuple[str, Optional[Agent]]:
    """The opponent's name in the mix and its agent (None: self or a baseline)."""
    from ..inference.outside import policy_for
    opp = opponents.parse(spec)
    if opp.kind in (opponents.SELF, opponents.BASELINE):
        return opp.spec, None
    policy, _ = policy_for(opp.spec, device, battle_format=cfg.runner.battle_format)
    name = opp.name if opp.kind == opponents.CHECKPOINT else policy.name
    return name, Agent(policy, cfg.batcher, name="opponent")


class _Engine:
    """What runs on the pool's event loop thread: the server, the agent, the collector and
    the slots. It holds no reference to its :class:`~.local.BattlePool`, so a pool its caller
    forgot is collected, and its finalizer stops this."""

    def __init__(self, cfg: config_mod.Config, device, opp: tuple, num_battles: int, sides: int,
                 game: games.Game, quiet: bool):
        self.cfg, self.device, self.opp, self.quiet = cfg, device, opp, quiet
        self.out: deque = deque()  # records delivered, not yet received
        self.cv = threading.Condition()
        self.settled_after = -1  # the caller's latest send after which nothing more could come (slots.py)
        self.error: Optional[BaseException] = None
        self.ready = threading.Event()
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.server = self.agent = self.collector = None
        self.slots = _Slots(num_battles, sides, self.deliver, self.settle, game)
        self.thread = threading.Thread(target=self.thread_main, name="maple-pool", daemon=True)

    def thread_main(self) -> None:
        from ..run.process import run_async
        try:
            run_async(self.main())
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            self.error = self.error or e
        finally:
            self.ready.set()
            with self.cv:
                self.cv.notify_all()

    async def main(self) -> None:
        from ..showdown import showdown_for
        self.loop = asyncio.get_running_loop()
        self.started = asyncio.Event()
        self.stop = asyncio.Event()
        cfg = self.cfg
        async with showdown_for(cfg.server, quiet=self.quiet, runner=cfg.runner) as server:
            self.server = server
            slots = self.slots
            self.agent = Agent(_CallerPolicy(), cfg.batcher, reward_cfg=cfg.reward, listener=slots,
                               batcher_cls=HandoffBatcher, name="pool",
                               batcher_kwargs={"sink": slots.handoff, "held": lambda: slots.with_caller})
            slots.agent = self.agent
            name, opp_agent = self.opp
            self.opp = None  # the collector holds it from now on (set_opponent may retire it)
            self.collector = collector = Collector(cfg, quiet=self.quiet, agent=self.agent, device=self.device,
                                                   mix={name: 1.0}, opponents={name: opp_agent} if opp_agent else {},
                                                   label="pool")
            slots.sides_to_come = collector.sides_to_come
            self.ready.set()
            await asyncio.wait([asyncio.ensure_future(self.started.wait()),
                                asyncio.ensure_future(self.stop.wait())], return_when=asyncio.FIRST_COMPLETED)
            if self.stop.is_set():
                return
            run = asyncio.ensure_future(self.collector.run(server))
            stop = asyncio.ensure_future(self.stop.wait())
            await asyncio.wait([run, stop], return_when=asyncio.FIRST_COMPLETED)
            slots.close()
            self.collector.request_stop("closed")
            await run

    def deliver(self, record: Record) -> None:
        with self.cv:
            self.out.append(record)
            # a mark stands for what was delivered when it was set: check_settled sets it again
            self.settled_after = min(self.settled_after, self.slots.answered - 1)
            self.cv.notify()

    def settle(self, seq: int) -> None:
        with self.cv:
            if seq > self.settled_after:
                self.settled_after = seq
                self.cv.notify()

    def call(self, fn, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    async def reset(self, seed: Optional[int]) -> None:
        """End the battles in flight (forfeited, never handed back) and start new ones."""
        slots = self.slots
        self.agent.closing = True  # the pending decisions released below send nothing
        slots.close()

        def between() -> None:  # the old battles are gone, the new ones not started
            with self.cv:
                self.out.clear()
                self.settled_after = -1
            slots.clear()
            if seed is not None:
                self.reseed(seed)
        await self.collector.restart(between)

    def reseed(self, seed: int) -> None:
        """New battles seeded ``seed`` (the simulator transport's battles and the team
        draws): the same seed, teams and policy give the same battles."""
        reseed = getattr(self.server, "reseed", None)
        if reseed is not None:
            reseed(seed)
        formats = self.collector.formats
        for fmt, teams in formats.items():
            if teams.mine is not None:
                mine = dataclasses.replace(teams.mine, seed=seed)
                theirs = mine if teams.theirs is teams.mine else dataclasses.replace(teams.theirs, seed=seed + 7919)
                formats[fmt] = dataclasses.replace(teams, mine=mine, theirs=theirs)

    def shutdown(self, timeout: float = 60.0) -> None:
        """Stop every battle, the loop's thread and the managed server (idempotent)."""
        loop = self.loop
        if self.thread.is_alive() and loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.stop.set)
            except RuntimeError:  # the loop closed meanwhile
                pass
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)
        with self.cv:
            self.cv.notify_all()
