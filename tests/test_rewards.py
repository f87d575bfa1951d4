"""Reward shaping: what the shaped terms add up to over a battle."""

from types import SimpleNamespace

import pytest

from maple_async.config import RewardConfig
from maple_async.obs import rewards
from maple_async.obs.rewards import RewardTracker

# (own HP sum, own fainted, opponent HP sum, opponent fainted) at each decision: a 6-0 win.
STATES = [(6.0, 0, 6.0, 0), (5.5, 0, 4.0, 1), (5.0, 0, 2.0, 3), (4.0, 0, 0.0, 6)]
WON = SimpleNamespace(won=True, lost=False)


def _per_decision(shaping, gamma, monkeypatch):
    monkeypatch.setattr(rewards, "side_state", lambda battle: STATES[-1])
    tr = RewardTracker(RewardConfig(win=1.0, hp=0.1, faint=0.05, shaping=shaping), gamma)
    calls = [tr.step(None, s) for s in STATES]
    assert calls[0] == 0.0  # nothing before the first decision
    return calls[1:] + [tr.final(WON)]  # what decision t earns arrives at decision t + 1


def test_difference_shaping_pays_the_margin_of_victory(monkeypatch):
    r = _per_decision("difference", 0.9, monkeypatch)
    margin = 0.1 * (4.0 - 0.0) + 0.05 * 6
    assert sum(r) == pytest.approx(1.0 + margin)


def test_potential_shaping_pays_no_margin(monkeypatch):
    """gamma Phi(s') - Phi(s) with Phi(end) = 0: the discounted shaped terms sum to -Phi(start)
    (0 in an even start), so only the win is paid, however big the margin."""
    g = 0.9
    r = _per_decision("potential", g, monkeypatch)
    assert sum(g ** t * x for t, x in enumerate(r)) == pytest.approx(g ** 3 * 1.0)
    assert r[0] > 0  # still dense: damage dealt pays at once
