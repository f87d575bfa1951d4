"""Derived observation features, computed for a whole batch at once.

The encoder (:mod:`maple_async.encoding`) writes what it reads from one battle. The
columns that are *functions of other columns* it leaves at zero; :func:`derive` fills
them for a batch of observations with a few dozen numpy operations, whatever the batch
size. :class:`~maple_async.networks.InferencePolicy` derives every batch before its
forward pass and the learner derives its rollouts, so the networks always see the complete
observation. Per battle in Python this was about a third of the encoder's cost; batched it
is ~10 us per observation at the batch sizes of self-play on a CPU, less on larger batches.

What is derived (the formulas are those documented in :mod:`maple_async.encoding`):

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

import numpy as np

from . import encoding as enc

_PAR = enc.P_STATUS + enc.STATUS_INDEX[enc.Status.PAR]
_BRN = enc.P_STATUS + enc.STATUS_INDEX[enc.Status.BRN]
_TYPES = slice(enc.P_TYPES, enc.P_TYPES + enc.N_TYPES)
_STATS = slice(enc.P_STATS, enc.P_STATS + len(enc.STATS))
_BOOSTS = slice(enc.P_BOOSTS, enc.P_BOOSTS + len(enc.BOOSTS))
_HP, _ATK, _DEF, _SPA, _SPD, _SPE = range(6)  # in STATS
_B_ATK, _B_DEF, _B_SPA, _B_SPD, _B_SPE = (enc.BOOSTS.index(k) for k in ("atk", "def", "spa", "spd", "spe"))

# Per defending type (row), per attacking type (column): log2 of the multiplier, and
# -1000 where immune. A defender's multi-hot types times this give, per attacking type,
# the log2 multiplier against it (< -500: immune).
_eff = enc.EFFECTIVENESS.astype(np.float64)
LOG_EFF = (np.log2(np.where(_eff > 0, _eff, 1.0)) - 1000.0 * (_eff == 0)).T.astype(np.float32)

# Every column derive() writes (the encoder leaves them at zero).
DERIVED_COLUMNS = np.array(
    [b * enc.POKE_DIM + c for b in range(12) for c in (enc.P_MATCH_OFF, enc.P_MATCH_DEF, enc.P_MATCH_SPE)]
    + [enc.MOVES + j * enc.MOVE_DIM + c for j in range(4)
       for c in (enc.M_EFFECT, enc.M_IMMUNE, enc.M_STAB, enc.M_DAMAGE, enc.M_KO)])


def _boost(b: np.ndarray) -> np.ndarray:
    """Stat multiplier of boost stage ``b`` (-6..6)."""
    return np.where(b >= 0, (2.0 + b) / 2.0, 2.0 / (2.0 - np.minimum(b, 0.0)))


def _best(att: np.ndarray, table: np.ndarray, dfn_known: np.ndarray) -> np.ndarray:
    """Best effectiveness (log2 / 2; -1.5 when every attacking type is immune) of the
    attacking types ``att`` (multi-hot) against a defender whose per-attacking-type log2
    multipliers are ``table`` (< -500: immune); 0 when either has no known type."""
    best = (table + (att - 1.0) * 1000.0).max(-1)
    out = np.where(best < -500.0, -1.5, best * 0.5)
    out[~((att.sum(-1) > 0) & dfn_known)] = 0.0
    return out


def derive(obs: np.ndarray) -> np.ndarray:
    """Fill the derived columns of ``obs`` (float32, ``[..., OBS_DIM]``, C-contiguous) in
    place; returns it."""
    if obs.shape[-1] != enc.OBS_DIM or obs.dtype != np.float32 or not obs.flags.c_contiguous:
        raise ValueError(f"derive needs a C-contiguous float32 array [..., {enc.OBS_DIM}], "
                         f"got {obs.dtype} {obs.shape}")
    flat = obs.reshape(-1, enc.OBS_DIM)
    n = flat.shape[0]
    if n == 0:
        return obs
    poke = flat[:, :enc.MOVES].reshape(n, 2, 6, enc.POKE_DIM)  # [n, side, slot, feature]
    act = poke[..., enc.P_ACTIVE] > 0
    has = act.any(-1)
    both = has[:, 0] & has[:, 1]
    # Each side's active block (zeros for a side without one), and the other side's.
    active = poke.reshape(2 * n, 6, enc.POKE_DIM)[np.arange(2 * n), act.argmax(-1).ravel()]
    active = active.reshape(n, 2, enc.POKE_DIM)
    active[~has] = 0.0
    other = active[:, ::-1]

    # Matchups of every block against the other side's active Pokémon.
    types = poke[..., _TYPES]
    flat_types = types.reshape(-1, enc.N_TYPES)
    table = (flat_types @ LOG_EFF).reshape(types.shape)
    o_types = np.ascontiguousarray(other[..., _TYPES])
    o_table = o_types @ LOG_EFF  # [n, side, attacking type]
    o_known = (o_types.sum(-1) > 0)[..., None]
    off = _best(types, o_table[:, :, None], o_known)
    dfn = _best(o_types[:, :, None], table, types.sum(-1) > 0)
    a_stats = np.rint(active[..., _STATS] * 400.0)
    a_boosts = np.rint(active[..., _BOOSTS] * 6.0)
    a_spe = a_stats[..., _SPE] * _boost(a_boosts[..., _B_SPE])
    a_spe = np.where(active[..., _PAR] > 0, a_spe * 0.5, a_spe)
    a_lspe = np.log2(np.maximum(a_spe, 1.0))  # [n, side]
    lspe = np.where(act, a_lspe[..., None],
                    np.log2(np.maximum(np.rint(poke[..., enc.P_STATS + _SPE] * 400.0), 1.0)))
    spe = np.clip((lspe - a_lspe[:, ::-1, None]) * 0.5, -1.0, 1.0)
    match = np.stack([off, dfn, spe], -1)
    match[~((poke[..., enc.P_PRESENT] > 0) & both[:, None, None])] = 0.0
    poke[..., enc.P_MATCH_OFF:enc.P_MATCH_SPE + 1] = match

    # The own active Pokémon's moves against the opponent's active Pokémon.
    mv = flat[:, enc.MOVES:enc.FIELD].reshape(n, 4, enc.MOVE_DIM)
    mtype = mv[..., enc.M_TYPE:enc.M_TYPE + enc.N_TYPES]
    typed = mtype.sum(-1) > 0
    stab = typed & ((mtype * active[:, :1, _TYPES]).sum(-1) > 0)
    lmult = (mtype * o_table[:, :1]).sum(-1)  # the own side's other = the opponent's active
    immune = lmult < -500.0
    physical = mv[..., enc.M_CATEGORY] > 0
    attacking = typed & (mv[..., enc.M_CATEGORY + 2] <= 0)
    effective = attacking & o_known[:, 0]
    mv[..., enc.M_IMMUNE] = effective & immune
    mv[..., enc.M_EFFECT] = np.where(effective & ~immune, lmult * 0.5, 0.0)
    mv[..., enc.M_STAB] = stab
    own_s, opp_s, own_b, opp_b = a_stats[:, 0], a_stats[:, 1], a_boosts[:, 0], a_boosts[:, 1]
    attack = np.where(physical, (own_s[:, _ATK] * _boost(own_b[:, _B_ATK]))[:, None],
                      (own_s[:, _SPA] * _boost(own_b[:, _B_SPA]))[:, None])
    defence = np.where(physical, (opp_s[:, _DEF] * _boost(opp_b[:, _B_DEF]))[:, None],
                       (opp_s[:, _SPD] * _boost(opp_b[:, _B_SPD]))[:, None])
    level = np.rint(active[:, 0, enc.P_LEVEL] * 100.0)
    power = np.rint(mv[..., enc.M_POWER] * 100.0)
    d = ((2.0 * level / 5.0 + 2.0)[:, None] * power * attack / np.maximum(defence, 1e-6)) / 50.0 + 2.0
    # (the clip only matters for arrays that are not observations: it keeps them finite)
    d *= np.exp2(np.clip(lmult, -30.0, 8.0)) * mv[..., enc.M_ACCURACY] * 0.925 * np.where(stab, 1.5, 1.0)
    d = np.where((active[:, 0, _BRN] > 0)[:, None] & physical, d * 0.5, d)
    hp = active[:, 1, enc.P_HP]  # the opponent's HP fraction (0: unknown, counted full)
    frac = d / np.maximum(opp_s[:, _HP] * np.where(hp > 0, hp, 1.0), 1.0)[:, None]
    hits = attacking & ~immune & (power > 0) & both[:, None]
    mv[..., enc.M_DAMAGE] = np.where(hits, np.minimum(frac, 2.0) * 0.5, 0.0)
    mv[..., enc.M_KO] = hits & (frac >= 1.0)
    return obs
