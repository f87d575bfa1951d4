import numpy as np
import pytest
import torch

from maple_async.obs import encoding as enc

from maple_async.obs import actions as act
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from maple_async.config import PPOConfig
from maple_async.learn.learner import Learner, Rollout, compute_gae, make_chunks
from maple_async.learn.metrics import wilson_interval


def test_gae_hand_computed():
    # gamma=0.5, lambda=0.5; rewards [0, 1], values [0.5, 1.0]; terminal after step 1.
    # delta1 = 1 - 1.0 = 0;  delta0 = 0 + 0.5*1.0 - 0.5 = 0
    # A1 = 0; A0 = 0 + 0.25*0 = 0
    adv, ret = compute_gae(np.array([0.0, 1.0]), np.array([0.5, 1.0]), 0.5, 0.5)
    np.testing.assert_allclose(adv, [0.0, 0.0])
    np.testing.assert_allclose(ret, [0.5, 1.0])
    # rewards [1, 0, 2], values [0, 0, 0], gamma=0.9, lambda=0.8
    # deltas = [1, 0, 2]; A2 = 2; A1 = 0 + 0.72*2 = 1.44; A0 = 1 + 0.72*1.44 = 2.0368
    adv, ret = compute_gae(np.array([1.0, 0.0, 2.0]), np.zeros(3), 0.9, 0.8)
    np.testing.assert_allclose(adv, [2.0368, 1.44, 2.0], rtol=1e-6)
    np.testing.assert_allclose(ret, adv)


def test_chunks_never_cross_battles():
    lengths = [5, 3, 8, 1]
    for bptt in (0, 1, 2, 3, 4, 100):
        chunks = make_chunks(lengths, bptt)
        covered = {b: [] for b in range(len(lengths))}
        for b, s, e in chunks:
            assert 0 <= s < e <= lengths[b]
            if bptt > 0:
                assert e - s <= bptt and s % bptt == 0
            covered[b].extend(range(s, e))
        for b, n in enumerate(lengths):
            assert sorted(covered[b]) == list(range(n))  # every step exactly once
    assert make_chunks([5, 3], 0) == [(0, 0, 5), (1, 0, 3)]


def fake_traj(rng, n, obs_dim=enc.OBS_DIM):
    masks = rng.random((n, act.N_ACTIONS)) < 0.4
    masks[np.arange(n), rng.integers(0, act.N_ACTIONS, n)] = True
    actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
    return {"obs": rng.standard_normal((n, obs_dim)).astype(np.float32), "masks": masks,
            "actions": actions, "logps": np.full(n, -1.0, np.float32),
            "values": rng.standard_normal(n).astype(np.float32),
            "rewards": rng.standard_normal(n).astype(np.float32),
            "versions": np.zeros(n, np.int64)}


@pytest.mark.parametrize("bptt", [0, 3])
def test_padding_is_masked_out_of_every_loss_term(bptt):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    cfg = PPOConfig(bptt_length=bptt, normalize_advantages=True)
    learner = Learner(nets.build("lstm", hidden_size=16), cfg)
    trajs = [fake_traj(rng, n) for n in (7, 3, 5)]
    ro = Rollout.from_trajectories(trajs, cfg, "cpu")
    chunks = make_chunks(ro.lengths, bptt)
    seq_len = max(e - s for _, s, e in chunks)
    h = learner.chunk_start_hidden(ro)
    batch = learner._gather(ro, chunks, seq_len, h)
    _, info = learner.loss(**batch)
    # Observations come for the real steps only; poison every other padded input: no loss
    # term may change.
    assert batch["obs"].shape[0] == int(batch["valid"].sum())
    pad = ~batch["valid"]
    assert pad.any()
    poisoned = dict(batch)
    poisoned["advantages"] = batch["advantages"].masked_fill(pad, 1e6)
    poisoned["returns"] = batch["returns"].masked_fill(pad, -1e6)
    poisoned["old_logps"] = batch["old_logps"].masked_fill(pad, 50.0)
    _, info2 = learner.loss(**poisoned)
    for k in info:
        assert info[k] == pytest.approx(info2[k], rel=1e-5, abs=1e-6), k


def test_hidden_zero_at_battle_start_and_recomputed_at_chunk_starts():
    rng = np.random.default_rng(1)
    torch.manual_seed(1)
    cfg = PPOConfig(bptt_length=2)
    learner = Learner(nets.build("lstm", hidden_size=8), cfg)
    ro = Rollout.from_trajectories([fake_traj(rng, 5), fake_traj(rng, 4)], cfg, "cpu")
    h = learner.chunk_start_hidden(ro)
    net = learner.network
    assert torch.equal(h[:, 0], torch.zeros_like(h[:, 0]))  # battle start: zero
    with torch.no_grad():  # chunk k=2 starts after 4 steps from zero, current weights
        _, _, expect = net.forward_sequence(ro.obs[:1, :4], net.initial_hidden(1), return_hidden=True)
    torch.testing.assert_close(h[0, 2], expect[0])


