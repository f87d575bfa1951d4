"""Doubles without a server: the layout, per-slot masks and the orders they make, on
requests written the way Showdown 0.11.11 sends them."""

import logging

import numpy as np
import pytest
import torch
from poke_env.battle import DoubleBattle

from maple_async.learn import checkpoint as ckpt
from maple_async.learn import networks as nets
from maple_async.obs import doubles as dbl
from maple_async.obs import encoding as enc
from maple_async.obs import games
from maple_async.obs.features import derive


def _mon(ident, species, moves, active=False, hp="100/100", tera="Water"):
    return {"ident": f"p1: {ident}", "details": f"{species}, L50", "condition": hp, "active": active,
            "stats": {"atk": 100, "def": 100, "spa": 100, "spd": 100, "spe": 100},
            "moves": [m["id"] for m in moves], "baseAbility": "pressure", "item": "leftovers",
            "pokeball": "pokeball", "ability": "pressure", "commanding": False, "reviving": False,
            "teraType": tera, "terastallized": ""}


def _move(move_id, target, disabled=False):
    return {"move": move_id, "id": move_id, "pp": 8, "maxpp": 8, "target": target, "disabled": disabled}


A_MOVES = [_move("ragepowder", "self"), _move("pollenpuff", "normal"), _move("acupressure", "adjacentAllyOrSelf"),
           _move("earthquake", "allAdjacent")]
B_MOVES = [_move("heatwave", "allAdjacentFoes"), _move("helpinghand", "adjacentAlly"),
           _move("fakeout", "normal"), _move("protect", "self", disabled=True)]


def battle(force=None, tera=True, trapped=False, foes=("p2a", "p2b")):
    b = DoubleBattle("battle-gen9vgc2025regi-1", "me", logging.getLogger("test"), gen=9)
    side = [_mon("Amoonguss", "Amoonguss", A_MOVES, active=True), _mon("Incineroar", "Incineroar", B_MOVES, active=True),
            _mon("Rillaboom", "Rillaboom", A_MOVES), _mon("Urshifu", "Urshifu-Rapid-Strike", B_MOVES)]
    request = {"side": {"name": "me", "id": "p1", "pokemon": side}, "rqid": 3}
    if force:
        request["forceSwitch"] = force
    else:
        request["active"] = [{"moves": A_MOVES, **({"canTerastallize": "Water"} if tera else {}),
                              **({"trapped": True} if trapped else {})},
                             {"moves": B_MOVES, **({"canTerastallize": "Fire"} if tera else {})}]
    b.parse_request(request)
    b._player_role = "p1"
    for pos, species in zip(foes, ("Tornadus", "Flutter Mane")):
        b.switch(f"{pos}: {species}", f"{species}, L50", "100/100")
    return b


def allowed(mask):
    return set(np.flatnonzero(mask).tolist())


def move_actions(j, targets, tera=False):
    return {(dbl.TERA0 if tera else dbl.MOVE0) + 5 * j + t for t in targets}


def test_layout_blocks_follow_each_other():
    assert dbl.OBS_DIM == dbl.X + dbl.X_DIM and dbl.MOVES_B == enc.OBS_DIM
    assert dbl.X_SHEET == dbl.OBS_DIM - 1
    assert dbl.N_ACTIONS == dbl.PREVIEW + 6 and dbl.PASS == dbl.N_SLOT - 1 == dbl.TERA0 + 20
    assert games.DOUBLES.layout != games.SINGLES.layout
    assert games.of_format("gen9vgc2025regi") is games.of_format("gen9randomdoublesbattle") is games.DOUBLES
    assert games.of_format("gen9bssregi") is games.SINGLES


def test_targets_of_spread_self_ally_and_self_or_ally_moves():
    b = battle()
    turn = dbl.Turn(b)
    m0 = allowed(turn.mask(0))
    # switches to the two benched Pokémon; rage powder (self) and earthquake (spread): no target;
    # pollen puff (normal): either foe or the ally; acupressure: ally or self
    expect = {2, 3} | move_actions(0, [0]) | move_actions(1, [1, 2, 3]) | move_actions(2, [3, 4]) | move_actions(3, [0])
    assert m0 == expect | {a + 20 for a in expect if a >= dbl.MOVE0}
    m1 = allowed(turn.mask(1, first=dbl.MOVE0 + 5 * 1 + 1))
    # heat wave: no target; helping hand: the ally only; fake out: foes or ally; protect is disabled
    expect1 = {2, 3} | move_actions(0, [0]) | move_actions(1, [3]) | move_actions(2, [1, 2, 3])
    assert m1 == expect1 | {a + 20 for a in expect1 if a >= dbl.MOVE0}


