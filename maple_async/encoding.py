"""Observation encoder and action mask for gen9 random battles (singles).

Feature layout (float32, ``OBS_DIM`` long; every block at a fixed offset):

=========================  ============  ==================================================
block                      size          contents
=========================  ============  ==================================================
own team, 6 slots          6 x POKE_DIM  slot i = ``battle.team`` order = switch action i
opponent team, 6 slots     6 x POKE_DIM  opponent's revealed Pokémon, reveal order
own active moves, 4 slots  4 x MOVE_DIM  slot j = ``active.moves`` order = move action 6+j
field                      FIELD_DIM     weather, fields, side conditions, flags
=========================  ============  ==================================================

POKE_DIM (per Pokémon): present, hp fraction, fainted, active, status one-hot (6),
types multi-hot (18), tera type one-hot (18), terastallized, level/100, boosts/6 (7).

MOVE_DIM (per move): present, available now, base power/100, accuracy, type one-hot (18),
category one-hot (3), priority/5, PP fraction, log2 effectiveness vs opponent active / 2,
immune, STAB.

FIELD_DIM: weather one-hot (9), fields multi-hot (15), own side conditions (24),
opponent side conditions (24), can tera, opponent used tera, force switch, trapped,
turn/50, own alive fraction, opponent alive fraction (unknown counted alive).

Action numbering follows poke-env's ``SinglesEnv`` (gen9, 26 actions): 0-5 switch to
team slot, 6-9 move, 22-25 move + terastallize (10-21: mega/z/dynamax, never legal in
gen9). ``action_mask`` and ``action_to_order`` agree by construction: both read the same
battle state, and the battle's message lock in poke-env keeps it fixed while a decision
is pending.
"""

from __future__ import annotations

import numpy as np
from poke_env.battle import Battle, MoveCategory, PokemonType, SideCondition, Status
from poke_env.battle.field import Field
from poke_env.battle.weather import Weather
from poke_env.data import GenData
from poke_env.player.battle_order import BattleOrder, DefaultBattleOrder, SingleBattleOrder

N_ACTIONS = 26
N_TYPES = 18
_TYPES = [t for t in PokemonType if t not in (PokemonType.THREE_QUESTION_MARKS, PokemonType.STELLAR)]
assert len(_TYPES) == N_TYPES
TYPE_INDEX = {t: i for i, t in enumerate(_TYPES)}
_STATUSES = [Status.BRN, Status.FRZ, Status.PAR, Status.PSN, Status.SLP, Status.TOX]
STATUS_INDEX = {s: i for i, s in enumerate(_STATUSES)}
BOOSTS = ("atk", "def", "spa", "spd", "spe", "accuracy", "evasion")
CATEGORY_INDEX = {MoveCategory.PHYSICAL: 0, MoveCategory.SPECIAL: 1, MoveCategory.STATUS: 2}
WEATHER_INDEX = {w: i for i, w in enumerate(Weather)}
FIELD_INDEX = {f: i for i, f in enumerate(Field)}
SIDE_INDEX = {s: i for i, s in enumerate(SideCondition)}

# Per-Pokémon block offsets
P_PRESENT, P_HP, P_FAINTED, P_ACTIVE = 0, 1, 2, 3
P_STATUS = 4
P_TYPES = P_STATUS + len(_STATUSES)
P_TERA = P_TYPES + N_TYPES
P_TERASTALLIZED = P_TERA + N_TYPES
P_LEVEL = P_TERASTALLIZED + 1
P_BOOSTS = P_LEVEL + 1
POKE_DIM = P_BOOSTS + len(BOOSTS)

# Per-move block offsets
M_PRESENT, M_AVAILABLE, M_POWER, M_ACCURACY = 0, 1, 2, 3
M_TYPE = 4
M_CATEGORY = M_TYPE + N_TYPES
M_PRIORITY = M_CATEGORY + 3
M_PP = M_PRIORITY + 1
M_EFFECT = M_PP + 1
M_IMMUNE = M_EFFECT + 1
M_STAB = M_IMMUNE + 1
MOVE_DIM = M_STAB + 1

