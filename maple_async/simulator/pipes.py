"""One simulator process: ``simhub.js`` on pipes (its protocol is at the top of that file).

Its records go to the battles' router a read at a time; the commands for it are written
together once per event-loop iteration, as Node writes its records.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..errors import UserError
from ..nodeproc import NodeProcess

HUB_JS = Path(__file__).with_name("simhub.js")
RS = b"\x1e"
# Bytes waiting in a process's stdin beyond which no new battle goes to it; choices still
# do (at most two per battle in flight), so what waits stays bounded by the battles.
BUSY_BYTES = 256 * 1024


class SimulatorError(UserError, RuntimeError):
    pass


class SimProcess(NodeProcess):
    """Process ``index`` of :class:`~maple_async.simulator.Simulators` ``sims``: its records
    go to ``sims.router``, its exit to ``sims.exited``; ``battles`` are the ones it runs."""

    separator = RS
    ready_record = b"R"

    def __init__(self, sims, index: int):
        super().__init__("simhub.js", error=SimulatorError)
        self.sims = sims
        self.index = index
        self.battles: dict = {}  # tag -> battles.Battle
        self._out: list[str] = []
        self._flush_scheduled = False

    def received(self, records: list) -> None:
        route = self.sims.router.route
        for rec in records:
            route(self, rec.decode())

    def on_exit(self) -> None:
        self.sims.exited(self)

    def write(self, line: str) -> None:
        self._out.append(line)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and not self.exited and self.stdin is not None and not self.stdin.is_closing():
            self.stdin.write(("\n".join(self._out) + "\n").encode())
        self._out = []

    def busy(self) -> bool:
        return self.stdin is None or self.stdin.get_write_buffer_size() > BUSY_BYTES
