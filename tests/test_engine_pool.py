"""poke-engine's worker processes: answers, names, and what goes wrong (a panic, a worker killed
mid-search, a search past its deadline). The engine is built by the set-up (and here if not)."""

import asyncio
import os
import signal

import pytest

from maple_async.search.pokeengine import build
from maple_async.search.pokeengine.pool import EngineDied, EngineHang, EnginePanic, EnginePool


@pytest.fixture(scope="module")
def gen4():
    return build.ensure(4)


def mon(id_, moves, types=("normal", "typeless"), hp=300):
    return {"id": id_, "level": 80, "types": types, "hp": hp, "maxhp": 300, "attack": 200, "defense": 200,
            "special_attack": 200, "special_defense": 200, "speed": 200,
            "moves": [{"id": m, "pp": 16, "disabled": False} for m in moves]}


SPEC = {"side_one": {"pokemon": [mon("snorlax", ["bodyslam", "earthquake"]),
                                 mon("pikachu", ["thunderbolt"], ("electric", "typeless"))]},
        "side_two": {"pokemon": [mon("gyarados", ["waterfall", "dragondance"], ("water", "flying")),
                                 mon("blissey", ["seismictoss"])]}}


async def test_search_names_and_outcomes(gen4):
    async with EnginePool(4, workers=1) as pool:
        r = await pool.request({"op": "mcts", "state": SPEC, "ms": 30}, budget_s=0.03)
        assert {c for c, _, _ in r["ours"]} == {"bodyslam", "earthquake", "switch pikachu"}
        assert sum(v for _, v, _ in r["ours"]) > 0 and r["iterations"] > 0
        r = await pool.request({"op": "names", "kind": "move", "names": ["bodyslam", "notamove"]}, 1.0)
        assert r["unknown"] == ["notamove"]
        r = await pool.request({"op": "names", "kind": "volatile", "names": ["SUBSTITUTE", "DYNAMAX"]}, 1.0)
        assert r["unknown"] == ["DYNAMAX"]
        r = await pool.request({"op": "instructions", "state": SPEC, "pairs": [["bodyslam", "waterfall"]]}, 1.0)
        outcomes = r["outcomes"][0]
        assert abs(sum(p for p, _ in outcomes) - 100) < 0.1
        # Gyarados (Water) hits Snorlax in every outcome that is not a miss: some HP is lost
        assert any(s["side_one"]["pokemon"][0]["hp"] < 300 for _, s in outcomes)


async def test_a_panic_costs_the_request_not_the_worker(gen4):
    async with EnginePool(4, workers=1) as pool:
        with pytest.raises(EnginePanic, match="Weather"):
            await pool.request({"op": "mcts", "state": {**SPEC, "weather": "notaweather"}, "ms": 10}, 0.01)
        r = await pool.request({"op": "mcts", "state": SPEC, "ms": 10}, budget_s=0.01)
        assert r["ours"] and pool.restarts == 0


async def test_a_worker_killed_mid_search_fails_its_request_and_starts_again(gen4):
    async with EnginePool(4, workers=2) as pool:
        task = asyncio.create_task(pool.request({"op": "mcts", "state": SPEC, "ms": 3000}, 3.0, worker=0))
        await asyncio.sleep(0.5)
        os.kill(pool.workers[0].proc.pid, signal.SIGKILL)
        with pytest.raises(EngineDied, match="SIGKILL"):
            await task
        # the other worker serves meanwhile; the killed one comes back
        r = await pool.request({"op": "mcts", "state": SPEC, "ms": 10}, 0.01)
        assert r["ours"]
        for _ in range(100):
            if pool.workers[0].alive:
                break
            await asyncio.sleep(0.1)
        assert pool.workers[0].alive and pool.restarts == 1


async def test_a_search_past_twice_its_budget_is_killed(gen4):
    async with EnginePool(4, workers=1) as pool:
        with pytest.raises(EngineHang):
            # told 10 ms, the engine is asked for 5 s: the deadline (2 x 10 ms + margin) passes
            await pool.request({"op": "mcts", "state": SPEC, "ms": 5000}, budget_s=0.01)
        for _ in range(100):
            if pool.workers[0].alive:
                break
            await asyncio.sleep(0.1)
        r = await pool.request({"op": "mcts", "state": SPEC, "ms": 10}, 0.01)
        assert r["ours"] and pool.restarts == 1


async def test_close_leaves_no_worker(gen4):
    pool = await EnginePool(4, workers=2).start()
    pids = [w.proc.pid for w in pool.workers]
    await pool.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(EngineDied):
        await pool.request({"op": "ping"}, 0.1)


async def test_a_worker_whose_restart_fails_is_started_again_within_the_budget(gen4):
    async with EnginePool(4, workers=1) as pool:
        spawn, calls = pool._spawn, []

        async def failing_once(w):
            calls.append(w.index)
            if len(calls) == 1:
                raise EngineDied("did not start")
            await spawn(w)
        pool._spawn = failing_once
        os.kill(pool.workers[0].proc.pid, signal.SIGKILL)
        for _ in range(200):
            if pool.workers[0].alive and len(calls) >= 2:
                break
            await asyncio.sleep(0.1)
        assert pool.workers[0].alive and len(calls) == 2 and pool.restarts == 2
        assert (await pool.request({"op": "ping"}, 1.0))["ok"]


async def test_past_its_restart_budget_the_pool_gives_up_naming_the_last_error(gen4):
    async with EnginePool(4, workers=1) as pool:
        async def never(w):
            raise EngineDied("no start for you")
        pool._spawn = never
        os.kill(pool.workers[0].proc.pid, signal.SIGKILL)
        for _ in range(200):
            if pool._failed:
                break
            await asyncio.sleep(0.1)
        with pytest.raises(EngineDied, match="no start for you"):
            await pool.request({"op": "ping"}, 1.0)


def test_an_answer_larger_than_a_pipe_arrives_whole_under_uvloop(gen4):
    """uvloop makes a watched file descriptor non-blocking: an answer longer than the pipe's
    buffer (a gen 1 turn's outcomes) arrives in parts, and reading it must wait for the rest,
    not take the pause for the worker's exit."""
    import uvloop
    names = [f"notamove{i:05d}" for i in range(20000)]  # every one unknown: ~300 kB of answer

    async def ask():
        async with EnginePool(4, workers=1) as pool:
            r = await pool.request({"op": "names", "kind": "move", "names": names}, 30.0)
            again = await pool.request({"op": "ping"}, 5.0)
            return r, again, pool.restarts

    r, again, restarts = uvloop.run(ask())
    assert r["unknown"] == names and again["ok"] and restarts == 0
