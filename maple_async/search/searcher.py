"""One decision's search: belief -> built states -> leaves -> payoff tables
-> a rule of :mod:`.choice` -> a Showdown choice string.

Per decision: :func:`~.belief.sample_states` draws ``states`` states; ``leafhub.js`` builds them;
per state each choice of ours searched (all; with a network and ``actions`` N, the policy's N
likeliest) meets at most ``replies`` of the opponent's: in ``slot`` order (their moves, then
switches, then tera variants) or, by ``threat`` with a network, the ones that score worst for us
when every choice of theirs is first played against our likeliest; each joint action played
``seeds`` times from a copy with a fresh seed (with ``depth`` 2 or 3, each of the table's live
leaves then plays the turns after it: :meth:`Searcher._onward`); a cell of a state's table is the mean of its
leaves' values: network-free by default (HP and Pokémon left, :class:`~.leaves.Leaf`), or a
``value`` object's (:class:`~.value.NetworkValue`: the agent's own value head, which also gives
the policy's probabilities as a prior, mixed in by ``prior_weight`` or, with ``q_scale``, weighted
by the exponentiated scores). The rule (``maxmin`` by default) picks our choice. A decision's
states are always dropped. What the searcher cannot do raises: :class:`~.belief.Refusal` (by
reason) or a :class:`~.leaves.LeafHubError`; :meth:`Searcher.try_choose` counts it and returns
None, and its caller plays its own choice.
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

from ..config import SEARCH_RULES, SearchConfig  # noqa: F401 - SearchConfig re-exported
from . import choice as rules
from .belief import Refusal, build_states, check_ours, sample_states
from .leaves import LeafHub, LeafHubDied, LeafHubError, metered

log = logging.getLogger("maple_async.search")
# First guesses of a decision's compute (the 2-core VM, loaded); measured costs replace them.
STATE_MS, LEAF_MS, EMA = 25.0, 5.0, 0.2
THEIRS = 9  # the opponent's choices a ranked plan prices when not told (gen 4: 4 moves, 5 switches)
LATER = 0.99  # a network-free leaf's value a turn later: a sooner win (a later loss) scores higher
TEAM = 6



@dataclass
class SearchStats:
    """Counters of a searcher and the player that falls back on it."""
    decisions: int = 0
    searched: int = 0
    refused: collections.Counter = field(default_factory=collections.Counter)  # reason -> n
    failed: collections.Counter = field(default_factory=collections.Counter)  # error kind -> n
    leaves: int = 0
    ms: float = 0.0  # over searched decisions
    compute_ms: float = 0.0  # the leaf process's and the leaf values' (what search.budget_ms bounds)
    over_3x: int = 0  # searched decisions whose compute passed 3 budgets
    later_failed: int = 0  # search.depth 2+: later turns the simulator refused (the turns before scored)
    later_fallback: int = 0  # later turns where the simulator refused our choice and our strongest attack played
    states_dropped: int = 0  # sampled states whose built request disagreed with ours
    # a decision's states the engine failed (by kind) where another of its states was searched
    states_failed: collections.Counter = field(default_factory=collections.Counter)
    relaxed: int = 0  # opponent sets no generator draw agreed with (revealed facts written over)
    examples: dict = field(default_factory=dict)  # reason or error kind -> its latest message

    def line(self) -> str:
        n = max(self.decisions, 1)
        refused = sum(self.refused.values())
        failed = sum(self.failed.values())
        by = ", ".join(f"{k} {v / n:.1%}" for k, v in self.refused.most_common())
        s = max(self.searched, 1)
        return (f"searched {self.searched / n:.1%} of {self.decisions} decisions, refused {refused / n:.1%}"
                + (f" ({by})" if by else "") + f", failed {failed / n:.1%}"
                + (f" ({', '.join(f'{k} {v}' + self._latest(k) for k, v in self.failed.items())})" if failed else "")
                + f"; per searched decision {self.ms / s:.0f} ms, {self.compute_ms / s:.0f} ms of compute, "
                + f"{self.leaves / s:.0f} leaves" + (f"; {self.over_3x} over 3 budgets" if self.over_3x else "")
                + (f"; {self.later_failed} later turns failed" if self.later_failed else "")
                + (f"; {self.later_fallback} later choices of ours refused (our strongest attack played)"
                   if self.later_fallback else "")
                + (f"; states the engine failed, the decision searched on the others: "
                   f"{', '.join(f'{k} {v}' for k, v in self.states_failed.items())}" if self.states_failed else ""))

    def _latest(self, kind: str) -> str:
        """A failure's latest message, short: what to look into."""
        msg = " ".join(str(self.examples.get(kind, "")).split())
        return f" (latest: {msg[:160]})" if msg else ""


