"""Derived observation columns (maple_async.obs.features), batched, against a per-battle
reference written from poke-env's own properties (no server)."""

import gzip
import json
import logging
import math

import numpy as np
import pytest
import torch
from poke_env.battle import Battle, Move, MoveCategory, Pokemon, Status

from maple_async.obs import encoding as enc

from maple_async.obs import actions as act
from maple_async.obs.features import DERIVED_COLUMNS, derive


def _boost(b: int) -> float:
    return (2 + b) / 2 if b >= 0 else 2 / (2 - b)


def _types(mon) -> tuple:
    return tuple(enc.TYPE_INDEX[t] for t in (mon.type_1, mon.type_2) if t in enc.TYPE_INDEX)


def _stats(mon) -> list:
    return enc._stats(mon.stats, mon.base_stats, mon.level)  # the raw stat columns' values


def _best(att: tuple, dfn: tuple) -> float:
    if not att or not dfn:
        return 0.0
    best = max(math.prod(enc.EFFECTIVENESS[a, d] for d in dfn) for a in att)
    return -1.5 if best == 0 else math.log2(best) / 2


def _active_log_speed(mon) -> float:
    spe = _stats(mon)[5] * _boost(mon.boosts["spe"])
    return math.log2(max(spe * 0.5 if mon.status == Status.PAR else spe, 1.0))


def reference(battle) -> tuple[np.ndarray, list]:
    """The derived columns of ``battle``'s observation, computed one battle at a time as
    maple_async.obs.encoding documents them; and the KO flags' damage fractions (a float32
    computation may round across 1.0 where the fraction is within a hair of it)."""
    out = np.zeros(enc.OBS_DIM, np.float32)
    sides = [list(battle.team.values()), list(battle.opponent_team.values())]
    # A side's active Pokémon, as the encoder marks it: the first active one in team
    # order, when it has one of the six blocks.
    first = [next((i for i, m in enumerate(side) if m.active), 6) for side in sides]
    actives = [side[i] if i < 6 else None for side, i in zip(sides, first)]
    own, opp = actives
    fracs = []
    if own is not None and opp is not None:
        for s, side in enumerate(sides):
            other = actives[1 - s]
            for i, mon in enumerate(side[:6]):
                base = (enc.OWN_TEAM, enc.OPP_TEAM)[s] + i * enc.POKE_DIM
                lspe = _active_log_speed(mon) if mon is actives[s] else math.log2(max(_stats(mon)[5], 1.0))
                out[base + enc.P_MATCH_OFF] = _best(_types(mon), _types(other))
                out[base + enc.P_MATCH_DEF] = _best(_types(other), _types(mon))
                out[base + enc.P_MATCH_SPE] = min(max((lspe - _active_log_speed(other)) / 2, -1.0), 1.0)
    if own is None:
        return out, fracs
    opp_types = _types(opp) if opp is not None else ()
    for j, move in enumerate(list(own.moves.values())[:4]):
        base = enc.MOVES + j * enc.MOVE_DIM
        mtype = enc.TYPE_INDEX.get(move.type)
        stab = mtype is not None and mtype in _types(own)
        out[base + enc.M_STAB] = stab
        if mtype is None or move.category == MoveCategory.STATUS:
            continue
        mult = math.prod(enc.EFFECTIVENESS[mtype, d] for d in opp_types)
        if opp_types:
            out[base + enc.M_IMMUNE] = mult == 0
            out[base + enc.M_EFFECT] = math.log2(mult) / 2 if mult else 0.0
        if opp is None or move.base_power <= 0 or mult == 0:
            continue
        physical = move.category == MoveCategory.PHYSICAL
        a, d = _stats(own), _stats(opp)
        attack = a[1] * _boost(own.boosts["atk"]) if physical else a[3] * _boost(own.boosts["spa"])
        defence = d[2] * _boost(opp.boosts["def"]) if physical else d[4] * _boost(opp.boosts["spd"])
        dmg = (2 * own.level / 5 + 2) * move.base_power * attack / defence / 50 + 2
        dmg *= mult * move.accuracy * 0.925 * (1.5 if stab else 1.0)
        if physical and own.status == Status.BRN:
            dmg *= 0.5
        frac = dmg / max(d[0] * (opp.current_hp_fraction or 1.0), 1.0)
        out[base + enc.M_DAMAGE] = min(frac, 2.0) / 2
        out[base + enc.M_KO] = frac >= 1.0
        fracs.append((base + enc.M_KO, frac))
    return out, fracs


def _compare(got: np.ndarray, want: np.ndarray, fracs: list, where) -> None:
    got, want = got.copy(), want.copy()
    for col, frac in fracs:
        if abs(frac - 1.0) < 1e-4:  # a KO decided by float rounding
            got[col] = want[col]
    diff = np.abs(got[DERIVED_COLUMNS] - want[DERIVED_COLUMNS])
    assert diff.max() < 1e-5, (DERIVED_COLUMNS[diff >= 1e-5], where)


