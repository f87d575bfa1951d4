"""The network-free ``search`` baseline: a poke-env player that searches every
decision on Showdown's own simulator and plays poke-env's SimpleHeuristicsPlayer where it cannot.

One :class:`~.leaves.LeafHub` per player, started at its first decision and closed with the
player (:meth:`SearchPlayer.close_search`). A refused decision (:class:`~.belief.Refusal`) or a
failed search (the hub died, a request was refused, anything else) plays the heuristics'
choice and is counted by reason in ``search_stats``; a hub that died is started again for the
next decision.
"""

from __future__ import annotations

from typing import Optional

from poke_env.player import SimpleHeuristicsPlayer
from poke_env.player.battle_order import BattleOrder

from ..opponents import search_format
from ..pokeenv.fastbattle import FastBattles
from .engines import make_searcher
from .searcher import SearchConfig, Searcher


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
            s = self.__dict__["_maple_searcher"] = make_searcher(self.search_config, self.search_seed)
        return s

    @property
    def search_stats(self):
        return self._searcher().stats

    async def choose_move(self, battle):
        choice = await self._searcher().try_choose(battle)
        if choice is not None:
            return ChoiceOrder(choice)
        return SimpleHeuristicsPlayer.choose_move(self, battle)

    async def close_search(self) -> None:
        s = self.__dict__.get("_maple_searcher")
        if s is not None:
            await s.close()


class SearchBaseline(FastBattles, SearchPlayer):
    """The ``search`` opponent of eval and play: SearchPlayer on our faster battle state."""

    track_changes = False


def baseline_class(battle_format: str) -> type:
    """The ``search`` opponent's player class; a doubles format is refused in one line."""
    search_format(battle_format)
    return SearchBaseline
