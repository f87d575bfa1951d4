"""Fault handling: a simulator process that exits with battles' ends still unread, decisions
held on our side (not Showdown's silence), a battle whose first request fails, and a pool's
decision flushed after its battle was gone."""

import asyncio
import time
from types import SimpleNamespace

import numpy as np
import pytest

from maple_async import simulator
from maple_async.simulator import pipes
from maple_async.collect import agent as agent_mod
from maple_async.collect.agent import Agent, _Live
from maple_async.collect.match import play
from maple_async.config import BatcherConfig
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from maple_async.pokeenv.players import PolicyPlayer, player_kwargs, run_id

# A regression must fail, not hang; far beyond what these few battles take on a loaded VM.
BOUND_S = 240


def _agent() -> Agent:
    return Agent(InferencePolicy(nets.build("mlp", hidden_size=16)), BatcherConfig())


# -- A: a process exits with battles' ends in its pipe or in their inboxes -------------------

class _Pipe:
    def __init__(self):
        self.written = []

    def write(self, data):
        self.written.append(data)

    def is_closing(self):
        return False

    def get_write_buffer_size(self):
        return 0


class _Transport:
    """A subprocess transport with no process behind it."""

    def __init__(self):
        self.stdin = _Pipe()

    def get_pipe_transport(self, fd):
        return self.stdin

    def get_pid(self):
        return -1

    def get_returncode(self):
        return -9

    def close(self):
        pass


async def _exiting_process():
    """Simulators with one fake process (driven through its protocol methods) and two
    PolicyPlayers of one agent that records which battle sides ended or were abandoned."""
    sims = simulator.Simulators(1)
    restarts = []

    async def restart(i):
        restarts.append(i)
    sims._restart = restart
    proc = pipes.SimProcess(sims, 0)
    proc.kill = lambda: None  # no process group behind it
    sims.procs = [proc]
    proc.connection_made(_Transport())
    proc.pipe_data_received(1, b"R\x1e")
    agent = _agent()
    seen = {"finished": [], "abandoned": []}
    agent.finished = lambda battle: seen["finished"].append(battle.battle_tag)
    agent.abandon = lambda key: seen["abandoned"].append(key[0])
    tag = run_id()
    players = [PolicyPlayer(agent, "self", **player_kwargs(sims, f"flt{tag}{i}", 4, "gen9randombattle"))
               for i in (1, 2)]
    for p in players:
        sims.attach(p)
    return sims, proc, players, seen, restarts


def _records(tag: str, *lines: str) -> bytes:
    """Both sides' M records of ``lines``."""
    return "".join(f"M{i}>{tag}\n" + "\n".join(lines) + "\x1e" for i in (1, 2)).encode()


def _start(tag, players) -> bytes:
    a, b = (p.username for p in players)
    return _records(tag, "|init|battle", f"|title|{a} vs. {b}", f"|player|p1|{a}|1|",
                    f"|player|p2|{b}|1|", "|gen|9", "|start")


def _win(tag, players) -> bytes:
    return _records(tag, "|", f"|win|{players[0].username}")


async def test_battles_that_ended_as_their_process_exited_count_as_ended():
    sims, proc, players, seen, restarts = await _exiting_process()
    futures = [await sims.start_battle(*players, "k") for _ in range(3)]
    a, b, c = proc.battles
    # b's end was routed to its players but not handled yet (its E record died with the
    # process); a's end is still in the pipe when asyncio reports the exit; c never ended.
    proc.pipe_data_received(1, _start(a, players) + _start(b, players) + _start(c, players)
                            + _win(b, players))
    proc.process_exited()
    proc.pipe_data_received(1, _win(a, players) + f"E{a}\x1e".encode())
    proc.pipe_connection_lost(1, None)
    proc.connection_lost(None)
    results = await asyncio.wait_for(asyncio.gather(*futures), 60)
    assert results == [True, True, False]
    assert sorted(seen["finished"]) == sorted([a, a, b, b])  # both sides of each
    assert seen["abandoned"] == [c, c]
    assert restarts == [0] and not sims._exiting
    await sims.close()


async def test_an_exited_process_whose_pipes_never_close_still_settles(monkeypatch):
    monkeypatch.setattr(simulator, "EXIT_DRAIN_S", 0.2, raising=False)
    sims, proc, players, seen, restarts = await _exiting_process()
    futures = [await sims.start_battle(*players, "k") for _ in range(2)]
    a, c = proc.battles
    proc.pipe_data_received(1, _start(a, players) + _start(c, players) + _win(a, players))
    proc.process_exited()  # and no connection_lost
    results = await asyncio.wait_for(asyncio.gather(*futures), 60)
    assert results == [True, False]
    assert seen["finished"] == [a, a] and seen["abandoned"] == [c, c]
    await sims.close()


# -- B: a decision held on our side is not Showdown's silence --------------------------------

def _live(last_active: float, pending: int = 0) -> _Live:
    return _Live(0, None, None, "self", last_active=last_active, pending=pending)