# Field block offsets
F_WEATHER = 0
F_FIELDS = F_WEATHER + len(WEATHER_INDEX)
F_SIDE = F_FIELDS + len(FIELD_INDEX)
F_OPP_SIDE = F_SIDE + len(SIDE_INDEX)
F_FLAGS = F_OPP_SIDE + len(SIDE_INDEX)
N_FLAGS = 7
FIELD_DIM = F_FLAGS + N_FLAGS

OWN_TEAM = 0
OPP_TEAM = OWN_TEAM + 6 * POKE_DIM
MOVES = OPP_TEAM + 6 * POKE_DIM
FIELD = MOVES + 4 * MOVE_DIM
OBS_DIM = FIELD + FIELD_DIM

# Type chart as a matrix: EFFECTIVENESS[attacking, defending].
_chart = GenData.from_gen(9).type_chart
EFFECTIVENESS = np.ones((N_TYPES, N_TYPES), dtype=np.float32)
for _d in _TYPES:
    for _a in _TYPES:
        EFFECTIVENESS[TYPE_INDEX[_a], TYPE_INDEX[_d]] = _chart[_d.name][_a.name]

# Static per-move features (power, accuracy, type, category, priority) by move id.
_MOVE_STATIC: dict[str, tuple[np.ndarray, int, int]] = {}


def _move_static(move) -> tuple[np.ndarray, int, int]:
    cached = _MOVE_STATIC.get(move.id)
    if cached is not None:
        return cached
    row = np.zeros(MOVE_DIM, dtype=np.float32)
    row[M_PRESENT] = 1.0
    row[M_POWER] = move.base_power / 100.0
    row[M_ACCURACY] = move.accuracy
    mtype = TYPE_INDEX.get(move.type, -1)
    if mtype >= 0:
        row[M_TYPE + mtype] = 1.0
    row[M_CATEGORY + CATEGORY_INDEX[move.category]] = 1.0
    row[M_PRIORITY] = move.priority / 5.0
    is_status = move.category == MoveCategory.STATUS
    cached = (row, mtype, int(is_status))
    _MOVE_STATIC[move.id] = cached
    return cached


def _type_ids(mon) -> list[int]:
    return [TYPE_INDEX[t] for t in mon.types if t in TYPE_INDEX]


def _encode_pokemon(out: np.ndarray, base: int, mon) -> None:
    out[base + P_PRESENT] = 1.0
    out[base + P_HP] = mon.current_hp_fraction
    status = mon.status
    if status is Status.FNT or mon.fainted:
        out[base + P_FAINTED] = 1.0
    elif status is not None:
        out[base + P_STATUS + STATUS_INDEX[status]] = 1.0
    if mon.active:
        out[base + P_ACTIVE] = 1.0
    for t in _type_ids(mon):
        out[base + P_TYPES + t] = 1.0
    tera = mon.tera_type
    if tera in TYPE_INDEX:
        out[base + P_TERA + TYPE_INDEX[tera]] = 1.0
    if mon.is_terastallized:
        out[base + P_TERASTALLIZED] = 1.0
    out[base + P_LEVEL] = mon.level / 100.0
    boosts = mon.boosts
    for i, name in enumerate(BOOSTS):
        b = boosts[name]
        if b:
            out[base + P_BOOSTS + i] = b / 6.0


