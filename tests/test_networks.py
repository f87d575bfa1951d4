import pytest
import torch

from maple_async.obs import encoding as enc

from maple_async.obs import actions as act
from maple_async.inference.policy import InferencePolicy, resolve_device, sample_categorical
from maple_async.learn import networks as nets


@pytest.mark.parametrize("kind", ["lstm", "attention"])
def test_recurrent_output_independent_of_batch_companions(kind):
    torch.manual_seed(0)
    net = nets.build(kind, hidden_size=32).eval()
    steps = 6
    xa = torch.randn(steps, enc.OBS_DIM)
    others = torch.randn(steps, 5, enc.OBS_DIM)
    h_alone = net.initial_hidden(1)
    h_batch = net.initial_hidden(6)
    # Companions start with non-zero state: must not leak into battle A.
    h_batch[1:] = torch.randn(5, net.hidden_dim)
    with torch.no_grad():
        for t in range(steps):
            (la, va), h_alone = net(xa[t:t + 1], h_alone)
            xb = torch.cat([xa[t:t + 1], others[t]], dim=0)
            (lb, vb), h_batch = net(xb, h_batch)
            torch.testing.assert_close(lb[0], la[0], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(vb[0], va[0], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(h_batch[0], h_alone[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind,layers", [("mlp", 1), ("lstm", 1), ("lstm", 2), ("attention", 1)])
def test_sequence_unroll_matches_stepwise(kind, layers):
    """The acting step (fused lstm_cell for one layer) equals the training unroll (nn.LSTM)."""
    torch.manual_seed(1)
    net = nets.build(kind, hidden_size=16, num_layers=layers).eval()
    x = torch.randn(3, 5, enc.OBS_DIM)
    h = net.initial_hidden(3)
    with torch.no_grad():
        logits_seq, values_seq = net.forward_sequence(x, h)
        for t in range(5):
            (lt, vt), h = net(x[:, t], h)
            torch.testing.assert_close(logits_seq[:, t], lt, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(values_seq[:, t], vt, rtol=1e-5, atol=1e-6)


def test_truncated_bptt_same_values_cut_gradients():
    torch.manual_seed(2)
    net = nets.build("lstm", hidden_size=16)
    x = torch.randn(2, 8, enc.OBS_DIM, requires_grad=True)
    h = net.initial_hidden(2)
    full, _ = net.forward_sequence(x, h)
    cut, _ = net.forward_sequence(x, h, detach_every=4)
    torch.testing.assert_close(full, cut)
    cut[:, 7].sum().backward()
    # The loss at t=7 reaches inputs of its own chunk (4..7) but not the previous one.
    assert x.grad[:, :4].abs().sum() == 0
    assert x.grad[:, 4:].abs().sum() > 0


def test_networks_hold_no_state():
    net = nets.build("lstm", hidden_size=8)
    x = torch.randn(2, enc.OBS_DIM)
    h = net.initial_hidden(2)
    with torch.no_grad():
        out1, _ = net(x, h)
        net(torch.randn(2, enc.OBS_DIM), torch.randn(2, net.hidden_dim))
        out2, _ = net(x, h)
    torch.testing.assert_close(out1[0], out2[0])


def test_inference_policy_respects_mask():
    torch.manual_seed(3)
    pol = InferencePolicy(nets.build("lstm", hidden_size=16))
    obs = torch.randn(64, enc.OBS_DIM).numpy()
    mask = torch.zeros(64, act.N_ACTIONS, dtype=torch.bool)
    for i in range(64):
        mask[i, torch.randperm(act.N_ACTIONS)[: 1 + i % 4]] = True
    for _ in range(20):
        actions, logps, values, h = pol.act(obs, mask.numpy(), torch.zeros(64, pol.hidden_dim))
        assert mask[torch.arange(64), torch.from_numpy(actions)].all()
        assert (logps <= 0).all() and h.shape == (64, pol.hidden_dim)


def test_resolve_device():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError):
            resolve_device("cuda")


def test_entity_head_scores_each_slot_with_one_shared_scorer():
    """Swapping two move blocks swaps their entity scores (and the tera copies); swapping
    two own-team blocks swaps their switch scores."""
    torch.manual_seed(0)
    head = nets.EntityHead(hidden_size=16)
    for layer in (head.poke_ctx, head.move_ctx, head.poke_out, head.move_out):
        torch.nn.init.normal_(layer.weight)
    x, y = torch.randn(3, enc.OBS_DIM), torch.randn(3, 16)
    out = head(x, y)
    assert out.shape == (3, act.N_ACTIONS)
    for first in (act.MEGA, act.ZMOVE, act.DYNAMAX, act.TERA):  # each gimmick scores as its move
        assert torch.equal(out[:, 6:10], out[:, first:first + 4])
    xs = x.clone()
    m0, m2 = enc.MOVES, enc.MOVES + 2 * enc.MOVE_DIM
    xs[:, m0:m0 + enc.MOVE_DIM], xs[:, m2:m2 + enc.MOVE_DIM] = x[:, m2:m2 + enc.MOVE_DIM], x[:, m0:m0 + enc.MOVE_DIM]
    p1, p4 = enc.OWN_TEAM + enc.POKE_DIM, enc.OWN_TEAM + 4 * enc.POKE_DIM
    xs[:, p1:p1 + enc.POKE_DIM], xs[:, p4:p4 + enc.POKE_DIM] = x[:, p4:p4 + enc.POKE_DIM], x[:, p1:p1 + enc.POKE_DIM]
    swapped = head(xs, y)
    assert torch.allclose(swapped[:, [8, 7, 6, 9]], out[:, 6:10], atol=1e-6)
    assert torch.allclose(swapped[:, [0, 4, 2, 3, 1, 5]], out[:, 0:6], atol=1e-6)


def test_sample_categorical_follows_the_distribution_and_never_draws_masked():
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.0, 0.5, 0.0]])
    mask = torch.tensor([[True, True, True, True, True, False]])
    logp = torch.log_softmax(nets.masked_logits(logits, mask), dim=-1).expand(40000, -1)
    counts = torch.bincount(sample_categorical(logp), minlength=6).double() / 40000
    assert counts[5] == 0
    torch.testing.assert_close(counts, logp[0].exp().double(), atol=0.01, rtol=0)
