"""Leaf values from the agent's own network.

A leaf is one turn played in Showdown from a sampled state (:class:`~.leaves.Leaf`: our side's
protocol lines of the turn, the next request, whether the battle ended and who won). Its value
here is what the agent itself would think at that point: a copy of the root's poke-env battle
takes the leaf's lines and request through poke-env's own message handling
(:func:`apply_leaf`, the dispatch of ``Player._handle_battle_message``), is encoded as the agent
encodes (:func:`maple_async.obs.encoding.encode`), and every leaf of a decision goes through
ONE batched forward of the network.

Which hidden state. The agent's step ``t`` is ``(logits_t, value_t), h_t = net(obs_t, h_{t-1})``;
its next decision is ``net(obs_{t+1}, h_t)``. A leaf is that next decision (the state after this
turn), so its input hidden state is ``h_t``: the state BEFORE this decision's forward
(``h_{t-1}``, what the caller passes) advanced by the ROOT's observation. Not ``h_{t-1}`` (that
would read the leaf as if the root had never been seen) and not the root's output fed the leaf
twice. ``h_t`` does not depend on which action is taken (the network's input is the observation
alone), so one root step serves every leaf. :func:`root_step` computes it, with the policy's
probabilities at the root (the search's prior) and the root's value.

What a leaf scores. The value head estimates the return to go of the checkpoint's own reward
(``reward.*``, discount ``ppo.gamma``). With the win/loss reward alone, a leaf that ended scores
+1, -1 or 0 and a live leaf its value. With shaping (``reward.hp``/``faint``, the default configs),
the value of a state leaves out what was already paid on the way there, so leaves are compared
by the one-step target the learner uses, ``q = r(root -> leaf) + gamma * V(leaf)``, with ``r``
from the agent's own :class:`~maple_async.obs.rewards.RewardTracker` (at an end: the tracker's
final reward, shaped change plus the win term, no value). :class:`LeafValues` carries both: the
raw ``values`` (±1/0 at an end, else the value head) and the ``scores`` the search compares.

Copies: the root battle is pickled once per decision, without the encoder's cache
(:func:`~maple_async.obs.encoding.snapshot`), and each leaf unpickles its own copy (about
0.25 ms, a quarter of ``copy.deepcopy``); the real battle is never touched.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import orjson
import torch
from poke_env.battle import Move
from poke_env.player import Player

from ..learn.networks import masked_logits
from ..obs import actions as act
from ..obs import encoding as enc
from ..obs.rewards import RewardTracker
from .leaves import Leaf

IGNORED = Player.MESSAGES_TO_IGNORE
WIN = {"us": 1.0, "them": -1.0, "tie": 0.0}


def apply_leaf(battle, lines: str, request: Optional[dict] = None) -> None:
    """Feed a turn's protocol lines (and then its request) to ``battle`` as poke-env's player
    does (``Player._handle_battle_message``), without a player: no orders are sent, an end is
    recorded on the battle (``won_by``/``tied``) and nothing else."""
    for line in lines.split("\n"):
        m = line.split("|")
        if len(m) < 2:
            continue
        kind = m[1]
        if kind == "":
            battle.parse_message(m)
        elif kind in IGNORED or kind in ("error", "bigerror", "showteam"):
            continue
        elif kind == "request":
            if len(m) > 2 and m[2]:
                battle.parse_request(orjson.loads("|".join(m[2:])))
        elif kind == "win":
            battle.won_by(m[2])
        elif kind == "tie":
            battle.tied()
        else:
            battle.parse_message(m)
    if request is not None:
        battle.parse_request(request)


@dataclass
class Root:
    """The agent's step at the root: what a leaf needs from it."""
    obs: np.ndarray
    mask: np.ndarray
    h_after: np.ndarray  # h_t: the leaves' input hidden state
    probs: np.ndarray  # the policy's probabilities over actions (0 where illegal)
    value: float


def _forward(policy, obs: np.ndarray, hidden: np.ndarray):
    """One batched forward of the policy's network: logits, values, new hidden (numpy)."""
    x = np.array(obs, dtype=np.float32)  # (a copy: the features step fills columns in place)
    if policy.features is not None:
        x = policy.features(x)
    dev = policy.device
    with torch.inference_mode():
        xt = torch.from_numpy(x).to(dev)
        ht = torch.from_numpy(np.ascontiguousarray(hidden, dtype=np.float32)).to(dev)
        (logits, values), new_h = policy.network(xt, ht)
        return logits, values.float().cpu().numpy(), (new_h.float().cpu().numpy()
                                                      if policy.hidden_dim else hidden)


