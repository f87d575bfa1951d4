"""Simulator processes as a server setting: a managed server runs as many as it was given."""

import json
import os
import subprocess

import pytest

from maple_async.collect.agent import Agent
from maple_async.collect.match import play
from maple_async.config import BatcherConfig
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from maple_async.nodeproc import group_processes
from maple_async.server import ShowdownServer, resolve_simulators

def _simulators(pgid: int) -> dict:
    """pid -> CPU seconds of the server's simulator processes (Showdown's room-battle workers)."""
    return {pid: cpu for pid, cmd, cpu in group_processes(pgid) if b"room-battle.js" in cmd}


@pytest.mark.integration
async def test_two_simulators_both_play():
    srv = ShowdownServer(simulators=2)
    await srv.start()
    try:
        before = _simulators(srv.pid)
        assert len(before) == 2, before
        agent = Agent(InferencePolicy(nets.build("mlp", hidden_size=16)), BatcherConfig())
        res = await play(agent, srv.url, 8, opponent="random", concurrency=8)
        await agent.batcher.close()
        assert res.battles == 8 and len(agent.hidden) == 0
        after = _simulators(srv.pid)
        assert after.keys() == before.keys()
        assert all(after[p] > before[p] for p in before), (before, after)  # battles went to both
    finally:
        srv.stop()


def test_auto_simulators_follow_the_cores(monkeypatch):
    from maple_async import server
    monkeypatch.setattr(server, "cores", lambda: 2)
    assert resolve_simulators(0) == 2 and resolve_simulators(3) == 3
    monkeypatch.setattr(server, "cores", lambda: 16)
    assert resolve_simulators(0) == server.MAX_AUTO_SIMULATORS
    assert resolve_simulators(0, shards=4) == 4 and resolve_simulators(0, shards=32) == 1


@pytest.mark.integration
def test_managed_config_turns_off_the_debug_copies():
    """Showdown's view of the managed config (ours merged over config-example.js, as its
    loader does): no input-log copies to the main process, no reload of a shared file."""
    from maple_async import server
    pkg = server.install(quiet=True)
    merged = ("const c = Object.assign({}, require('./config/config-example.js'), require('./config/config.js'));"
              "console.log(JSON.stringify([c.debugsimprocesses, c.debugvalidatorprocesses, c.watchconfig,"
              " c.bindaddress, c.subprocesses.simulator]))")
    out = subprocess.run(["node", "-e", merged], cwd=pkg, capture_output=True, text=True, check=True,
                         env={**os.environ, "MAPLE_SIMULATORS": "3"})
    assert json.loads(out.stdout) == [False, False, False, "127.0.0.1", 3]
