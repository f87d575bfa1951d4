"""From payoff tables to an action: pure numpy, no simulator, no network.

Input, for one decision: per sampled state ``s`` (weight ``w_s``) a table ``V_s[a, b]``, our
payoff when we play our legal action ``a`` and the opponent its legal action ``b`` (a leaf's
value, in [-1, 1]); NaN where that pair was not played. Every table has the same rows (our
legal actions) and columns (theirs), in the same order.

Rules:

* :func:`maxmin` — per state, each action's worst reply; the action whose worst, averaged over
  states by weight, is best. The opponent is taken to know the state (it knows its own team),
  we do not: so the minimum is inside the state, the average outside. Safe against a reply
  picked to hurt us; gives nothing away when the opponent is weaker than its worst case.
* :func:`equilibrium` — the mixed Nash equilibrium of the weight-averaged zero-sum table
  (regret matching+, alternating updates, linearly weighted average: deterministic). The
  right answer to simultaneous moves: a pure max-min action can be read and punished, a
  mixed one cannot. Its action should be drawn (pass ``rng``), not taken as the argmax.
* :func:`expected` — the best action against a given distribution of their replies (the
  opponent policy's prior, or uniform): right when the opponent is predictable.

Each rule may be mixed with our own prior (the policy's probabilities) by ``prior_weight``
in [0, 1]: ``probs = (1 - prior_weight) * search + prior_weight * prior``. An action whose
row has no played entry gets no probability from the search (its value is unknown) but keeps
its prior share. Or, with ``q_scale`` c > 0, by the rule's scores instead of its pick:
``probs ∝ prior * exp(c * score)`` (Gumbel MuZero's improved policy: a score gap must
outweigh the policy's log-odds before it overrules the policy, so a noisy table moves the
choice only as far as its gaps are large; an unscored action counts as the worst scored).
Each returns a :class:`Choice`: the chosen action (drawn from ``probs`` with ``rng``, else
its argmax), ``probs``, the table's value under the rule (before any mixing) and each
action's score under the rule.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

Tables = Sequence[np.ndarray]
CHECK_EVERY = 50


@dataclass(frozen=True)
class Choice:
    action: int
    probs: np.ndarray  # one per our action, sums to 1
    value: float  # the table's value under the rule, before mixing with the prior
    scores: np.ndarray  # one per our action under the rule (NaN: not scored)


def _stack(tables: Tables, weights: Optional[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray([np.asarray(t, dtype=np.float64) for t in tables])
    if v.ndim != 3 or v.shape[0] == 0 or v.shape[1] == 0 or v.shape[2] == 0:
        raise ValueError(f"expected one or more tables of equal shape (our actions x theirs), "
                         f"got an array of shape {v.shape}")
    w = np.ones(len(v)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(v),) or (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"weights must be {len(v)} non-negative numbers with a positive sum")
    if np.isnan(v).all():
        raise ValueError("every entry of every table is NaN: nothing was played")
    return v, w


def _weighted_mean(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Mean over the first axis by weight, skipping NaN; NaN where every state is NaN."""
    played = ~np.isnan(values)
    ww = np.where(played, w.reshape((-1,) + (1,) * (values.ndim - 1)), 0.0)
    total = ww.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (np.nan_to_num(values) * ww).sum(axis=0) / total, np.nan)


def average_table(tables: Tables, weights: Optional[Sequence[float]] = None) -> np.ndarray:
    """The weight-averaged table over states, each cell over the states that played it."""
    v, w = _stack(tables, weights)
    return _weighted_mean(v, w)


def _argmax_probs(scores: np.ndarray) -> np.ndarray:
    """Uniform over the best scores (NaN never best)."""
    if np.isnan(scores).all():
        raise ValueError("no action of ours has a score: nothing it played was weighed")
    best = np.nanmax(scores)
    top = np.isclose(scores, best, rtol=0.0, atol=1e-12) & ~np.isnan(scores)
    return top / top.sum()


def _finish(search: np.ndarray, value: float, scores: np.ndarray, prior: Optional[Sequence[float]],
            prior_weight: float, rng: Optional[np.random.Generator], q_scale: float = 0.0) -> Choice:
    if not 0.0 <= prior_weight <= 1.0:
        raise ValueError(f"prior_weight must be in [0, 1], got {prior_weight}")
    if not (q_scale >= 0.0 and np.isfinite(q_scale)):
        raise ValueError(f"q_scale must be a finite number >= 0, got {q_scale}")
    probs = search
    if prior is not None and (prior_weight > 0 or q_scale > 0):
        p = np.asarray(prior, dtype=np.float64)
        if p.shape != search.shape or (p < 0).any() or p.sum() <= 0:
            raise ValueError(f"prior must be {len(search)} non-negative numbers with a positive sum")
        p = p / p.sum()
        if q_scale > 0:
            s = np.where(np.isnan(scores), np.nanmin(scores), scores)
            with np.errstate(divide="ignore"):
                logits = np.log(p) + q_scale * (s - s.max())
            probs = np.exp(logits - logits.max())
        else:
            probs = (1.0 - prior_weight) * search + prior_weight * p
    probs = probs / probs.sum()
    action = int(rng.choice(len(probs), p=probs)) if rng is not None else int(np.argmax(probs))
    return Choice(action, probs, float(value), scores)


