"""The network-free ``search`` baseline (issue 62, item 5): a poke-env player that searches every
decision on Showdown's own simulator and plays poke-env's SimpleHeuristicsPlayer where it cannot.

One :class:`~.leaves.LeafHub` per player, started at its first decision and closed with the
player (:meth:`SearchPlayer.close_search`). A refused decision (:class:`~.belief.Refusal`) or a
failed search (the hub died, a request was refused, anything else) plays the heuristics'
choice and is counted by reason in ``search_stats``; a hub that died is started again for the
next decision.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Optional

from poke_env.player import SimpleHeuristicsPlayer
from poke_env.player.battle_order import BattleOrder

from .belief import Refusal
from .leaves import LeafHub, LeafHubDied, LeafHubError
from .searcher import SearchConfig, Searcher

log = logging.getLogger("maple_async.search")


class ChoiceOrder(BattleOrder):
    """A Showdown choice string ("move 2 terastallize", "switch 3") sent as it is."""

    def __init__(self, choice: str):
        self.choice = choice

    @property
    def message(self) -> str:
        return f"/choose {self.choice}"


class SearchPlayer(SimpleHeuristicsPlayer):
    """Searches each decision; the heuristics play what the search refuses or fails."""

    search_config: Optional[SearchConfig] = None
    search_seed = 0

    def _searcher(self) -> Searcher:
        s = self.__dict__.get("_maple_searcher")
        if s is None:
            s = self.__dict__["_maple_searcher"] = Searcher(LeafHub(), self.search_config, self.search_seed)
            self.__dict__["_maple_hub_lock"] = asyncio.Lock()
        return s

    @property
    def search_stats(self):
        return self._searcher().stats

    async def choose_move(self, battle):
        searcher = self._searcher()
        stats = searcher.stats
        stats.decisions += 1
        try:
            if not searcher.hub.alive:
                async with self.__dict__["_maple_hub_lock"]:
                    if not searcher.hub.alive:
                        await searcher.hub.start()
            return ChoiceOrder(await searcher.choose(battle))
        except Refusal as r:
            stats.refused[r.reason] += 1
            stats.examples[r.reason] = str(r)
        except LeafHubDied as e:
            stats.failed["hub_died"] += 1
            stats.examples["hub_died"] = str(e)
            log.warning("search: the leaf process died (%s); the heuristics play this decision", e)
        except LeafHubError as e:
            stats.failed["hub_refused"] += 1
            stats.examples["hub_refused"] = str(e)
            log.debug("search: %s", e)
        except Exception as e:  # a searcher bug costs one decision's search, not the battle
            stats.failed[type(e).__name__] += 1
            stats.examples[type(e).__name__] = f"{e!r}"
            log.warning("search failed (%s: %s); the heuristics play this decision", type(e).__name__, e)
        return SimpleHeuristicsPlayer.choose_move(self, battle)

    async def close_search(self) -> None:
        s = self.__dict__.get("_maple_searcher")
        if s is not None:
            await s.hub.close()
