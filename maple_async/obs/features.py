"""Derived observation features, computed for a whole batch at once.

The encoder (:mod:`maple_async.obs.encoding`) writes what it reads from one battle. The
columns that are *functions of other columns* it leaves at zero; :func:`derive` fills
them for a batch of observations with about sixty numpy calls, whatever the batch size.
It is the ``features`` step of :class:`~maple_async.inference.policy.InferencePolicy`
(every batch, before its forward pass) and of the learner (its rollouts), so the networks
always see the complete observation. Per battle in Python this was about a third of the
encoder's cost (docs/design.md#notes).

What is derived (the formulas are those documented in :mod:`maple_async.obs.encoding`):

- per Pokémon block, the matchup against the other side's active Pokémon: best type
  effectiveness of its types against it and of its types against this one (log2 / 2,
  -1.5 for immunity, 0 when either has no known type) and the log2 speed ratio / 2,
  clipped to +-1 (an active Pokémon's speed with its boost and paralysis);
- per move: log2 effectiveness against the opponent's active Pokémon / 2, immunity, STAB,
  the damage estimate as a fraction of the opponent active's remaining HP (clipped to 2,
  then / 2) and whether it knocks it out.

They are computed from the columns the encoder writes: types, stats, boosts, status,
level, HP fraction and the active flag of the Pokémon blocks; type, category, base power
and accuracy of the moves. A side's active Pokémon is the block whose active flag is set;
while a side has none (before the first switch-in, or in the rare state where the active
Pokémon is not among the six blocks), matchups, effectiveness and damage stay zero.
Deriving an observation twice gives the same observation.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from . import doubles as dbl
from . import encoding as enc

_PAR = enc.P_STATUS + enc.STATUS_INDEX[enc.Status.PAR]
_BRN = enc.P_STATUS + enc.STATUS_INDEX[enc.Status.BRN]
_TYPES = slice(enc.P_TYPES, enc.P_TYPES + enc.N_TYPES)
_STATS = slice(enc.P_STATS, enc.P_STATS + len(enc.STATS))
_HP, _SPE = 0, 5  # in STATS
assert enc.STATS[1:] == ("atk", "def", "spa", "spd", "spe") == enc.BOOSTS[:5]

# Type combinations: a Pokémon has at most two types (tera: one). A block's types
# multi-hot times _KEY_W gives (sum of u, sum of u^2) over its types (u = type index + 1),
# which tells every set of at most two types apart (and no type: 0); _COMBO maps that key to
# an index into _SETS, whose entry 0 is the empty set.
_SETS = [()] + [(a,) for a in range(enc.N_TYPES)] + [
    (a, b) for a in range(enc.N_TYPES) for b in range(a + 1, enc.N_TYPES)]
_KEY_W = np.stack([np.arange(1, enc.N_TYPES + 1), np.arange(1, enc.N_TYPES + 1) ** 2], 1).astype(np.float32)
_KEY_STRIDE = 1 + 2 * enc.N_TYPES ** 2
_COMBO = np.zeros(_KEY_STRIDE * (2 * enc.N_TYPES + 1), np.intp)
for _c, _set in enumerate(_SETS):
    _COMBO[sum(t + 1 for t in _set) * _KEY_STRIDE + sum((t + 1) ** 2 for t in _set)] = _c


# _MULT[g, a, c]: the multiplier of attacking type a against type set c in generation g + 1.
_MULT = np.ones((enc.N_GENS, enc.N_TYPES, len(_SETS)), np.float64)
for _c, _set in enumerate(_SETS):
    for _d in _set:
        _MULT[:, :, _c] *= enc.CHARTS[:, :, _d]


def _best(c: tuple) -> np.ndarray:
    """[g, o]: best multiplier of type set ``c``'s types against each type set o."""
    return _MULT[:, list(c), :].max(1)