def test_second_slot_never_repeats_a_switch_or_a_tera():
    turn = dbl.Turn(battle())
    after_switch = allowed(turn.mask(1, first=2))
    assert 2 not in after_switch and 3 in after_switch
    after_tera = allowed(turn.mask(1, first=dbl.TERA0 + 5 * 1 + 2))
    assert after_tera and not any(dbl.TERA0 <= a < dbl.PASS for a in after_tera)
    # without tera left, neither slot may terastallize
    no_tera = dbl.Turn(battle(tera=False))
    assert not any(dbl.TERA0 <= a < dbl.PASS for s in (0, 1) for a in allowed(no_tera.mask(s)))


def test_orders_name_showdown_positions():
    turn = dbl.Turn(battle())
    assert turn.part(0, dbl.MOVE0 + 5 * 2 + 4) == "move 3 -1"  # acupressure on itself (position 1)
    assert turn.part(0, dbl.MOVE0 + 5 * 2 + 3) == "move 3 -2"  # on its ally
    assert turn.part(1, dbl.MOVE0 + 5 * 1 + 3) == "move 2 -1"  # helping hand from position 2
    assert turn.part(1, dbl.TERA0 + 5 * 2 + 2) == "move 3 2 terastallize"
    assert turn.part(0, dbl.MOVE0) == "move 1" and turn.part(0, dbl.PASS) == "pass"
    assert turn.part(0, 2) == "switch 3"  # the request's party slot
    order = turn.order([dbl.MOVE0 + 5 * 1 + 1, 3])
    assert order.message == "/choose move 2 1, switch 4"


def test_forced_switches_and_passes():
    one = dbl.Turn(battle(force=[True, False]))
    assert allowed(one.mask(0)) == {2, 3} and allowed(one.mask(1, first=2)) == {dbl.PASS}
    both = dbl.Turn(battle(force=[True, True]))
    assert allowed(both.mask(1, first=2)) == {3}
    trapped = dbl.Turn(battle(trapped=True))
    assert not allowed(trapped.mask(0)) & {0, 1, 2, 3, 4, 5}
    # a foe position left empty is not offered as a target
    alone = dbl.Turn(battle(foes=("p2a",)))
    m = allowed(alone.mask(0))
    assert dbl.MOVE0 + 5 + 1 in m and dbl.MOVE0 + 5 + 2 not in m


def test_observation_marks_the_deciding_slot_and_the_first_choice():
    b = battle()
    turn = dbl.Turn(b)
    o0, o1 = turn.obs(0), turn.obs(1, first=dbl.MOVE0 + 6)
    active = [enc.OWN_TEAM + i * enc.POKE_DIM + enc.P_ACTIVE for i in range(6)]
    assert o0[active].tolist()[:2] == [1.0, 0.0] and o1[active].tolist()[:2] == [0.0, 1.0]
    assert o0[dbl.X_SLOT:dbl.X_SLOT + 2].tolist() == [1.0, 0.0]
    assert o1[dbl.X_FIRST + dbl.MOVE0 + 6] == 1.0 and o0[dbl.X_FIRST:dbl.X_MONS].sum() == 0
    heatwave = dbl.X_TARGET + dbl.TARGET_INDEX["allAdjacentFoes"]
    assert o1[heatwave] == 1.0 and o0[heatwave] == 0.0
    # the same state read again gives the same bytes (the doubles encoder always reads in full)
    assert dbl.Turn(b).obs(1, first=dbl.MOVE0 + 6).tobytes() == o1.tobytes()
    derived = derive(np.stack([o0, o1]))
    # moves are derived against each foe: the first copy against position 1, the second against 2
    assert derived.shape == (2, dbl.OBS_DIM) and np.isfinite(derived).all()


def _matchups(obs, own=True):
    team = enc.OWN_TEAM if own else enc.OPP_TEAM
    return np.array([obs[team + i * enc.POKE_DIM + enc.P_MATCH_OFF:team + i * enc.POKE_DIM + enc.P_MATCH_SPE + 1]
                     for i in range(4)])


