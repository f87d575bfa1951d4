"""League opponents: every battle plays one snapshot of the learner from its first decision
to its last.

The learning loop keeps the snapshots and decides how likely each is to be drawn
(:func:`league_probs`: uniform, recent, or prioritised fictitious self-play by the
learner's results against it); every collector, in every backend, gets the same message
and draws per battle with :class:`LeaguePolicy`. A snapshot that leaves the league stays
loaded until the battles that drew it are over.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Callable, Hashable, Optional

import numpy as np
import torch

from .policy import InferencePolicy

SAMPLING = ("uniform", "recent", "pfsp")
_RECENT_TAGS = 4096  # finished battles whose snapshot can still be asked for (labels)


def league_probs(ids: list[int], results: dict, sampling: str) -> dict[int, float]:
    """Probability of drawing each snapshot ``ids`` (oldest first).

    ``results``: the learner's ``(wins, battles)`` pair against each snapshot id. ``pfsp``: weight
    (1 - p)^2 with p the learner's win rate (Laplace-smoothed), so the snapshots it still
    loses to come up most, as in prioritised fictitious self-play; ``recent``: weight
    1, 2, ..., n from oldest to newest; ``uniform``: equal.
    """
    if not ids:
        return {}
    if sampling == "uniform":
        w = [1.0] * len(ids)
    elif sampling == "recent":
        w = [float(i + 1) for i in range(len(ids))]
    elif sampling == "pfsp":
        w = []
        for sid in ids:
            wins, n = results.get(sid, (0.0, 0))
            p = (wins + 1.0) / (n + 2.0)
            w.append((1.0 - p) ** 2)
    else:
        raise ValueError(f"unknown league sampling {sampling!r} (known: {', '.join(SAMPLING)})")
    total = sum(w)
    return {sid: x / total for sid, x in zip(ids, w)}


class LeaguePolicy:
    """Several snapshots behind one batcher. Each battle draws a snapshot at its first
    request and keeps it until :meth:`release`. The batcher calls :meth:`route` on the
    event loop's thread (where releases and new weights also happen) and hands its answer
    to :meth:`act`, which may run in the forward thread. Weights arrive through
    :meth:`load_state_dict` as ``{"snapshots": {id: state_dict}, "probs": {id: p}}``,
    between two batches."""

    def __init__(self, make_network: Callable[[], torch.nn.Module], device="cpu",
                 rng: Optional[random.Random] = None, greedy: bool = False, **policy_kwargs):
        self.make_network = make_network
        self.device = device
        self.greedy = greedy
        self.policy_kwargs = policy_kwargs
        self.rng = rng or random.Random()
        self.hidden_dim = make_network().hidden_dim
        self.version = 0
        self.policies: dict[int, InferencePolicy] = {}
        self.probs: dict[int, float] = {}
        self.assigned: dict[Hashable, int] = {}  # battle key (tag, side) -> snapshot id
        self.recent: OrderedDict = OrderedDict()  # battle tag -> snapshot id, released too

    def load_state_dict(self, league: dict, version: Optional[int] = None) -> None:
        for sid, sd in league["snapshots"].items():
            if sid not in self.policies:
                self.policies[sid] = InferencePolicy(self.make_network(), self.device, greedy=self.greedy,
                                                     **self.policy_kwargs)
                self.policies[sid].network.load_state_dict(sd)
        self.probs = {sid: p for sid, p in league["probs"].items() if sid in self.policies}
        self._drop_unused()
        self.version = self.version + 1 if version is None else version

    def _drop_unused(self) -> None:
        used = set(self.assigned.values()) | set(self.probs)
        for sid in [s for s in self.policies if s not in used]:
            del self.policies[sid]

    def pick(self, key: Hashable) -> int:
        """The snapshot of ``key``'s battle: drawn at its first request, then fixed."""
        sid = self.assigned.get(key)
        if sid is None:
            ids = list(self.probs)
            sid = self.rng.choices(ids, weights=[self.probs[i] for i in ids])[0]
            self.assigned[key] = sid
            self.recent[key[0]] = sid
            while len(self.recent) > _RECENT_TAGS:
                self.recent.popitem(last=False)
        return sid

    def snapshot_of(self, battle_tag: str) -> Optional[int]:
        """The snapshot that played battle ``battle_tag`` (while it runs and for a while after)."""
        return self.recent.get(battle_tag)

    def release(self, key: Hashable) -> None:
        """The battle is over: its snapshot may be unloaded once no other battle uses it."""
        sid = self.assigned.pop(key, None)
        if sid is None:
            return
        if sid not in self.probs and sid not in self.assigned.values():
            self.policies.pop(sid, None)

    def route(self, keys) -> list[InferencePolicy]:
        """The snapshot's policy for each request's battle (drawn at a battle's first)."""
        if not self.probs and not self.assigned:
            raise RuntimeError("league has no snapshot yet")
        return [self.policies[self.pick(k)] for k in keys]

    def act(self, obs, mask, hidden: torch.Tensor, routes: list[InferencePolicy]):
        """Each group of rows through its own snapshot (``routes``: :meth:`route`'s answer)."""
        n = len(routes)
        actions = np.zeros(n, dtype=np.int64)
        logps = np.zeros(n, dtype=np.float32)
        values = np.zeros(n, dtype=np.float32)
        new_h = hidden.clone() if self.hidden_dim else hidden
        groups: dict[int, list] = {}
        for i, policy in enumerate(routes):
            groups.setdefault(id(policy), [policy, []])[1].append(i)
        for policy, rows in groups.values():
            rows = np.asarray(rows)
            idx = torch.from_numpy(rows)
            a, lp, v, h = policy.act(obs[rows], mask[rows], hidden[idx] if self.hidden_dim else hidden)
            actions[rows], logps[rows], values[rows] = a, lp, v
            if self.hidden_dim:
                new_h[idx] = h
        return actions, logps, values, new_h
