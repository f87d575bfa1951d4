"""Shared fixtures. Integration tests get a real local Showdown started here."""

from __future__ import annotations

import asyncio
import os

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def showdown_url():
    """URL of a local Showdown: $MAPLE_TEST_SERVER if set, else a managed loopback server."""
    url = os.environ.get("MAPLE_TEST_SERVER")
    if url:
        yield url
        return
    from maple_async.server import ShowdownServer

    srv = ShowdownServer()
    asyncio.run(srv.start())
    try:
        yield srv.url
    finally:
        srv.stop()
        assert not srv.alive(), "managed Showdown survived stop()"


@pytest.fixture(scope="session")
def managed_server(showdown_url):
    """The managed server object's port (skip-free: always a managed one in CI)."""
    return showdown_url


@pytest.fixture
def restore_gc():
    """For tests that run a command in this process: its GC setting (runner.gc_young_threshold,
    with start-up objects frozen) must not outlive the test."""
    import gc
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.fixture(params=["websocket", "simulator"])
async def venue(request, showdown_url):
    """Where a test's battles run, once per transport: the session's server URL, or
    simulator processes started for this test (seeded, so its battles repeat)."""
    if request.param == "websocket":
        yield showdown_url
        return
    from maple_async.simulator import Simulators
    sims = await Simulators(2, seed=7).start()
    pids = list(sims.pgids)
    try:
        yield sims
    finally:
        await sims.close()
        assert not any(os.path.exists(f"/proc/{p}") for p in pids), "simulator processes survived close()"