def test_a_replacement_decision_sees_matchups_against_the_foes():
    b = DoubleBattle("battle-gen9vgc2025regi-1", "me", logging.getLogger("test"), gen=9)
    b._player_role = "p1"
    b.switch("p1a: Amoonguss", "Amoonguss, L50", "100/100")
    b.switch("p1b: Incineroar", "Incineroar, L50", "100/100")
    b.get_pokemon("p1a: Amoonguss").faint()
    side = [_mon("Amoonguss", "Amoonguss", A_MOVES, active=True, hp="0 fnt"),
            _mon("Incineroar", "Incineroar", B_MOVES, active=True),
            _mon("Rillaboom", "Rillaboom", A_MOVES), _mon("Urshifu", "Urshifu-Rapid-Strike", B_MOVES)]
    b.parse_request({"side": {"name": "me", "id": "p1", "pokemon": side}, "rqid": 3, "forceSwitch": [True, False]})
    for pos, species in (("p2a", "Tornadus"), ("p2b", "Flutter Mane")):
        b.switch(f"{pos}: {species}", f"{species}, L50", "100/100")
    turn = dbl.Turn(b)
    assert b.active_pokemon[0] is None and allowed(turn.mask(0)) == {2, 3}
    obs = derive(turn.obs(0)[None])[0]
    # the switch-ins are weighed against the foe as in singles: Rillaboom (Grass) and
    # Urshifu (Water) against Tornadus (Flying) differ; without the fainted Pokémon marked
    # as the deciding one, every matchup was zero
    m = _matchups(obs)
    assert np.abs(m[2:]).sum() > 0 and not np.array_equal(m[2], m[3])
    assert obs[dbl.X_OWN_POS:dbl.X_OWN_POS + 6].sum() == 0  # position 1 still reads as empty


def test_with_one_foe_left_both_move_copies_are_against_it():
    alone = derive(dbl.Turn(battle(foes=("p2a",))).obs(1)[None])[0]
    a, b = alone[enc.MOVES:enc.FIELD], alone[dbl.MOVES_B:dbl.ALLY_MOVES]
    assert np.array_equal(a, b) and a.reshape(4, enc.MOVE_DIM)[0, enc.M_DAMAGE] > 0  # heat wave
    two = derive(dbl.Turn(battle()).obs(1)[None])[0]
    assert not np.array_equal(two[enc.MOVES:enc.FIELD], two[dbl.MOVES_B:dbl.ALLY_MOVES])


def test_each_slot_sees_the_ally_moves_as_the_ally_sees_its_own():
    turn = dbl.Turn(battle())
    o0, o1 = derive(np.stack([turn.obs(0), turn.obs(1, first=dbl.MOVE0 + 6)]))
    # slot 1's view of the ally's moves, against each foe, is slot 2's view of its own moves
    assert np.array_equal(o0[dbl.ALLY_MOVES:dbl.ALLY_MOVES_B], o1[enc.MOVES:enc.FIELD])
    assert np.array_equal(o0[dbl.ALLY_MOVES_B:dbl.OWN_MATCH_B], o1[dbl.MOVES_B:dbl.ALLY_MOVES])
    assert np.array_equal(o1[dbl.ALLY_MOVES:dbl.ALLY_MOVES_B], o0[enc.MOVES:enc.FIELD])
    heatwave = o1[enc.MOVES:enc.FIELD].reshape(4, enc.MOVE_DIM)[0]
    assert heatwave[enc.M_DAMAGE] > 0 and not np.array_equal(o0[dbl.ALLY_MOVES:dbl.ALLY_MOVES_B],
                                                               o0[dbl.ALLY_MOVES_B:dbl.OWN_MATCH_B])
    # the own team against the foe in 2 (Flutter Mane) differs from against 1 (Tornadus);
    # with one foe left, both are against it
    own_b = o0[dbl.OWN_MATCH_B:dbl.X].reshape(6, dbl.N_MATCH)[:4]
    assert np.abs(own_b).sum() > 0 and not np.array_equal(own_b, _matchups(o0))
    alone = derive(dbl.Turn(battle(foes=("p2a",))).obs(0)[None])[0]
    assert np.array_equal(alone[dbl.OWN_MATCH_B:dbl.X].reshape(6, dbl.N_MATCH)[:4], _matchups(alone))
    # no ally (the team preview has no active Pokémon): nothing derived for it
    preview = derive(dbl.encode_preview(battle(), [], 4)[None])[0]
    assert not preview[dbl.ALLY_MOVES:dbl.X].any()


