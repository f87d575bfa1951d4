"""Observation encoder for every singles format of every generation (random and team).

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
types multi-hot (18), tera type one-hot (18; own team: from the request before it is
used), terastallized, level/100, boosts/6 (7), stats/400 (6: hp atk def spa spd spe; own
team: the real stats from the request, opponent: estimated from base stats and level as
random battles build sets), matchup against the other side's active Pokémon (3, derived):
best type effectiveness of this Pokémon's types against it, of its types against this one
(both log2 / 2, -1.5 for immunity), log2 speed ratio / 2 (clipped to +-1; the active
Pokémon's speed with its boost and paralysis); then in battle (own: brought to this battle
(at team preview: picked so far), opponent: seen in battle, not only at team preview),
item one-hot (``ITEMS``, then "other item", then "no item"; all zero while unknown),
ability one-hot (``ABILITIES``, then "other ability"; zero while unknown) and the types
of its known damaging moves (multi-hot, 18: the own team's four from the request, the
opponent's as revealed).

Opponent slots: the Pokémon seen in battle in reveal order, then (formats with a team
preview) the previewed species not seen yet, in preview order, with "in battle" 0. Own
slots in a pick format (BSS: bring 3 of 6): all six of the team, "in battle" 0 for those
left home; only brought ones can be switched in.

MOVE_DIM (per move): present, available now, base power/100, accuracy, type one-hot (18),
category one-hot (3), priority/5, PP fraction, and (derived) log2 effectiveness vs
opponent active / 2, immune, STAB, estimated damage as a fraction of the opponent active's
remaining HP (Showdown's damage formula with stats, boosts, STAB, effectiveness, accuracy
and burn; clipped to 2) / 2, and whether that estimate knocks it out.

The *derived* columns are functions of other columns. :func:`encode` leaves them at zero;
:func:`maple_async.obs.features.derive` fills them for a whole batch at once (the inference
policy and the learner call it, so networks always see them). Per battle in Python they
were about a third of the encoder's cost.

FIELD_DIM: weather one-hot (9), fields multi-hot (15), own side conditions (24),
opponent side conditions (24), can tera, opponent used tera, force switch, trapped,
turn/50, own alive fraction, opponent alive fraction (unknown counted alive; both of six),
team preview, picks left at team preview / 6, can mega evolve, can use a Z-move, can
dynamax, opponent can still dynamax, own and opponent dynamax turns left / 3, and the
generation one-hot (9: gen 1 ... gen 9).

One layout for every generation: what a generation lacks stays zero (gen 1: items; gens
1-2: abilities; gens 1-8: tera) and what it has is read as the game has it: the
derived columns use the battle's own generation's type chart (gen 1: Ghost does nothing
to Psychic, Bug and Poison hit each other super-effectively; Steel resists Ghost and Dark
until gen 6), poke-env's moves and Pokédex of that generation give move types, powers,
categories (physical or special by type before gen 4) and base stats (gen 1: one Special,
as both special stats), and an unseen opponent's stats are estimated as that
generation's random battles build them (gens 1-2: DVs 15, full stat experience).

Actions (numbering, masks, orders, team preview picks) are :mod:`maple_async.obs.actions`;
:func:`encode` fills their mask from its own reads (``mask=``).
"""

from __future__ import annotations

import copyreg
import io
import operator
import pickle
from typing import Optional

import numpy as np
from poke_env.battle import Battle, MoveCategory, PokemonType, SideCondition, Status
from poke_env.battle.field import Field
from poke_env.battle.weather import Weather
from poke_env.data import GenData

from ..pokeenv.fastbattle import ALL, take_changes
from .actions import N_ACTIONS, _MOVE_ID, fill_mask, only_unknown_move, preview_mask
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
STATS = ("hp", "atk", "def", "spa", "spd", "spe")
P_STATS = P_BOOSTS + len(BOOSTS)
P_MATCH_OFF = P_STATS + len(STATS)
P_MATCH_DEF = P_MATCH_OFF + 1
P_MATCH_SPE = P_MATCH_DEF + 1
P_IN_BATTLE = P_MATCH_SPE + 1
# Items and abilities that change how a battle is played; the rest are "other".
ITEMS = ("choiceband", "choicespecs", "choicescarf", "leftovers", "lifeorb", "heavydutyboots",
         "focussash", "assaultvest", "rockyhelmet", "sitrusberry", "lumberry", "boosterenergy",
         "blacksludge", "airballoon", "eviolite", "expertbelt", "weaknesspolicy", "toxicorb",
         "flameorb", "lightclay", "heatrock", "damprock", "clearamulet", "covertcloak",
         "loadeddice", "whiteherb", "powerherb", "redcard", "ejectbutton", "ejectpack",
         "rustedsword", "rustedshield", "mentalherb", "throatspray", "safetygoggles", "terrainextender")