def root_step(policy, battle, h_before: Optional[np.ndarray]) -> Root:
    """The agent's forward at the root from ``h_before`` (the hidden state before this
    decision's forward; None or empty: a network without one, or the battle's first)."""
    mask = np.zeros(act.N_ACTIONS, dtype=bool)
    obs = enc.encode(battle, mask=mask, incremental=False)
    h = np.zeros((1, policy.hidden_dim), np.float32) if h_before is None or not policy.hidden_dim \
        else np.asarray(h_before, np.float32).reshape(1, -1)
    logits, values, new_h = _forward(policy, obs[None], h)
    with torch.inference_mode():
        probs = torch.softmax(masked_logits(logits.float(), torch.from_numpy(mask[None]).to(logits.device)),
                              dim=-1)[0].cpu().numpy()
    return Root(obs, mask, new_h[0], probs * mask, float(values[0]))


def _same_move(move_id: str) -> str:
    """A move id as both the request and poke-env may spell it (Hidden Power's type and
    power, Return's and Frustration's power: ``hiddenpowerice70``, ``hiddenpower``)."""
    move_id = move_id.rstrip("0123456789")
    return "hiddenpower" if move_id.startswith("hiddenpower") else move_id


def action_choice(battle, action: int, moves: Optional[list] = None) -> Optional[str]:
    """The Showdown choice string ("move 2 terastallize", "switch 3") of a legal action of
    ours, in the current request's numbering; None when the request does not name it."""
    order = act.action_to_order(battle, action, moves)
    if action < act.MOVE:
        slot = getattr(order, "slot", 0)
        return f"switch {slot}" if slot else None
    active = ((battle.last_request or {}).get("active") or [{}])[0]
    entries = active.get("moves") or []
    move = order.order
    want = _same_move(move.id) if isinstance(move, Move) else None
    index = None
    if len(entries) == 1 and act.only_unknown_move(battle.available_moves,
                                                  [m.id for m in act.known_moves(battle.active_pokemon)]):
        index = 1
    else:
        for i, e in enumerate(entries, start=1):
            if _same_move(Move.retrieve_id(e.get("id") or e.get("move") or "")) == want:
                index = i
                break
    if index is None:
        return None
    for first, word in ((act.MEGA, "mega"), (act.ZMOVE, "zmove"), (act.DYNAMAX, "dynamax"),
                        (act.TERA, "terastallize")):
        if first <= action < first + 4:
            return f"move {index} {word}"
    return f"move {index}"


def prior_over(battle, root: Root, choices: Sequence[str]) -> np.ndarray:
    """The policy's probabilities at the root, over our choices in Showdown's words (a
    choice no action names gets 0)."""
    moves = act.move_choices(battle)
    where = {c: i for i, c in enumerate(choices)}
    out = np.zeros(len(choices))
    for a in np.flatnonzero(root.mask):
        c = action_choice(battle, int(a), moves)
        if c in where:
            out[where[c]] += root.probs[a]
    return out


@dataclass
class After:
    """A live leaf as the agent would meet it, for the turn after it (``search.depth`` 2 or more)."""
    battle: object  # the root's copy after the leaf's turns (None once its next turn is played)
    tracker: Optional[RewardTracker]  # the reward tracker after it
    hidden: np.ndarray  # h after the leaf's forward: the next turn's input hidden state
    choice: Optional[str]  # the policy's likeliest choice there (None: no choice names it)
    reward: float  # the discounted reward from the root to it: r1 (+ gamma r2 ...)
    discount: float = 1.0  # what the next turn's score is worth from the root: gamma ** turns played


@dataclass
class LeafValues:
    values: np.ndarray  # the value head's (±1 or 0 at an end); NaN: the leaf had an error
    scores: np.ndarray  # what the search compares: r(root -> leaf) + gamma V(leaf), or the final reward
    after: Optional[list] = None  # with ``keep``: an :class:`After` per live leaf, else None


