"""A child's start cut short by a close (the tests of nodeproc and of the leaf process)."""

import asyncio

import pytest

from maple_async.nodeproc import group_processes


async def given_up(start: asyncio.Task, proc, error: type, match: str) -> None:
    """``start`` ends by ``error`` (matching ``match``), not by a cancel its caller never asked
    for, and nothing of ``proc``'s process group is left."""
    await asyncio.wait([start], timeout=60)
    assert start.done() and not start.cancelled()
    with pytest.raises(error, match=match):
        start.result()
    await asyncio.wait_for(proc.gone, 30)
    assert group_processes(proc.pgid) == []


async def ended(start: asyncio.Task, proc) -> None:
    """Test cleanup: whatever the code under test left of ``start`` and ``proc`` is ended."""
    start.cancel()
    await asyncio.gather(start, return_exceptions=True)
    proc.discard()
    if proc.transport is not None:
        await asyncio.wait([proc.gone], timeout=30)
