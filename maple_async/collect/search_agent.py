"""A checkpoint's agent that searches its decisions (``eval --search``).

:class:`SearchAgent` is an :class:`~maple_async.collect.agent.Agent` (its batcher, hidden
states and statistics; a match plays it as any agent) whose every singles decision is first
taken by the policy as usual, which advances the battle's hidden state by the root's
observation, and then searched: the leaves are valued by the same network
(:class:`~maple_async.search.value.NetworkValue`, from the hidden state the agent had before this decision) and
the policy's probabilities are the search's prior. What the search refuses or fails, and a
decision Showdown rejected once (poke-env asks again; the policy re-decides without the
rejected action), plays the policy's own order: counted in ``search_stats`` by reason. An
outside policy (``--policy``) has no value head: its leaves keep their network-free values (HP
and Pokémon left), with no prior, and a switch after a faint is its own.
"""

from __future__ import annotations

from typing import Optional

from poke_env.battle import DoubleBattle
from poke_env.player.battle_order import DefaultBattleOrder

from ..inference.outside import OutsidePolicy
from ..search.engines import make_searcher
from ..search.player import ChoiceOrder
from ..search.searcher import SearchConfig
from ..search.value import NetworkValue
from .agent import NO_ORDER, Agent

NAME = "agent+search"  # its row in eval's table


class SearchAgent(Agent):
    """``value_reward``/``value_gamma``: the checkpoint's ``reward`` section and ``ppo.gamma``
    (how its value head was trained: :mod:`.value` scores leaves by them)."""

    def __init__(self, policy, batcher_cfg, *, search_config: Optional[SearchConfig] = None,
                 value_reward=None, value_gamma: float = 0.99, search_seed: int = 0, **kwargs):
        super().__init__(policy, batcher_cfg, **kwargs)
        # an outside policy has no value head: its leaves keep their network-free values
        value = (None if isinstance(policy, OutsidePolicy)
                 else NetworkValue(policy, self._hidden_before, value_reward, value_gamma))
        self.searcher = make_searcher(search_config, search_seed, value=value)

    @property
    def search_stats(self):
        return self.searcher.stats

    def _hidden_before(self, battle):
        live = self.live.get(self.key(battle))
        return live.hidden_before if live is not None else None

    async def choose(self, battle, opponent: str):
        order = await super().choose(battle, opponent)
        if (isinstance(battle, DoubleBattle) or self.closing or order is NO_ORDER
                or isinstance(order, DefaultBattleOrder) or battle.teampreview):
            return order
        live = self.live.get(self.key(battle))
        if live is None:  # abandoned while the policy decided
            return order
        if live.retry:  # Showdown refused the last order: the policy's re-decision plays
            self.searcher.stats.decisions += 1
            self.searcher.stats.refused["retry"] += 1
            return order
        choice = await self.searcher.try_choose(battle)
        if choice is None or self.closing or self.live.get(self.key(battle)) is not live:
            return order
        return ChoiceOrder(choice)

    async def close_search(self) -> None:
        await self.searcher.close()