class DecisionValue:
    """One decision's leaf values: the root's copy and step, made once."""

    def __init__(self, policy, battle, h_before, reward_cfg=None, gamma: float = 0.99):
        self.policy = policy
        self.battle = battle
        self.root = root_step(policy, battle, h_before)
        self.blob = enc.snapshot(battle)
        self.gamma = gamma
        self.tracker = None
        if reward_cfg is not None:
            self.tracker = RewardTracker(reward_cfg, gamma)
            self.tracker.step(battle)

    def prior(self, choices: Sequence[str]) -> np.ndarray:
        return prior_over(self.battle, self.root, choices)

    def leaf_battle(self, leaf: Leaf):
        """A fresh copy of the root battle after the leaf's turn."""
        b = pickle.loads(self.blob)
        apply_leaf(b, leaf.lines, None if leaf.ended else leaf.request)
        return b

    def encode(self, leaf: Leaf) -> np.ndarray:
        """The leaf's observation, as the agent would encode it at its next decision."""
        return enc.encode(self.leaf_battle(leaf), incremental=False)

    @staticmethod
    def _final(leaf: Leaf, battle, tracker: RewardTracker) -> tuple[float, float]:
        """An ended leaf's value (±1 or 0) and its final reward, from ``battle`` after its lines."""
        value = WIN.get(leaf.winner, 0.0)
        if leaf.winner == "us" and not battle.won:
            battle.won_by(battle.player_username)  # (the lines carry the winner's name)
        elif leaf.winner == "them" and not battle.lost:
            battle.won_by(battle.opponent_username)
        return value, tracker.final(battle)

    def _scored(self, leaves: Sequence[Leaf], battles: Optional[Sequence], trackers: Sequence,
                hidden: Optional[np.ndarray], keep: bool = False) -> LeafValues:
        """Each leaf from ``battles[i]`` (a battle before its lines; None: copies of the root),
        ``trackers[i]`` and hidden state ``hidden[i]`` (None: the root's ``h_t``): values and
        scores; with ``keep``, an :class:`After` per live leaf."""
        n = len(leaves)
        values = np.full(n, np.nan)
        scores = np.full(n, np.nan)
        after: list = [None] * n
        live, obs, masks, rewards, kept = [], [], [], [], []
        for i, leaf in enumerate(leaves):
            if leaf.error is not None:
                continue
            tracker = trackers[i]
            if leaf.ended and tracker is None:
                values[i] = scores[i] = WIN.get(leaf.winner, 0.0)
                continue
            b = battles[i] if battles is not None else pickle.loads(self.blob)
            apply_leaf(b, leaf.lines, None if leaf.ended else leaf.request)
            if leaf.ended:
                values[i], scores[i] = self._final(leaf, b, tracker)
                continue
            state: list = []
            mask = np.zeros(act.N_ACTIONS, dtype=bool) if keep else None  # (only the next turn's choice reads it)
            obs.append(enc.encode(b, side_state=state, mask=mask, incremental=False))
            masks.append(mask)
            rewards.append(tracker.step(b, state) if tracker is not None else 0.0)
            live.append(i)
            kept.append((b, tracker))
        if live:
            h = np.repeat(self.root.h_after[None], len(live), axis=0) if hidden is None else hidden[live]
            logits, v, new_h = _forward(self.policy, np.stack(obs), h)
            values[live] = v
            scores[live] = np.asarray(rewards) + (self.gamma if self.tracker is not None else 1.0) * v
            if keep:
                with torch.inference_mode():
                    best = masked_logits(logits.float(), torch.from_numpy(np.stack(masks)).to(logits.device))
                    best = best.argmax(-1).cpu().numpy()
                for j, i in enumerate(live):
                    b, tracker = kept[j]
                    after[i] = After(b, tracker, new_h[j], action_choice(b, int(best[j])) if masks[j].any()
                                     else None, rewards[j], self.gamma)
        return LeafValues(values, scores, after if keep else None)

    def __call__(self, leaves: Sequence[Leaf], keep: bool = False) -> LeafValues:
        """The leaves of one turn from the root; ``keep``: with an :class:`After` per live leaf."""
        n = len(leaves)
        # a shallow copy: a step rebinds only the copy's _last (its totals are never read here)
        trackers = [copy.copy(self.tracker) if self.tracker is not None else None for _ in range(n)]
        return self._scored(leaves, None, trackers, None, keep)

    def onward(self, after: Sequence[After], leaves: Sequence[Leaf], keep: bool = False) -> LeafValues:
        """The turn after each leaf: ``after[i]``'s leaf, then ``leaves[i]``. Scores from the
        root: ``reward + discount * (r + gamma * V)`` (two turns: ``r1 + gamma (r2 + gamma V)``;
        an end: the final reward in place of ``r + gamma V``; without a reward config, ``V``
        or the outcome discounted once a turn after the first: ``gamma V``, ``gamma ** 2 V``);
        NaN where the turn had an error.
        ``keep``: an :class:`After` per live leaf, its reward and discount from the root. Each
        :class:`After` is played once (its battle and tracker move on)."""
        if any(a.battle is None for a in after):
            raise ValueError("an After's next turn was already played")
        hidden = np.stack([a.hidden for a in after]) if after else np.zeros((0, 1), np.float32)
        out = self._scored(leaves, [a.battle for a in after], [a.tracker for a in after], hidden, keep)
        for a in after:
            a.battle = None
        out.scores = np.array([a.reward + a.discount * s for a, s in zip(after, out.scores)], dtype=float)
        for a, b in zip(after, out.after or []):
            if b is not None:
                b.reward, b.discount = a.reward + a.discount * b.reward, a.discount * self.gamma
        return out


class NetworkValue:
    """Leaf values from ``policy``'s value head for every decision of a searcher.
    ``hidden_before(battle)``: the hidden state the agent had before this decision's forward
    (None: zeros). ``reward_cfg``/``gamma``: the checkpoint's ``reward`` section and
    ``ppo.gamma`` (None: score leaves by their raw values)."""

    def __init__(self, policy, hidden_before: Callable[[object], Optional[np.ndarray]],
                 reward_cfg=None, gamma: float = 0.99):
        self.policy = policy
        self.hidden_before = hidden_before
        self.reward_cfg = reward_cfg
        self.gamma = gamma

    def decision(self, battle) -> DecisionValue:
        return DecisionValue(self.policy, battle, self.hidden_before(battle), self.reward_cfg, self.gamma)