def test_silence_counts_only_when_no_side_waits_on_us():
    from maple_async.collect.match import silent_battles
    now = 1000.0
    agent = SimpleNamespace(live={
        ("held", "p1"): _live(now - 60, pending=1), ("held", "p2"): _live(now - 60),
        ("quiet", "p1"): _live(now - 60), ("quiet", "p2"): _live(now - 50),
        ("answered", "p1"): _live(now - 60), ("answered", "p2"): _live(now - 1),
    })
    unfinished = SimpleNamespace(finished=False)
    player = SimpleNamespace(battles={"held": unfinished, "quiet": unfinished, "answered": unfinished,
                                      "orphan": unfinished, "over": SimpleNamespace(finished=True)})
    silent, orphans = silent_battles([agent], [player], 10.0, now, {})
    assert set(silent) == {"quiet"} and sorted(k for _, k in silent["quiet"]) == [("quiet", "p1"), ("quiet", "p2")]
    assert orphans == {"orphan": (now, 0)}  # no live side: counted from now on
    silent, orphans = silent_battles([agent], [player], 10.0, now + 11, orphans)
    assert "orphan" in silent and orphans == {"orphan": (now, 0)}


async def test_a_match_of_two_baselines_has_a_watchdog():
    from maple_async.collect.match import start_agents
    task = start_agents([], [SimpleNamespace(battles={})], 10.0)
    assert task is not None  # eval --baseline: no agent, its battles watched all the same
    task.cancel()


def test_a_battle_of_two_baselines_is_silent_only_once_its_turn_stays_for_the_timeout():
    from maple_async.collect.match import silent_battles
    now = 1000.0
    battle = SimpleNamespace(finished=False, turn=3)
    player = SimpleNamespace(battles={"b": battle})
    _, orphans = silent_battles([], [player], 10.0, now, {})
    battle.turn = 4  # it moved on: counted afresh
    silent, orphans = silent_battles([], [player], 10.0, now + 11, orphans)
    assert not silent and orphans == {"b": (now + 11, 4)}
    silent, _ = silent_battles([], [player], 10.0, now + 22, orphans)
    assert set(silent) == {"b"}


@pytest.mark.integration
async def test_decisions_held_longer_than_the_timeout_forfeit_nothing(venue):
    """A paused batcher (the learner is behind) holds every battle's decision for several
    battle timeouts: no battle is taken for silent; unpaused, all of them finish."""
    agent = _agent()
    agent.batcher.pause(True)
    task = asyncio.get_running_loop().create_task(
        play(agent, venue, 4, opponent="random", concurrency=4, battle_timeout_s=2.0))
    try:
        deadline = time.monotonic() + BOUND_S
        while agent.batcher.pending < 4 and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert agent.batcher.pending == 4  # every battle waits on us
        # Past the timeout and the old watchdog's 5 s period, whatever the phase.
        await asyncio.sleep(8.0)
        assert agent.stats.abandoned == 0 and len(agent.live) == 4
        agent.batcher.pause(False)
        res = await asyncio.wait_for(task, BOUND_S)
    finally:
        task.cancel()
        await agent.batcher.close()
    assert res.battles == 4 and agent.stats.battles == 4 and agent.stats.abandoned == 0
    assert len(agent.live) == 0 and len(agent.hidden) == 0


# -- C: a battle whose handling fails before its first decision ------------------------------

@pytest.mark.integration
async def test_a_battle_whose_first_request_fails_frees_its_slot(venue, monkeypatch):
    encode = agent_mod.enc.encode
    failed = []

    def encode_failing_once(battle, **kw):
        if not failed:
            failed.append(battle.battle_tag)
            raise RuntimeError("test: the first request's encoding fails")
        return encode(battle, **kw)

    monkeypatch.setattr(agent_mod.enc, "encode", encode_failing_once)
    agent = _agent()
    try:
        res = await asyncio.wait_for(
            play(agent, venue, 4, opponent="random", concurrency=2, battle_timeout_s=3.0), BOUND_S)
    finally:
        await agent.batcher.close()
    assert failed and res.battles == 4
    assert len(agent.live) == 0 and len(agent.hidden) == 0


# -- D: a pool's decision flushed after its battle was abandoned -----------------------------

async def test_a_stale_decision_takes_no_battle_index_in_a_pool():
    """A request still in the batcher when its battle was abandoned (a reset while the
    batcher was paused, the watchdog) is flushed later: it must not take a battle index,
    or with every index taken so the next battles wait forever."""
    from maple_async.env.slots import _Slots
    from maple_async.inference.batcher import _Request
    loop = asyncio.get_running_loop()

    def request(key):
        return _Request(key, 0, np.zeros(4, np.float32), np.ones(32, bool), loop.create_future(), 0.0)

    delivered = []
    slots = _Slots(1, 2, delivered.append, lambda seq: None)
    new = _live(0.0)
    slots.agent = SimpleNamespace(live={("new", "p1"): new})
    stale = request(("old", "p1"))  # its side is no longer live
    slots.handoff([stale])
    assert stale.future.done() and stale.future.result().action == -1  # released: it sends nothing
    assert list(slots.free) == [0] and not slots.battle_of and not delivered
    new.battle = SimpleNamespace(force_switch=False)
    slots.handoff([request(("new", "p1"))])
    assert [(r.battle_tag, r.side) for r in delivered] == [("new", "p1")]