def test_sequences_in_a_minibatch_do_not_leak_into_each_other():
    rng = np.random.default_rng(2)
    cfg = PPOConfig()
    learner = Learner(nets.build("lstm", hidden_size=8), cfg)
    a, b = fake_traj(rng, 6), fake_traj(rng, 9)
    net = learner.network
    ro_ab = Rollout.from_trajectories([a, b], cfg, "cpu")
    ro_a = Rollout.from_trajectories([a], cfg, "cpu")
    with torch.no_grad():
        la, _ = net.forward_sequence(ro_ab.obs, net.initial_hidden(2))
        lb, _ = net.forward_sequence(ro_a.obs, net.initial_hidden(1))
    torch.testing.assert_close(la[0, :6], lb[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["mlp", "lstm"])
def test_update_logps_equal_collection_logps(kind):
    """Masked logits in the update reproduce collection's log-probs exactly (ratio = 1)."""
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    net = nets.build(kind, hidden_size=16)
    policy = InferencePolicy(nets.build(kind, hidden_size=16))
    policy.network.load_state_dict(net.state_dict())
    trajs = []
    for n in (6, 4):
        obs = rng.standard_normal((n, enc.OBS_DIM)).astype(np.float32)
        masks = rng.random((n, act.N_ACTIONS)) < 0.3
        masks[:, 6] = True
        h = torch.zeros(1, policy.hidden_dim)
        acts, lps, vals = [], [], []
        for t in range(n):
            a, lp, v, h = policy.act(obs[t:t + 1], masks[t:t + 1], h)
            acts.append(a[0]); lps.append(lp[0]); vals.append(v[0])
        trajs.append({"obs": obs, "masks": masks, "actions": np.array(acts), "logps": np.array(lps),
                      "values": np.array(vals), "rewards": np.zeros(n, np.float32),
                      "versions": np.zeros(n, np.int64)})
    learner = Learner(net, PPOConfig())
    ro = Rollout.from_trajectories(trajs, learner.cfg, "cpu")
    chunks = make_chunks(ro.lengths, 0)
    batch = learner._gather(ro, chunks, max(ro.lengths), learner.chunk_start_hidden(ro))
    with torch.no_grad():
        logits, _ = net.forward_sequence(batch["obs"], batch["h0"], valid=batch["valid"])
        logp = torch.log_softmax(nets.masked_logits(logits, batch["masks"]), -1)
        new = logp.gather(-1, batch["actions"][..., None]).squeeze(-1)
    torch.testing.assert_close(new[batch["valid"]], batch["old_logps"][batch["valid"]], rtol=1e-5, atol=1e-5)
    _, info = learner.loss(**batch)
    assert info["approx_kl"] == pytest.approx(0.0, abs=1e-6) and info["clipfrac"] == 0.0


def test_each_minibatch_is_padded_to_its_own_longest_sequence():
    rng = np.random.default_rng(3)
    torch.manual_seed(3)
    cfg = PPOConfig(minibatch_sequences=2, epochs=1)
    learner = Learner(nets.build("lstm", hidden_size=16), cfg)
    ro = Rollout.from_trajectories([fake_traj(rng, n) for n in (2, 40, 3, 4, 5, 2)], cfg, "cpu")
    chunks = make_chunks(ro.lengths, 0)
    h = learner.chunk_start_hidden(ro)
    seen, gather = [], learner._gather
    learner._gather = lambda ro_, mb, seq_len, h_: seen.append(mb) or gather(ro_, mb, seq_len, h_)
    batches = list(learner._minibatches(ro, chunks, 1))
    assert len(batches) == 3 and min(b["valid"].shape[1] for b in batches) < 40
    for mb, batch in zip(seen, batches):
        assert batch["valid"].shape[1] == max(e - s for _, s, e in mb)  # no column of padding only
        # the same sequences padded to the update's longest give the same loss
        wide = gather(ro, mb, max(ro.lengths), h)
        torch.testing.assert_close(learner.loss(**batch)[0], learner.loss(**wide)[0])


@pytest.mark.parametrize("algo,bptt", [("ppo", 0), ("ppo", 4), ("reinforce", 0)])
def test_update_runs_and_changes_weights(algo, bptt):
    rng = np.random.default_rng(4)
    learner = Learner(nets.build("lstm", hidden_size=16), PPOConfig(algo=algo, bptt_length=bptt, epochs=2,
                                                                     minibatch_sequences=2))
    before = {k: v.clone() for k, v in learner.network.state_dict().items()}
    m = learner.update([fake_traj(rng, n) for n in (5, 9, 3)])
    assert learner.updates == 1 and np.isfinite(m["pg_loss"]) and m["steps"] == 17
    assert any(not torch.equal(before[k], v) for k, v in learner.network.state_dict().items())


def test_wilson_interval():
    lo, hi = wilson_interval(90, 100)
    assert 0.82 < lo < 0.84 and 0.94 < hi < 0.96
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_linear_lr_follows_the_budget_that_ends_first(tmp_path):
    """With max_minutes the run ends on time: the LR must reach its floor then, not stay at
    the share of total_sides done so far."""
    from maple_async.config import Config
    from maple_async.run.loop import LearningLoop

    learner = Learner(nets.build("mlp", hidden_size=8), PPOConfig(lr=1e-3, lr_schedule="linear"),
                      total_updates=10)
    assert learner.lr_at(0.0) == pytest.approx(1e-3) and learner.lr_at(0.5) == pytest.approx(5e-4)
    assert learner.lr_at(1.2) == pytest.approx(5e-5)  # the 5% floor
    m = learner.update([fake_traj(np.random.default_rng(0), 4)], progress=0.75)
    assert m["lr"] == pytest.approx(2.5e-4) and m["entropy_coef"] == pytest.approx(0.01)  # constant
    learner.cfg.entropy_schedule = "linear"  # the entropy bonus anneals too, to a 10% floor
    m = learner.update([fake_traj(np.random.default_rng(0), 4)], progress=0.75)
    assert m["entropy_coef"] == pytest.approx(0.0025) and learner.entropy_coef_at(0.99) == pytest.approx(0.001)

    cfg = Config()
    cfg.train.run_dir, cfg.train.tensorboard = str(tmp_path), False
    cfg.train.total_sides, cfg.train.max_minutes = 10_000, 30.0
    loop = LearningLoop(cfg, "cpu", quiet=True, handle_signals=False)
    loop.counters["battles"] = 1_000  # 10% of the battles ...
    assert loop.progress(27 * 60) == pytest.approx(0.9)  # ... but 90% of the time
    loop.counters["battles"] = 9_500
    assert loop.progress(60) == pytest.approx(0.95)
    cfg.train.max_minutes = 0.0  # no time limit: battles only
    assert loop.progress(10 ** 6) == pytest.approx(0.95)
    # A decision budget (published curves count steps) anneals over decisions when it ends first.
    cfg.train.total_decisions = 1_000_000
    loop.counters["battles"], loop.counters["decisions"] = 1_000, 400_000
    assert loop.progress(60) == pytest.approx(0.4)
    cfg.train.total_decisions = 0
    assert loop.progress(60) == pytest.approx(0.1)


def test_seeded_updates_are_reproducible():
    """runner.seed seeds torch's global stream; network init and minibatch order come from
    it, so one seed gives one update and another seed another."""
    def run(seed):
        torch.manual_seed(seed)
        learner = Learner(nets.build("lstm", hidden_size=8), PPOConfig(epochs=2, minibatch_sequences=1))
        learner.update([fake_traj(np.random.default_rng(1), n) for n in (3, 5, 4)])
        return learner.network.state_dict()

    a, b, c = run(5), run(5), run(6)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_shard_workers_get_their_own_seeds():
    from maple_async.config import Config
    from maple_async.run.transports import ProcessTransport
    cfg = Config()
    cfg.runner.seed, cfg.train.shards = 7, 3
    tp = ProcessTransport(cfg, quiet=True)
    seeds = [tp._worker_cfg(i)["runner"]["seed"] for i in range(3)]
    assert len(set(seeds + [7])) == 4
    cfg.runner.seed = None
    assert tp._worker_cfg(0)["runner"]["seed"] is None


@pytest.mark.parametrize("algo", ["ppo", "reinforce"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_policy_gradient_sign(algo, sign):
    """A step that earned more than its value estimate becomes more likely after an update,
    one that earned less, less likely (with the log-probs and values recorded at collection)."""
    torch.manual_seed(0)
    net = nets.build("lstm", hidden_size=16)
    policy = InferencePolicy(nets.build("lstm", hidden_size=16))
    policy.network.load_state_dict(net.state_dict())
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((1, enc.OBS_DIM)).astype(np.float32)
    mask = np.zeros((1, act.N_ACTIONS), bool)
    mask[0, 6:10] = True
    trajs = []
    for _ in range(8):  # one-step battles from the same state: action 7, reward +-1
        a, lp, v, _ = policy.act(obs.copy(), mask, torch.zeros(1, policy.hidden_dim))
        logit_lp = torch.log_softmax(nets.masked_logits(policy.network(torch.from_numpy(obs), torch.zeros(
            1, policy.hidden_dim))[0][0], torch.from_numpy(mask)), -1)[0, 7].item()
        trajs.append({"obs": obs.copy(), "masks": mask.copy(), "actions": np.array([7]),
                      "logps": np.array([logit_lp], np.float32), "values": v.astype(np.float32),
                      "rewards": np.array([sign], np.float32), "versions": np.zeros(1, np.int64)})
    before = logit_lp
    learner = Learner(net, PPOConfig(algo=algo, lr=1e-3, epochs=2, minibatch_sequences=4,
                                     normalize_advantages=False, entropy_coef=0.0))
    learner.update(trajs)
    with torch.no_grad():
        (logits, _), _ = net(torch.from_numpy(obs), torch.zeros(1, net.hidden_dim))
        after = torch.log_softmax(nets.masked_logits(logits, torch.from_numpy(mask)), -1)[0, 7].item()
    assert (after - before) * sign > 1e-4, (before, after)


@pytest.mark.parametrize("kind", ["mlp", "lstm", "attention"])
def test_real_steps_only_give_the_padded_forward(kind):
    """forward_sequence on the real steps (valid=) equals the padded forward there, and its
    gradients equal the padded one's when padding is masked out of the loss."""
    torch.manual_seed(5)
    net = nets.build(kind, hidden_size=16)
    x = torch.randn(3, 6, enc.OBS_DIM)
    valid = torch.arange(6)[None, :] < torch.tensor([6, 2, 4])[:, None]
    x = x * valid[..., None]
    h0 = net.initial_hidden(3)
    la, va = net.forward_sequence(x, h0)
    lb, vb = net.forward_sequence(x[valid], h0, valid=valid)
    torch.testing.assert_close(la[valid], lb[valid], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(va[valid], vb[valid], rtol=1e-5, atol=1e-5)
    assert not lb[~valid].any() and not vb[~valid].any()
    grads = []
    for logits, values in ((la, va), (lb, vb)):
        net.zero_grad()
        ((logits.sum(-1) + values) * valid).sum().backward(retain_graph=True)
        grads.append([p.grad.clone() for p in net.parameters() if p.grad is not None])
    for ga, gb in zip(*grads):
        torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-5)


def test_an_entropy_floor_raises_the_bonus_below_it_and_lowers_it_back_above(tmp_path):
    from maple_async import config as C
    learner = Learner(nets.build("mlp", hidden_size=8), PPOConfig(entropy_coef=0.01, entropy_target=50.0))
    rng = np.random.default_rng(0)
    weights = [learner.update([fake_traj(rng, 4)])["entropy_coef"] for _ in range(3)]
    assert weights == pytest.approx([0.01, 0.011, 0.0121])  # entropy is far below 50 nats
    state = learner.state_dict()
    again = Learner(nets.build("mlp", hidden_size=8), PPOConfig(entropy_coef=0.01, entropy_target=50.0))
    again.load_state_dict(state)  # a resumed run keeps the weight it had reached
    assert again.update([fake_traj(rng, 4)])["entropy_coef"] == pytest.approx(0.01331)
    for _ in range(60):
        m = again.update([fake_traj(rng, 4)])
    assert m["entropy_coef"] == pytest.approx(0.2)  # the ceiling
    again.cfg.entropy_target = 0.01  # now above the floor: back down, never under entropy_coef
    for _ in range(60):
        m = again.update([fake_traj(rng, 4)])
    assert m["entropy_coef"] == pytest.approx(0.01)
    again.cfg.entropy_target = 50.0
    for _ in range(60):
        again.update([fake_traj(rng, 4)])
    again.cfg.entropy_target = 0.0  # resumed with the floor off: the carried factor is not applied
    assert again.update([fake_traj(rng, 4)])["entropy_coef"] == pytest.approx(0.01)
    big = Learner(nets.build("mlp", hidden_size=8), PPOConfig(entropy_coef=0.3, entropy_target=50.0))
    assert [big.update([fake_traj(rng, 4)])["entropy_coef"] for _ in range(2)] == pytest.approx([0.3, 0.3])
    plain = Learner(nets.build("mlp", hidden_size=8), PPOConfig(entropy_coef=0.01))
    assert [plain.update([fake_traj(rng, 4)])["entropy_coef"] for _ in range(2)] == pytest.approx([0.01, 0.01])
    with pytest.raises(C.ConfigError, match="ppo.entropy_target"):
        C.load(None, {"ppo.entropy_target": 0.4, "ppo.entropy_coef": 0.0})
    assert C.load(None, {"ppo.entropy_target": 0.4}).ppo.entropy_target == 0.4
