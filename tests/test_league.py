"""League opponents: one snapshot per battle for the battle's whole life, drawn by one rule
that the learning loop computes and every backend's collector applies."""

import asyncio
import pickle
import random

import numpy as np
import pytest
import torch

from maple_async import config as C
from maple_async.inference.batcher import InferenceBatcher
from maple_async.inference.hidden import HiddenStates
from maple_async.inference.league import LeaguePolicy, league_probs
from maple_async.learn import networks as nets
from maple_async.obs import encoding as enc
from maple_async.obs import actions as act
from maple_async.run.loop import LearningLoop
from maple_async.run.wire import PackedTrajectory

from test_learner import fake_traj
from test_loop import ScriptedTransport, _cfg

NET = C.NetworkConfig(kind="lstm", hidden_size=16)


def make_net():
    return nets.from_config(NET)


def snapshot(seed):
    torch.manual_seed(seed)
    return {k: v.clone() for k, v in make_net().state_dict().items()}


def test_probabilities_uniform_recent_and_pfsp():
    ids = [10, 20, 30]
    assert league_probs(ids, {}, "uniform") == pytest.approx({10: 1 / 3, 20: 1 / 3, 30: 1 / 3})
    assert league_probs(ids, {}, "recent") == pytest.approx({10: 1 / 6, 20: 2 / 6, 30: 3 / 6})
    # The learner beats 10 nearly always and loses to 30 mostly: 30 comes up most.
    p = league_probs(ids, {10: (95.0, 100), 20: (50.0, 100), 30: (20.0, 100)}, "pfsp")
    assert p[30] > p[20] > p[10] and sum(p.values()) == pytest.approx(1.0)
    assert league_probs(ids, {}, "pfsp") == pytest.approx(league_probs(ids, {}, "uniform"))  # no results yet
    with pytest.raises(ValueError, match="unknown league sampling"):
        league_probs(ids, {}, "best")


