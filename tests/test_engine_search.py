"""Search on poke-engine in real battles: the network-free player and a checkpoint's agent search
their decisions; an engine worker killed mid-search, a search past its deadline and an engine
panic each cost one decision's search (counted by kind, the fallback plays) and the battle goes
on, the next decisions searched again."""

import asyncio
import os
import shutil
import signal

import pytest
from poke_env.player import RandomPlayer

from maple_async.config import SearchConfig
from maple_async.pokeenv.players import close_players, make_baseline, player_kwargs, run_id
from maple_async.search.player import baseline_class
from maple_async.search.pokeengine import build
from maple_async.search.pokeengine.pool import EnginePool

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")]
FMT = "gen4randombattle"


@pytest.fixture(scope="module", autouse=True)
def gen4_engine():
    return build.ensure(4)


def sabotage(me, kind: str, at: int, done: list) -> None:
    """Wrap the player's engine pool: at the ``at``-th tree search, make the engine fail by
    ``kind`` (kill the worker under it, ask it for far longer than its deadline, or hand it a
    state that panics)."""
    searcher = me._searcher()
    get = searcher.pools.get

    async def get_then_wrap(gen):
        pool = await get(gen)
        if getattr(pool, "_wrapped", False):
            return pool
        pool._wrapped = True
        request = pool.request
        count = [0]

        async def request_failing(msg, budget_s, worker=None):
            if msg.get("op") != "mcts":
                return await request(msg, budget_s, worker)
            count[0] += 1
            if done or count[0] < at:
                return await request(msg, budget_s, worker)
            done.append(kind)
            if kind == "panic":
                return await request({**msg, "state": {**msg["state"], "weather": "notaweather"}}, budget_s, worker)
            if kind == "hang":
                return await request({**msg, "ms": 20000}, budget_s, worker)
            task = asyncio.ensure_future(request({**msg, "ms": 3000}, 3.0, 0))
            await asyncio.sleep(0.5)
            os.kill(pool.workers[0].proc.pid, signal.SIGKILL)
            return await task
        pool.request = request_failing
        return pool
    searcher.pools.get = get_then_wrap


@pytest.mark.parametrize("kind,counted,states", [("kill", "engine_died", 1), ("hang", "engine_hang", 1),
                                                 ("panic", "engine_panic", 1), ("kill", "engine_died", 2)])
async def test_an_engine_fault_costs_one_search_and_the_battle_goes_on(showdown_url, kind, counted, states):
    """One state: the decision's search fails (counted), the heuristics play it. Two states:
    the decision is searched on the state the engine did not fail (counted by state)."""
    tag = run_id()
    me = make_baseline("search", showdown_url, f"pe{tag}a", 1, FMT, base=baseline_class(FMT))
    them = RandomPlayer(**player_kwargs(showdown_url, f"pe{tag}b", 1, FMT))
    me.search_config = SearchConfig(engine="poke-engine", states=states, budget_ms=40)
    done: list = []
    sabotage(me, kind, at=3, done=done)
    restarts = [0]
    pools = me._searcher().pools
    close = pools.close

    async def close_counting():
        restarts[0] += sum(p.restarts for p in pools.pools.values())
        await close()
    pools.close = close_counting
    try:
        for _ in range(3):  # a short battle may end before the third search: play on
            await asyncio.wait_for(me.battle_against(them, n_battles=1), 900)
            if done and me.search_stats.searched > 4:
                break
    finally:
        await close_players(me, them)
        await me.close_search()
    stats = me.search_stats
    assert done == [kind] and me.n_finished_battles >= 1
    failures = stats.failed if states == 1 else stats.states_failed
    assert failures[counted] >= 1 and counted in stats.line(), stats.line()
    assert stats.searched > 2, stats.line()  # searched before and after the fault
    if kind != "panic":
        assert restarts[0] >= 1


async def test_the_engine_players_processes_end_with_it(showdown_url):
    tag = run_id()
    me = make_baseline("search", showdown_url, f"pf{tag}a", 1, FMT, base=baseline_class(FMT))
    them = RandomPlayer(**player_kwargs(showdown_url, f"pf{tag}b", 1, FMT))
    me.search_config = SearchConfig(engine="poke-engine", states=2, budget_ms=40)
    try:
        await asyncio.wait_for(me.battle_against(them, n_battles=1), 900)
        pool: EnginePool = me._searcher().pools.pools[4]
        pids = [w.proc.pid for w in pool.workers]
        assert me.search_stats.searched > 0, me.search_stats.line()
    finally:
        await close_players(me, them)
        await me.close_search()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_eval_baseline_search_on_poke_engine(showdown_url, tmp_path, capsys):
    from maple_async.cli import main
    assert main(["eval", "--baseline", "search", "--opponents", "random", "--battles", "2", "--concurrency", "2",
                 "--runner.battle_format", FMT, "--search.engine", "poke-engine", "--server", showdown_url]) == 0
    text = capsys.readouterr().out
    assert "[eval] search vs random (no network): win rate" in text, text
    line = next(x for x in text.splitlines() if x.startswith("[eval] search: searched"))
    assert float(line.split("searched ")[1].split("%")[0]) > 50, line
    assert "failed 0.0%" in line, line
