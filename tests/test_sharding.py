"""Process-per-server sharding: two workers, each with its own Showdown (spawned), and Ray actors."""

import asyncio
import os
import signal

import pytest

from maple_async import config as C
from maple_async.run.loop import LearningLoop
from maple_async.run.transports import ProcessTransport
from maple_async.run.wire import ShardStats

pytestmark = pytest.mark.integration


def _assert_updates(trainer, run_dir, per_update=16):
    """Every update but the final one trained on at least ``per_update`` trajectories (one
    update takes the whole backlog, so how many updates a run makes depends on timing: a
    slow poll can hand over 22 at once), and the updates add up to all that was trained."""
    import csv

    with open(run_dir / "metrics.csv") as f:
        cum = [int(r["battles"]) for r in csv.DictReader(f)]
    sizes = [b - a for a, b in zip([0] + cum, cum)]
    assert len(sizes) == trainer.learner.updates >= 2  # at least one broadcast mid-run
    assert min(sizes[:-1]) >= per_update and sizes[-1] >= 1, sizes
    assert cum[-1] == trainer.trained_trajectories == trainer.counters["battles"]


async def _train(cfg, transport, timeout):
    trainer = LearningLoop(cfg, "cpu", quiet=True)
    await asyncio.wait_for(trainer.run(transport), timeout)
    return trainer


def _cfg(tmp_path, total=64):
    # A league lane too: its battles draw their snapshot in the workers, by the loop's rule.
    return C.load("test", {"train.run_dir": str(tmp_path / "run"), "train.shards": 2,
                                       "train.total_sides": total, "train.sides_per_update": 16,
                                       "runner.concurrency": 8, "train.opponents": "self:0.5,league:0.5",
                                       "train.league_every_updates": 1})


def _assert_league(trainer):
    """Learner trajectories against the league came back naming the snapshot they played."""
    ids = {e["id"] for e in trainer.league}
    assert trainer.league_results and set(trainer.league_results) <= ids
    assert sum(n for _, n in trainer.league_results.values()) > 0


async def test_two_shards_train_and_receive_learner_weights(tmp_path):
    cfg = _cfg(tmp_path)
    tp = ProcessTransport(cfg, quiet=True)
    trainer = await _train(cfg, tp, 420)
    assert trainer.counters["battles"] >= 64
    _assert_updates(trainer, tmp_path / "run")
    assert set(tp.by_shard) == {0, 1} and min(tp.by_shard.values()) > 0
    assert trainer.trained_trajectories == sum(tp.by_shard.values())  # none lost
    urls = {sh.stats["url"] for sh in tp.shards}
    assert len(urls) == 2  # one server per shard
    for sh in tp.shards:
        v = sh.stats["version"]
        assert v >= 1, "worker never received an update broadcast"
        assert sh.stats["checksum"] == pytest.approx(tp.checksums[v], rel=0, abs=1e-9)
        assert not sh.worker.is_alive()
    assert (tmp_path / "run" / "latest.pt").exists()
    _assert_league(trainer)


async def test_two_shards_over_two_formats_count_each_formats_decisions(tmp_path):
    """Trajectories from the shards carry their battle's key: the learner splits the decisions
    by format as a one-process run does."""
    cfg = _cfg(tmp_path, total=48)
    cfg.runner.battle_format = "gen1randombattle,gen4randombattle"
    trainer = await _train(cfg, ProcessTransport(cfg, quiet=True), 420)
    split = trainer.counters["format_decisions"]
    assert set(split) == {"gen1randombattle", "gen4randombattle"} and min(split.values()) > 0, split
    assert sum(split.values()) == trainer.counters["decisions"]


async def test_killed_worker_is_replaced(tmp_path):
    cfg = _cfg(tmp_path, total=80)
    tp = ProcessTransport(cfg, quiet=True)
    trainer = LearningLoop(cfg, "cpu", quiet=True)
    killed = {}

    async def killer():
        while trainer.learner.updates < 1:
            await asyncio.sleep(0.2)
        killed["pid"] = tp.shards[0].worker.pid
        os.kill(killed["pid"], signal.SIGKILL)

    k = asyncio.get_running_loop().create_task(killer())
    try:
        await asyncio.wait_for(trainer.run(tp), 480)
    finally:
        k.cancel()
    assert killed and tp.worker_restarts == 1 and tp.shards[0].restarts == 1
    assert tp.shards[0].worker.pid != killed["pid"]
    assert trainer.counters["battles"] >= 80


