"""The simulator transport's pipe reading, and its processes' ends, without Node (a shell
script stands for simhub.js)."""

import asyncio
import time

import pytest

from maple_async import simulator
from maple_async.nodeproc import group_processes
from maple_async.simulator import Simulators, SimulatorError
from maple_async.simulator.pipes import SimProcess as _Process

# Says ready (simhub.js's R record), then never reads its stdin: deaf to the end of it.
HUNG = "printf 'R\\036'; exec sleep 600\n"


async def test_a_read_that_ends_inside_a_character_loses_nothing():
    sims = Simulators(1)
    seen = []
    sims.router.route = lambda proc, rec: seen.append(rec)
    proc = _Process(sims, 0)
    record = "M1>battle-gen9randombattle-1\n|rule|Species Clause: Limit one of each Pokémon".encode()
    cut = record.index("é".encode()) + 1  # between the two bytes of é
    proc.pipe_data_received(1, record[:cut])
    proc.pipe_data_received(1, record[cut:] + b"\x1eEbattle-gen9randombattle-1\x1e")
    assert seen == [record.decode(), "Ebattle-gen9randombattle-1"]


def _sims(tmp_path, monkeypatch, script: str, **kw) -> Simulators:
    """Simulators(1) whose process is ``sh`` running ``script``, not yet started."""
    hub = tmp_path / "hub.sh"
    hub.write_text(script)
    monkeypatch.setattr(simulator, "HUB_JS", hub)
    sims = Simulators(1, **kw)
    sims._node, sims._pkg = "sh", tmp_path
    sims.procs = [None]
    return sims


async def _gone(proc) -> None:
    """Test cleanup: whatever the code under test left of ``proc`` is ended."""
    proc.discard()
    if proc.transport is not None:
        await asyncio.wait([proc.gone], timeout=10)


async def test_a_cancelled_close_leaves_no_simulator_process(tmp_path, monkeypatch):
    sims = _sims(tmp_path, monkeypatch, HUNG)
    proc = await sims._spawn(0)
    try:
        assert proc.started and group_processes(proc.pgid)
        closing = asyncio.ensure_future(sims.close())
        await asyncio.sleep(0.1)
        closing.cancel()
        await asyncio.gather(closing, return_exceptions=True)
        await asyncio.wait([proc.gone], timeout=5)
        assert proc.exited and group_processes(proc.pgid) == []
    finally:
        await _gone(proc)


async def test_a_hung_simulator_process_does_not_hold_up_the_close(tmp_path, monkeypatch):
    sims = _sims(tmp_path, monkeypatch, HUNG)
    proc = await sims._spawn(0)
    try:
        t0 = time.monotonic()
        await sims.close()
        assert time.monotonic() - t0 < 2.0  # the graceful wait is 5 s; there is nothing to keep
        assert proc.exited and proc.returncode == -9 and proc.transport.is_closing()
    finally:
        await _gone(proc)


@pytest.mark.parametrize("script,why", [("echo boom >&2; exit 3\n", r"did not start: .*code 3.*boom"),
                                        ("exec sleep 600\n", r"did not start within 1s")])
async def test_a_failed_start_closes_its_transport(tmp_path, monkeypatch, script, why):
    sims = _sims(tmp_path, monkeypatch, script, start_timeout_s=1.0)
    try:
        with pytest.raises(SimulatorError, match=why):
            await sims._spawn(0)
        proc = sims.procs[0]
        assert proc.exited and group_processes(proc.pgid) == []
        assert proc.transport.is_closing()
    finally:
        await _gone(sims.procs[0])
        await sims.close()


async def test_a_process_started_as_the_close_came_is_killed_and_its_transport_closed(tmp_path, monkeypatch):
    sims = _sims(tmp_path, monkeypatch, HUNG)
    sims.closed = True  # close() came while the spawn was under way
    proc = await sims._spawn(0)
    try:
        await asyncio.wait([proc.gone], timeout=5)
        assert proc.exited and group_processes(proc.pgid) == []
        await asyncio.sleep(0)
        assert proc.transport.is_closing()
    finally:
        await _gone(proc)
