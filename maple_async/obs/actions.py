"""Singles actions: their numbering, the mask of legal ones and the orders they send.

Numbering follows poke-env's ``SinglesEnv`` for 0-25 in every generation:

=======  ===========================================================================
action   meaning
=======  ===========================================================================
0-5      switch to team slot i (``battle.team`` order, the observation's slot order)
6-9      move j (the active Pokémon's first four known moves, ``active.moves`` order)
10-13    move j + mega evolve (gens 6-7, while the request offers it)
14-17    move j as its Z-move (gen 7, for the moves the request names Z-capable)
18-21    move j + dynamax (gen 8, while the request offers it)
22-25    move j + terastallize (gen 9, while the request offers it)
26-31    team preview: bring team slot i next (the first pick leads)
=======  ===========================================================================

A team preview is one decision per pick (:func:`preview_mask`, and the observation's
:func:`maple_async.obs.encoding.encode_preview`): BSS picks 3, a full-team format orders
the team (its last pick is forced and not asked). The mask allows exactly what Showdown
accepts: the gimmick blocks copy the move block only while the request offers that
gimmick (Z-moves: only the moves it names). :func:`fill_mask` and :func:`action_to_order`
agree by construction: both read the same battle state, and the battle's message lock in
poke-env keeps it fixed while a decision is pending. Doubles numbers its pairs of slot
actions in :mod:`maple_async.obs.doubles`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Optional

import numpy as np
from poke_env.battle import Battle, Move, Pokemon
from poke_env.player.battle_order import BattleOrder, DefaultBattleOrder, SingleBattleOrder

from ..pokeenv.fastbattle import party_slots

N_ACTIONS = 32
MOVE, MEGA, ZMOVE, DYNAMAX, TERA = 6, 10, 14, 18, 22  # first action of each move block
PREVIEW = 26  # actions PREVIEW + i: team preview, bring team slot i next

_MOVE_ID = operator.attrgetter("_id")
_NO_ACTION = bytes(N_ACTIONS)


def any_legal(mask: np.ndarray) -> bool:
    """``mask.any()`` for an action mask, at a twentieth of numpy's cost on 32 entries."""
    return mask.tobytes() != _NO_ACTION


def active_mon(team: dict):
    """``Battle.active_pokemon`` (the same scan, reading the slot the property returns)."""
    for mon in team.values():
        if mon._active:
            return mon
    return None


def known_moves(active) -> list:
    """The moves that move actions 6..9 name: the first four the active Pokémon knows."""
    return list(active.moves.values())[:4] if active is not None else []


def only_unknown_move(available_moves: list, known_ids: list) -> bool:
    """Struggle / recharge: the one available move is not one the Pokémon "knows"; move
    action 6 then means that move (the mask and :func:`action_to_order` both ask here)."""
    return len(available_moves) == 1 and _MOVE_ID(available_moves[0]) not in known_ids


def move_choices(battle: Battle) -> list:
    """The moves that move actions 6..9 refer to (poke-env's SinglesEnv convention)."""
    available = battle.available_moves
    known = known_moves(active_mon(battle.team))
    if only_unknown_move(available, list(map(_MOVE_ID, known))):
        return available
    return known


def z_move_ids(battle: Battle) -> set:
    """ids of the moves the request lets the active Pokémon use as Z-moves (gen 7)."""
    active = ((battle.last_request or {}).get("active") or [{}])[0]
    out = set()
    for entry, z in zip(active.get("moves") or (), active.get("canZMove") or ()):
        if z:
            out.add(Move.retrieve_id(entry.get("id") or entry.get("move") or ""))
    return out


def fill_mask(battle: Battle, mask: np.ndarray, mons: list, active, available_moves: list,
              available: set, known_ids: list) -> None:
    """The legal actions from what the encoder has read: the team in order, the active
    Pokémon, the available moves (and their ids) and the ids of its first four moves."""
    mask.fill(False)
    if battle._wait:
        return
    if not battle.trapped:
        # poke-env fills available_switches with the team's own Pokémon objects: compare
        # by identity (base_species is a pokedex lookup + regex per call).
        switchable = {id(p) for p in battle.available_switches}
        if switchable:
            for i, mon in enumerate(mons):
                if id(mon) in switchable:
                    mask[i] = True
    if active is not None and available_moves:
        if only_unknown_move(available_moves, known_ids):
            mask[MOVE] = True
        else:
            for j, move_id in enumerate(known_ids):
                if move_id in available:
                    mask[MOVE + j] = True
        # each gimmick on its own: National Dex formats offer mega and tera (or dynamax) together
        if battle.can_tera:
            mask[TERA:TERA + 4] = mask[MOVE:MOVE + 4]
        if battle.can_dynamax:
            mask[DYNAMAX:DYNAMAX + 4] = mask[MOVE:MOVE + 4]
        if battle.can_mega_evolve:
            mask[MEGA:MEGA + 4] = mask[MOVE:MOVE + 4]
        if battle.can_z_move:
            z = z_move_ids(battle)
            for j, move_id in enumerate(known_ids):
                if move_id in z and mask[MOVE + j]:
                    mask[ZMOVE + j] = True


