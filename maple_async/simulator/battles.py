"""The battles in the simulator processes and the routing between them and the players.

A battle's options (seeds, teams, open team sheets) are made once (:func:`battle_options`);
each side's messages are handled in order by its :class:`Inbox`; the :class:`Router` sends
each process's records to the battles' inboxes and each player's commands to its battle's
process, and settles how a battle ends: ended (both players handled its end: its future is
True) or abandoned (False).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
import secrets
from typing import Optional

log = logging.getLogger("maple_async.simulator")


def battle_seed(seed: Optional[int], key: str, index: int) -> str:
    """Showdown seed string of battle ``index`` of player pair ``key`` in a run seeded
    ``seed`` (None: fresh randomness)."""
    if seed is None:
        return "sodium," + secrets.token_hex(16)
    return "sodium," + hashlib.sha256(f"{seed}/{key}/{index}".encode()).hexdigest()[:32]


def battle_options(p1, p2, seed: str) -> dict:
    """What simhub.js starts a battle of ``p1`` (first seat) against ``p2`` with: the format,
    ``seed``, each side's name, packed team or a team-generator seed derived from ``seed``,
    and the open team sheets (shown when both players accept)."""
    fmt = p1.format
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
    return opts


class Inbox:
    """One player's messages of one battle, handled in order by one task at a time (the
    websocket path takes a per-battle lock for the same reason)."""

    __slots__ = ("player", "queue", "task", "battle", "answered")

    def __init__(self, player, battle: Optional["Battle"]):
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
                        b.router.drop(b.tag)
        finally:
            self.task = None

    def _stuck(self, item: str) -> bool:
        """A failure on ``item`` left a battle that no decision of this side ever moved
        (and no watchdog watches yet) waiting forever: its first request unanswered, or
        the battle never made."""
        b = self.battle
        return (b is not None and not self.answered
                and ("|request|" in item or b.tag not in self.player._battles))


class Battle:
    """One battle in simulator process ``proc``: its two sides' inboxes and its future."""

    __slots__ = ("tag", "proc", "router", "inboxes", "future", "open_sides", "roles")

    def __init__(self, tag: str, proc, p1, p2, future: asyncio.Future, router: "Router"):
        self.tag = tag
        self.proc = proc
        self.router = router
        self.inboxes = {"1": Inbox(p1, self), "2": Inbox(p2, self)}
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


class Router:
    """Every battle running in the simulator processes, by tag (``owner``)."""

    def __init__(self):
        self.owner: dict[str, Battle] = {}

    def open(self, proc, tag: str, p1, p2, opts: dict) -> asyncio.Future:
        """Start battle ``tag`` in ``proc`` with ``opts`` (:func:`battle_options`); the
        future resolves True when both players have handled its end, False when abandoned."""
        future = asyncio.get_running_loop().create_future()
        battle = Battle(tag, proc, p1, p2, future, self)
        proc.battles[tag] = battle
        self.owner[tag] = battle
        p1.ps_client.roles[tag] = "p1"
        p2.ps_client.roles[tag] = "p2"
        proc.write(f"S {tag} {json.dumps(opts, separators=(',', ':'))}")
        return future

    def route(self, proc, rec: str) -> None:
        """One record of ``proc``'s (simhub.js's protocol)."""
        kind = rec[:1]
        if kind == "M":
            nl = rec.find("\n")
            b = proc.battles.get(rec[3:nl])
            if b is not None:
                b.inboxes[rec[1]].put(rec[2:])
        elif kind == "E":
            b = proc.battles.get(rec[1:])
            if b is not None:
                self.end(b)
        elif kind == "K":
            tag, _, why = rec[1:].partition("\t")
            b = proc.battles.get(tag)
            log.warning("simulator error in %s: %s", tag, why)
            if b is not None:
                self.abandon(b)
        # "P": the answer to a ping; hearing it was the point

    def command(self, tag: str, role: str, line: str) -> None:
        b = self.owner.get(tag)
        if b is not None:
            b.inboxes[role[1]].answered = True
            b.proc.write(line)

    def end(self, b: Battle) -> None:
        """The battle ended: its players finish handling it, then its future is True."""
        b.proc.battles.pop(b.tag, None)
        self.owner.pop(b.tag, None)
        self._forget_roles(b)
        for inbox in b.inboxes.values():
            inbox.put(None)

    def drop(self, tag: str) -> None:
        b = self.owner.get(tag)
        if b is not None:
            b.proc.write(f"X {tag}")
            self.abandon(b)

    @staticmethod
    def _forget_roles(b: Battle) -> None:
        for player, _role in b.roles:
            player.ps_client.roles.pop(b.tag, None)

    def abandon(self, b: Battle) -> None:
        """Forget a battle that will not end: its sides' agents drop the partial trajectory
        and hidden state, the players forget it, its seat in the match is freed."""
        b.proc.battles.pop(b.tag, None)
        self.owner.pop(b.tag, None)
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