def test_a_pokemon_that_protected_last_turn_is_flagged():
    b = battle()
    flag = dbl.X_MONS + 0 * dbl.N_MON_FLAGS + 3
    assert dbl.Turn(b).obs(0)[flag] == 0.0
    b.active_pokemon[0]._protect_counter = 1
    assert dbl.Turn(b).obs(0)[flag] == 1.0


def test_networks_and_checkpoints_know_their_game(tmp_path):
    for kind in ("mlp", "lstm", "attention"):
        net = nets.build(kind, hidden_size=32, obs_dim=dbl.OBS_DIM, n_actions=dbl.N_ACTIONS)
        (logits, value), _ = net(torch.zeros(2, dbl.OBS_DIM), net.initial_hidden(2))
        assert logits.shape == (2, dbl.N_ACTIONS)
    assert isinstance(nets.build("lstm", obs_dim=dbl.OBS_DIM, n_actions=dbl.N_ACTIONS).entity_head,
                      nets.DoublesEntityHead)
    path = ckpt.save(tmp_path / "d.pt", {"config": {"runner": {"battle_format": "gen9vgc2025regi"}}})
    data = ckpt.load(path)
    assert data["layout"] == games.DOUBLES.layout
    games.check_checkpoint(data["layout"], "gen9doublesou")
    with pytest.raises(games.UserError, match="plays doubles and gen9bssregi is a singles format"):
        games.check_checkpoint(data["layout"], "gen9bssregi", "d.pt")
    with pytest.raises(games.UserError, match="plays singles and gen9vgc2025regi is a doubles format"):
        games.check_checkpoint(games.SINGLES.layout, "gen9vgc2025regi", "s.pt")


async def test_a_rejected_doubles_order_undoes_both_steps_of_that_turn_only():
    from test_agent import ScriptedBatcher
    from types import SimpleNamespace

    from maple_async.collect.agent import Agent
    from maple_async.config import BatcherConfig

    pollen_foe1, fakeout_foe2 = dbl.MOVE0 + 5 * 1 + 1, dbl.MOVE0 + 5 * 2 + 2
    a = Agent(SimpleNamespace(hidden_dim=0, version=0), BatcherConfig(), record=True)
    a.batcher = ScriptedBatcher([pollen_foe1, fakeout_foe2, 2, 3, pollen_foe1, fakeout_foe2])
    b = battle()
    first = await a.choose(b, "self")
    assert first.message == "/choose move 2 1, move 3 2"
    b._last_request = {**b.last_request, "rqid": 4}
    await a.choose(b, "self")  # next turn: both slots switch
    traj = a.live[a.key(b)].traj
    assert traj.actions == [pollen_foe1, fakeout_foe2, 2, 3]
    again = await a.choose(b, "self")  # Showdown refused it and asks again (same rqid)
    assert a.stats.retries == 1 and again.message == "/choose move 2 1, move 3 2"
    assert traj.actions == [pollen_foe1, fakeout_foe2, pollen_foe1, fakeout_foe2]
    assert len(traj.obs) == len(traj.rewards) == 4
    assert traj.obs[1][dbl.X_FIRST + pollen_foe1] == 1.0 and traj.obs[1][dbl.X_SLOT + 1] == 1.0


def test_the_move_head_reads_each_move_target_type_and_loads_checkpoints_from_before_it():
    net = nets.build("lstm", hidden_size=32, obs_dim=dbl.OBS_DIM, n_actions=dbl.N_ACTIONS)
    head = net.entity_head
    old = {k: v for k, v in net.state_dict().items() if "move_target" not in k}
    net.load_state_dict(old)  # a doubles checkpoint written before the target embedding
    assert head.move_target.weight.abs().sum() == 0
    torch.nn.init.normal_(head.move_target.weight)
    obs = torch.from_numpy(derive(dbl.Turn(battle()).obs(0)[None]))
    spread = obs.clone()
    spread[0, dbl.X_TARGET:dbl.X_TARGET + len(dbl.TARGETS)] = 0.0
    spread[0, dbl.X_TARGET + dbl.TARGET_INDEX["allAdjacentFoes"]] = 1.0
    y = torch.randn(1, 32)  # the same core output: only the head sees the change
    move1, move2 = slice(dbl.MOVE0, dbl.MOVE0 + 5), slice(dbl.MOVE0 + 5, dbl.MOVE0 + 10)
    a, b = head(obs, y), head(spread, y)
    assert not torch.allclose(a[0, move1], b[0, move1]) and torch.allclose(a[0, move2], b[0, move2])
