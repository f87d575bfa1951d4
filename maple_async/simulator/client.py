"""The poke-env client shim: what a Player needs of its ``ps_client`` when its battles run
in the simulator processes."""

from __future__ import annotations

import asyncio
from typing import Optional


class Client:
    """A name, a logger, and ``send_message`` turned into the commands of the battles'
    ``router`` (:class:`~maple_async.simulator.battles.Router`), in place of a websocket."""

    websocket = None
    _listening_coroutine = None

    def __init__(self, router, original):
        self.router = router
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
            self.router.command(room, role, f"C {room} {role} {message[8:]}")
        elif message.startswith("/team "):
            self.router.command(room, role, f"C {room} {role} team {message[6:]}")
        elif message == "/forfeit":
            self.router.command(room, role, f"F {room} {role}")
        elif message == "/undo":
            self.router.command(room, role, f"C {room} {role} undo")
        # /timer, /leave and the open-team-sheet answers: decided at the start, no room

    async def stop_listening(self) -> None:
        """Drop this player's battles that still run (their opponents' sides too)."""
        for tag in list(self.roles):
            self.router.drop(tag)
