"""Cheaper poke-env battle state for the players maple-async drives, by subclassing.

poke-env re-reads every Pokémon of the team from each ``|request|`` (about 6.6
``update_from_request`` and 27 ``_add_move`` calls per decision, measured) and each of those
resolves ``Pokemon.moves`` through three properties of its ``MoveSet`` (Transform and Mimic
overrides). For the common case, a Pokémon neither transformed nor mimicking, the resolved
dict *is* the base dict; :class:`FastPokemon` returns it directly and memoises
``Move.retrieve_id``, which is a pure function of the move id. Everything else (transformed
or mimicking Pokémon, new moves) takes poke-env's own path, so the state is the same as
poke-env's: ``tests/test_fastbattle.py`` replays recorded requests through both and
compares every slot.

Only the battles of our own :class:`~maple_async.runner.PolicyPlayer` (through the
:class:`FastBattles` mixin) are converted, by ``__class__`` assignment (layout-compatible:
the subclasses add no slots); the RandomPlayer ceiling that the bench measures against
stays stock poke-env.
"""

from __future__ import annotations

from typing import Dict, Optional

from poke_env.battle import Battle, Move, Pokemon

_MOVE_IDS: Dict[str, str] = {}  # raw move id -> Move.retrieve_id(raw id)


class FastPokemon(Pokemon):
    __slots__ = ()

    @property
    def moves(self) -> Dict[str, Move]:
        ms = self._moves
        if ms._transform_moves is None and ms._mimic_move is None:
            return ms._base_moves
        return ms.moves

    def _add_move(self, move_id: str) -> Optional[Move]:
        id_ = _MOVE_IDS.get(move_id)
        if id_ is None:
            id_ = _MOVE_IDS[move_id] = Move.retrieve_id(move_id)
        move = self.moves.get(id_)
        if move is not None:
            return move
        return Pokemon._add_move(self, move_id)


class FastBattle(Battle):
    __slots__ = ()

    def get_pokemon(self, identifier: str, force_self_team: bool = False, details: str = "",
                    request=None) -> Pokemon:
        mon = Battle.get_pokemon(self, identifier, force_self_team, details, request)
        if mon.__class__ is Pokemon:
            mon.__class__ = FastPokemon
        return mon


class FastBattles:
    """Player mixin (before ``Player`` in the bases): the battles it creates are
    :class:`FastBattle` while ``fast_battles`` is true (``runner.fast_battles`` in the
    config: off for an A/B, or if a poke-env release breaks the assumptions above)."""

    fast_battles = True

    async def _create_battle(self, split_message):
        battle = await super()._create_battle(split_message)
        return speed_up(battle) if self.fast_battles else battle


def speed_up(battle):
    """Convert a stock singles :class:`Battle` (and the Pokémon it holds) in place; other
    battle kinds (doubles, subclasses) are returned unchanged."""
    if battle.__class__ is Battle:
        battle.__class__ = FastBattle
        for team in (battle._team, battle._opponent_team):
            for mon in team.values():
                if mon.__class__ is Pokemon:
                    mon.__class__ = FastPokemon
    return battle
