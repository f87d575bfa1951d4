"""Where a run's battles are played: the transport ``server.transport`` names."""

from __future__ import annotations

import contextlib

from .config import transport_of
from .server import server_for
from .simulator import simulators_for


@contextlib.asynccontextmanager
async def showdown_for(server_cfg, quiet: bool = False, runner=None):
    """Yield Showdown for a run: :class:`~maple_async.simulator.Simulators` (seeded from
    ``runner.seed``) on the simulator transport, else a server's
    :class:`~maple_async.server.ServerHandle`. Both offer ``url`` (what :class:`Match`
    takes), ``managed``, ``healthy()``, ``recover()`` and ``restarts``."""
    if transport_of(server_cfg) == "simulator":
        async with simulators_for(server_cfg, runner.battle_timeout_s if runner else 300.0,
                                  runner.seed if runner else None, quiet) as sims:
            yield sims
    else:
        async with server_for(server_cfg, quiet) as server:
            yield server
