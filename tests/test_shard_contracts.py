"""Shard workers' contracts with their parent: a failing shard says why (ShardedPool and the
training ProcessTransport), training shards die with a SIGKILLed learner, close() stops
the workers together, the sharded pool's server_url, set_opponent and worker deaths, and
resets of a running sharded pool (epochs, seeds, a caller's callback that raises).

Most tests run the real worker (``shards._worker``) and parent over a stand-in pool
(:class:`FakePool`: no server, no battles) that fails on cue; the rest play on Showdown."""

import asyncio
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from maple_async.env import shards
from maple_async.env.shards import ShardedPool
from maple_async.run.process import shard_seed
from proc_tree import descendants

N_ACTIONS = 32  # gen9randombattle

_conn = None  # the fake worker's pipe (its pool writes half a message into it, on cue)


class FakePool:
    """A shard's BattlePool stand-in: one slot, a step whenever it is not pending, tagged
    with its reset generation and seed; ``fake[shard]`` names how it fails."""

    def __init__(self, *, num_battles, seed, opponent, server, fake, **_):
        self.shard = seed // 1000 - 1  # ShardedPool(seed=0): shard_seed(0, i) = 1000 * (i + 1)
        self.mode, self.dir = fake.get(self.shard, ""), Path(fake["dir"])
        self.num_envs = num_battles
        self.server_url = server or f"http://fake-shard-{self.shard}"
        self.opponent_name = opponent
        self._started = self.pending = self.stopped = False
        self.generation, self.seed, self.calls = 0, None, 0
        if self.mode == "hang_on_close":
            signal.signal(signal.SIGTERM, self._terminated)

    def _terminated(self, *_):
        (self.dir / f"term{self.shard}").write_text(repr(time.monotonic()))
        os._exit(0)

    def async_reset(self, seed=None):
        self._started, self.pending = True, False
        self.generation, self.seed = self.generation + 1, seed

    def _check(self):
        if self.stopped:
            raise RuntimeError("the battle pool stopped: SimulatorError('simulator 1 exited (code 1); "
                               "log /tmp/maple-sim-1.log')")

    def recv(self, timeout=None):
        self.calls += 1
        if self.mode == "stops":
            self.stopped = True
            self._check()
        if self.mode == "user_error" and self.generation == 1:
            raise ValueError("bad embed")
        if self.mode == "dies_mid_message":
            os.write(_conn.fileno(), struct.pack("!i", 1000) + b"x" * 10)  # 10 of 1000 bytes
            self._die()
        if self.mode == "closes_pipe_after_batch" and self.calls > 1:
            while not (self.dir / "go").exists():  # the test has both shards' first steps
                time.sleep(0.05)
            self._die()
        if self.pending:
            time.sleep(timeout or 0)
            return _batch(0, None)
        self.pending = True
        return _batch(1, f"g{self.generation}-s{self.seed}")

    def _die(self):
        """As a worker killed mid-write: its pipe is closed a moment before it exits (code 3)."""
        socket.socket(fileno=os.dup(_conn.fileno())).shutdown(socket.SHUT_RDWR)
        (self.dir / f"closed{self.shard}").touch()
        time.sleep(2)
        os._exit(3)

    def answer(self, actions, env_ids):
        self.pending = False

    def set_opponent(self, opponent):
        if opponent == "bogus":
            raise ValueError("opponent 'bogus': expected self, random, ...")
        self.opponent_name = opponent

    @property
    def stats(self):
        return {"battles": 1, "decisions": 2, "batches": 1}

    def close(self):
        if self.mode == "hang_on_close":
            time.sleep(120)


def _batch(n, tag):
    mask = np.ones((n, N_ACTIONS), bool)
    info = {"env_id": np.zeros(n, np.int32), "elapsed_step": np.zeros(n, np.int32), "action_mask": mask,
            "battle_tag": np.array([tag] * n, dtype=object)}
    return {"observation": np.zeros((n, 4), np.float32), "action_mask": mask}, np.zeros(n, np.float32), \
        np.zeros(n, bool), np.zeros(n, bool), info


def _fake_worker(conn, args, kwargs):
    """The real shard worker, over a FakePool (in the spawned child)."""
    global _conn
    _conn = conn
    shards.BattlePool = FakePool
    shards._worker(conn, args, kwargs)


@pytest.fixture
def fake_pool(monkeypatch, tmp_path):
    """``make(modes={shard: mode}, **kwargs)``: a 2-shard ShardedPool over FakePools."""
    monkeypatch.setattr(shards, "_worker", _fake_worker)
    made = []

    def make(modes=None, **kwargs):
        kwargs.setdefault("opponent", "random")
        pool = ShardedPool(num_battles=2, shards=2, seed=0, recv_timeout_s=30, start_timeout_s=120,
                           fake={**(modes or {}), "dir": str(tmp_path)}, **kwargs)
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.close(timeout=5)


