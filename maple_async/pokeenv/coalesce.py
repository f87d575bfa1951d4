"""A player's websocket: one socket write per event-loop iteration out, one message per
iteration in.

When the batcher resolves a batch, every battle in it sends its order in the same
event-loop iteration: poke-env's ``PSClient.send_message`` awaits ``websocket.send`` once
per order, and the websockets library writes each frame to the transport at once, which
costs a ``send`` system call per order (loopback TCP does the receiving side's work in that
call too) and wakes Showdown's process once per order.

:func:`coalesce_sends` gives a player's client a transport wrapper that keeps the frames
written during one iteration and writes them together, in order, from a callback scheduled
at the first of them (``loop.call_soon``: it runs after the callbacks already queued, i.e.
after every battle resumed by the same batch has written). The bytes on the wire are the
same frames in the same order; only their grouping into writes changes. Close, half-close
and abort keep their meaning (pending frames go out before a close or half-close; an abort
drops them, as it drops the transport's own buffer).

:func:`fair_receive` makes poke-env's listen loop take one message per event-loop
iteration. Showdown's simulator answers every choice it has queued in one pass, so the
requests come back in waves of up to every battle in flight; one socket read then holds
dozens of frames, and ``PSClient.listen`` (``async for message in websocket``: ``recv``
returns at once while messages are buffered) creates a task for each before any of them
runs. Orders that a batch resolved in the meantime are sent only after all those frames
are parsed, and the simulator sits idle until they arrive. Yielding once before each
``recv`` puts the resolved battles' continuations (their orders) ahead of the next frame
(docs/experiments.md#the-decision-path has the A/B).
"""

from __future__ import annotations

import asyncio


class CoalescingTransport:
    """Wraps an ``asyncio.Transport``: ``write`` defers to one joined write per loop
    iteration; every other attribute is the wrapped transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self.transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, lines) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Write what is pending now (a no-op when nothing is)."""
        if not self._pending:
            return
        data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending.clear()
        if self.transport.is_closing():
            return  # the connection went away meanwhile: what the transport would drop too
        self.transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + sum(map(len, self._pending))

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self.transport.abort()

    def __getattr__(self, name):
        return getattr(self.transport, name)


def _on_each_connection(client, setup) -> None:
    """Call ``setup(websocket)`` once per connection of a poke-env ``PSClient``: the
    websocket is opened later (by ``listen``), so at the first send after each
    (re)connection."""
    send_message = client.send_message
    last = [None]

    async def send_message_set_up(message: str, room: str = "", message_2=None):
        ws = getattr(client, "websocket", None)
        if ws is not None and ws is not last[0]:
            last[0] = ws
            setup(ws)
        await send_message(message, room, message_2)

    client.send_message = send_message_set_up


def coalesce_sends(client) -> None:
    """Make a poke-env ``PSClient`` group the frames it writes in one event-loop iteration
    into one socket write."""
    def setup(ws):
        if not isinstance(ws.transport, CoalescingTransport):
            ws.transport = CoalescingTransport(ws.transport, asyncio.get_running_loop())

    _on_each_connection(client, setup)


def fair_receive(client) -> None:
    """Make a poke-env ``PSClient``'s listen loop yield to the event loop before taking
    each message (see the module docstring)."""
    def setup(ws):
        recv = ws.recv

        async def fair_recv(*args, **kwargs):
            await asyncio.sleep(0)
            return await recv(*args, **kwargs)

        ws.recv = fair_recv

    _on_each_connection(client, setup)