def action_mask(battle: Battle, out: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask of legal actions (``N_ACTIONS``). The encoder fills the same mask
    (``encode(mask=...)``) from its own reads."""
    if out is None:
        out = np.zeros(N_ACTIONS, dtype=bool)
    team = battle.team
    active = active_mon(team)
    available_moves = battle.available_moves
    known_ids = list(map(_MOVE_ID, known_moves(active)))
    fill_mask(battle, out, list(team.values()), active, available_moves,
              set(map(_MOVE_ID, available_moves)), known_ids)
    return out


@dataclass
class SlotSwitchOrder(SingleBattleOrder):
    """A switch sent as the party slot number of the current request.

    poke-env sends ``/choose switch <name>``, and Showdown matches that against the party
    in order, active Pokémon first, by name *or species*: an active Pokémon transformed
    into the same species (Ditto, Imposter) is matched instead of the one on the bench, and
    the choice is rejected ("You can't switch to an active Pokémon").
    """

    slot: int = 0

    @property
    def message(self) -> str:
        return f"/choose switch {self.slot}"


def _switch_order(battle: Battle, action: int) -> BattleOrder:
    ident, mon = list(battle.team.items())[action]
    slots = party_slots(battle)
    if slots is not None and ident in slots:
        return SlotSwitchOrder(mon, slot=slots[ident])
    side = (battle.last_request or {}).get("side") or {}
    for slot, entry in enumerate(side.get("pokemon") or (), start=1):
        if entry.get("ident") == ident:
            return SlotSwitchOrder(mon, slot=slot)
    return SingleBattleOrder(mon)  # no request to read the slot from: poke-env's form


def action_to_order(battle: Battle, action: int, moves: Optional[list] = None) -> BattleOrder:
    """Translate an action index into a poke-env order (inverse of the mask's numbering).
    ``moves``: the move choices the encoder filled for this state, if at hand."""
    if action < 0:
        return DefaultBattleOrder()
    if action < MOVE:
        return _switch_order(battle, action)
    move = (moves if moves is not None else move_choices(battle))[(action - MOVE) % 4]
    return SingleBattleOrder(move, mega=MEGA <= action < ZMOVE, z_move=ZMOVE <= action < DYNAMAX,
                             dynamax=DYNAMAX <= action < TERA, terastallize=TERA <= action < PREVIEW)


def order_to_action(battle: Battle, order: BattleOrder, moves: Optional[list] = None) -> Optional[int]:
    """The action index of a poke-env order another player chose (a teacher's, for
    behaviour cloning): the inverse of :func:`action_to_order`; None for an order with no
    index (``/choose default``, a move the action numbering does not name)."""
    target = getattr(order, "order", None)
    if isinstance(target, Pokemon):
        for i, mon in enumerate(battle.team.values()):
            if mon is target:
                return i
        return None
    if isinstance(target, Move):
        choices = moves if moves is not None else move_choices(battle)
        for j, move in enumerate(choices[:4]):
            if move is target or _MOVE_ID(move) == _MOVE_ID(target):
                for flag, first in (("mega", MEGA), ("z_move", ZMOVE), ("dynamax", DYNAMAX),
                                    ("terastallize", TERA)):  # poke-env's message reads them in this order
                    if getattr(order, flag, False):
                        return first + j
                return MOVE + j
    return None


# -- team preview ---------------------------------------------------------------------------

def preview_picks(battle: Battle) -> int:
    """How many Pokémon the team preview asks for: the request's ``maxChosenTeamSize``
    (BSS: 3), else the whole team."""
    request = battle.last_request or {}
    n = len(battle.team)
    return min(request.get("maxChosenTeamSize") or n, n, 6)


def preview_mask(battle: Battle, picks: list, out: Optional[np.ndarray] = None,
                 preview: int = PREVIEW, n_actions: int = N_ACTIONS) -> np.ndarray:
    """Legal team preview actions: bring a team slot not picked yet (``preview + i``; the
    doubles numbering passes its own)."""
    if out is None:
        out = np.zeros(n_actions, dtype=bool)
    else:
        out.fill(False)
    for i in range(min(len(battle.team), 6)):
        if i not in picks:
            out[preview + i] = True
    return out


def preview_order(battle: Battle, picks: list) -> str:
    """``/team`` message for team slots ``picks`` (the first leads), numbered as the
    request lists the team."""
    side = (battle.last_request or {}).get("side") or {}
    position = {e.get("ident"): k for k, e in enumerate(side.get("pokemon") or (), start=1)}
    idents = list(battle.team)
    numbers = [position.get(idents[i], i + 1) for i in picks]
    for i, mon in enumerate(battle.team.values()):
        mon._selected_in_teampreview = i in picks
    return "/team " + "".join(map(str, numbers))
