import numpy as np
import torch

from maple_async.inference.hidden import HiddenStates


def test_start_zeroes_and_end_deletes():
    hs = HiddenStates(4)
    g = hs.start(("b1", "p1"))
    assert np.array_equal(hs.get(("b1", "p1")), np.zeros(4))
    assert hs.put(("b1", "p1"), g, torch.ones(4))
    assert np.array_equal(hs.get(("b1", "p1")), np.ones(4))
    # Restarting the same key zeroes it again under a new generation.
    g2 = hs.start(("b1", "p1"))
    assert g2 != g
    assert np.array_equal(hs.get(("b1", "p1")), np.zeros(4))
    hs.end(("b1", "p1"))
    assert len(hs) == 0 and ("b1", "p1") not in hs


def test_late_result_never_written_into_reused_slot():
    hs = HiddenStates(3)
    key = ("battle-x", "p2")
    old = hs.start(key)
    hs.end(key)  # battle ended while its forward pass was in flight
    assert not hs.put(key, old, torch.full((3,), 7.0))
    assert key not in hs
    new = hs.start(key)  # same key reused by a new battle
    assert not hs.put(key, old, torch.full((3,), 7.0))
    assert np.array_equal(hs.get(key), np.zeros(3))
    assert hs.put(key, new, torch.full((3,), 2.0))
    assert hs.stale_writes == 2


def test_gather_reads_zeros_for_ended_keys():
    hs = HiddenStates(2)
    ga = hs.start("a")
    gb = hs.start("b")
    hs.put("a", ga, torch.tensor([1.0, 2.0]))
    hs.put("b", gb, torch.tensor([3.0, 4.0]))
    hs.end("b")
    out = hs.gather(["a", "b"], [ga, gb])
    assert torch.equal(out, torch.tensor([[1.0, 2.0], [0.0, 0.0]]))