def _recv_both(pool, limit_s=60):
    """Steps until both slots (one per shard) came back: {env_id: battle_tag}."""
    tags = {}
    t0 = time.monotonic()
    while len(tags) < 2:
        assert time.monotonic() - t0 < limit_s, f"only {tags} came back"
        obs, rew, term, trunc, info = pool.recv(timeout=10)
        tags.update(zip(info["env_id"].tolist(), info["battle_tag"].tolist()))
    return tags


def _wait_for(path, limit_s=60):
    t0 = time.monotonic()
    while not path.exists():
        assert time.monotonic() - t0 < limit_s, f"{path.name} never appeared"
        time.sleep(0.05)


# -- a failing shard says why ---------------------------------------------------------------

def test_a_shard_whose_pool_stopped_reports_its_cause(fake_pool):
    pool = fake_pool({0: "stops"})
    with pytest.raises(RuntimeError) as err:
        _recv_both(pool)
    text = str(err.value)
    assert "shard 0" in text and "Traceback" in text and "exited (code 1)" in text
    assert "SimulatorError('simulator 1 exited (code 1); log /tmp/maple-sim-1.log')" in text
    for call in (lambda: pool.recv(timeout=1), lambda: pool.send([0], [1]), lambda: pool.stats):
        with pytest.raises(RuntimeError, match="shard 0 exited .code 1.:\nTraceback"):
            call()
    assert pool._procs[0].exitcode == 1


def test_a_callback_that_raises_in_a_shard_repeats_until_reset(fake_pool):
    pool = fake_pool({0: "user_error"})
    for _ in range(2):  # the same error again: the shard stopped calling its pool's recv
        with pytest.raises(RuntimeError, match=r"(?s)shard 0: .*Traceback.*ValueError: bad embed") as err:
            _recv_both(pool)
    assert "async_reset" in str(err.value)
    assert pool.stats["battles"] == 2  # the pool itself goes on
    pool.async_reset()
    assert _recv_both(pool) == {0: "g2-sNone", 1: "g2-sNone"}


# -- reset of a running sharded pool -------------------------------------------------------

def test_a_reset_drops_what_was_gathered_before_it_and_seeds_each_shard(fake_pool):
    pool = fake_pool()
    assert _recv_both(pool) == {0: "g1-sNone", 1: "g1-sNone"}
    pool.send([0, 0], [0, 1])
    for conn in pool._conns:  # each shard sent a step of the old battles, unread
        assert conn.poll(30)
    pool.async_reset(seed=5)
    with pytest.raises(ValueError, match="not pending"):
        pool.send([0], [0])  # what recv returned before the reset is forgotten
    assert _recv_both(pool) == {0: f"g2-s{shard_seed(5, 0)}", 1: f"g2-s{shard_seed(5, 1)}"}


# -- the sharded pool's API ----------------------------------------------------------------

def test_server_url_of_a_sharded_pool(fake_pool):
    assert fake_pool().server_url == ["http://fake-shard-0", "http://fake-shard-1"]
    given = fake_pool(server="http://127.0.0.1:8000")
    assert given.server_url == "http://127.0.0.1:8000"
    assert given.server_urls == ["http://127.0.0.1:8000"] * 2


def test_set_opponent_names_the_new_opponent_and_reports_a_refusal(fake_pool):
    pool = fake_pool()
    pool.set_opponent("max_power")
    assert pool.opponent_name == "max_power"
    with pytest.raises(ValueError, match="shard 0: ValueError: opponent 'bogus'"):
        pool.set_opponent("bogus")
    assert pool.stats["battles"] == 2  # both shards still answer


def test_close_stops_every_straggler_in_one_sweep(fake_pool, tmp_path):
    """Two workers that never finish closing: both are terminated after one deadline, not
    the second one a whole deadline after the first."""
    pool = fake_pool({0: "hang_on_close", 1: "hang_on_close"})
    _recv_both(pool)
    pool.close(timeout=4)
    assert not any(p.is_alive() for p in pool._procs)
    t0, t1 = (float((tmp_path / f"term{i}").read_text()) for i in (0, 1))
    assert abs(t0 - t1) < 2, (t0, t1)


def test_a_worker_dying_mid_message_is_named_with_its_exit_code(fake_pool):
    pool = fake_pool({0: "dies_mid_message"})
    with pytest.raises(RuntimeError, match=r"the battle pool stopped: shard 0 exited \(code 3\)"):
        _recv_both(pool)
    with pytest.raises(RuntimeError, match=r"shard 0 exited \(code 3\)"):
        pool.recv(timeout=1)


def test_a_send_to_a_worker_that_closed_its_pipe_is_named_with_its_exit_code(fake_pool, tmp_path):
    pool = fake_pool({0: "closes_pipe_after_batch"})
    _recv_both(pool)
    (tmp_path / "go").touch()
    _wait_for(tmp_path / "closed0")  # its pipe is closed, it has not exited yet
    with pytest.raises(RuntimeError, match=r"the battle pool stopped: shard 0 exited \(code 3\)"):
        pool.send([0, 0], [0, 1])


# -- on Showdown ---------------------------------------------------------------------------

