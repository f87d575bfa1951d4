"""search/choice.py: the rules from payoff tables to an action, on tables small enough to
solve by hand."""

import numpy as np
import pytest

from maple_async.search import choice

NAN = np.nan
PENNIES = np.array([[1.0, -1.0], [-1.0, 1.0]])


def test_matching_pennies_equilibrium_is_half_half_with_value_zero():
    c = choice.equilibrium([PENNIES])
    np.testing.assert_allclose(c.probs, [0.5, 0.5], atol=0.01)
    assert abs(c.value) < 0.01


def test_equilibrium_of_an_unbalanced_game():
    # Row 0 wins 2 or loses 1, row 1 loses 1 or wins 1: x = (2/5, 3/5), value 1/5.
    c = choice.equilibrium([np.array([[2.0, -1.0], [-1.0, 1.0]])])
    np.testing.assert_allclose(c.probs, [0.4, 0.6], atol=0.01)
    assert c.value == pytest.approx(0.2, abs=0.01)


def test_equilibrium_is_deterministic_and_sampled_with_rng():
    t = np.random.default_rng(0).uniform(-1, 1, (5, 7))
    a, b = choice.equilibrium([t]), choice.equilibrium([t])
    np.testing.assert_array_equal(a.probs, b.probs)
    draws = {choice.equilibrium([PENNIES], rng=np.random.default_rng(s)).action for s in range(20)}
    assert draws == {0, 1}


def test_a_dominant_action_is_picked_by_every_rule():
    t = np.array([[0.1, -0.2, 0.0], [0.5, 0.3, 0.4], [-0.1, 0.2, -0.3]])
    for rule in (choice.maxmin, choice.equilibrium, choice.expected):
        c = rule([t])
        assert c.action == 1, rule.__name__
        assert c.probs[1] == pytest.approx(1.0, abs=0.01), rule.__name__
    assert choice.maxmin([t]).value == pytest.approx(0.3)
    assert choice.equilibrium([t]).value == pytest.approx(0.3, abs=0.01)
    assert choice.expected([t]).value == pytest.approx(0.4)


def test_maxmin_prefers_the_safe_action_expected_the_greedy_one():
    t = np.array([[1.0, -1.0], [0.2, 0.1]])
    assert choice.maxmin([t]).action == 1
    assert choice.expected([t], their_prior=[0.9, 0.1]).action == 0


def test_nans_are_ignored():
    # Row 0's worst played reply is 0.5; row 1 would be worse at its NaN cell if it were played.
    t = np.array([[0.5, NAN], [0.6, -0.9]])
    assert choice.maxmin([t]).action == 0
    assert choice.maxmin([t]).value == pytest.approx(0.5)
    assert choice.expected([t]).value == pytest.approx(0.5)
    # A row nothing played gets no search probability.
    u = np.array([[NAN, NAN], [0.1, 0.2]])
    for rule in (choice.maxmin, choice.equilibrium, choice.expected):
        c = rule([u])
        assert c.action == 1 and c.probs[0] == 0.0, rule.__name__


def test_weights_matter():
    a = np.array([[1.0, 1.0], [0.0, 0.0]])  # state A: action 0 is right
    b = np.array([[-1.0, -1.0], [0.0, 0.0]])  # state B: action 1 is right
    for rule in (choice.maxmin, choice.equilibrium, choice.expected):
        assert rule([a, b], weights=[0.8, 0.2]).action == 0, rule.__name__
        assert rule([a, b], weights=[0.2, 0.8]).action == 1, rule.__name__


def test_maxmin_takes_the_worst_inside_each_state():
    # The opponent knows the state: per state, action 0 meets its bad reply (-1) each time.
    a = np.array([[1.0, -1.0], [0.0, 0.0]])
    b = np.array([[-1.0, 1.0], [0.0, 0.0]])
    assert choice.maxmin([a, b]).action == 1
    assert choice.maxmin([a, b]).value == pytest.approx(0.0)


def test_prior_mixing():
    t = np.array([[1.0, 1.0], [0.0, 0.0]])
    c = choice.maxmin([t], prior=[0.0, 1.0], prior_weight=0.25)
    np.testing.assert_allclose(c.probs, [0.75, 0.25])
    assert c.action == 0 and c.value == pytest.approx(1.0)
    assert choice.maxmin([t], prior=[0.0, 1.0], prior_weight=1.0).action == 1
    # An unplayed row keeps its prior share.
    u = np.array([[NAN, NAN], [0.1, 0.2]])
    np.testing.assert_allclose(choice.expected([u], prior=[3, 1], prior_weight=0.5).probs,
                               [0.375, 0.625])


