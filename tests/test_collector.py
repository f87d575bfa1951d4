"""The collector's decisions, without a server: when a lane dies it is a fault or a bug."""

import asyncio

import pytest

from maple_async import config as C
from maple_async.collect import collector as T


def _collector(tmp_path):
    cfg = C.load(None, {"train.run_dir": str(tmp_path / "run"), "train.tensorboard": False,
                        "network.hidden_size": 16})
    return T.Collector(cfg, lambda traj: None, quiet=True)


async def _dead_lane(exc=None):
    async def body():
        if exc is not None:
            raise exc
    task = asyncio.get_running_loop().create_task(body())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert task.done()
    return T.Lane("self", None, 1, task)


async def _loop_once(tr, lanes):
    tr._wake.set()
    return await asyncio.wait_for(tr.until_stop_or_fault(lanes), 10)


async def test_lanes_done_cleanly_stop_the_run(tmp_path):
    tr = _collector(tmp_path)
    await _loop_once(tr, [await _dead_lane()])
    assert tr._stop.is_set() and not tr._fault.is_set()


async def test_lane_dead_with_server_down_is_a_fault_not_the_end(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "_WATCH_PERIOD_S", 0.5)
    tr = _collector(tmp_path)
    lane = await _dead_lane(ConnectionError("socket closed"))
    # The server watcher flags the fault a moment later.
    asyncio.get_running_loop().call_later(0.2, tr._fault.set)
    await _loop_once(tr, [lane])
    assert tr._fault.is_set() and not tr._stop.is_set()


async def test_lane_dead_with_server_up_raises_the_lanes_error(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "_WATCH_PERIOD_S", 0.05)
    tr = _collector(tmp_path)
    lane = await _dead_lane(ValueError("bug in a lane"))
    with pytest.raises(RuntimeError, match="lane self failed") as e:
        await _loop_once(tr, [lane])
    assert isinstance(e.value.__cause__, ValueError)
    assert not tr._stop.is_set()


def test_a_schedule_starts_on_its_first_mix_and_a_message_brings_the_next(tmp_path):
    cfg = C.load(None, {"train.run_dir": str(tmp_path / "run"), "train.tensorboard": False,
                        "network.hidden_size": 16, "train.opponents": "random:1; @100 self:0.8,league:0.2"})
    tr = T.Collector(cfg, lambda traj: None, quiet=True)
    assert tr.mix == {"random": 1.0}
    assert tr.league_agent is not None  # the league of a later mix is ready to play
    weights = tr.agent.batcher.policy.network.state_dict()
    tr.apply({"weights": weights, "version": 1, "league": None})
    assert tr.mix == {"random": 1.0} and not tr._switch
    tr.apply({"weights": weights, "version": 2, "league": None, "mix": {"self": 0.8, "league": 0.2}})
    assert tr.mix == {"self": 0.8, "league": 0.2} and not tr._switch  # not playing yet: no lanes to replace
    tr._running = True
    tr.apply({"weights": weights, "version": 3, "league": None, "mix": {"random": 1.0}})
    assert tr.mix == {"random": 1.0} and tr._switch  # playing: new lanes, the old play out their battles