@pytest.mark.parametrize("name", ["battles.json.gz", "rare_battles.json.gz"])
async def test_derived_columns_match_the_reference_on_recorded_battles(name):
    """At every decision point of real battles: the encoder leaves the derived columns at
    zero, and one batched derive() fills them as the per-battle reference computes them."""
    from test_fastbattle import DATA, FastReplayer, _player
    data = json.load(gzip.open(DATA.parent / name, "rt"))
    p = _player(FastReplayer, data["username"])
    rows, refs = [], []
    for split_messages in data["records"]:
        await p._handle_battle_message([list(m) for m in split_messages])
        b = p.battles[split_messages[0][0][1:]]
        if not any(m[1:2] == ["request"] for m in split_messages):
            continue
        x = enc.encode(b)
        assert not x[DERIVED_COLUMNS].any()
        rows.append(x)
        refs.append((reference(b), split_messages[0][0]))
    batch = derive(np.stack(rows))
    assert len(rows) > 100
    for got, ((want, fracs), where) in zip(batch, refs):
        _compare(got, want, fracs, where)
    # Not vacuous: the features are there in most states, with every kind of value.
    d = batch[:, DERIVED_COLUMNS]
    assert (d != 0).any(1).mean() > 0.9
    moves = batch[:, enc.MOVES:enc.FIELD].reshape(len(batch), 4, enc.MOVE_DIM)
    for col in (enc.M_IMMUNE, enc.M_STAB, enc.M_KO):
        assert moves[..., col].any(), col
    assert (moves[..., enc.M_EFFECT] > 0).any() and (moves[..., enc.M_EFFECT] < 0).any()


def test_derive_is_idempotent_and_shape_agnostic():
    rng = np.random.default_rng(0)
    x = _charizard_vs_venusaur()[0]
    once = derive(x.copy())
    assert np.array_equal(derive(once.copy()), once)
    seq = np.stack([x, np.zeros_like(x), x])[None]  # [B, T, D] with an empty (padding) step
    out = derive(seq.copy())[0]
    assert np.array_equal(out[0], once) and not out[1].any() and np.array_equal(out[2], once)
    with pytest.raises(ValueError):
        derive(rng.random((2, enc.OBS_DIM)))  # float64


def _charizard_vs_venusaur():
    b = Battle("battle-gen9randombattle-2", "me", logging.getLogger("test"), gen=9)
    b._player_role = "p1"
    own = Pokemon(gen=9, species="charizard")
    foe = Pokemon(gen=9, species="venusaur")
    own._active = foe._active = True
    for m in ("flamethrower", "dragonclaw", "roost"):
        own._moves.moves[m] = Move(m, gen=9)
    b._team = {"p1: Charizard": own}
    b._opponent_team = {"p2: Venusaur": foe}
    return enc.encode(b), b, own, foe


def test_matchup_and_damage_features():
    """Type matchups against the other active Pokémon and the per-move damage estimate:
    a super-effective STAB move beats a resisted one, and a low-HP target is a KO."""
    raw, b, own, foe = _charizard_vs_venusaur()
    x = derive(raw.copy())
    o, f = enc.OWN_TEAM, enc.OPP_TEAM
    # fire vs grass/poison = 2 -> 0.5; Venusaur's best against fire/flying is poison (1x) -> 0
    assert x[o + enc.P_MATCH_OFF] == pytest.approx(0.5) and x[o + enc.P_MATCH_DEF] == 0.0
    assert x[f + enc.P_MATCH_OFF] == 0.0 and x[f + enc.P_MATCH_DEF] == pytest.approx(0.5)
    assert x[o + enc.P_MATCH_SPE] > 0 > x[f + enc.P_MATCH_SPE]  # Charizard is faster
    flame, claw, roost = (enc.MOVES + j * enc.MOVE_DIM for j in range(3))
    assert x[flame + enc.M_STAB] == 1.0 and x[claw + enc.M_STAB] == 0.0
    assert x[flame + enc.M_DAMAGE] > 2 * x[claw + enc.M_DAMAGE] > 0
    assert x[roost + enc.M_DAMAGE] == 0.0
    assert x[flame + enc.M_KO] == 0.0
    foe._status = Status.PAR  # paralysis halves the active's speed: still slower
    foe._boosts["spe"] = 2
    x = derive(enc.encode(b))
    _compare(x, *reference(b), "paralysed, +2 speed")
    foe._current_hp, foe._max_hp = 10, 100
    x = derive(enc.encode(b))
    assert x[flame + enc.M_KO] == 1.0 and x[flame + enc.M_DAMAGE] == 1.0  # clipped at 2x HP


def test_inference_policy_derives_its_batch():
    """The acting policy fills the derived columns before its forward pass."""
    from maple_async.inference.policy import InferencePolicy
    from maple_async.learn import networks

    seen = []

    class Spy(networks.MLPPolicy):
        def forward(self, x, hidden):
            seen.append(x.clone())
            return super().forward(x, hidden)

    raw = _charizard_vs_venusaur()[0]
    pol = InferencePolicy(Spy(enc.OBS_DIM, act.N_ACTIONS))
    pol.act(raw[None].copy(), np.ones((1, act.N_ACTIONS), bool), torch.zeros(1, 0))
    assert np.array_equal(seen[0][0].numpy(), derive(raw.copy()))