ABILITIES = ("levitate", "intimidate", "flashfire", "waterabsorb", "voltabsorb", "stormdrain",
             "lightningrod", "sapsipper", "eartheater", "wellbakedbody", "dryskin", "multiscale",
             "regenerator", "unaware", "magicguard", "sturdy", "protosynthesis", "quarkdrive",
             "goodasgold", "magicbounce", "thickfat", "purifyingsalt", "hugepower", "purepower",
             "drought", "drizzle", "sandstream", "snowwarning", "electricsurge", "grassysurge",
             "psychicsurge", "mistysurge", "orichalcumpulse", "hadronengine", "speedboost",
             "moxie", "supremeoverlord", "technician", "adaptability", "guts", "prankster",
             "defiant", "competitive", "poisonheal", "disguise", "zerotohero", "swiftswim",
             "chlorophyll", "sandrush", "slushrush", "asoneglastrier",
             "asonespectrier", "vesselofruin", "swordofruin", "tabletsofruin", "beadsofruin")
ITEM_INDEX = {x: i for i, x in enumerate(ITEMS)}
ABILITY_INDEX = {x: i for i, x in enumerate(ABILITIES)}
P_ITEM = P_IN_BATTLE + 1
P_ITEM_OTHER, P_ITEM_NONE = P_ITEM + len(ITEMS), P_ITEM + len(ITEMS) + 1
P_ABILITY = P_ITEM_NONE + 1
P_ABILITY_OTHER = P_ABILITY + len(ABILITIES)
P_MOVE_TYPES = P_ABILITY_OTHER + 1
POKE_DIM = P_MOVE_TYPES + N_TYPES

# Per-move block offsets
M_PRESENT, M_AVAILABLE, M_POWER, M_ACCURACY = 0, 1, 2, 3
M_TYPE = 4
M_CATEGORY = M_TYPE + N_TYPES
M_PRIORITY = M_CATEGORY + 3
M_PP = M_PRIORITY + 1
M_EFFECT = M_PP + 1
M_IMMUNE = M_EFFECT + 1
M_STAB = M_IMMUNE + 1
M_DAMAGE = M_STAB + 1
M_KO = M_DAMAGE + 1
MOVE_DIM = M_KO + 1

# Field block offsets
F_WEATHER = 0
F_FIELDS = F_WEATHER + len(WEATHER_INDEX)
F_SIDE = F_FIELDS + len(FIELD_INDEX)
F_OPP_SIDE = F_SIDE + len(SIDE_INDEX)
F_FLAGS = F_OPP_SIDE + len(SIDE_INDEX)
N_GENS = 9
FLAG_PREVIEW, FLAG_PICKS_LEFT = 7, 8
FLAG_GIMMICKS = 9  # can mega, can Z, can dynamax, opponent can dynamax, dynamax turns (own, opponent)
FLAG_GEN = FLAG_GIMMICKS + 6  # generation one-hot
N_FLAGS = FLAG_GEN + N_GENS
FIELD_DIM = F_FLAGS + N_FLAGS

OWN_TEAM = 0
OPP_TEAM = OWN_TEAM + 6 * POKE_DIM
MOVES = OPP_TEAM + 6 * POKE_DIM
FIELD = MOVES + 4 * MOVE_DIM
OBS_DIM = FIELD + FIELD_DIM
# What a checkpoint records of the observation and actions; a different one is refused.
LAYOUT = f"maple-obs/3 gens=1-9 obs={OBS_DIM} poke={POKE_DIM} move={MOVE_DIM} field={FIELD_DIM} actions={N_ACTIONS}"

# Each generation's type chart as a matrix: CHARTS[gen - 1, attacking, defending] (a type
# the generation lacks is neutral); EFFECTIVENESS is gen 9's.
CHARTS = np.ones((N_GENS, N_TYPES, N_TYPES), dtype=np.float32)
for _g in range(1, N_GENS + 1):
    _chart = GenData.from_gen(_g).type_chart
    for _d in _TYPES:
        for _a in _TYPES:
            CHARTS[_g - 1, TYPE_INDEX[_a], TYPE_INDEX[_d]] = _chart.get(_d.name, {}).get(_a.name, 1.0)