def maxmin(tables: Tables, weights: Optional[Sequence[float]] = None,
           prior: Optional[Sequence[float]] = None, prior_weight: float = 0.0,
           rng: Optional[np.random.Generator] = None, q_scale: float = 0.0,
           model: Optional[Sequence[int]] = None, model_weight: float = 0.0) -> Choice:
    """The action whose worst reply (per state, NaN skipped), averaged over states by
    weight, is best. Ties share the search's probability. ``model``: per state, the column of
    the reply the opponent is expected to play (-1: none); with ``model_weight`` w a state
    scores an action ``(1 - w) worst + w`` its cell in that column (its worst where unplayed)."""
    v, w = _stack(tables, weights)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN row: NaN, skipped below
        worst = np.nanmin(v, axis=2)  # [state, our action]
    if model is not None and model_weight > 0:
        if len(model) != len(v) or not 0 < model_weight <= 1:
            raise ValueError(f"model needs one column per state ({len(v)}) and model_weight in (0, 1]")
        cols = np.asarray(model)
        cell = v[np.arange(len(v)), :, np.clip(cols, 0, v.shape[2] - 1)]  # [state, our action]
        cell = np.where((cols[:, None] >= 0) & ~np.isnan(cell), cell, worst)
        worst = (1.0 - model_weight) * worst + model_weight * cell
    score = _weighted_mean(worst, w)
    return _finish(_argmax_probs(score), np.nanmax(score), score, prior, prior_weight, rng, q_scale)


def _regret_matching(a: np.ndarray, iterations: int, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Regret matching+ on the zero-sum game ``a`` (row player maximises): the averaged
    strategies of both players, each iteration weighted by its number. Stops early once
    neither player gains more than ``tol`` by deviating from the averages (checked every
    ``CHECK_EVERY`` iterations)."""
    n, m = a.shape
    rx, ry = np.zeros(n), np.zeros(m)
    sx, sy = np.zeros(n), np.zeros(m)

    def strategy(r: np.ndarray) -> np.ndarray:
        s = r.sum()
        return r / s if s > 0 else np.full(len(r), 1.0 / len(r))

    y = strategy(ry)
    for t in range(1, iterations + 1):
        ux = a @ y
        x = strategy(rx)
        rx = np.maximum(rx + ux - x @ ux, 0.0)
        x = strategy(rx)
        uy = -(x @ a)
        ry = np.maximum(ry + uy - y @ uy, 0.0)
        y = strategy(ry)
        sx += t * x
        sy += t * y
        if t % CHECK_EVERY == 0 and exploitability(a, sx / sx.sum(), sy / sy.sum()) < tol:
            break
    return sx / sx.sum(), sy / sy.sum()


def exploitability(a: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """What the two players gain together by best-responding to ``x`` and ``y``: 0 exactly
    at an equilibrium of the zero-sum game ``a``."""
    return float((a @ y).max() - (x @ a).min())


def equilibrium(tables: Tables, weights: Optional[Sequence[float]] = None,
                prior: Optional[Sequence[float]] = None, prior_weight: float = 0.0,
                rng: Optional[np.random.Generator] = None, q_scale: float = 0.0,
                iterations: int = 2000, tol: float = 1e-3) -> Choice:
    """Our strategy of the mixed Nash equilibrium of the weight-averaged table.

    Rows and columns that no state played are left out; a cell left NaN inside the rest
    counts as that row's worst played cell (the opponent is assumed to pick it when it
    hurts us most). Deterministic: the same tables give the same strategy. Runs up to
    ``iterations`` of regret matching+, fewer once the strategies are within ``tol`` of an
    equilibrium (:func:`exploitability`)."""
    if q_scale > 0:
        raise ValueError("q_scale needs the maxmin or expected rule: the rows an equilibrium plays "
                         "all score its value, so the scores cannot weigh its mix")
    a = average_table(tables, weights)
    rows = ~np.isnan(a).all(axis=1)
    cols = ~np.isnan(a).all(axis=0)
    sub = a[np.ix_(rows, cols)]
    sub = np.where(np.isnan(sub), np.nanmin(sub, axis=1, keepdims=True), sub)
    x, y = _regret_matching(sub, iterations, tol)
    search = np.zeros(a.shape[0])
    search[rows] = x
    scores = np.full(a.shape[0], np.nan)
    scores[rows] = sub @ y  # each row against their equilibrium strategy
    return _finish(search, x @ sub @ y, scores, prior, prior_weight, rng)


def expected(tables: Tables, weights: Optional[Sequence[float]] = None,
             their_prior: Optional[Sequence[float]] = None,
             prior: Optional[Sequence[float]] = None, prior_weight: float = 0.0,
             rng: Optional[np.random.Generator] = None, q_scale: float = 0.0) -> Choice:
    """The best action against ``their_prior`` over their replies (uniform when None) on
    the weight-averaged table; a row's NaN cells are left out and the prior renormalised
    over the replies that row played."""
    a = average_table(tables, weights)
    q = np.ones(a.shape[1]) if their_prior is None else np.asarray(their_prior, dtype=np.float64)
    if q.shape != (a.shape[1],) or (q < 0).any() or q.sum() <= 0:
        raise ValueError(f"their_prior must be {a.shape[1]} non-negative numbers with a positive sum")
    played = ~np.isnan(a)
    mass = (played * q).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(mass > 0, (np.nan_to_num(a) * q).sum(axis=1) / mass, np.nan)
    return _finish(_argmax_probs(score), np.nanmax(score), score, prior, prior_weight, rng, q_scale)
