"""The one learning loop, driven by a scripted transport (no server): the rules it applies
after each update are the same whatever carries the trajectories."""

import asyncio
import csv

import numpy as np

from maple_async import config as C
from maple_async.run.loop import LearningLoop
from maple_async.run.wire import PackedTrajectory

from test_learner import fake_traj


class ScriptedTransport:
    """Hands the loop ``per_wait`` fake trajectories per wait, up to ``total``; records what
    the loop publishes."""

    def __init__(self, total, per_wait, rng):
        self.left, self.per_wait, self.rng = total, per_wait, rng
        self.published, self.started, self.stopped = [], None, False
        self.ended = ""
        self.pauses = []

    def _make(self, n):
        n = min(n, self.left)
        self.left -= n
        return [PackedTrajectory(fake_traj(self.rng, 5), 1.0, "self", {"win": 1.0}, 0) for _ in range(n)]

    async def start(self, msg):
        self.started = msg

    async def wait(self, want, stop):
        await asyncio.sleep(0)
        if self.left == 0:
            self.ended = "script over"
        return self._make(self.per_wait)

    def publish(self, msg):
        self.published.append(msg)

    def pause(self, paused):
        self.pauses.append(paused)

    async def stop(self):
        self.stopped = True
        return self._make(3)  # trajectories that arrived while stopping

    def throughput_counters(self):
        return {"dec": 0, "bat": 0, "bdec": 0}

    def report(self, seconds):
        return ""


def _cfg(tmp_path, **over):
    return C.load(None, {"train.run_dir": str(tmp_path / "run"), "train.tensorboard": False,
                         "network.hidden_size": 8, "ppo.epochs": 1, "train.sides_per_update": 8,
                         "train.checkpoint_every_updates": 2, "train.opponents": "self:1.0",
                         "ppo.lr_schedule": "constant", **over})


async def test_updates_publish_checkpoint_and_stop_by_the_rules(tmp_path):
    cfg = _cfg(tmp_path, **{"train.total_sides": 32})
    tp = ScriptedTransport(total=1000, per_wait=5, rng=np.random.default_rng(0))
    loop = LearningLoop(cfg, "cpu", quiet=True, handle_signals=False)
    await asyncio.wait_for(loop.run(tp), 60)
    assert tp.started["version"] == 0 and tp.started["league"] is None
    # 5 a wait, 8 an update: every update takes the whole backlog of >= 8
    assert loop.stop_reason == "reached 32 battle sides" and tp.stopped
    assert [m["version"] for m in tp.published] == list(range(1, len(tp.published) + 1))
    assert loop.learner.updates == len(tp.published) + 1  # + the final update on the 3 left over
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    # ... with a step scaled to its size (3 of 8; constant schedule)
    assert float(rows[-1]["lr"]) == cfg.ppo.lr * 3 / 8 and float(rows[-2]["lr"]) == cfg.ppo.lr
    assert loop.trained_trajectories == loop.collected_trajectories
    ckpts = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert "ckpt_000002.pt" in ckpts and (tmp_path / "run" / "latest.pt").exists()
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert int(rows[-1]["battles"]) == loop.counters["battles"] == loop.trained_trajectories


async def test_collection_that_ends_by_itself_stops_the_run(tmp_path):
    cfg = _cfg(tmp_path, **{"train.total_sides": 10_000})
    tp = ScriptedTransport(total=20, per_wait=5, rng=np.random.default_rng(1))
    loop = LearningLoop(cfg, "cpu", quiet=True, handle_signals=False)
    await asyncio.wait_for(loop.run(tp), 60)
    assert loop.stop_reason == "script over"
    assert loop.trained_trajectories == loop.collected_trajectories == 20


async def test_league_snapshots_follow_one_rule(tmp_path):
    cfg = _cfg(tmp_path, **{"train.total_sides": 48, "train.opponents": "self:0.5,league:0.5",
                            "train.league_every_updates": 2, "train.league_size": 2})
    tp = ScriptedTransport(total=1000, per_wait=8, rng=np.random.default_rng(2))
    loop = LearningLoop(cfg, "cpu", quiet=True, handle_signals=False)
    await asyncio.wait_for(loop.run(tp), 60)
    assert tp.started["league"] is not None  # the first snapshot is there before any battle
    assert all(m["league"] is not None for m in tp.published)
    assert len(loop.league) == 2  # snapshots at updates 0, 2, 4, 6: the newest two kept