def legal_choices(request: dict) -> list[str]:
    """Our choices in Showdown's words, as leafhub's legalChoices (leafhub/play.js) lists them."""
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


def their_choices(battle) -> int:
    """About how many choices the opponent has: its moves (doubled by tera while gen 9 allows
    it) and a switch to each of its Pokémon not known to have fainted."""
    moves = 8 if battle.gen >= 9 and not battle.opponent_used_tera else 4
    fainted = sum(1 for p in battle.opponent_team.values() if p.fainted)
    return moves + max(TEAM - 1 - fainted, 0)


async def counted(searcher, battle) -> Optional[str]:
    """``searcher.choose(battle)``, counted in ``searcher.stats``: None when the search refused
    the decision (by reason) or failed (the leaf process died: started again for the next
    decision; a request it refused; an error that names its ``kind``, as the engine's do;
    anything else, by type), and the caller plays its own choice."""
    stats = searcher.stats
    stats.decisions += 1
    hub = searcher.hub
    try:
        if not hub.alive:
            async with searcher._starting:
                if not hub.alive:
                    await hub.start()
        return await searcher.choose(battle)
    except Refusal as r:
        stats.refused[r.reason] += 1
        stats.examples[r.reason] = str(r)
        log.debug("search refused: %s", r)
    except LeafHubDied as e:
        stats.failed["hub_died"] += 1
        stats.examples["hub_died"] = str(e)
        log.warning("search: the leaf process died (%s); the player's own choice plays this decision", e)
    except LeafHubError as e:
        stats.failed["hub_refused"] += 1
        stats.examples["hub_refused"] = str(e)
        log.debug("search: %s", e)
    except Exception as e:  # a searcher bug costs one decision's search, not the battle
        kind = getattr(e, "kind", None) or type(e).__name__
        stats.failed[kind] += 1
        stats.examples[kind] = f"{e!r}"
        log.warning("search failed (%s: %s); the player's own choice plays this decision", kind, e)
    return None


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
        self.state_ms, self.leaf_ms = STATE_MS, LEAF_MS  # compute per state and per leaf, measured

    async def close(self) -> None:
        await self.hub.close()

    def plan(self, n_ours: int, n_theirs: Optional[int] = None, ranked: bool = False) -> tuple[int, int]:
        """(states, replies) whose compute fits ``budget_ms`` by the costs measured so far: the
        opponent's replies shrink first (to 3), then the states, then the replies to 1.
        ``n_ours``: our choices searched; ``n_theirs``: the opponent's choices when known to be
        fewer (1: it waits) or estimated; ``ranked``: its replies are ranked by a first pass of
        all its choices (``THEIRS`` when not given) against one of ours."""
        cfg = self.config
        top = min(cfg.replies, n_theirs) if n_theirs else cfg.replies
        if not cfg.budget_ms:
            return cfg.states, top
        floor = min(3, top)
        steps = ([(cfg.states, r) for r in range(top, floor - 1, -1)]
                 + [(m, floor) for m in range(cfg.states - 1, 0, -1)]
                 + [(1, r) for r in range(floor - 1, 0, -1)])
        for m, r in steps:
            leaves = (max(n_theirs or THEIRS, r) if ranked else 0) + n_ours * r * cfg.depth
            if m * (self.state_ms + leaves * cfg.seeds * self.leaf_ms) <= cfg.budget_ms:
                return m, r
        return 1, 1

    def _measured(self, n_states: int, state_ms: float, n_leaves: int, leaves_ms: float) -> float:
        """Fold one decision's compute into the running costs; returns that compute."""
        self.state_ms += EMA * (state_ms / n_states - self.state_ms)
        if n_leaves:
            self.leaf_ms += EMA * (leaves_ms / n_leaves - self.leaf_ms)
        total = state_ms + leaves_ms
        self.stats.compute_ms += total
        if self.config.budget_ms and total > 3 * self.config.budget_ms:
            self.stats.over_3x += 1
        return total

    async def try_choose(self, battle) -> Optional[str]:
        return await counted(self, battle)

    async def choose(self, battle) -> str:
        """Our choice for the battle's current request; raises Refusal or a LeafHubError."""
        t0 = time.perf_counter()
        seed = int(self._rng.integers(1 << 62))
        request = battle.last_request or {}
        try:
            ours = legal_choices(request)
        except (KeyError, IndexError, TypeError):
            ours = None  # a request the belief refuses below
        if ours is not None and len(ours) == 1:  # nothing to choose between
            self.stats.searched += 1
            return ours[0]
        n_ours = len(ours) if ours is not None else 9
        theirs = battle.opponent_active_pokemon
        waits = bool(request.get("forceSwitch")) and not (theirs is not None and theirs.fainted)
        cfg = self.config
        networked = self.value is not None
        n_rows = min(n_ours, cfg.actions) if networked and cfg.actions else n_ours
        states, replies_n = self.plan(n_rows, 1 if waits else their_choices(battle),
                                      ranked=networked and cfg.reply_order == "threat" and not waits)
        with metered() as meter:
            # a switch after a faint: the agent's value head judges the switch-ins; the
            # network-free value (HP left) cannot tell them apart, so its player's own choice plays
            belief = await sample_states(self.hub, battle, states, seed, forced_switches=networked)
        self.stats.relaxed += belief.relaxed
        fmt = battle.format or battle.battle_tag.split("-")[1]
        value = self.value.decision(battle) if networked else None
        choice = await self.search(fmt, battle.player_role, belief.states, battle.last_request,
                                   name=f"{battle.battle_tag}:{battle.turn}", value=value,
                                   replies_n=replies_n, sample_ms=sum(meter))
        self.stats.ms += (time.perf_counter() - t0) * 1000
        return choice

    async def search(self, fmt: str, us: str, states: list[dict], request: Optional[dict] = None,
                     name: str = "", value=None, replies_n: Optional[int] = None,
                     sample_ms: float = 0.0) -> str:
        """Our choice over given STATEs; ``request`` is the real one our side must agree with
        (None: the first built state's, for constructed positions). ``value``: this
        decision's leaf values and prior (:class:`~.value.DecisionValue`); None: the leaves'
        network-free values, no prior. ``replies_n``: the opponent's replies per state (default
        ``replies``); ``sample_ms``: the leaf process's time drawing ``states``, for the budget."""
        cfg = self.config
        replies_n = replies_n or cfg.replies
        decision = f"{name}:{next(self._ids)}"
        value_ms = 0.0

        def scored(leaves):
            nonlocal value_ms
            t = time.perf_counter()
            out = value(leaves).scores if value is not None else np.array([leaf.value for leaf in leaves])
            value_ms += (time.perf_counter() - t) * 1000
            return out

        with metered() as meter:
            built = await build_states(self.hub, decision, fmt, states, us)
            try:
                request = request or built[0].request
                ours = legal_choices(request)
                prior = value.prior(ours) if value is not None else None
                if prior is not None and prior.sum() <= 0:
                    prior = None  # the policy names none of our choices (a move the request words otherwise)
                rows = self._rows(ours, prior)
                if len(rows) == 1:  # search.actions 1: the policy's likeliest plays unplayed
                    self.stats.searched += 1
                    self._measured(len(states), sample_ms + sum(meter), 0, 0.0)
                    return ours[rows[0]]
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
                built_ms = sum(meter)
                ranked = (prior is not None and cfg.reply_order == "threat"
                          and any(len(built[k].theirs) > replies_n for k in kept))
                first = []
                if ranked:  # every reply against our likeliest choice; the worst for us are kept
                    first = self._specs([(k, ours[rows[0]], b) for k in kept for b in built[k].theirs])
                    got = await self.hub.leaves(decision, first)
                    chosen = self._threats(kept, built, first, got, scored(got), replies_n)
                else:
                    chosen = {k: replies(built[k].theirs, replies_n) for k in kept}
                if cfg.attack_weight > 0:  # the modelled reply is played in every state's table
                    for k in kept:
                        if built[k].attack in built[k].theirs and built[k].attack not in chosen[k]:
                            chosen[k] = chosen[k] + [built[k].attack]
                # the table's leaves are all fresh: the first pass's were kept for scoring low
                specs = self._specs([(k, ours[a], b) for k in kept for a in rows for b in chosen[k]])
                leaves = await self.hub.leaves(decision, specs, keep=cfg.depth > 1)
                if cfg.depth > 1:
                    scores, n_next, ms = await self._onward(decision, leaves, value)
                    value_ms += ms
                else:
                    scores, n_next = scored(leaves), 0
                played = sum(meter) - built_ms
            finally:
                await self.hub.drop(decision)
        columns: list[str] = []
        for k in kept:
            columns += [c for c in chosen[k] if c not in columns]
        sums = np.zeros((len(kept), len(rows), len(columns)))
        counts = np.zeros_like(sums)
        where = {k: i for i, k in enumerate(kept)}
        row_of = {ours[a]: i for i, a in enumerate(rows)}
        for (k, a, b, _), leaf, score in zip(specs, leaves, scores):
            if leaf.error is None:
                cell = (where[k], row_of[a], columns.index(b))
                sums[cell] += score
                counts[cell] += 1
        if not counts.any():
            raise Refusal("no_leaf", leaves[0].error if leaves else "no leaves")
        with np.errstate(invalid="ignore"):
            tables = list(np.where(counts > 0, sums / np.maximum(counts, 1), np.nan))
        rule = getattr(rules, cfg.rule)
        row_prior = prior[rows] if prior is not None and prior[rows].sum() > 0 else None
        modelled = {}
        if cfg.attack_weight > 0:
            modelled = {"model": [columns.index(built[k].attack) if built[k].attack in columns else -1 for k in kept],
                        "model_weight": cfg.attack_weight}
        picked = rule(tables, rng=self._rng if cfg.rule == "equilibrium" else None,
                      prior=row_prior, prior_weight=cfg.prior_weight if row_prior is not None else 0.0,
                      q_scale=cfg.q_scale, **modelled)
        if log.isEnabledFor(logging.DEBUG):  # the scores against the policy, to choose q_scale
            log.debug("%s scores %s prior %s -> %s", decision, np.round(picked.scores, 3),
                      None if row_prior is None else np.round(row_prior / row_prior.sum(), 3),
                      ours[rows[picked.action]])
        n_leaves = len(first) + len(specs) + n_next
        self.stats.searched += 1
        self.stats.leaves += n_leaves
        self._measured(len(states), sample_ms + built_ms, n_leaves, played + value_ms)
        return ours[rows[picked.action]]

    async def _onward(self, decision: str, leaves, value) -> tuple[np.ndarray, int, float]:
        """Scores of the table's leaves over ``search.depth`` turns, how many later turns were
        played and the leaf values' milliseconds: each live leaf plays the turns after it, we the
        policy's likeliest choice there (without a network: our strongest attack), the opponent
        its strongest attack on our active; a leaf whose later turn fails (or whose choice no
        action names) keeps the score of its turns before."""
        t = time.perf_counter()
        now = value(leaves, keep=True) if value is not None else None
        scores = now.scores.copy() if now is not None else np.array([leaf.value for leaf in leaves])
        at = np.arange(len(leaves))  # each current leaf's row in the table
        played = 0
        ms = (time.perf_counter() - t) * 1000
        for turn in range(2, self.config.depth + 1):
            live = [i for i, leaf in enumerate(leaves) if leaf.kept is not None
                    and (now is None or (now.after[i] is not None and now.after[i].choice is not None))]
            if not live:
                break
            seeds = self._rng.integers(0, 1 << 16, (len(live), 4))
            keep = turn < self.config.depth
            nxt = await self.hub.next(decision, [
                (leaves[i].kept, now.after[i].choice if now is not None else None, [int(x) for x in s])
                for i, s in zip(live, seeds)], keep=keep)
            t = time.perf_counter()
            if now is not None:
                now = value.onward([now.after[i] for i in live], nxt, keep=keep)
                got = now.scores
            else:
                got = np.array([np.nan if leaf.error else LATER ** (turn - 1) * leaf.value for leaf in nxt])
            ms += (time.perf_counter() - t) * 1000
            ok = np.isfinite(got)
            at = at[np.asarray(live)]
            scores[at[ok]] = got[ok]
            played += len(live)
            self.stats.later_failed += int((~ok).sum())
            fell = [leaf.fallback for leaf in nxt if leaf.fallback]
            self.stats.later_fallback += len(fell)
            if not ok.all() or fell:
                log.debug("%s: turn %d failed: %s; our choice refused: %s", decision, turn,
                          next((x.error for x in nxt if x.error), None), fell[0] if fell else None)
            leaves = nxt
        return scores, played, ms

    def _rows(self, ours: list[str], prior: Optional[np.ndarray]) -> list[int]:
        """Our choices searched, as indices into ``ours``: with a prior and ``actions`` N, its
        N likeliest (likeliest first); else all of them, in order."""
        n = self.config.actions
        if prior is None:
            return list(range(len(ours)))
        order = [int(i) for i in np.argsort(-prior, kind="stable")]
        return order[:n] if n else order

    def _specs(self, pairs) -> list:
        """(state, ours, theirs) pairs as leaf specs, ``seeds`` each with a fresh seed."""
        return [(k, a, b, [int(x) for x in self._rng.integers(0, 1 << 16, 4)])
                for k, a, b in pairs for _ in range(self.config.seeds)]

    @staticmethod
    def _threats(kept, built, specs, leaves, scores, n: int) -> dict[int, list[str]]:
        """Per state, the ``n`` replies whose first-pass leaves scored lowest for us (a reply
        whose every leaf failed last; ties in :func:`replies`' order)."""
        total: dict = collections.defaultdict(float)
        count: dict = collections.defaultdict(int)
        for (k, _, b, _), leaf, score in zip(specs, leaves, scores):
            if leaf.error is None:
                total[k, b] += score
                count[k, b] += 1
        chosen = {}
        for k in kept:
            order = replies(built[k].theirs, len(built[k].theirs))
            mean = {b: total[k, b] / count[k, b] if count[k, b] else np.inf for b in order}
            chosen[k] = sorted(order, key=lambda b: mean[b])[:n]  # sorted is stable
        return chosen