def _scaled(best: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(best == 0.0, -1.5, np.log2(best) / 2.0)


# _MATCH[g, c, o]: (best effectiveness of type set c against o, of o against c) in
# generation g + 1 (log2 / 2, -1.5 for immunity, 0 when either set is empty).
_BEST = np.stack([np.zeros((enc.N_GENS, len(_SETS)))] + [_best(c) for c in _SETS[1:]], 1)  # [g, c, o]
_EFF = _scaled(_BEST)
_EFF[:, 0, :] = 0.0
_EFF[:, :, 0] = 0.0
_MATCH = np.stack([_EFF, _EFF.transpose(0, 2, 1)], -1).astype(np.float32)
# Per generation, move type (0: none, t + 1: type t) and defending type set: log2 of the
# multiplier (-1000: immune; 0 for a move without a type or a defender without one) and STAB.
_MOVE_LOG = np.zeros((enc.N_GENS, enc.N_TYPES + 1, len(_SETS)), np.float32)
with np.errstate(divide="ignore"):
    _MOVE_LOG[:, 1:, :] = np.where(_MULT == 0.0, -1000.0, np.log2(_MULT))
_STAB = np.zeros((enc.N_TYPES + 1, len(_SETS)), bool)
for _c, _set in enumerate(_SETS):
    for _t in _set:
        _STAB[_t + 1, _c] = True
_GEN = slice(enc.FIELD + enc.F_FLAGS + enc.FLAG_GEN, enc.FIELD + enc.F_FLAGS + enc.FLAG_GEN + enc.N_GENS)


def _gens(flat: np.ndarray) -> np.ndarray:
    """Each row's generation index (0: gen 1 ... 8: gen 9; gen 9 where none is marked)."""
    onehot = flat[:, _GEN]
    return np.where(onehot.any(1), onehot.argmax(1), enc.N_GENS - 1)


# Every column derive() writes (the encoder leaves them at zero).
DERIVED_COLUMNS = np.array(
    [b * enc.POKE_DIM + c for b in range(12) for c in (enc.P_MATCH_OFF, enc.P_MATCH_DEF, enc.P_MATCH_SPE)]
    + [enc.MOVES + j * enc.MOVE_DIM + c for j in range(4)
       for c in (enc.M_EFFECT, enc.M_IMMUNE, enc.M_STAB, enc.M_DAMAGE, enc.M_KO)])


def _boost(b: np.ndarray) -> np.ndarray:
    """Stat multiplier of boost stage ``b`` (-6..6)."""
    return np.where(b >= 0, (2.0 + b) / 2.0, 2.0 / (2.0 - np.minimum(b, 0.0)))


# A step applied to observation batches before a forward pass (derive, or None for raw inputs).
Features = Optional[Callable[[np.ndarray], np.ndarray]]


def derive(obs: np.ndarray) -> np.ndarray:
    """Fill the derived columns of ``obs`` (float32, ``[..., OBS_DIM]`` of singles or of
    doubles, C-contiguous) in place; returns it."""
    if obs.shape[-1] == dbl.OBS_DIM and obs.dtype == np.float32 and obs.flags.c_contiguous:
        return _derive_doubles(obs)
    if obs.shape[-1] != enc.OBS_DIM or obs.dtype != np.float32 or not obs.flags.c_contiguous:
        raise ValueError(f"derive needs a C-contiguous float32 array [..., {enc.OBS_DIM}] "
                         f"(doubles: {dbl.OBS_DIM}), got {obs.dtype} {obs.shape}")
    flat = obs.reshape(-1, enc.OBS_DIM)
    if flat.shape[0]:
        _derive_core(flat)
    return obs


def _combos(types: np.ndarray) -> np.ndarray:
    """The type set (an index into _SETS) of each types multi-hot ``[..., N_TYPES]``."""
    key = np.rint(types.reshape(-1, enc.N_TYPES) @ _KEY_W)
    key = key[:, 0] * _KEY_STRIDE + key[:, 1]
    return _COMBO[np.clip(key, 0, len(_COMBO) - 1).astype(np.intp)].reshape(types.shape[:-1])


def _fighting(blocks: np.ndarray) -> tuple:
    """Of Pokémon blocks ``[..., POKE_DIM]`` in battle: stats, atk def spa spd spe boosted,
    and log2 of the speed (boosted, halved by paralysis)."""
    stats = np.rint(blocks[..., _STATS] * 400.0)
    b = np.rint(blocks[..., enc.P_BOOSTS:enc.P_BOOSTS + 5] * 6.0)
    boosted = stats[..., 1:] * np.where(b >= 0, (2.0 + b) / 2.0, 2.0 / (2.0 - np.minimum(b, 0.0)))
    spe = np.where(blocks[..., _PAR] > 0, boosted[..., 4] * 0.5, boosted[..., 4])
    return stats, boosted, np.log2(np.maximum(spe, 1.0))


def _derive_core(flat: np.ndarray) -> tuple:
    """The singles columns of ``flat [n, >= enc.OBS_DIM]`` (in place); returns what doubles
    reuses: the Pokémon blocks, their type sets, log2 speeds and presence, and each side's
    active block, type set, whether it has one, and its boosted stats."""
    n = flat.shape[0]
    g = _gens(flat)
    poke = flat[:, :enc.MOVES].reshape(n, 2, 6, enc.POKE_DIM)  # [n, side, slot, feature]
    act = poke[..., enc.P_ACTIVE] > 0
    has = act.any(-1)
    both = has[:, 0] & has[:, 1]
    # Each side's active block (zeros for a side without one).
    rows = np.arange(2 * n)
    ai = act.argmax(-1).ravel()
    active = poke.reshape(2 * n, 6, enc.POKE_DIM)[rows, ai].reshape(n, 2, enc.POKE_DIM)
    active[~has] = 0.0

    # Every block's type set, and the actives'.
    combo = _combos(poke[..., _TYPES])
    a_combo = combo.reshape(2 * n, 6)[rows, ai].reshape(n, 2)
    a_combo[~has] = 0

    # Matchups of every block against the other side's active Pokémon.
    a_stats, boosted, a_lspe = _fighting(active)  # [n, side, ...]
    lspe = np.where(act, a_lspe[..., None],
                    np.log2(np.maximum(np.rint(poke[..., enc.P_STATS + _SPE] * 400.0), 1.0)))
    present = poke[..., enc.P_PRESENT] > 0
    poke[..., enc.P_MATCH_OFF:enc.P_MATCH_SPE + 1] = _matchups(
        g[:, None, None], combo, lspe, a_combo[:, ::-1, None], a_lspe[:, ::-1, None], present & both[:, None, None])

    # The own active Pokémon's moves against the opponent's active Pokémon.
    _derive_moves(g[:, None], flat[:, enc.MOVES:enc.FIELD].reshape(n, 4, enc.MOVE_DIM), active[:, 0],
                  active[:, 1], a_combo[:, 0], a_combo[:, 1], boosted[:, 0], boosted[:, 1], a_stats[:, 1], both)
    return g, poke, combo, lspe, present, active, a_combo, has, boosted


def _matchups(g, combo, lspe, vs_combo, vs_lspe, keep) -> np.ndarray:
    """Matchup columns (offence, defence, speed) of Pokémon blocks, given their type sets and
    log2 speeds, against a Pokémon's (broadcast alike, with the generation index ``g``);
    zero where ``keep`` is false."""
    match = np.empty((*combo.shape, 3), np.float32)
    match[..., :2] = _MATCH[g, combo, vs_combo]
    match[..., 2] = np.clip((lspe - vs_lspe) * 0.5, -1.0, 1.0)
    match[~keep] = 0.0
    return match


def _derive_moves(g, mv, att, dfn, att_combo, dfn_combo, att_boosted, dfn_boosted, dfn_stats, both) -> None:
    """The derived columns of move blocks ``mv [..., 4, MOVE_DIM]`` (in place), used by an
    attacker against a defender: their blocks ``[..., POKE_DIM]``, type sets, boosted
    stats, the defender's stats, and whether both are there (leading shapes alike; ``g``,
    the generation index, broadcasts against ``mv[..., 0]``)."""
    mtype = np.clip(np.rint(mv[..., enc.M_TYPE:enc.M_TYPE + enc.N_TYPES] @ _KEY_W[:, 0]),
                    0, enc.N_TYPES).astype(np.intp)  # 0: no type, t + 1: type t
    opp_combo = dfn_combo[..., None]
    lmult = _MOVE_LOG[g, mtype, opp_combo]
    immune = lmult < -500.0
    stab = _STAB[mtype, att_combo[..., None]]
    physical = mv[..., enc.M_CATEGORY] > 0
    attacking = (mtype > 0) & (mv[..., enc.M_CATEGORY + 2] <= 0)
    effective = attacking & (opp_combo > 0)
    mv[..., enc.M_IMMUNE] = effective & immune
    mv[..., enc.M_EFFECT] = np.where(effective & ~immune, lmult * 0.5, 0.0)
    mv[..., enc.M_STAB] = stab
    attack = np.where(physical, att_boosted[..., 0:1], att_boosted[..., 2:3])
    defence = np.where(physical, dfn_boosted[..., 1:2], dfn_boosted[..., 3:4])
    level = np.rint(att[..., enc.P_LEVEL] * 100.0)
    power = np.rint(mv[..., enc.M_POWER] * 100.0)
    d = ((2.0 * level / 5.0 + 2.0)[..., None] * power * attack / np.maximum(defence, 1e-6)) / 50.0 + 2.0
    d *= np.exp2(np.maximum(lmult, -30.0)) * mv[..., enc.M_ACCURACY] * 0.925 * np.where(stab, 1.5, 1.0)
    d = np.where((att[..., _BRN] > 0)[..., None] & physical, d * 0.5, d)
    hp = dfn[..., enc.P_HP]  # the defender's HP fraction (0: unknown, counted full)
    frac = d / np.maximum(dfn_stats[..., _HP] * np.where(hp > 0, hp, 1.0), 1.0)[..., None]
    hits = attacking & ~immune & (power > 0) & both[..., None]
    mv[..., enc.M_DAMAGE] = np.where(hits, np.minimum(frac, 2.0) * 0.5, 0.0)
    mv[..., enc.M_KO] = hits & (frac >= 1.0)


def _pick(blocks: np.ndarray, onehot: np.ndarray, fallback, fallback_combo, combo):
    """Per row, the block ``[n, 6, ...]`` a one-hot ``[n, 6]`` names (else the fallback),
    with its type set; and whether one was named."""
    named = onehot.any(-1)
    i = onehot.argmax(-1)
    rows = np.arange(len(i))
    blk = np.where(named[:, None], blocks[rows, i], fallback)
    return blk, np.where(named, combo[rows, i], fallback_combo), named


def _derive_doubles(obs: np.ndarray) -> np.ndarray:
    """Doubles (:mod:`.doubles`): the core as in singles (the deciding Pokémon against the
    foe in position 1); its moves and the own team's matchups against the foe in position 2
    (against foe 1 while position 2 is empty); the ally's moves against both foes."""
    flat = obs.reshape(-1, dbl.OBS_DIM)
    n = flat.shape[0]
    if n == 0:
        return obs
    g, poke, combo, lspe, present, active, a_combo, has, boosted = _derive_core(flat)
    foe2, foe2_combo, there = _pick(poke[:, 1], flat[:, dbl.X_FOE_POS + 6:dbl.X_FOE_POS + 12],
                                    active[:, 1], a_combo[:, 1], combo[:, 1])
    second = flat[:, dbl.X_SLOT + 1:dbl.X_SLOT + 2] > 0  # slot 2 decides: the ally is in 1
    ally_pos = np.where(second, flat[:, dbl.X_OWN_POS:dbl.X_OWN_POS + 6],
                        flat[:, dbl.X_OWN_POS + 6:dbl.X_OWN_POS + 12])
    ally, ally_combo, ally_there = _pick(poke[:, 0], ally_pos, 0.0, 0, combo[:, 0])
    foe2_has = there | has[:, 1]
    # three move blocks in a row: own vs foe 2, ally vs foe 1, ally vs foe 2
    att = np.stack([active[:, 0], ally, ally], 1)
    dfn = np.stack([foe2, active[:, 1], foe2], 1)
    _, att_boosted, _ = _fighting(att)
    dfn_stats, dfn_boosted, dfn_lspe = _fighting(dfn)
    _derive_moves(g[:, None, None], flat[:, dbl.MOVES_B:dbl.OWN_MATCH_B].reshape(n, 3, 4, enc.MOVE_DIM), att, dfn,
                  np.stack([a_combo[:, 0], ally_combo, ally_combo], 1),
                  np.stack([foe2_combo, a_combo[:, 1], foe2_combo], 1), att_boosted, dfn_boosted, dfn_stats,
                  np.stack([has[:, 0] & foe2_has, ally_there & has[:, 1], ally_there & foe2_has], 1))
    match = _matchups(g[:, None], combo[:, 0], lspe[:, 0], foe2_combo[:, None], dfn_lspe[:, :1],
                      present[:, 0] & (has[:, 0] & foe2_has)[:, None])
    flat[:, dbl.OWN_MATCH_B:dbl.X] = match.reshape(n, -1)
    return obs