async def test_collection_holds_still_while_the_learner_is_behind(tmp_path):
    cfg = _cfg(tmp_path, **{"train.total_sides": 60})
    # 20 arrive per wait, 8 asked per update: every batch is >= 16, the learner is behind
    tp = ScriptedTransport(total=1000, per_wait=20, rng=np.random.default_rng(2))
    loop = LearningLoop(cfg, "cpu", quiet=True, handle_signals=False)
    await asyncio.wait_for(loop.run(tp), 60)
    assert tp.pauses and tp.pauses == [True, False] * (len(tp.pauses) // 2)
    assert loop.held_updates == len(tp.pauses) // 2  # counted in metrics.csv
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert int(rows[-1]["held_updates"]) == loop.held_updates
    cfg = _cfg(tmp_path, **{"train.total_sides": 60, "train.hold_when_behind": False})
    tp = ScriptedTransport(total=1000, per_wait=20, rng=np.random.default_rng(2))
    await asyncio.wait_for(LearningLoop(cfg, "cpu", quiet=True, handle_signals=False).run(tp), 60)
    assert tp.pauses == []
    cfg = _cfg(tmp_path, **{"train.total_sides": 60})
    tp = ScriptedTransport(total=1000, per_wait=5, rng=np.random.default_rng(2))  # keeping up
    await asyncio.wait_for(LearningLoop(cfg, "cpu", quiet=True, handle_signals=False).run(tp), 60)
    assert tp.pauses == []


def test_checkpoints_keep_the_newest_and_a_weights_snapshot_per_period(tmp_path):
    import pytest
    import torch

    from maple_async.learn.checkpoint import CheckpointError
    from maple_async.tools.evaluate import policy_from_checkpoint

    cfg = _cfg(tmp_path, **{"train.keep_checkpoints": 2, "train.snapshot_minutes": 1.0})
    loop = LearningLoop(cfg, "cpu", quiet=True, handle_signals=False)
    folder = tmp_path / "run" / "checkpoints"
    for upd, seconds in [(1, 10), (2, 50), (3, 70), (4, 100), (5, 110)]:
        loop.learner.updates, loop.counters["seconds"] = upd, float(seconds)
        loop.save_checkpoint(final=upd == 5)
    names = sorted(p.name for p in folder.iterdir())
    # full: the newest two; weights: the first of each minute (0-59 s: 1, 60-119 s: 3) and the end
    assert names == ["ckpt_000004.pt", "ckpt_000005.pt", "weights_000001.pt", "weights_000003.pt",
                     "weights_000005.pt"]
    data = torch.load(folder / "weights_000003.pt", weights_only=True)
    assert set(data["learner"]) == {"network", "updates"} and data["counters"]["seconds"] == 70.0
    policy, saved = policy_from_checkpoint(str(folder / "weights_000003.pt"), "cpu")
    assert saved.train.keep_checkpoints == 2
    with pytest.raises(CheckpointError, match="--train.init"):
        LearningLoop(cfg, "cpu", resume=str(folder / "weights_000003.pt"), quiet=True, handle_signals=False)
    again = LearningLoop(_cfg(tmp_path / "b", **{"train.init": str(folder / "weights_000003.pt")}), "cpu",
                         quiet=True, handle_signals=False)
    w = torch.load(folder / "weights_000003.pt", weights_only=True)["learner"]["network"]
    assert all(torch.equal(v, w[k]) for k, v in again.learner.network.state_dict().items())
    # a resumed run does not snapshot again in the period it resumed in
    resumed = LearningLoop(cfg, "cpu", resume=str(folder / "ckpt_000005.pt"), quiet=True, handle_signals=False)
    resumed.learner.updates += 1
    resumed.counters["seconds"] = 115.0
    resumed.save_checkpoint()
    assert not (folder / "weights_000006.pt").exists() and (folder / "ckpt_000006.pt").exists()
    assert not (folder / "ckpt_000004.pt").exists()


async def test_a_resumed_run_keeps_its_limits_over_the_whole_run(tmp_path):
    import pytest

    from maple_async.errors import UserError
    from maple_async.learn import checkpoint as ckpt

    cfg = _cfg(tmp_path, **{"train.total_sides": 16})
    await asyncio.wait_for(LearningLoop(cfg, "cpu", quiet=True, handle_signals=False).run(
        ScriptedTransport(total=1000, per_wait=8, rng=np.random.default_rng(3))), 60)
    latest = tmp_path / "run" / "latest.pt"
    config_before = (tmp_path / "run" / "config.yaml").read_text()
    # a run that has trained its battle sides is refused, naming the key to raise; nothing written
    with pytest.raises(UserError, match=r"already trained \d+ battle sides of train.total_sides 16 .*"
                                        r"--train.total_sides \d+$"):
        LearningLoop(_cfg(tmp_path, **{"train.total_sides": 16, "train.max_minutes": 5.0}), "cpu",
                     resume=str(latest), quiet=True, handle_signals=False)
    assert (tmp_path / "run" / "config.yaml").read_text() == config_before
    # ten minutes trained before: a 10-minute budget is spent, a little more ends after one update
    data = ckpt.load(latest)
    data["counters"]["seconds"] = 600.0
    ckpt.save(latest, data)
    over = {"train.total_sides": 10_000}
    with pytest.raises(UserError, match="already trained 10 minutes of train.max_minutes 10 "):
        LearningLoop(_cfg(tmp_path, **over, **{"train.max_minutes": 10.0}), "cpu", resume=str(latest),
                     quiet=True, handle_signals=False)
    loop = LearningLoop(_cfg(tmp_path, **over, **{"train.max_minutes": 10.0 + 1e-6}), "cpu",
                        resume=str(latest), quiet=True, handle_signals=False)
    tp = ScriptedTransport(total=1000, per_wait=8, rng=np.random.default_rng(4))
    await asyncio.wait_for(loop.run(tp), 60)
    assert loop.stop_reason.startswith("reached 10.000001 minutes") and len(tp.published) == 1


def test_a_refused_resume_names_every_spent_limit_and_enough_to_go_on(tmp_path):
    import pytest

    from maple_async.errors import UserError

    done = LearningLoop(_cfg(tmp_path), "cpu", quiet=True, handle_signals=False)
    # trained under the old rule: 90 minutes over three 30-minute invocations
    done.counters.update(battles=64, seconds=90 * 60.0)
    path = done.save_checkpoint()
    with pytest.raises(UserError) as e:
        LearningLoop(_cfg(tmp_path, **{"train.total_sides": 64, "train.max_minutes": 30.0}), "cpu",
                     resume=str(path), quiet=True, handle_signals=False)
    assert ("has already trained 64 battle sides of train.total_sides 64 and 90 minutes of "
            "train.max_minutes 30 ") in str(e.value)
    assert str(e.value).endswith("raise them to train on, e.g. --train.total_sides 128 --train.max_minutes 120")


class CurrentTransport(ScriptedTransport):
    """Trajectories played by the weights the loop published last, as collectors that keep up."""

    def _make(self, n):
        out = super()._make(n)
        version = self.published[-1]["version"] if self.published else 0
        for t in out:
            t.versions[:] = version
        return out


async def test_a_run_whose_battles_play_old_weights_says_so_once(tmp_path, capsys):
    cfg = _cfg(tmp_path, **{"train.total_sides": 8 * 14})
    # every trajectory played version 0: update k learns from weights k - 1 updates old
    tp = ScriptedTransport(total=1000, per_wait=8, rng=np.random.default_rng(3))
    await asyncio.wait_for(LearningLoop(cfg, "cpu", handle_signals=False).run(tp), 60)
    warned = [line for line in capsys.readouterr().out.splitlines() if "policy lag" in line]
    assert len(warned) == 1 and "update 11 " in warned[0] and "10 updates older" in warned[0], warned
    tp = CurrentTransport(total=1000, per_wait=8, rng=np.random.default_rng(3))
    await asyncio.wait_for(LearningLoop(_cfg(tmp_path / "b", **{"train.total_sides": 8 * 14}), "cpu",
                                        handle_signals=False).run(tp), 60)
    assert "policy lag" not in capsys.readouterr().out


async def test_an_opponent_schedule_changes_the_mix_at_its_decisions_and_after_a_resume(tmp_path, capsys):
    # 8 trajectories of 5 decisions an update: 40 decisions each
    spec = "random:1; @100 self:0.5,league:0.5; @200 max_power:1"
    cfg = _cfg(tmp_path, **{"train.total_sides": 24, "train.opponents": spec})
    tp = ScriptedTransport(total=1000, per_wait=8, rng=np.random.default_rng(5))
    loop = LearningLoop(cfg, "cpu", handle_signals=False)
    await asyncio.wait_for(loop.run(tp), 60)
    assert tp.started["mix"] == {"random": 1.0}
    assert tp.started["league"] is not None  # a later mix plays the league: snapshots from the start
    assert [m["mix"] for m in tp.published] == [{"random": 1.0}, {"random": 1.0}, {"self": 0.5, "league": 0.5}]
    assert "[train] opponents from 100 decisions: self:0.5,league:0.5" in capsys.readouterr().out
    resumed = LearningLoop(_cfg(tmp_path, **{"train.total_sides": 10_000, "train.opponents": spec}), "cpu",
                           resume=str(tmp_path / "run" / "latest.pt"), quiet=True, handle_signals=False)
    tp = ScriptedTransport(total=16, per_wait=8, rng=np.random.default_rng(6))
    await asyncio.wait_for(resumed.run(tp), 60)
    assert resumed.counters["decisions"] >= 120
    assert tp.started["mix"] == {"self": 0.5, "league": 0.5} and tp.published[-1]["mix"] == {"max_power": 1.0}


async def test_a_single_mix_sends_no_mix(tmp_path):
    tp = ScriptedTransport(total=16, per_wait=8, rng=np.random.default_rng(7))
    await asyncio.wait_for(LearningLoop(_cfg(tmp_path), "cpu", quiet=True, handle_signals=False).run(tp), 60)
    assert "mix" not in tp.started and not any("mix" in m for m in tp.published)


def test_a_training_process_never_imports_the_search_package():
    """What ``maple-async train`` imports (the command, the loop, its transports and shard
    workers, the end-of-training evaluation) leaves ``maple_async.search`` unloaded: the
    ``search`` baseline's player is imported only by a match that plays it."""
    import subprocess
    import sys
    from pathlib import Path
    modules = ["maple_async.cli", "maple_async.tools.train", "maple_async.run.loop", "maple_async.run.transports",
               "maple_async.run.worker", "maple_async.showdown", "maple_async.inference.policy"]
    code = ("import importlib, sys\n"
            f"for m in {modules!r}:\n    importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith('maple_async.search')))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[]", p.stdout
