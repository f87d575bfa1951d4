"""close_players leaves no message handler pending (no server: a stand-in for poke-env's client)."""

import asyncio
import logging
from types import SimpleNamespace

from maple_async.pokeenv.players import close_players


class LateClient:
    """Like poke-env's PSClient: ``listen`` runs as a future from run_coroutine_threadsafe and
    turns each received frame into a handler task in ``_active_tasks``. After the socket is
    closed it still hands out the frames that were buffered before (as the real loop does,
    one per iteration with fair_receive): those handlers start *after* stop_listening returns.
    Each handler waits on something that never comes (a decision of a closed batcher)."""

    def __init__(self, loop, late_frames: int):
        self._active_tasks: set = set()
        self._closed = asyncio.Event()
        self.late_frames = late_frames
        self._listening_coroutine = asyncio.run_coroutine_threadsafe(self.listen(), loop)

    async def _handle_message(self):
        await asyncio.Event().wait()

    def _spawn(self):
        task = asyncio.get_running_loop().create_task(self._handle_message())
        self._active_tasks.add(task)
        task.add_done_callback(self._active_tasks.discard)

    async def listen(self):
        self._spawn()  # a handler from before the close
        await self._closed.wait()
        for _ in range(self.late_frames):
            await asyncio.sleep(0)
            self._spawn()

    async def stop_listening(self):
        self._closed.set()


async def test_handlers_of_frames_buffered_before_the_close_are_cancelled_too():
    loop = asyncio.get_running_loop()
    clients = [LateClient(loop, late_frames=3), LateClient(loop, late_frames=0)]
    await asyncio.sleep(0.01)
    made = [set(c._active_tasks) for c in clients]
    assert [len(m) for m in made] == [1, 1]
    players = [SimpleNamespace(ps_client=c, logger=logging.getLogger(f"p{i}")) for i, c in enumerate(clients)]
    await close_players(*players)
    await asyncio.sleep(0.01)
    for c in clients:
        assert c._listening_coroutine.done()
        # Every handler ever made is finished; none is left to be garbage-collected while
        # pending ("Task was destroyed but it is pending!").
        assert not c._active_tasks
    assert all(t.cancelled() for t in made[0] | made[1])