EFFECTIVENESS = CHARTS[N_GENS - 1]


# Enum members hash through Python-level code; the hot path keys its tables by id() instead.
_TYPE_BY_ID = {id(t): i for t, i in TYPE_INDEX.items()}
_STATUS_BY_ID = {id(s): i for s, i in STATUS_INDEX.items()}
_WEATHER_BY_ID = {id(w): i for w, i in WEATHER_INDEX.items()}
_FIELD_BY_ID = {id(f): i for f, i in FIELD_INDEX.items()}
_SIDE_BY_ID = {id(c): i for c, i in SIDE_INDEX.items()}
_FNT = Status.FNT
_UNKNOWN_ITEM = GenData.UNKNOWN_ITEM

# Static per-move features (power, accuracy, type, category, priority, max PP) by
# generation, then move id (a move's type, power and category change between generations).
_MOVE_STATICS: dict[int, dict[str, tuple]] = {g: {} for g in range(1, N_GENS + 1)}


# Move.id, Move.current_pp and whether the move came from Transform, in one C call (the
# properties only return these slots; tests/test_encoding.py checks that).
_MOVE_SLOTS = operator.attrgetter("_id", "_current_pp", "_from_transform")


def _move_static(move) -> tuple:
    """(row as a memoryview, max PP) for ``move``."""
    statics = _MOVE_STATICS[move._gen]
    cached = statics.get(move.id)
    if cached is not None:
        return cached
    row = np.zeros(MOVE_DIM, dtype=np.float32)
    row[M_PRESENT] = 1.0
    row[M_POWER] = move.base_power / 100.0
    row[M_ACCURACY] = move.accuracy
    mtype = TYPE_INDEX.get(move.type, -1)
    if mtype >= 0:
        row[M_TYPE + mtype] = 1.0
    category = CATEGORY_INDEX[move.category]
    row[M_CATEGORY + category] = 1.0
    row[M_PRIORITY] = move.priority / 5.0
    cached = (memoryview(row), move.entry["pp"] * 8 // 5)
    statics[move.id] = cached
    return cached


_MOVE_TYPE: dict[tuple, int] = {}


def _move_type(move) -> int:
    """Type index of a damaging move (-1: a status move or no type), by move id and generation."""
    key = (move.id, move._gen)
    t = _MOVE_TYPE.get(key)
    if t is None:
        damaging = move.category is not MoveCategory.STATUS
        t = _MOVE_TYPE[key] = TYPE_INDEX.get(move.type, -1) if damaging else -1
    return t


def _stats(known, base, level: int, gen: int = 9) -> list:
    """Stats (hp atk def spa spd spe): the request's (``known``) when there (own team),
    otherwise estimated from base stats and level as random battles build sets: EVs 84
    and IVs 31 (2b + 52), in gens 1-2 DVs 15 and full stat experience (2b + 93)."""
    known = known or {}
    extra = 93 if gen <= 2 else 52
    out = []
    for k in STATS:
        v = known.get(k)
        if v is None:
            b = base.get(k, 80)
            v = (2 * b + extra) * level // 100 + (level + 10 if k == "hp" else 5)
        out.append(float(v))
    return out


# Every Pokémon attribute the encoder reads, in one C-level call: through poke-env's
# properties (Python functions) that is ~15 calls per Pokémon, 12 Pokémon per decision.
# What the properties would return is derived from these slots as they do (type_1, type_2,
# base_stats, current_hp_fraction); tests/test_encoding.py checks the derivation against
# the properties on every state of recorded real battles.
_MON_SLOTS = operator.attrgetter(
    "_type_1", "_type_2", "_temporary_types", "_terastallized", "_terastallized_type",
    "_level", "_base_stats", "_temporary_base_stats", "_stats", "_current_hp", "_max_hp",
    "_status", "_active", "_boosts", "_item", "_ability", "_moves")
R_LEVEL, R_STATUS, R_ACTIVE, R_BOOSTS, R_ITEM, R_ABILITY, R_MOVES = 5, 11, 12, 13, 14, 15, 16


def _hp_fraction(r: tuple) -> float:
    """``Pokemon.current_hp_fraction`` from the slots."""
    hp = r[9]
    return hp / (r[10] or 0) if hp else 0.0


# The static part of a Pokémon block (present, types, tera type, terastallized, level,
# stats), cached per Pokémon object together with the attributes it was built from,
# compared by identity: a stale or reused entry is rebuilt, never used.
_POKE_STATIC: dict[int, tuple] = {}
_POKE_STATIC_MAX = 20000


def _poke_static(mon, r: tuple) -> tuple[memoryview, tuple, list]:
    """(static row as a memoryview, type indices, stats) of ``mon``, whose slots are ``r``."""
    t1, t2, tmp, tz, tera, level, base, tbase, known = r[:9]
    item, ability = r[R_ITEM], r[R_ABILITY]
    n_moves = len(mon.moves)
    # Pokemon.type_1 / type_2 / base_stats
    if tz and tera is not None:
        t1 = tera
    elif tmp:
        t1 = tmp[0]
    if tz or len(tmp) == 1:
        t2 = None
    elif tmp:
        t2 = tmp[1]
    if tbase is not None:
        base = tbase
    atk = known.get("atk") if known else None
    c = _POKE_STATIC.get(id(mon))
    if (c is not None and c[0] is t1 and c[1] is t2 and c[2] is tera and c[3] is tz
            and c[4] == level and c[5] is base and c[6] == atk and c[10] == item
            and c[11] == ability and c[12] == n_moves):
        return c[7], c[8], c[9]
    row = np.zeros(POKE_DIM, dtype=np.float32)
    row[P_PRESENT] = 1.0
    types = tuple(_TYPE_BY_ID[id(t)] for t in (t1, t2) if id(t) in _TYPE_BY_ID)
    for t in types:
        row[P_TYPES + t] = 1.0
    if id(tera) in _TYPE_BY_ID:
        row[P_TERA + _TYPE_BY_ID[id(tera)]] = 1.0
    if tz:
        row[P_TERASTALLIZED] = 1.0
    row[P_LEVEL] = level / 100.0
    gen = mon._gen
    stats = _stats(known, base, level, gen)
    row[P_STATS:P_STATS + len(STATS)] = stats
    row[P_STATS:P_STATS + len(STATS)] /= 400.0
    row[P_IN_BATTLE] = 1.0
    # Showdown's requests say item '' in gen 1 and ability 'noability' in gens 1-2: the game has none, left zero
    if gen >= 2:
        if item == "" or item is None:
            row[P_ITEM_NONE] = 1.0
        elif item != _UNKNOWN_ITEM:
            row[P_ITEM + ITEM_INDEX.get(item, len(ITEMS))] = 1.0
    if ability and gen >= 3:
        row[P_ABILITY + ABILITY_INDEX.get(ability, len(ABILITIES))] = 1.0
    for move in mon.moves.values():
        mtype = _move_type(move)
        if mtype >= 0:
            row[P_MOVE_TYPES + mtype] = 1.0
    if len(_POKE_STATIC) >= _POKE_STATIC_MAX:
        _POKE_STATIC.clear()
    row = memoryview(row)  # slice-assigned into the output: 3x cheaper than numpy's
    _POKE_STATIC[id(mon)] = (t1, t2, tera, tz, level, base, atk, row, types, stats, item, ability,
                             n_moves)
    return row, types, stats


def _encode_mon(w, base: int, mon, r: tuple, is_active: bool, away: bool = False) -> tuple:
    """Write one Pokémon block (``r``: its slots) at ``base`` (its matchup columns are
    derived later, batched: :mod:`maple_async.obs.features`); return whether it is fainted
    and its HP fraction. ``away``: not in this battle (left home, or only previewed)."""
    row, _, _ = _poke_static(mon, r)
    w[base:base + POKE_DIM] = row
    if away:
        w[base + P_IN_BATTLE] = 0.0
    hp = _hp_fraction(r)
    if hp:
        w[base + P_HP] = hp
    status = r[R_STATUS]
    fainted = status is _FNT  # what Pokemon.fainted tests
    if fainted:
        w[base + P_FAINTED] = 1.0
    elif status is not None:
        w[base + P_STATUS + _STATUS_BY_ID[id(status)]] = 1.0
    if is_active:
        w[base + P_ACTIVE] = 1.0
    boosts = r[R_BOOSTS]
    if any(boosts.values()):  # most Pokémon have none
        for j, name in enumerate(BOOSTS):
            b = boosts[name]
            if b:
                w[base + P_BOOSTS + j] = b / 6.0
    return fainted, hp


def opponent_slots(battle: Battle) -> tuple[list, int]:
    """The opponent's Pokémon for its slots, and how many of them were seen in battle: the
    seen ones in reveal order, then the previewed species not seen yet."""
    seen = list(battle._opponent_team.values())
    preview = battle._teampreview_opponent_team
    if not preview or len(seen) >= 6:
        return seen, len(seen)
    species = [m.species for m in seen]
    # (a forme seen in battle starts with its previewed species: zamazenta -> zamazentacrowned)
    rest = [p for p in preview if not any(s.startswith(p.species) for s in species)]
    return seen + rest, len(seen)


_NONE: frozenset = frozenset()


def left_home(battle: Battle) -> frozenset:
    """ids of the own Pokémon left home at the team preview of a pick format (BSS): those
    the requests after it no longer list. Empty in formats without a team preview."""
    d = battle.__dict__
    benched = d.get("_maple_benched")
    if benched is not None:
        return benched
    if not battle._teampreview_opponent_team or battle.teampreview:
        return _NONE
    side = (battle.last_request or {}).get("side") or {}
    idents = {e.get("ident") for e in side.get("pokemon") or ()}
    if not idents:
        return _NONE
    benched = d["_maple_benched"] = frozenset(id(m) for ident, m in battle._team.items()
                                              if ident not in idents)
    return benched


class _Teams:
    """Both team blocks of one battle as last encoded, with what they were built from.

    A battle that tracks its changed Pokémon (:class:`~maple_async.pokeenv.fastbattle.FastBattle`)
    keeps one between decisions (in its ``__dict__``) and the next encoding re-reads only
    the Pokémon that changed (other battles are read by :func:`_read_teams`). Per side
    (0 own, 1 opponent), in slot order: the Pokémon, their slots, and from their blocks:
    fainted and HP fraction; ``active``: the indices whose slots say active (the first one
    is the side's active Pokémon, as ``Battle.active_pokemon`` finds it); ``benched``: own
    Pokémon left home; ``n_seen``: opponent slots seen in battle (the rest only previewed)."""

    __slots__ = ("buf", "w", "mons", "raws", "where", "fainted", "hp", "active", "benched", "n_seen")

    def __init__(self, battle: Battle):
        # The two team blocks, then zeros: each encoding starts from a copy.
        self.buf = np.zeros(OBS_DIM, dtype=np.float32)
        self.w = memoryview(self.buf)
        self.mons, self.raws = ([], []), ([], [])
        self.fainted, self.hp = ([], []), ([], [])
        self.where: dict = {}
        self.active = (set(), set())
        self.benched = left_home(battle)
        opp, self.n_seen = opponent_slots(battle)
        self._add(0, list(battle.team.values()))
        self._add(1, opp)

    def _add(self, s: int, mons: list) -> list:
        """Append Pokémon to side ``s``; return the (side, index) of those with a block."""
        n = len(self.mons[s])
        for i, mon in enumerate(mons, start=n):
            self.where[id(mon)] = (s, i)
        self.mons[s].extend(mons)
        raws = list(map(_MON_SLOTS, mons))
        self.raws[s].extend(raws)
        self.active[s].update(i for i, r in enumerate(raws, start=n) if r[R_ACTIVE])
        self.fainted[s].extend([False] * len(mons))
        self.hp[s].extend([0.0] * len(mons))
        return [(s, i) for i in range(n, min(n + len(mons), 6))]

    def todo(self) -> list:
        """Every (side, index) that has a block."""
        return [(s, i) for s, mons in enumerate(self.mons) for i in range(min(len(mons), 6))]

    def away(self, s: int, i: int) -> bool:
        return id(self.mons[0][i]) in self.benched if s == 0 else i >= self.n_seen

    def update(self, battle: Battle, changes: set) -> Optional[list]:
        """Re-read the Pokémon in ``changes`` and return the (side, index) blocks to
        rewrite, or None when the cache no longer fits the battle (a side is not the
        cached one plus Pokémon added at its end, the brought Pokémon changed, or a
        changed Pokémon is in neither)."""
        if left_home(battle) is not self.benched:
            return None
        todo = []
        opp, n_seen = opponent_slots(battle) if battle._teampreview_opponent_team else (None, 0)
        if opp is not None and (n_seen != self.n_seen or len(opp) != len(self.mons[1])):
            return None  # a previewed Pokémon was seen: slots move
        for s, team in enumerate((battle.team, battle._opponent_team)):
            mons = self.mons[s]
            n = len(mons)
            if len(team) != n and opp is None:
                now = list(team.values())
                if len(now) < n or any(a is not b for a, b in zip(now, mons)):
                    return None
                todo += self._add(s, now[n:])
                if s == 1:
                    self.n_seen = len(self.mons[1])
        where, raws, mons, active = self.where, self.raws, self.mons, self.active
        for key in changes:
            si = where.get(key)
            if si is None:
                return None
            s, i = si
            r = raws[s][i] = _MON_SLOTS(mons[s][i])
            if r[R_ACTIVE]:
                active[s].add(i)
            else:
                active[s].discard(i)
            if i < 6 and si not in todo:
                todo.append(si)
        return todo

    def sums(self) -> list:
        """[own HP, own fainted, opponent HP, opponent fainted] over the Pokémon in battle."""
        own = [i for i in range(min(len(self.mons[0]), 6)) if not self.away(0, i)]
        seen = range(min(self.n_seen, 6))
        return [sum(self.hp[0][i] for i in own), sum(self.fainted[0][i] for i in own),
                sum(self.hp[1][i] for i in seen), sum(self.fainted[1][i] for i in seen)]


def _active_index(raws: list) -> int:
    """Index of the active Pokémon (what Battle.active_pokemon returns), -1 for none."""
    for i, r in enumerate(raws):
        if r[R_ACTIVE]:
            return i
    return -1


def _read_teams(battle: Battle, w) -> tuple:
    """Write both team blocks into ``w``, reading every Pokémon. Returns what the rest of
    the encoding needs: (own Pokémon, own active index, side sums [own HP, own fainted,
    opp HP, opp fainted] over the Pokémon in battle, own Pokémon in battle, opponent
    Pokémon seen)."""
    mons = list(battle.team.values())
    opp_mons, n_seen = opponent_slots(battle)
    benched = left_home(battle)
    ai, sums = write_teams(w, mons, opp_mons, n_seen, benched)
    return mons, ai, sums, len(mons) - len(benched), n_seen


def write_teams(w, mons: list, opp_mons: list, n_seen: int, benched, mark_active: bool = True) -> tuple:
    """Both team blocks, every Pokémon read; returns the own active index and the side
    sums [own HP, own fainted, opp HP, opp fainted] over the Pokémon in battle.
    ``mark_active``: set each side's active flag (doubles sets its own, per slot)."""
    sums = [0.0, 0, 0.0, 0]
    ai = -1
    for s, (offset, side_mons) in enumerate(((OWN_TEAM, mons), (OPP_TEAM, opp_mons))):
        raws = list(map(_MON_SLOTS, side_mons))
        act = _active_index(raws) if mark_active else -1
        if s == 0:
            ai = act
        for i in range(min(len(side_mons), 6)):
            away = id(side_mons[i]) in benched if s == 0 else i >= n_seen
            fainted, hp = _encode_mon(w, offset + i * POKE_DIM, side_mons[i], raws[i], i == act, away)
            if not away:
                sums[2 * s] += hp
                sums[2 * s + 1] += fainted
    return ai, sums


def write_field(battle, w) -> None:
    """Weather, fields and both sides' conditions into the field block."""
    for weather in battle.weather:
        w[FIELD + F_WEATHER + _WEATHER_BY_ID[id(weather)]] = 1.0
    for f in battle.fields:
        w[FIELD + F_FIELDS + _FIELD_BY_ID[id(f)]] = 1.0
    for c in battle.side_conditions:
        w[FIELD + F_SIDE + _SIDE_BY_ID[id(c)]] = 1.0
    for c in battle.opponent_side_conditions:
        w[FIELD + F_OPP_SIDE + _SIDE_BY_ID[id(c)]] = 1.0


def write_generation(battle, w) -> None:
    """The generation one-hot, and the mega / Z-move / dynamax flags of the generations
    that have them, into the field block's flags."""
    flags = FIELD + F_FLAGS
    gen = battle._gen
    w[flags + FLAG_GEN + gen - 1] = 1.0
    if gen < 6:
        return
    # whatever the generation from 6: National Dex formats offer mega, Z-moves or dynamax in
    # gens 8-9 (a doubles battle keeps a flag per slot: any counts)
    mega, z, dyna = battle._can_mega_evolve, battle._can_z_move, battle._can_dynamax
    if mega is True or (mega and any(mega)):
        w[flags + FLAG_GIMMICKS] = 1.0
    if z is True or (z and any(z)):
        w[flags + FLAG_GIMMICKS + 1] = 1.0
    dyna = dyna is True or bool(dyna and any(dyna))
    if gen == 8 or dyna or battle._dynamax_turn is not None:
        w[flags + FLAG_GIMMICKS + 2] = 1.0 if dyna else 0.0
        w[flags + FLAG_GIMMICKS + 3] = 1.0 if battle._opponent_dynamax_turn is None else 0.0
        w[flags + FLAG_GIMMICKS + 4] = (battle.dynamax_turns_left or 0) / 3.0
        w[flags + FLAG_GIMMICKS + 5] = (battle.opponent_dynamax_turns_left or 0) / 3.0


def _cached_teams(battle: Battle, changes: set) -> tuple:
    """:func:`_read_teams` from the battle's cached blocks, re-reading only the Pokémon in
    ``changes``; returns the cache and the same tuple."""
    # The cache is taken out of the battle until the encoding has finished (an exception
    # leaves none: the next encoding reads everything).
    teams = battle.__dict__.pop("_maple_teams", None)
    todo = None
    if teams is not None and ALL not in changes:
        todo = teams.update(battle, changes)
    if todo is None:
        teams = _Teams(battle)
        todo = teams.todo()
    tw = teams.w
    mons = teams.mons
    raws = teams.raws
    act = teams.active
    ai = min(act[0]) if act[0] else -1
    oi = min(act[1]) if act[1] else -1
    for s, i in todo:
        teams.fainted[s][i], teams.hp[s][i] = _encode_mon(
            tw, (OWN_TEAM, OPP_TEAM)[s] + i * POKE_DIM, mons[s][i], raws[s][i],
            i == (ai, oi)[s], teams.away(s, i))
    return teams, (mons[0], ai, teams.sums(), len(mons[0]) - len(teams.benched), teams.n_seen)


def _dropped(_obj):
    return type(None), ()


# The incremental encoder's cache rides in the battle's __dict__ (memoryviews: not picklable).
_COPY_TABLE = {**copyreg.dispatch_table, _Teams: _dropped, memoryview: _dropped}


def snapshot(battle: Battle) -> bytes:
    """The battle pickled without the encoder's cache: each :func:`pickle.loads` of it gives a
    copy, to be encoded in full (``incremental=False``)."""
    buf = io.BytesIO()
    p = pickle.Pickler(buf, pickle.HIGHEST_PROTOCOL)
    p.dispatch_table = _COPY_TABLE
    p.dump(battle)
    return buf.getvalue()


def opponent_team_size(battle: Battle) -> int:
    """How many Pokémon the opponent brings (its |teamsize|; BSS: 3), six until told."""
    role = battle.player_role
    return next((v for k, v in battle._team_size.items() if k != role), 6)


def encode(battle: Battle, out: np.ndarray | None = None,
           side_state: Optional[list] = None, mask: Optional[np.ndarray] = None,
           incremental: bool = True, moves: Optional[list] = None) -> np.ndarray:
    """Encode ``battle`` from its player's point of view into a float32 vector.

    ``side_state``, when given, is filled with what the reward shaping reads (see
    :func:`maple_async.obs.rewards.side_state`), from the same attribute reads: own HP sum,
    own fainted, opponent HP sum (unrevealed Pokémon at full HP), opponent fainted.
    ``mask``, when given (bool, ``N_ACTIONS``), is filled as :func:`action_mask` fills it,
    from the same reads; ``moves``, when given, is filled with the moves that move actions
    name (what :func:`action_to_order` needs, as it would find them). With ``incremental``
    and a battle that tracks its changes (:class:`~maple_async.pokeenv.fastbattle.FastBattle`), only
    the Pokémon that changed since the battle's previous encoding are read again (the
    result is the same); otherwise everything is read and no cache is kept or touched.
    """
    if not battle.__dict__.get("_maple_tera_known"):
        learn_tera_types(battle)
    changes = take_changes(battle) if incremental else None
    teams = None
    if changes is None:
        if out is None:
            out = np.zeros(OBS_DIM, dtype=np.float32)
        else:
            out.fill(0.0)
        # Scalar writes and block copies go through a memoryview (a half and a third of
        # the cost of numpy's item and slice assignment).
        w = memoryview(out) if out.flags.c_contiguous else out
        view = _read_teams(battle, w)
    else:
        teams, view = _cached_teams(battle, changes)
        if out is None:
            out = teams.buf.copy()
        else:
            out[:] = teams.buf
        w = memoryview(out) if out.flags.c_contiguous else out
    mons, ai, sums, n_team, n_opp = view
    active = mons[ai] if ai >= 0 else None
    own_hp_sum, own_fainted, opp_hp_sum, opp_fainted = sums
    own_alive = min(n_team, 6) - own_fainted  # (only the first six are counted)
    opp_size = opponent_team_size(battle)
    if side_state is not None:
        side_state[:] = (own_hp_sum, own_fainted,
                         opp_hp_sum + max(opp_size - n_opp, 0), opp_fainted)

    known_ids: list = []
    known: list = []
    available_moves = battle.available_moves
    available: set = set()
    if active is not None:
        statics = _MOVE_STATICS[battle._gen]
        available = set(map(_MOVE_ID, available_moves))
        for j, move in enumerate(active.moves.values()):
            if j == 4:
                break
            base = MOVES + j * MOVE_DIM
            move_id, pp, from_transform = _MOVE_SLOTS(move)
            known_ids.append(move_id)
            known.append(move)
            row, max_pp = statics.get(move_id) or _move_static(move)
            w[base:base + MOVE_DIM] = row
            if move_id in available:
                w[base + M_AVAILABLE] = 1.0
            if from_transform:
                max_pp = move.max_pp  # transformed moves have at most 5 PP
            w[base + M_PP] = pp / max_pp if max_pp else 0.0

    write_field(battle, w)
    flags = FIELD + F_FLAGS
    force_switch = battle.force_switch
    out[flags:flags + FLAG_GIMMICKS] = (
        battle.can_tera, battle.opponent_used_tera,
        any(force_switch) if isinstance(force_switch, list) else force_switch,
        battle.trapped, battle.turn / 50.0, own_alive / 6.0, (opp_size - opp_fainted) / 6.0,
        0.0, 0.0)
    write_generation(battle, w)
    if mask is not None:
        fill_mask(battle, mask, mons, active, available_moves, available, known_ids)
    if moves is not None:
        moves[:] = available_moves if only_unknown_move(available_moves, known_ids) else known
    if teams is not None:
        battle.__dict__["_maple_teams"] = teams
    return out


# -- team preview ---------------------------------------------------------------------------

def encode_preview(battle: Battle, picks: list, n_picks: int,
                   mask: Optional[np.ndarray] = None) -> np.ndarray:
    """The observation of one team preview pick: both teams as previewed (own: fully
    known from the request; "in battle": picked so far), no active Pokémon or moves,
    the preview flag and the picks left. ``mask`` is filled with :func:`preview_mask`."""
    out = encode(battle, incremental=False)
    for i in range(min(len(battle.team), 6)):
        out[OWN_TEAM + i * POKE_DIM + P_IN_BATTLE] = 1.0 if i in picks else 0.0
    out[FIELD + F_FLAGS + FLAG_PREVIEW] = 1.0
    out[FIELD + F_FLAGS + FLAG_PICKS_LEFT] = (n_picks - len(picks)) / 6.0
    if mask is not None:
        preview_mask(battle, picks, mask)
    return out


def learn_tera_types(battle: Battle) -> None:
    """Own tera types from the request (poke-env keeps a tera type only once used, or
    from a teambuilder): what the request says before the battle starts."""
    d = battle.__dict__
    if d.get("_maple_tera_known"):
        return
    side = (battle.last_request or {}).get("side") or {}
    team = battle._team
    changes = d.get("_maple_changes")
    for e in side.get("pokemon") or ():
        tera = e.get("teraType")
        mon = team.get(e.get("ident"))
        if tera and mon is not None and mon._terastallized_type is None:
            mon._terastallized_type = PokemonType.from_name(tera)
            if changes is not None:
                changes.add(id(mon))
    d["_maple_tera_known"] = bool(side.get("pokemon"))
