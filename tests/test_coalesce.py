"""Orders sent in one event-loop iteration leave in one socket write (maple_async/coalesce.py)."""

import asyncio

import websockets
from websockets.asyncio.server import serve

from maple_async.pokeenv.coalesce import CoalescingTransport, coalesce_sends, fair_receive


class FakeTransport:
    def __init__(self):
        self.log = []

    def write(self, data):
        self.log.append(("write", bytes(data)))

    def write_eof(self):
        self.log.append(("eof",))

    def close(self):
        self.log.append(("close",))

    def abort(self):
        self.log.append(("abort",))

    def get_write_buffer_size(self):
        return 7

    def is_closing(self):
        return False


async def test_writes_in_one_iteration_become_one_write_in_order():
    raw = FakeTransport()
    t = CoalescingTransport(raw, asyncio.get_running_loop())
    t.write(b"ab")
    t.write(memoryview(b"cd"))
    t.writelines([b"e", b"f"])
    assert raw.log == [] and t.get_write_buffer_size() == 7 + 6
    await asyncio.sleep(0)
    assert raw.log == [("write", b"abcdef")]
    t.write(b"g")  # a later iteration: its own write
    await asyncio.sleep(0)
    assert raw.log == [("write", b"abcdef"), ("write", b"g")]  # 5 writes asked, 2 made
    assert t.is_closing() is False  # everything else is the wrapped transport's


async def test_close_and_eof_send_pending_frames_first_abort_drops_them():
    for end, expected in (("close", [("write", b"xy"), ("close",)]),
                          ("write_eof", [("write", b"xy"), ("eof",)]),
                          ("abort", [("abort",)])):
        raw = FakeTransport()
        t = CoalescingTransport(raw, asyncio.get_running_loop())
        t.write(b"x")
        t.write(b"y")
        getattr(t, end)()
        await asyncio.sleep(0)  # the scheduled flush then finds nothing to write
        assert raw.log == expected, end
    raw = FakeTransport()
    t = CoalescingTransport(raw, asyncio.get_running_loop())
    t.write(b"z")
    raw.is_closing = lambda: True  # the connection was lost before the flush
    await asyncio.sleep(0)
    assert raw.log == [] and t.get_write_buffer_size() == 7


async def test_a_real_websocket_receives_every_frame_in_order():
    """Frames joined into one write are still separate websocket messages on the server, in
    the order they were sent, and a closing handshake still completes."""
    got = []
    done = asyncio.Event()

    async def handler(ws):
        async for message in ws:
            got.append(message)
            if len(got) == 50:
                done.set()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]

        class Client:  # the part of poke-env's PSClient that coalesce_sends touches
            async def send_message(self, message, room="", message_2=None):
                await self.websocket.send("|".join([room, message]))

        client = Client()
        coalesce_sends(client)
        async with websockets.connect(f"ws://127.0.0.1:{port}") as ws:
            client.websocket = ws
            socket_writes = []
            raw_write = ws.transport.write  # the loop's own transport (before the wrapper)
            ws.transport.write = lambda data: (socket_writes.append(len(data)), raw_write(data))
            await asyncio.gather(*(client.send_message(f"/choose move {i}", f"battle-{i}")
                                   for i in range(50)))
            await asyncio.wait_for(done.wait(), 10)
            assert isinstance(ws.transport, CoalescingTransport)
            assert 1 <= len(socket_writes) < 10, socket_writes  # 50 frames, a few writes
        assert got == [f"battle-{i}|/choose move {i}" for i in range(50)]
        assert ws.close_code == 1000  # the close frame went out and the handshake finished


async def _order_position(fair: bool, n: int = 30) -> int:
    """A server sends ``n`` messages that all sit buffered on the client; the client runs
    poke-env's listen loop (a task per message). The first message resolves a decision
    whose battle then sends its order. Returns how many messages were handled before it."""
    async def handler(ws):
        for i in range(n):
            await ws.send(f"m{i}")
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        events = []

        class Client:  # the part of poke-env's PSClient that fair_receive touches
            async def send_message(self, message, room="", message_2=None):
                events.append(message)

        client = Client()
        if fair:
            fair_receive(client)
        async with websockets.connect(f"ws://127.0.0.1:{port}", max_queue=None) as ws:
            client.websocket = ws
            await client.send_message("/hello")  # the first send puts the wrapper on
            events.clear()
            await asyncio.sleep(0.3)  # every message is buffered now
            decided = asyncio.get_running_loop().create_future()

            async def handle(message):
                events.append(message)
                if message == "m0":
                    decided.set_result(None)

            async def battle():
                await decided
                await client.send_message("/choose move 1")

            order = asyncio.create_task(battle())
            tasks = []
            async for message in ws:  # PSClient.listen
                tasks.append(asyncio.create_task(handle(message)))
                if len(tasks) == n:
                    break
            await asyncio.gather(order, *tasks)
        assert sorted(events) == sorted([f"m{i}" for i in range(n)] + ["/choose move 1"])
        return events.index("/choose move 1")


async def test_fair_receive_sends_a_resolved_order_before_the_rest_of_a_buffered_wave():
    assert await _order_position(fair=False) == 30  # stock: after every buffered message
    assert await _order_position(fair=True) <= 2
