"""Test helper: a leaf process killed in the middle of a decision's leaves."""

import asyncio
import os
import signal


def kill_during_leaves(hub, searched, after: int, killed: list) -> None:
    """Wrap ``hub.leaves``: once ``searched()`` reaches ``after``, the next decision's leaves
    start and the process gets SIGKILL under them; its pid is appended to ``killed``."""
    leaves = hub.leaves

    async def leaves_then_die(decision, specs, **kw):
        if not killed and searched() >= after:
            killed.append(hub.pid)
            task = asyncio.ensure_future(leaves(decision, specs, **kw))
            await asyncio.sleep(0)
            os.kill(hub.pid, signal.SIGKILL)
            return await task
        return await leaves(decision, specs, **kw)

    hub.leaves = leaves_then_die
