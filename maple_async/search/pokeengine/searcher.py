"""One decision's search on poke-engine: belief -> built states -> snapshots -> the engine's
tree search on each state, in parallel -> our choice from the visit shares.

Per decision: the belief draws ``search.states`` states and ``leafhub.js`` builds them as the
Showdown search does (our side checked against the real request), then describes each in plain
terms; :mod:`.translate` turns each into the engine's state; each state is searched by the
engine's decoupled tree search (both sides choose at once, each by UCB1) for its share of
``search.budget_ms``, the states spread over the generation's engine workers. Our choice is the
argmax of the visit shares summed over the states; with a network, mixed with the policy's
probabilities as the Showdown search mixes its scores (``search.prior_weight``, or
``search.q_scale`` on each choice's mean score). What cannot be searched raises Refusal (by
reason) or an :class:`~.pool.EngineError` (by kind); :meth:`EngineSearcher.try_choose` counts it
and returns None, and the caller plays its own choice.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import time
from typing import Optional

import numpy as np

from ...config import SearchConfig
from ..belief import Refusal, check_ours, sample_states
from ..leaves import LeafHub, metered
from ..searcher import SearchStats, counted, legal_choices
from .pool import EngineDied, EnginePool
from .translate import Translation, translate

log = logging.getLogger("maple_async.search.engine")
MIN_STATE_MS = 5
# Tree-search iterations a millisecond on a loaded 2-core machine, at the slowest seen (gen 9,
# six Pokémon a side): what a count of iterations is given as time before its deadline passes.
SLOWEST_ITERATIONS_PER_MS = 20


class EngineSearcher:
    """Searches decisions on poke-engine; builds its states on one :class:`LeafHub`."""

    def __init__(self, hub: LeafHub, config: Optional[SearchConfig] = None, seed: int = 0, value=None,
                 pools: Optional["EnginePools"] = None):
        self.hub = hub
        self.config = config or SearchConfig()
        self.value = value
        self.pools = pools or EnginePools(workers=self.config.engine_workers or None)
        self.stats = SearchStats()
        self._ids = itertools.count(1)
        self._rng = np.random.default_rng(seed)
        self._starting = asyncio.Lock()
        self._unknown: dict = collections.defaultdict(dict)  # kind -> name -> unknown to the engine
        self.approximated: collections.Counter = collections.Counter()  # what was held approximately

    async def close(self) -> None:
        await self.hub.close()
        await self.pools.close()

    async def try_choose(self, battle) -> Optional[str]:
        """:meth:`choose`, counted: None when the search refused or failed the decision (an
        engine's fault by its kind: ``engine_panic``, ``engine_hang``, ``engine_died``)."""
        return await counted(self, battle)

    async def choose(self, battle) -> str:
        t0 = time.perf_counter()
        request = battle.last_request or {}
        try:
            ours = legal_choices(request)
        except (KeyError, IndexError, TypeError):
            ours = None
        if ours is not None and len(ours) == 1:
            self.stats.searched += 1
            return ours[0]
        cfg = self.config
        seed = int(self._rng.integers(1 << 62))
        pool = await self.pools.get(battle.gen)
        with metered() as meter:
            belief = await sample_states(self.hub, battle, cfg.states, seed, forced_switches=True)
            self.stats.relaxed += belief.relaxed
            fmt = battle.format or battle.battle_tag.split("-")[1]
            decision = f"{battle.battle_tag}:{battle.turn}:{next(self._ids)}"
            try:
                built = await self.hub.build(decision, fmt, belief.states, us=battle.player_role, describe=True)
            finally:
                await self.hub.drop(decision)
        ours = legal_choices(request)
        trapped = bool((request.get("active") or [{}])[0].get("trapped"))
        translations: list[Translation] = []
        refusal: Optional[Refusal] = None
        for b in built:
            try:
                check_ours(b, request, ours)
                translations.append(translate(b.snapshot, battle.player_role, trapped))
            except Refusal as r:
                if r.reason == "our_choices":
                    self.stats.states_dropped += 1
                refusal = r
        if not translations:
            raise refusal or Refusal("our_choices", "no sampled state allows our real choices")
        await self._check_names(pool, translations)
        if cfg.record:
            self._record(fmt, battle.player_role, belief.states[0])
        share, score = await self.search(pool, translations, ours)
        prior = self.value.decision(battle).prior(ours) if self.value is not None else None
        pick = self.pick(ours, share, score, prior)
        self.stats.searched += 1
        self.stats.ms += (time.perf_counter() - t0) * 1000
        self.stats.compute_ms += sum(meter)
        return pick

    def _record(self, fmt: str, us: str, state: dict) -> None:
        with open(self.config.record, "a") as f:
            f.write(json.dumps({"format": fmt, "us": us, "state": state}) + "\n")

    async def search(self, pool: EnginePool, translations: list[Translation], ours: list[str]):
        """Each state's tree search, for its share of the budget; returns per choice of ours the
        visit share summed over the states (each state's shares sum to 1) and the mean score."""
        cfg = self.config
        ms = max(int((cfg.budget_ms or 100.0) / len(translations)), MIN_STATE_MS)
        if cfg.iterations:  # a count, not a clock: its deadline from the engine's slowest rate seen here
            ms = max(ms, int(cfg.iterations / SLOWEST_ITERATIONS_PER_MS))
        # each state on the least busy worker; a state the engine fails costs that state alone
        got = await asyncio.gather(*(
            pool.request({"op": "mcts", "state": t.spec, "ms": ms, "iterations": cfg.iterations, "threads": 1},
                         budget_s=ms / 1000) for t in translations), return_exceptions=True)
        kept = [(t, r) for t, r in zip(translations, got) if not isinstance(r, BaseException)]
        for r in got:
            if isinstance(r, asyncio.CancelledError):
                raise r
        if not kept:
            raise next(r for r in got if isinstance(r, BaseException))
        for r in got:
            if isinstance(r, BaseException):
                self.stats.states_failed[getattr(r, "kind", type(r).__name__)] += 1
        translations, replies = [t for t, _ in kept], [r for _, r in kept]
        share = np.zeros(len(ours))
        scores = np.zeros(len(ours))
        seen = np.zeros(len(ours))
        index = {c: i for i, c in enumerate(ours)}
        for t, reply in zip(translations, replies):
            total = sum(v for _, v, _ in reply["ours"]) or 1
            for choice, visits, score in reply["ours"]:
                mine = t.from_engine.get(choice)
                i = index.get(mine) if mine is not None else None
                if i is None:
                    continue  # a choice the real request does not offer (tera the format forbids, ...)
                share[i] += visits / total
                if visits:
                    scores[i] += score / visits
                    seen[i] += 1
            self.stats.compute_ms += float(reply.get("ms", 0.0))
            self.stats.leaves += int(reply.get("iterations", 0))
        if not share.any():
            raise Refusal("engine:no_choice", "the engine searched none of our real choices")
        return share / len(translations), np.where(seen > 0, scores / np.maximum(seen, 1), 0.0)

    def pick(self, ours: list[str], share: np.ndarray, score: np.ndarray, prior: Optional[np.ndarray]) -> str:
        """Our choice: the visit shares' argmax; with a policy, ``q_scale`` > 0 weighs its
        probabilities by exp(q_scale x each choice's mean score), else ``prior_weight`` mixes
        them into the shares."""
        cfg = self.config
        final = share
        if prior is not None and prior.sum() > 0:
            p = prior / prior.sum()
            if cfg.q_scale > 0:
                final = p * np.exp(cfg.q_scale * (score - score.max())) * (share > 0)
            else:
                final = (1 - cfg.prior_weight) * share + cfg.prior_weight * p
        return ours[int(np.argmax(final))]

    async def _check_names(self, pool: EnginePool, translations: list[Translation]) -> None:
        """A name the engine lacks (it would read it as nothing): an item is held as no item (its
        effect is outside the engine's model: Light Clay, Damp Rock and the like; counted in
        ``approximated``), a species, move, ability or volatile refuses the state. Each name is asked of
        the engine once."""
        for kind in ("pokemon", "move", "item", "ability", "volatile"):
            names = sorted({n for t in translations for n in t.names[kind]})
            cache = self._unknown[kind]
            new = [n for n in names if n not in cache]
            if new:
                reply = await pool.request({"op": "names", "kind": kind, "names": new}, budget_s=1.0)
                bad = set(reply["unknown"])
                for n in new:
                    cache[n] = n in bad
            missing = [n for n in names if cache[n]]
            if not missing:
                continue
            if kind != "item":
                raise Refusal(f"engine_unknown:{kind}", f"the engine has no {kind} {', '.join(missing)}")
            for t in translations:
                for key in ("side_one", "side_two"):
                    for mon in t.spec[key]["pokemon"]:
                        if cache.get(mon["item"]):
                            self.approximated[f"item:{mon['item']}"] += 1
                            mon["item"] = "none"


class EnginePools:
    """One :class:`EnginePool` per generation, started at its first use."""

    def __init__(self, workers: Optional[int] = None, home=None):
        self.workers = workers
        self.home = home
        self.pools: dict[int, EnginePool] = {}
        self._lock = asyncio.Lock()

    async def get(self, gen: int) -> EnginePool:
        """The generation's pool; the first caller starts it, the others wait for that."""
        pool = self.pools.get(gen)
        if pool is not None and not pool.closed:
            return pool
        async with self._lock:
            pool = self.pools.get(gen)
            if pool is None or pool.closed:
                pool = await EnginePool(gen, self.workers, self.home).start()
                self.pools[gen] = pool
            return pool

    async def close(self) -> None:
        for pool in self.pools.values():
            await pool.close()
        self.pools.clear()


__all__ = ["EngineSearcher", "EnginePools", "EngineDied"]