def test_scores_weigh_the_prior_by_their_gaps_with_q_scale():
    # Row 0's worst reply 0.1, row 1's 0.0: max-min alone takes row 0 whatever the prior.
    t = np.array([[0.1, 0.5], [0.0, 0.0]])
    assert choice.maxmin([t], prior=[0.2, 0.8], prior_weight=0.5).action == 0
    c = choice.maxmin([t], prior=[0.2, 0.8], q_scale=10.0)
    np.testing.assert_allclose(c.scores, [0.1, 0.0])
    # prior * exp(10 * score): 0.2 e^1 = 0.54 against 0.8: the policy's 4:1 outweighs a 0.1 gap
    np.testing.assert_allclose(c.probs, np.array([0.2 * np.e, 0.8]) / (0.2 * np.e + 0.8))
    assert c.action == 1
    # a gap of 0.2 at the same scale outweighs it; prior_weight is then unused
    wide = np.array([[0.2, 0.5], [0.0, 0.0]])
    assert choice.maxmin([wide], prior=[0.2, 0.8], q_scale=10.0, prior_weight=1.0).action == 0
    # an unscored row counts as the worst scored, its prior kept
    u = np.array([[NAN, NAN], [0.1, 0.2], [0.3, 0.4]])
    c = choice.expected([u], prior=[0.5, 0.25, 0.25], q_scale=5.0)
    np.testing.assert_allclose(c.scores, [NAN, 0.15, 0.35])
    np.testing.assert_allclose(c.probs, np.array([0.5, 0.25, 0.25 * np.e]) / (0.75 + 0.25 * np.e))
    # equilibrium's scores are each row against their equilibrium strategy (a dominated row
    # scores below); its rows played all score the game's value, so q_scale is refused there
    c = choice.equilibrium([np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])])
    np.testing.assert_allclose(c.scores, [0.5, 0.5, -1.0], atol=1e-2)
    with pytest.raises(ValueError, match="q_scale"):
        choice.equilibrium([PENNIES], prior=[0.9, 0.1], q_scale=3.0)
    # without a prior q_scale changes nothing
    assert choice.maxmin([t], q_scale=10.0).action == 0
    with pytest.raises(ValueError, match="q_scale"):
        choice.maxmin([t], prior=[0.5, 0.5], q_scale=-1.0)


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        choice.maxmin([PENNIES], prior_weight=1.5)
    with pytest.raises(ValueError):
        choice.maxmin([PENNIES, PENNIES], weights=[1.0])
    with pytest.raises(ValueError):
        choice.maxmin([np.full((2, 2), NAN)])
    with pytest.raises(ValueError):
        choice.expected([PENNIES], their_prior=[1.0, 0.0, 0.0])
    with pytest.raises(ValueError):
        choice.maxmin([PENNIES], prior=[1.0], prior_weight=0.5)


def test_equilibrium_stops_near_an_equilibrium():
    t = [np.random.default_rng(i).uniform(-1, 1, (9, 9)) for i in range(4)]
    a = choice.average_table(t)
    c = choice.equilibrium(t, tol=1e-3)
    # The opponent's best reply to our strategy costs us little against the game's value.
    assert c.value - (c.probs @ a).min() < 2e-3
    full = choice.equilibrium(t, tol=0.0, iterations=5000)
    assert abs(full.value - c.value) < 2e-3


def test_maxmin_weighs_the_modelled_reply_against_the_worst():
    # row 0 is safe (0.1 against both), row 1 beats the modelled reply (col 0) and loses to col 1
    t = np.array([[0.1, 0.1], [0.8, -0.4]])
    assert choice.maxmin([t]).action == 0
    mixed = choice.maxmin([t], model=[0], model_weight=0.5)
    assert mixed.action == 1 and mixed.scores == pytest.approx([0.1, 0.2])
    # a modelled reply the row did not play, or no model in a state, scores that state's worst
    nan = np.array([[0.1, 0.1], [np.nan, -0.4]])
    assert choice.maxmin([nan], model=[0], model_weight=1.0).scores == pytest.approx([0.1, -0.4])
    assert choice.maxmin([t, t], model=[-1, 0], model_weight=1.0).scores == pytest.approx([0.1, 0.2])
    with pytest.raises(ValueError, match="one column per state"):
        choice.maxmin([t], model=[0, 1], model_weight=0.5)