def _embed_fails_until_healed(battle):
    # the workers inherit the variable; a file, not a count, so no shard's first embed can fall after the reset
    if not os.path.exists(os.environ["MAPLE_TEST_HEALED"]):
        raise ValueError("embed failed once")
    return np.array([battle.turn, len(battle.team)], dtype=np.float32)


@pytest.mark.integration
def test_a_running_sharded_pool_resets_after_a_callback_error(showdown_url, tmp_path, monkeypatch):
    """A caller's embed_battle raises in the shards: recv raises it (again and again) until
    async_reset; a reset of the running pool then returns only the new battles' steps."""
    rng = np.random.default_rng(3)
    healed = tmp_path / "healed"
    monkeypatch.setenv("MAPLE_TEST_HEALED", str(healed))
    with ShardedPool(num_battles=2, shards=2, opponent="random", server=showdown_url,
                     embed_battle=_embed_fails_until_healed, recv_timeout_s=60) as pool:
        for _ in range(2):
            with pytest.raises(RuntimeError, match=r"(?s)shard \d: .*Traceback.*ValueError: embed failed once"):
                pool.recv(timeout=60)
        healed.touch()
        pool.async_reset()
        old = set()
        for _ in range(3):
            obs, rew, term, trunc, info = pool.recv(timeout=60)
            assert obs["observation"].shape[1:] == (2,)
            old.update(info["battle_tag"].tolist())
            masks = obs["action_mask"]
            pool.send(np.array([rng.choice(np.flatnonzero(m)) for m in masks]), info["env_id"])
        for conn in pool._conns:  # steps of the old battles on their way
            conn.poll(30)
        pool.async_reset(seed=11)
        first = {}
        while len(first) < 2:
            obs, rew, term, trunc, info = pool.recv(timeout=60)
            for e, tag, step in zip(info["env_id"].tolist(), info["battle_tag"].tolist(),
                                    info["elapsed_step"].tolist()):
                first.setdefault(e, (tag, step))
            pool.send(np.array([rng.choice(np.flatnonzero(m)) for m in obs["action_mask"]]), info["env_id"])
        assert not {tag for tag, _ in first.values()} & old, (first, old)
        assert all(step == 0 for _, step in first.values()), first


# -- training shards (ProcessTransport) ----------------------------------------------------

async def test_a_failed_training_worker_reports_its_cause(tmp_path, capsys):
    from maple_async import config as C
    from maple_async.run.transports import ProcessTransport

    cfg = C.load("test", {"train.run_dir": str(tmp_path / "run"), "train.shards": 2})
    cfg.train.worker_device = "bogus"  # the workers' own config check fails
    tp = ProcessTransport(cfg)
    await tp.start({"version": 0, "weights": {}})
    stop = asyncio.Event()
    t0 = time.monotonic()
    try:
        while tp.worker_restarts < 1:
            assert time.monotonic() - t0 < 180, "no worker was replaced"
            await tp.wait(1, stop, timeout=0.5)
    finally:
        await tp.stop(timeout=10)
    out = capsys.readouterr().out
    assert re.search(r"worker died \(exit 1\): \S*ConfigError: config key 'runner.device'", out), out
    assert "Traceback" in out


_LEARNER = r"""
import asyncio, sys
from maple_async import config as C
from maple_async.run.loop import LearningLoop
from maple_async.run.transports import ProcessTransport

async def main():
    cfg = C.load("test", {"train.run_dir": sys.argv[1], "train.shards": 2,
                                       "runner.concurrency": 2})
    tp = ProcessTransport(cfg, quiet=True)
    await tp.start(LearningLoop(cfg, "cpu", quiet=True).weights_msg())
    stop = asyncio.Event()
    while not all(sh.stats for sh in tp.shards):  # each shard's server is up: it reports
        await tp.wait(1, stop, timeout=0.5)
    print(" ".join(str(sh.worker.pid) for sh in tp.shards), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.integration
def test_training_shards_die_with_a_sigkilled_learner(tmp_path):
    import select

    learner = subprocess.Popen([sys.executable, "-c", _LEARNER, str(tmp_path / "run")],
                               cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, text=True)
    left: set = set()
    try:
        ready, _, _ = select.select([learner.stdout], [], [], 300)
        line = learner.stdout.readline() if ready else ""
        assert line.strip(), f"the learner's shards did not come up (exit {learner.poll()})"
        workers = {int(p) for p in line.split()}
        family = set(descendants(workers))  # the workers and their Node servers
        assert len(family) > len(workers)
        learner.send_signal(signal.SIGKILL)
        learner.wait(30)
        t0 = time.monotonic()
        left = {p for p in family if _running(p)}
        while left and time.monotonic() - t0 < 10:
            time.sleep(0.2)
            left = {p for p in family if _running(p)}
        assert not left, f"outlived their SIGKILLed learner: {sorted(left)} (workers {sorted(workers)})"
    finally:
        if learner.poll() is None:
            learner.kill()
            learner.wait(30)
        for pid in left:  # a failed run leaves no orphans behind
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
