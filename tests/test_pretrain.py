"""Behaviour cloning: a teacher's orders become our action indices, the agent records them
as trajectory steps, the learner fits them, and PPO starts from the result."""

import gzip
import json

import numpy as np
import pytest
import torch

from maple_async import config as C
from maple_async.collect.agent import Agent
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from maple_async.learn.learner import Learner
from maple_async.obs import encoding as enc
from maple_async.obs import actions as act

from test_learner import fake_traj


async def _recorded_decision_points():
    from test_fastbattle import DATA, FastReplayer, _player
    data = json.load(gzip.open(DATA, "rt"))
    p = _player(FastReplayer, data["username"])
    for split_messages in data["records"]:
        await p._handle_battle_message([list(m) for m in split_messages])
        if any(m[1:2] == ["request"] for m in split_messages):
            b = p.battles[split_messages[0][0][1:]]
            mask = act.action_mask(b)
            if mask.any():
                yield b, mask


async def test_order_to_action_inverts_action_to_order_and_takes_teachers_orders():
    from poke_env.player import MaxBasePowerPlayer, SimpleHeuristicsPlayer
    teachers = [object.__new__(SimpleHeuristicsPlayer), object.__new__(MaxBasePowerPlayer)]
    n = indexed = 0
    async for b, mask in _recorded_decision_points():
        for a in np.flatnonzero(mask):
            assert act.order_to_action(b, act.action_to_order(b, int(a))) == a
        for t in teachers:
            try:
                order = type(t).choose_move(t, b)
            except Exception:  # a baseline that needs its player's state: not this test's point
                continue
            n += 1
            a = act.order_to_action(b, order)
            indexed += a is not None and bool(mask[a])
    assert n > 100 and indexed / n > 0.98, (indexed, n)


class _Battle:
    """Just enough battle for Agent.imitate with a patched encoder."""

    def __init__(self, tag, rqid):
        self.battle_tag, self.player_role, self.player_username = tag, "p1", "me"
        self.last_request = {"rqid": rqid}


def test_imitate_records_the_teachers_action_and_skips_orders_without_one(monkeypatch):
    trajs = []
    agent = Agent(InferencePolicy(nets.from_config(C.NetworkConfig(kind="mlp", hidden_size=8))),
                  C.BatcherConfig(), record=True, on_trajectory=trajs.append)

    def fake_encode(battle, side_state=None, mask=None, moves=None):
        mask[[1, 6, 7]] = True
        side_state[:] = [1.0, 1.0, 0, 0, 0, 0]
        return np.full(enc.OBS_DIM, battle.last_request["rqid"], np.float32)

    monkeypatch.setattr(enc, "encode", fake_encode)
    actions = iter([7, None, 1])
    monkeypatch.setattr(act, "order_to_action", lambda b, o, m=None: next(actions))
    for rqid in (1, 2, 3):
        assert agent.imitate(_Battle("battle-x", rqid), "heuristics", f"order{rqid}") == f"order{rqid}"
    t = agent.live[("battle-x", "p1")].traj
    assert t.actions == [7, 1] and [o[0] for o in t.obs] == [1.0, 3.0] and t.opponent == "heuristics"
    assert agent.stats.fallbacks == 1  # the default order: played, not recorded


def test_cloning_moves_the_policy_to_the_teachers_actions():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cfg = C.PPOConfig(lr=3e-3, minibatch_sequences=8)
    learner = Learner(nets.from_config(C.NetworkConfig(kind="lstm", hidden_size=32)), cfg, features=None)
    trajs = []
    for _ in range(16):
        t = fake_traj(rng, 12)
        t["masks"][:] = True
        t["actions"] = (t["obs"][:, 0] > 0).astype(np.int64) + 6  # the teacher's rule
        trajs.append(t)
    first = learner.clone(trajs, epochs=1)
    for _ in range(15):
        last = learner.clone(trajs, epochs=1)
    assert last["nll"] < 0.5 * first["nll"] and last["accuracy"] > 0.9
    assert learner.updates == 0  # cloning is not a PPO update


def test_train_init_takes_the_weights_and_the_teacher(tmp_path):
    from maple_async.learn import checkpoint as ckpt
    from maple_async.run.loop import LearningLoop
    from maple_async.tools.evaluate import training_label
    cfg = C.load(None, {"train.run_dir": str(tmp_path / "a"), "network.hidden_size": 16})
    learner = Learner(nets.from_config(cfg.network), cfg.ppo)
    ckpt.save(tmp_path / "pre.pt", {"config": cfg.to_dict(), "learner": learner.state_dict(),
                                   "counters": {}, "league": [], "pretrain": {"teacher": "heuristics"}})
    cfg2 = C.load(None, {"train.run_dir": str(tmp_path / "b"), "network.hidden_size": 16,
                         "train.init": str(tmp_path / "pre.pt"), "train.opponents": "self:1.0"})
    loop = LearningLoop(cfg2, "cpu", quiet=True, handle_signals=False)
    for k, v in learner.network.state_dict().items():
        assert torch.equal(loop.learner.network.state_dict()[k], v)
    assert loop.cfg.train.teacher == "heuristics" and "teacher: heuristics" in (tmp_path / "b" / "config.yaml").read_text()
    assert training_label("heuristics", loop.cfg.train) == "teacher (cloned)"
    assert training_label("max_power", loop.cfg.train) == "held out"
    with pytest.raises(ckpt.CheckpointError, match="does not fit"):
        LearningLoop(C.load(None, {"train.run_dir": str(tmp_path / "c"), "network.hidden_size": 32,
                                   "train.init": str(tmp_path / "pre.pt")}), "cpu", quiet=True)