async def test_shards_hold_while_the_learner_takes_nothing(tmp_path):
    """A learner that reads nothing: each shard stops deciding once its trajectories
    waiting for the learner reach its share of an update (16 // 2 shards = 8), instead of
    queueing finished battles without bound; reading them lets it go on."""
    cfg = _cfg(tmp_path)
    cfg.train.opponents = "random:1.0"  # one learner trajectory a battle (self-play gives two)
    tp = ProcessTransport(cfg, quiet=True)
    trainer = LearningLoop(cfg, "cpu", quiet=True)
    stop = asyncio.Event()
    peak = {}  # most trajectories a shard reported waiting for the learner
    handle = tp._handle

    def spy(msg):
        if isinstance(msg, ShardStats):
            peak[msg.shard] = max(peak.get(msg.shard, 0), msg.stats["queued"])
        handle(msg)

    tp._handle = spy
    await tp.start(trainer.weights_msg())
    try:
        got = []
        while len(got) < 2:  # both shards are playing
            got += await tp.wait(2, stop)
        # then until both hold (a loaded machine takes longer to get there), and 10 s more
        for _ in range(600):
            if set(peak) == {0, 1} and min(peak.values()) >= 8:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(10)
        later = []
        for _ in range(20):
            later += await tp.wait(4, stop, timeout=0.5)
        assert later, "the shards never went on after the learner read their backlog"
        # held at 8 (16 per update // 2 shards), after which only the other 7 battles in
        # flight can end: a new battle needs a decision first
        assert set(peak) == {0, 1} and max(peak.values()) <= 8 + 7, peak
        # read after the backlog: each shard's stats sent behind its queued trajectories
        held = [sh.stats.get("backlog_held_s", 0) for sh in tp.shards]
        assert min(held) > 5, held
    finally:
        await tp.stop()


async def test_ray_backend_two_actors(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'maple-async[ray]')")
    from maple_async.run.transports import RayTransport

    cfg = _cfg(tmp_path)
    cfg.train.backend = "ray"
    cfg.train.ray_cpus_per_shard = 0.5
    tp = RayTransport(cfg, quiet=True)
    trainer = await _train(cfg, tp, 480)
    assert trainer.counters["battles"] >= 64
    _assert_updates(trainer, tmp_path / "run")
    assert set(tp.by_shard) == {0, 1} and min(tp.by_shard.values()) > 0
    assert trainer.trained_trajectories == sum(tp.by_shard.values())
    for sh in tp.shards:
        v = sh.stats["version"]
        assert v >= 1 and sh.stats["checksum"] == pytest.approx(tp.checksums[v], rel=0, abs=1e-9)
    _assert_league(trainer)


def test_a_worker_dying_mid_message_blocks_nobody(tmp_path):
    """A worker killed while writing leaves half a message in its own pipe: the learner
    reads the other workers' messages, sees EOF on the dead one's pipe, and never hangs
    (with one queue shared by all workers this deadlocked the whole run)."""
    import concurrent.futures
    import multiprocessing as mp
    import struct

    trainer = ProcessTransport(_cfg(tmp_path), quiet=True)
    dead_r, dead_w = mp.Pipe(duplex=False)
    live_r, live_w = mp.Pipe(duplex=False)
    live_w.send(("stats", 1, {"battles": 3}))
    os.write(dead_w.fileno(), struct.pack("!i", 1000) + b"x" * 10)  # header says 1000 bytes
    dead_w.close()  # ... and the writer is gone
    trainer._readers = [dead_r, live_r]
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        msgs = []
        for _ in range(3):
            msgs += ex.submit(trainer._drain, 0.5).result(timeout=10)
    assert msgs == [("stats", 1, {"battles": 3})]
    assert trainer._readers == [live_r] and dead_r.closed
    live_w.close()


def test_close_during_a_drain_leaves_the_draining_thread_quiet(tmp_path, monkeypatch):
    """stop() cancelled (Ctrl-C) closes the pipes while a drain runs in its thread: the
    drain ends on the closed pipe without an error of its own."""
    import multiprocessing as mp

    from maple_async.run import shards
    trainer = ProcessTransport(_cfg(tmp_path), quiet=True)
    r, w = mp.Pipe(duplex=False)
    w.send(("stats", 0, {}))
    trainer._readers = [r]

    def closed_meanwhile(readers, timeout):
        trainer.close()
        return readers

    monkeypatch.setattr(shards, "wait_connections", closed_meanwhile)
    assert trainer._drain(0.1) == [] and trainer._readers == []
    w.close()


async def test_league_battles_in_one_process_name_their_snapshot(tmp_path, showdown_url):
    from maple_async.run.transports import LocalTransport
    cfg = _cfg(tmp_path)
    cfg.train.shards = 1
    tp = LocalTransport(cfg, showdown_url, quiet=True)
    trainer = await _train(cfg, tp, 300)
    _assert_league(trainer)
    assert not tp.collector.league_policy.assigned  # every battle gave its snapshot back
