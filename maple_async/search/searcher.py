"""One decision's search (issue 62, item 2): belief -> built states -> leaves -> payoff tables
-> a rule of :mod:`.choice` -> a Showdown choice string.

Per decision: :func:`~.belief.sample_states` draws ``states`` states; ``leafhub.js`` builds them;
per state every legal choice of ours meets at most ``replies`` of the opponent's (their moves
first, then switches, then tera variants: a fixed, network-free order), each joint action played
``seeds`` times from a copy with a fresh seed; a cell of a state's table is the mean of its
leaves' values: network-free by default (HP and Pokémon left, :class:`~.leaves.Leaf`), or a
``value`` object's (:class:`~.value.NetworkValue`: the agent's own value head, which also gives
the policy's probabilities as a prior, mixed in by ``prior_weight``). The rule (``maxmin`` by
default) picks our choice. A decision's states are always dropped. What the searcher cannot do
raises: :class:`~.belief.Refusal` (by reason) or a :class:`~.leaves.LeafHubError`;
:meth:`Searcher.try_choose` counts it and returns None, and its caller plays its own choice.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import choice as rules
from .belief import Refusal, build_states, check_ours, sample_states
from .leaves import LeafHub, LeafHubDied, LeafHubError

log = logging.getLogger("maple_async.search")
RULES = ("maxmin", "equilibrium", "expected")


@dataclass
class SearchConfig:
    states: int = 2  # sampled states per decision
    replies: int = 6  # the opponent's replies per state at most
    seeds: int = 1  # leaves per joint action
    rule: str = "maxmin"
    # Weight of the policy's probabilities when a value object gives them (the agent's
    # search): probs = (1 - w) search + w prior. At 0.5 the search's own max-min pick is never
    # overruled (it keeps at least half the mass), the prior breaks the search's ties and is
    # the only voice for an action no leaf scored; with ``equilibrium`` it is an even blend.
    prior_weight: float = 0.5

    def __post_init__(self):
        if self.states < 1 or self.replies < 1 or self.seeds < 1:
            raise ValueError("search: states, replies and seeds must be >= 1")
        if not 0.0 <= self.prior_weight <= 1.0:
            raise ValueError(f"search: the prior's weight must be in [0, 1], got {self.prior_weight}")
        if self.rule not in RULES:
            raise ValueError(f"search: rule must be one of {', '.join(RULES)}, got {self.rule!r}")


@dataclass
class SearchStats:
    """Counters of a searcher and the player that falls back on it."""
    decisions: int = 0
    searched: int = 0
    refused: collections.Counter = field(default_factory=collections.Counter)  # reason -> n
    failed: collections.Counter = field(default_factory=collections.Counter)  # error kind -> n
    leaves: int = 0
    ms: float = 0.0  # over searched decisions
    states_dropped: int = 0  # sampled states whose built request disagreed with ours
    relaxed: int = 0  # opponent sets no generator draw agreed with (revealed facts written over)
    examples: dict = field(default_factory=dict)  # reason or error kind -> its latest message

    def line(self) -> str:
        n = max(self.decisions, 1)
        refused = sum(self.refused.values())
        failed = sum(self.failed.values())
        by = ", ".join(f"{k} {v / n:.1%}" for k, v in self.refused.most_common())
        ms = self.ms / self.searched if self.searched else 0.0
        leaves = self.leaves / self.searched if self.searched else 0.0
        return (f"searched {self.searched / n:.1%} of {self.decisions} decisions, refused {refused / n:.1%}"
                + (f" ({by})" if by else "") + f", failed {failed / n:.1%}"
                + (f" ({', '.join(f'{k} {v}' for k, v in self.failed.items())})" if failed else "")
                + f"; {ms:.0f} ms and {leaves:.0f} leaves per searched decision")


def legal_choices(request: dict) -> list[str]:
    """Our choices in Showdown's words, as leafhub.js's legalChoices lists them."""
    switches = [f"switch {j + 1}" for j, p in enumerate(request["side"]["pokemon"])
                if not p.get("active") and not p["condition"].endswith(" fnt") and not p.get("reviving")]
    if request.get("forceSwitch"):
        return switches
    active = request["active"][0]
    out = []
    for i, m in enumerate(active["moves"]):
        if m.get("disabled"):
            continue
        n = i + 1
        out.append(f"move {n}")
        if active.get("canTerastallize"):
            out.append(f"move {n} terastallize")
        if active.get("canMegaEvo"):
            out.append(f"move {n} mega")
        if active.get("canZMove") and active["canZMove"][i]:
            out.append(f"move {n} zmove")
        if active.get("canDynamax"):
            out.append(f"move {n} dynamax")
    if not active.get("trapped"):
        out += switches
    return out


def replies(theirs: list[str], n: int) -> list[str]:
    """At most ``n`` of the opponent's choices: moves, then switches, then the rest."""
    moves = [c for c in theirs if c.startswith("move") and " " not in c[5:]]
    switches = [c for c in theirs if c.startswith("switch")]
    rest = [c for c in theirs if c not in moves and c not in switches]
    return (moves + switches + rest)[:n]