def encode(battle: Battle, out: np.ndarray | None = None) -> np.ndarray:
    """Encode ``battle`` from its player's point of view into a float32 vector."""
    if out is None:
        out = np.zeros(OBS_DIM, dtype=np.float32)
    else:
        out.fill(0.0)
    for i, mon in enumerate(battle.team.values()):
        if i == 6:
            break
        _encode_pokemon(out, OWN_TEAM + i * POKE_DIM, mon)
    for i, mon in enumerate(battle.opponent_team.values()):
        if i == 6:
            break
        _encode_pokemon(out, OPP_TEAM + i * POKE_DIM, mon)

    active = battle.active_pokemon
    opp = battle.opponent_active_pokemon
    if active is not None:
        opp_types = _type_ids(opp) if opp is not None else []
        own_types = set(_type_ids(active))
        available = {m.id for m in battle.available_moves}
        for j, move in enumerate(active.moves.values()):
            if j == 4:
                break
            base = MOVES + j * MOVE_DIM
            row, mtype, is_status = _move_static(move)
            out[base:base + MOVE_DIM] = row
            if move.id in available:
                out[base + M_AVAILABLE] = 1.0
            max_pp = move.max_pp
            out[base + M_PP] = move.current_pp / max_pp if max_pp else 0.0
            if mtype >= 0:
                if opp_types and not is_status:
                    mult = float(np.prod(EFFECTIVENESS[mtype, opp_types]))
                    if mult == 0.0:
                        out[base + M_IMMUNE] = 1.0
                    else:
                        out[base + M_EFFECT] = np.log2(mult) / 2.0
                if mtype in own_types:
                    out[base + M_STAB] = 1.0

    for w in battle.weather:
        out[FIELD + F_WEATHER + WEATHER_INDEX[w]] = 1.0
    for f in battle.fields:
        out[FIELD + F_FIELDS + FIELD_INDEX[f]] = 1.0
    for s in battle.side_conditions:
        out[FIELD + F_SIDE + SIDE_INDEX[s]] = 1.0
    for s in battle.opponent_side_conditions:
        out[FIELD + F_OPP_SIDE + SIDE_INDEX[s]] = 1.0
    flags = FIELD + F_FLAGS
    out[flags + 0] = float(battle.can_tera)
    out[flags + 1] = float(battle.opponent_used_tera)
    out[flags + 2] = float(any(battle.force_switch)) if isinstance(battle.force_switch, list) else float(battle.force_switch)
    out[flags + 3] = float(battle.trapped)
    out[flags + 4] = battle.turn / 50.0
    out[flags + 5] = sum(not m.fainted for m in battle.team.values()) / 6.0
    out[flags + 6] = (6 - sum(m.fainted for m in battle.opponent_team.values())) / 6.0
    return out


def _move_choices(battle: Battle) -> list:
    """The moves that move actions 6..9 refer to (poke-env's SinglesEnv convention)."""
    active = battle.active_pokemon
    available = battle.available_moves
    known = list(active.moves.values())[:4] if active is not None else []
    if len(available) == 1 and available[0].id not in {m.id for m in known}:
        return available  # Struggle / recharge: a move the Pokémon does not "know"
    return known


def action_mask(battle: Battle, out: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask of legal actions (``N_ACTIONS``)."""
    if out is None:
        out = np.zeros(N_ACTIONS, dtype=bool)
    else:
        out.fill(False)
    if battle._wait:
        return out
    if not battle.trapped:
        switchable = {p.base_species for p in battle.available_switches}
        if switchable:
            for i, mon in enumerate(battle.team.values()):
                if mon.base_species in switchable:
                    out[i] = True
    available = battle.available_moves
    if battle.active_pokemon is not None and available:
        avail_ids = {m.id for m in available}
        moves = _move_choices(battle)
        if moves is available:
            out[6] = True
        else:
            for j, move in enumerate(moves):
                if move.id in avail_ids:
                    out[6 + j] = True
        if battle.can_tera:
            out[22:26] = out[6:10]
    return out


def action_to_order(battle: Battle, action: int) -> BattleOrder:
    """Translate an action index into a poke-env order (inverse of the mask's numbering)."""
    if action < 0:
        return DefaultBattleOrder()
    if action < 6:
        return SingleBattleOrder(list(battle.team.values())[action])
    move = _move_choices(battle)[(action - 6) % 4]
    return SingleBattleOrder(move, terastallize=22 <= action < 26)