def _obs(n, rng):
    obs = np.zeros((n, enc.OBS_DIM), np.float32)
    obs[:, : enc.OBS_DIM // 2] = rng.standard_normal((n, enc.OBS_DIM // 2))
    return obs, np.ones((n, act.N_ACTIONS), bool)


def test_each_battle_keeps_its_snapshot_until_it_ends():
    pol = LeaguePolicy(make_net, rng=random.Random(0), greedy=True)
    pol.load_state_dict({"snapshots": {1: snapshot(1)}, "probs": {1: 1.0}})
    rng = np.random.default_rng(0)
    obs, mask = _obs(1, rng)
    h = torch.zeros(1, pol.hidden_dim)
    pol.act(obs, mask, h, pol.route([("battle-a", "p1")]))
    # Snapshot 1 leaves the league; battle-a goes on with it, a new battle gets snapshot 2.
    pol.load_state_dict({"snapshots": {2: snapshot(2)}, "probs": {2: 1.0}})
    assert set(pol.policies) == {1, 2}
    obs, mask = _obs(2, rng)
    pol.act(obs, mask, torch.zeros(2, pol.hidden_dim), pol.route([("battle-a", "p1"), ("battle-b", "p1")]))
    assert pol.assigned == {("battle-a", "p1"): 1, ("battle-b", "p1"): 2}
    pol.release(("battle-a", "p1"))
    assert set(pol.policies) == {2}  # unloaded once no battle uses it
    assert pol.snapshot_of("battle-a") == 1 and pol.snapshot_of("battle-b") == 2  # labels after the end


def test_rows_are_answered_by_their_own_snapshot():
    pol = LeaguePolicy(make_net, rng=random.Random(0), greedy=True)
    pol.load_state_dict({"snapshots": {1: snapshot(1), 2: snapshot(2)}, "probs": {1: 0.5, 2: 0.5}})
    keys = [(f"battle-{i}", "p2") for i in range(12)]
    rng = np.random.default_rng(1)
    obs, mask = _obs(12, rng)
    h = torch.randn(12, pol.hidden_dim)
    actions, logps, values, new_h = pol.act(obs, mask, h, pol.route(keys))
    drawn = [pol.assigned[k] for k in keys]
    assert set(drawn) == {1, 2}
    for i, k in enumerate(keys):  # the same as that snapshot alone on that row
        a, lp, v, hh = pol.policies[drawn[i]].act(obs[i:i + 1], mask[i:i + 1], h[i:i + 1])
        assert actions[i] == a[0] and values[i] == pytest.approx(v[0], abs=1e-5)
        assert torch.allclose(new_h[i], hh[0], atol=1e-5)


async def test_the_batcher_routes_a_league_policy_by_battle():
    pol = LeaguePolicy(make_net, rng=random.Random(0))
    pol.load_state_dict({"snapshots": {7: snapshot(7)}, "probs": {7: 1.0}})
    hs = HiddenStates(pol.hidden_dim)
    b = InferenceBatcher(pol, hs, live_count=lambda: 2, max_wait_ms=10_000, wait_per_side_ms=0.0)
    b.start()
    rng = np.random.default_rng(2)
    obs, mask = _obs(2, rng)
    futs = [b.decide(k, hs.start(k), obs[i], mask[i]) for i, k in enumerate([("t1", "p1"), ("t2", "p1")])]
    res = await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert all(r.action >= 0 for r in res)  # no fallback: the forward ran
    assert pol.assigned == {("t1", "p1"): 7, ("t2", "p1"): 7}
    await b.close()


def test_same_message_and_seed_same_draws_in_every_backend():
    """The loop's message reaches a local collector as is and a shard worker or Ray actor
    pickled; with the same seed both draw the same snapshot for the same battles."""
    msg = {"snapshots": {1: snapshot(1), 2: snapshot(2), 3: snapshot(3)}, "probs": {1: 0.2, 2: 0.3, 3: 0.5}}
    draws = []
    for m in (msg, pickle.loads(pickle.dumps(msg))):
        pol = LeaguePolicy(make_net, rng=random.Random(5))
        pol.load_state_dict(m)
        draws.append([pol.pick((f"battle-{i}", "p2")) for i in range(200)])
    assert draws[0] == draws[1]
    share = np.bincount(draws[0], minlength=4)[1:] / 200
    assert share == pytest.approx([0.2, 0.3, 0.5], abs=0.1)


async def test_loop_counts_results_per_snapshot_and_pfsp_follows_them(tmp_path):
    cfg = _cfg(tmp_path, **{"train.total_sides": 40, "train.opponents": "self:0.5,league:0.5",
                            "train.league_every_updates": 1, "train.league_size": 3,
                            "train.league_sampling": "pfsp"})
    rng = np.random.default_rng(3)

    class LeagueTransport(ScriptedTransport):
        def _make(self, n):
            n = min(n, self.left)
            self.left -= n
            ids = list(self.published[-1]["league"]["probs"]) if self.published else [0]
            # The learner beats the even snapshots and loses to the odd ones.
            return [PackedTrajectory(fake_traj(self.rng, 5), 1.0 if ids[i % len(ids)] % 2 == 0 else -1.0,
                                     f"league#{ids[i % len(ids)]}", {"win": 0.0}, 0) for i in range(n)]

    tp = LeagueTransport(total=1000, per_wait=8, rng=rng)
    loop = LearningLoop(cfg, "cpu", quiet=True, handle_signals=False)
    await asyncio.wait_for(loop.run(tp), 60)
    last = tp.published[-1]["league"]
    assert len(last["snapshots"]) == 3 and set(last["probs"]) == set(last["snapshots"])
    played = [s for s in last["probs"] if s in loop.league_results]
    even = [last["probs"][s] for s in played if s % 2 == 0]
    odd = [last["probs"][s] for s in played if s % 2 == 1]
    assert even and odd and max(even) < min(odd)  # the ones the learner loses to come up more
    # Metrics fold league#<id> into one "league" column.
    import csv
    header = next(csv.reader(open(tmp_path / "run" / "metrics.csv")))
    assert "win_rate/league" in header and not any("#" in h for h in header)
    # The league and its results survive a checkpoint (a run given more battle sides to train on).
    cfg.train.total_sides = 80
    loop2 = LearningLoop(cfg, "cpu", resume=str(tmp_path / "run" / "latest.pt"), quiet=True, handle_signals=False)
    assert [e["id"] for e in loop2.league] == [e["id"] for e in loop.league]
    assert loop2.league_results == loop.league_results


def test_a_checkpoint_with_the_old_league_format_resumes(tmp_path):
    from maple_async.learn import checkpoint as ckpt
    cfg = _cfg(tmp_path, **{"train.opponents": "self:0.5,league:0.5"})
    loop = LearningLoop(cfg, "cpu", quiet=True, handle_signals=False)
    loop.league = [loop.learner.weights_cpu(), loop.learner.weights_cpu()]  # bare state dicts
    path = loop.save_checkpoint()
    data = ckpt.load(path)
    data.pop("league_results")
    ckpt.save(path, data)
    loop2 = LearningLoop(cfg, "cpu", resume=str(path), quiet=True, handle_signals=False)
    assert [e["id"] for e in loop2.league] == [-2, -1] and all("weights" in e for e in loop2.league)
    assert set(loop2.weights_msg()["league"]["probs"]) == {-2, -1}


async def test_snapshots_are_drawn_on_the_loop_thread_when_the_forward_is_offloaded():
    """Releases and new weights run on the event loop's thread; draws must too, or a draw in
    the forward thread races a release reading the same table."""
    import threading
    pol = LeaguePolicy(make_net, rng=random.Random(0))
    pol.load_state_dict({"snapshots": {7: snapshot(7)}, "probs": {7: 1.0}})
    threads = []
    pick = pol.pick
    pol.pick = lambda key: (threads.append(threading.get_ident()), pick(key))[1]
    hs = HiddenStates(pol.hidden_dim)
    b = InferenceBatcher(pol, hs, live_count=lambda: 2, max_wait_ms=10_000, wait_per_side_ms=0.0,
                         offload_min_batch=1)  # every forward in the worker thread
    b.start()
    obs, mask = _obs(2, np.random.default_rng(3))
    futs = [b.decide(k, hs.start(k), obs[i], mask[i]) for i, k in enumerate([("t1", "p1"), ("t2", "p1")])]
    res = await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert all(r.action >= 0 for r in res) and b.stats.failed_batches == 0
    assert threads and set(threads) == {threading.get_ident()}
    await b.close()


async def test_shards_are_sent_each_snapshot_once_and_a_replaced_worker_all(tmp_path):
    """The sharded transports send a league snapshot once; a worker fed the deltas holds
    every snapshot the loop's draw probabilities name; a replaced worker starts whole."""
    from maple_async.run.shards import ProcessTransport, _Shard
    from maple_async.run.wire import unpack_weights_msg

    class Worker(list):  # what the learner sent it, in order
        send = list.append

        def is_alive(self):
            return True

    class Fake(ProcessTransport):
        def launch(self, i, msg):
            return Worker([msg])

    cfg = _cfg(tmp_path, **{"train.opponents": "self:0.5,league:0.5", "train.league_every_updates": 1,
                            "train.league_size": 2, "train.shards": 2})
    loop = LearningLoop(cfg, "cpu", quiet=True, handle_signals=False)
    tp = Fake(cfg, quiet=True)
    loop._league_rule()
    await tp.start(loop.weights_msg())
    policy = LeaguePolicy(lambda: nets.from_config(cfg.network), rng=random.Random(0))
    policy.load_state_dict(tp.shards[0].worker[0]["league"])
    for upd in range(1, 5):
        loop.learner.updates = upd
        loop._league_rule()
        tp.publish(loop.weights_msg())
        assert tp.shards[1].worker[-1] is tp.shards[0].worker[-1]  # packed once for every shard
        sent = unpack_weights_msg(tp.shards[0].worker[-1])["league"]
        assert list(sent["snapshots"]) == [upd] and set(sent["probs"]) == {upd - 1, upd}
        policy.load_state_dict(sent)
        assert set(policy.policies) == set(sent["probs"])
    # the last message kept for a replacement is whole
    assert set(tp._last_msg["league"]["snapshots"]) == {3, 4}
    assert isinstance(tp.shards[0], _Shard)