class Searcher:
    """Searches decisions on one :class:`LeafHub` (started by the caller)."""

    def __init__(self, hub: LeafHub, config: Optional[SearchConfig] = None, seed: int = 0,
                 value=None):
        """``value``: None (leaves keep their network-free values) or an object whose
        ``decision(battle)`` gives that decision's leaf values and prior
        (:class:`~.value.NetworkValue`)."""
        self.hub = hub
        self.config = config or SearchConfig()
        self.value = value
        self.stats = SearchStats()
        self._ids = itertools.count(1)
        self._rng = np.random.default_rng(seed)
        self._starting = asyncio.Lock()

    async def try_choose(self, battle) -> Optional[str]:
        """:meth:`choose`, counted: None when the search refused the decision (by reason) or
        failed (the leaf process died: started again for the next decision; a request it
        refused; anything else), and the caller plays its own choice."""
        stats = self.stats
        stats.decisions += 1
        try:
            if not self.hub.alive:
                async with self._starting:
                    if not self.hub.alive:
                        await self.hub.start()
            return await self.choose(battle)
        except Refusal as r:
            stats.refused[r.reason] += 1
            stats.examples[r.reason] = str(r)
        except LeafHubDied as e:
            stats.failed["hub_died"] += 1
            stats.examples["hub_died"] = str(e)
            log.warning("search: the leaf process died (%s); the player's own choice plays this decision", e)
        except LeafHubError as e:
            stats.failed["hub_refused"] += 1
            stats.examples["hub_refused"] = str(e)
            log.debug("search: %s", e)
        except Exception as e:  # a searcher bug costs one decision's search, not the battle
            stats.failed[type(e).__name__] += 1
            stats.examples[type(e).__name__] = f"{e!r}"
            log.warning("search failed (%s: %s); the player's own choice plays this decision",
                        type(e).__name__, e)
        return None

    async def choose(self, battle) -> str:
        """Our choice for the battle's current request; raises Refusal or a LeafHubError."""
        t0 = time.perf_counter()
        seed = int(self._rng.integers(1 << 62))
        belief = await sample_states(self.hub, battle, self.config.states, seed)
        self.stats.relaxed += belief.relaxed
        fmt = battle.format or battle.battle_tag.split("-")[1]
        value = self.value.decision(battle) if self.value is not None else None
        choice = await self.search(fmt, battle.player_role, belief.states, battle.last_request,
                                   name=f"{battle.battle_tag}:{battle.turn}", value=value)
        self.stats.ms += (time.perf_counter() - t0) * 1000
        return choice

    async def search(self, fmt: str, us: str, states: list[dict], request: Optional[dict] = None,
                     name: str = "", value=None) -> str:
        """Our choice over given STATEs; ``request`` is the real one our side must agree with
        (None: the first built state's, for constructed positions). ``value``: this
        decision's leaf values and prior (:class:`~.value.DecisionValue`); None: the leaves'
        network-free values, no prior."""
        cfg = self.config
        decision = f"{name}:{next(self._ids)}"
        built = await build_states(self.hub, decision, fmt, states, us)
        request = request or built[0].request
        ours = legal_choices(request)
        try:
            kept = []
            for k, b in enumerate(built):
                try:
                    check_ours(b, request, ours)
                    kept.append(k)
                except Refusal as r:
                    if r.reason != "our_choices":
                        raise
                    self.stats.states_dropped += 1
            if not kept:
                raise Refusal("our_choices", "no sampled state allows our real choices")
            columns: list[str] = []
            specs = []
            for k in kept:
                theirs = replies(built[k].theirs, cfg.replies)
                columns += [c for c in theirs if c not in columns]
                for a in ours:
                    for b in theirs:
                        for _ in range(cfg.seeds):
                            specs.append((k, a, b, [int(x) for x in self._rng.integers(0, 1 << 16, 4)]))
            leaves = await self.hub.leaves(decision, specs)
        finally:
            await self.hub.drop(decision)
        scores = value(leaves).scores if value is not None else [leaf.value for leaf in leaves]
        sums = np.zeros((len(kept), len(ours), len(columns)))
        counts = np.zeros_like(sums)
        where = {k: i for i, k in enumerate(kept)}
        for (k, a, b, _), leaf, score in zip(specs, leaves, scores):
            if leaf.error is None:
                cell = (where[k], ours.index(a), columns.index(b))
                sums[cell] += score
                counts[cell] += 1
        if not counts.any():
            raise Refusal("no_leaf", leaves[0].error if leaves else "no leaves")
        with np.errstate(invalid="ignore"):
            tables = list(np.where(counts > 0, sums / np.maximum(counts, 1), np.nan))
        rule = getattr(rules, cfg.rule)
        prior = value.prior(ours) if value is not None else None
        if prior is not None and prior.sum() <= 0:
            prior = None  # the policy names none of our choices (a move the request words otherwise)
        picked = rule(tables, rng=self._rng if cfg.rule == "equilibrium" else None,
                      prior=prior, prior_weight=cfg.prior_weight if prior is not None else 0.0)
        self.stats.searched += 1
        self.stats.leaves += len(specs)
        return ours[picked.action]
