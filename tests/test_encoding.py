"""Action mask and encoder on hand-built battle states (no server)."""

from types import SimpleNamespace as NS

import numpy as np
import pytest

from maple_async.obs import encoding as enc

from maple_async.obs import actions as act


def move(move_id):
    return NS(id=move_id, _id=move_id)  # the property and the slot it returns


def mon(species, moves=(), active=False, fainted=False):
    return NS(base_species=species, species=species, active=active, _active=active,
              fainted=fainted, moves={m: move(m) for m in moves})


def battle(team, active_moves=None, switches=(), trapped=False, can_tera=False, wait=False,
           available=None, can_mega=False, can_dynamax=False, z_moves=()):
    team_d = {f"p1: {m.species}": m for m in team}
    active = next((m for m in team if m.active), None)
    avail = [move(m) for m in (available if available is not None else (active_moves or []))]
    request = None
    if z_moves:  # Showdown's canZMove: one entry per move of the request, null where none
        request = {"active": [{"moves": [{"id": m.id} for m in avail],
                               "canZMove": [{"move": "Z"} if m.id in z_moves else None for m in avail]}]}
    return NS(team=team_d, active_pokemon=active, available_moves=avail,
              available_switches=[m for m in team if m.species in switches],
              trapped=trapped, can_tera=can_tera, can_mega_evolve=can_mega, can_dynamax=can_dynamax,
              can_z_move=bool(z_moves), _wait=wait, last_request=request)


TEAM = [mon("a", ["tackle", "ember", "growl", "surf"], active=True), mon("b"), mon("c"),
        mon("d"), mon("e", fainted=True), mon("f")]


def legal_orders(b):
    """Ground truth: what a correct client may send for this state."""
    out = {("switch", m.species) for m in b.available_switches if not b.trapped}
    z = {e["id"] for e, c in zip(*(((b.last_request or {}).get("active") or [{}])[0].get(k) or ()
                                   for k in ("moves", "canZMove"))) if c}
    for mv in b.available_moves:
        out.add(("move", mv.id, None))
        for kind, allowed in (("terastallize", b.can_tera), ("mega", b.can_mega_evolve),
                              ("dynamax", b.can_dynamax), ("z_move", mv.id in z)):
            if allowed:
                out.add(("move", mv.id, kind))
    return out


def as_tuple(order):
    o = order.order
    if hasattr(o, "base_species"):
        return ("switch", o.species)
    kinds = [k for k in ("terastallize", "mega", "dynamax", "z_move") if getattr(order, k)]
    assert len(kinds) <= 1
    return ("move", o.id, kinds[0] if kinds else None)


CASES = {
    "normal turn": battle(TEAM, ["tackle", "ember", "growl", "surf"], switches="bcdf"),
    "disabled move + tera": battle(TEAM, ["tackle", "surf"], switches="bcd", can_tera=True),
    "trapped": battle(TEAM, ["ember"], switches="bcdf", trapped=True),
    "forced switch": battle([mon(m.species, m.moves) for m in TEAM], None, switches="bcd"),
    "struggle": battle(TEAM, None, switches="", available=["struggle"]),
    "recharge + tera flag": battle(TEAM, None, switches="", available=["recharge"], can_tera=True),
    "mega (gens 6-7)": battle(TEAM, ["tackle", "ember", "surf"], switches="bc", can_mega=True),
    "z-move for two moves (gen 7)": battle(TEAM, ["tackle", "ember", "growl", "surf"], switches="b",
                                           z_moves=("ember", "growl")),
    "dynamax, one move disabled (gen 8)": battle(TEAM, ["tackle", "growl", "surf"], switches="bcdf",
                                                 can_dynamax=True),
}
CASES["mega and tera (National Dex)"] = battle(TEAM, ["tackle", "ember"], switches="b", can_mega=True,
                                              can_tera=True)
GIMMICKS = {"disabled move + tera": (22,), "recharge + tera flag": (22,), "mega (gens 6-7)": (10,),
            "z-move for two moves (gen 7)": (14,), "dynamax, one move disabled (gen 8)": (18,),
            "mega and tera (National Dex)": (10, 22)}


@pytest.mark.parametrize("name", list(CASES))
def test_mask_allows_exactly_the_legal_choices(name):
    b = CASES[name]
    mask = act.action_mask(b)
    assert mask.dtype == bool and mask.shape == (act.N_ACTIONS,)
    chosen = {as_tuple(act.action_to_order(b, a)) for a in np.flatnonzero(mask)}
    legal = legal_orders(b)
    assert chosen <= legal, f"illegal choices allowed: {chosen - legal}"
    assert chosen == legal, f"legal choices missing: {legal - chosen}"
    offered = GIMMICKS.get(name, ())  # the move blocks besides 6-9 the state allows
    assert all(mask[k:k + 4].any() == (k in offered) for k in (10, 14, 18, 22))


def test_switch_actions_follow_team_order():
    b = CASES["normal turn"]
    mask = act.action_mask(b)
    assert mask[:6].tolist() == [False, True, True, True, False, True]
    assert act.action_to_order(b, 3).order.species == "d"


def test_waiting_battle_has_no_legal_action():
    assert not act.action_mask(battle(TEAM, ["tackle"], switches="b", wait=True)).any()


def test_layout_is_consistent():
    assert enc.OBS_DIM == enc.FIELD + enc.FIELD_DIM
    assert enc.MOVES - enc.OPP_TEAM == 6 * enc.POKE_DIM
    assert enc.EFFECTIVENESS.shape == (18, 18)
    fire, grass, water = (enc.TYPE_INDEX[t] for t in (
        enc.PokemonType.FIRE, enc.PokemonType.GRASS, enc.PokemonType.WATER))
    assert enc.EFFECTIVENESS[fire, grass] == 2 and enc.EFFECTIVENESS[fire, water] == 0.5


def _real_battle():
    import logging

    from poke_env.battle import Battle, Pokemon
    b = Battle("battle-gen9randombattle-1", "me", logging.getLogger("test"), gen=9)
    b._player_role = "p1"
    own = Pokemon(gen=9, species="charizard")
    foe = Pokemon(gen=9, species="blastoise")
    b._team = {"p1: Charizard": own}
    b._opponent_team = {"p2: Blastoise": foe}
    return b, own, foe


def test_encoder_cache_follows_changes_on_the_same_pokemon():
    """The per-Pokémon static block is cached; a type change (tera) or a boost must show up
    exactly as a fresh, uncached encoding shows it."""
    b, own, foe = _real_battle()
    before = enc.encode(b)
    t_fire = enc.TYPE_INDEX[enc.PokemonType.FIRE]
    t_water = enc.TYPE_INDEX[enc.PokemonType.WATER]
    assert before[enc.OWN_TEAM + enc.P_TYPES + t_fire] == 1.0
    own.terastallize("water")
    own.boost("atk", 2)
    after = enc.encode(b)
    enc._POKE_STATIC.clear()
    fresh = enc.encode(b)
    assert np.array_equal(after, fresh)
    assert not np.array_equal(before, after)
    assert after[enc.OWN_TEAM + enc.P_TERASTALLIZED] == 1.0
    assert after[enc.OWN_TEAM + enc.P_TYPES + t_water] == 1.0
    assert after[enc.OWN_TEAM + enc.P_TYPES + t_fire] == 0.0
    assert after[enc.OWN_TEAM + enc.P_BOOSTS + enc.BOOSTS.index("atk")] == pytest.approx(2 / 6)
    assert after[enc.OPP_TEAM + enc.P_PRESENT] == 1.0 and after[enc.OPP_TEAM + enc.P_TYPES + t_water] == 1.0


def test_switch_is_sent_as_the_request_slot():
    """Showdown matches `switch <name>` by name or species, active Pokémon first: an active
    Ditto transformed into the benched species would be picked. Switches go by slot."""
    b = battle(TEAM, ["tackle"], switches="bcdf")
    b.last_request = {"side": {"pokemon": [{"ident": f"p1: {s}"} for s in "dabcfe"]}}
    assert act.action_to_order(b, 3).message == "/choose switch 1"  # "d" is first in the request
    assert act.action_to_order(b, 1).message == "/choose switch 3"
    assert act.action_to_order(b, 5).order.species == "f"
    b.last_request = None  # no request to read: poke-env's own form (by name)
    order = act.action_to_order(b, 1)
    assert type(order) is act.SingleBattleOrder and order.order.species == "b"


def test_encoder_side_state_is_the_reward_side_state():
    """The reward shaping reads HP and faints from the encoder's pass; it must be what
    rewards.side_state computes on its own (unrevealed opponents at full HP)."""
    import logging

    from poke_env.battle import Battle, Pokemon
    from poke_env.battle.status import Status

    from maple_async.obs.rewards import side_state
    b = Battle("battle-gen9randombattle-3", "me", logging.getLogger("test"), gen=9)
    b._player_role = "p1"
    own = [Pokemon(gen=9, species=s) for s in ("charizard", "pikachu", "snorlax")]
    foe = [Pokemon(gen=9, species=s) for s in ("venusaur", "gengar")]
    own[0]._active = foe[0]._active = True
    own[1]._current_hp, own[1]._max_hp = 30, 120
    own[2]._current_hp, own[2]._status = 0, Status.FNT
    foe[1]._current_hp, foe[1]._max_hp = 50, 100
    b._team = {f"p1: {m.species}": m for m in own}
    b._opponent_team = {f"p2: {m.species}": m for m in foe}
    state: list = []
    enc.encode(b, side_state=state)
    assert state == pytest.approx(list(side_state(b)))
    own_hp, own_fainted, opp_hp, opp_fainted = state
    assert own_fainted == 1 and opp_fainted == 0
    # 4 unrevealed opponents count at full HP
    assert opp_hp == pytest.approx(foe[0].current_hp_fraction + 0.5 + 4)


def _property_view(mon):
    """What the encoder must read from a Pokémon, through poke-env's own properties."""
    types = tuple(enc.TYPE_INDEX[t] for t in (mon.type_1, mon.type_2) if t in enc.TYPE_INDEX)
    return (types, enc._stats(mon.stats, mon.base_stats, mon.level), float(mon.current_hp_fraction),
            mon.status, mon.active, mon.boosts, mon.level)


def _slot_view(mon):
    """The same, from the encoder's one-call slot read."""
    r = enc._MON_SLOTS(mon)
    _, types, stats = enc._poke_static(mon, r)
    return (types, stats, enc._hp_fraction(r), r[enc.R_STATUS], r[enc.R_ACTIVE], r[enc.R_BOOSTS], r[enc.R_LEVEL])


async def test_slot_reads_are_poke_envs_properties_on_recorded_battles():
    """The encoder reads Pokémon slots directly (one C call instead of ~15 property calls);
    what it derives must be what poke-env's properties return, on every state of real
    battles. Fails when a poke-env release changes what a property does."""
    import gzip
    import json

    from test_fastbattle import DATA, Replayer, _player
    data = json.load(gzip.open(DATA, "rt"))
    p = _player(Replayer, data["username"])
    checked = 0
    for split_messages in data["records"]:
        await p._handle_battle_message([list(m) for m in split_messages])
        b = p.battles[split_messages[0][0][1:]]
        assert act.active_mon(b.team) is b.active_pokemon
        assert act.active_mon(b.opponent_team) is b.opponent_active_pokemon
        for mon in (*b.team.values(), *b.opponent_team.values()):
            assert _slot_view(mon) == _property_view(mon), mon
            checked += 1
            for move in mon.moves.values():
                assert enc._MOVE_SLOTS(move) == (move.id, move.current_pp, move._from_transform)
                assert act._MOVE_ID(move) == move.id
    assert checked > 10_000


def test_slot_reads_follow_tera_and_temporary_types():
    from poke_env.battle import Pokemon
    T = enc.PokemonType
    mon = Pokemon(gen=9, species="charizard")  # fire / flying
    mon._temporary_types = [T.WATER]  # e.g. Soak
    assert _slot_view(mon) == _property_view(mon) and _slot_view(mon)[0] == (enc.TYPE_INDEX[T.WATER],)
    mon._temporary_types = [T.GRASS, T.STEEL]
    assert _slot_view(mon) == _property_view(mon)
    mon._temporary_types = []
    mon.terastallize("electric")
    assert _slot_view(mon) == _property_view(mon) and _slot_view(mon)[0] == (enc.TYPE_INDEX[T.ELECTRIC],)
    mon._temporary_base_stats = {"hp": 1, "atk": 2, "def": 3, "spa": 4, "spd": 5, "spe": 6}
    assert _slot_view(mon) == _property_view(mon)
    mon._current_hp, mon._max_hp = 37, 150
    assert _slot_view(mon) == _property_view(mon)


async def test_encoder_mask_is_action_mask_on_recorded_battles():
    """The runner takes the action mask and the move choices from ``encode(..., mask=,
    moves=)`` (same reads as the observation); they must be :func:`action_mask`'s and
    :func:`action_to_order`'s own on every state of real battles, and the observation must
    not change when they are asked for."""
    import gzip
    import json

    from test_fastbattle import DATA, FastReplayer, Replayer, _player
    data = json.load(gzip.open(DATA, "rt"))
    seen = dict.fromkeys(("switch", "move", "tera", "forced switch", "none"), 0)
    for cls in (Replayer, FastReplayer):
        p = _player(cls, data["username"])
        for split_messages in data["records"]:
            await p._handle_battle_message([list(m) for m in split_messages])
            b = p.battles[split_messages[0][0][1:]]
            mask = np.ones(act.N_ACTIONS, dtype=bool)  # stale content must be cleared
            s1, s2, moves = [], [], [None]
            obs = enc.encode(b, side_state=s1, mask=mask, moves=moves)
            assert mask.tolist() == act.action_mask(b).tolist(), split_messages
            choices = act.move_choices(b)
            assert len(moves) == len(choices) and all(x is y for x, y in zip(moves, choices))
            assert act.any_legal(mask) == mask.any()
            assert obs.tobytes() == enc.encode(b, side_state=s2).tobytes() and s1 == s2
            seen["switch"] += bool(mask[:6].any())
            seen["move"] += bool(mask[6:10].any())
            seen["tera"] += bool(mask[22:].any())
            seen["forced switch"] += bool(mask[:6].any() and not mask[6:].any())
            seen["none"] += not mask.any()
    assert all(n > 0 for n in seen.values()), seen


@pytest.mark.parametrize("case", ["recharge", "struggle", "trapped", "wait", "tera"])
def test_encoder_mask_on_special_requests(case):
    from poke_env.battle import Move, Pokemon
    b, own, foe = _real_battle()
    bench = Pokemon(gen=9, species="pikachu")
    b._team["p1: Pikachu"] = bench
    own._active = foe._active = True
    for m in ("flamethrower", "airslash", "roost", "dragonpulse"):
        own._add_move(m)
    b._available_moves = [Move("recharge" if case == "recharge" else "struggle", gen=9)] \
        if case in ("recharge", "struggle") else [own.moves["flamethrower"], own.moves["roost"]]
    b._available_switches = [bench]
    b._trapped = case == "trapped"
    b._wait = case == "wait"
    b._can_tera = case in ("tera", "recharge")
    mask = np.zeros(act.N_ACTIONS, dtype=bool)
    enc.encode(b, mask=mask)
    assert mask.tolist() == act.action_mask(b).tolist()
    expected = {"recharge": [1, 6, 22], "struggle": [1, 6], "trapped": [6, 8], "wait": [],
                "tera": [1, 6, 8, 22, 24]}[case]
    assert np.flatnonzero(mask).tolist() == expected


RECORDED = ["battles.json.gz", "rare_battles.json.gz"]  # the second: -transform, replace, ...


@pytest.mark.parametrize("when", ["requests", "60% of requests", "every message"])
@pytest.mark.parametrize("name", RECORDED)
async def test_encoding_from_changes_equals_a_full_read_on_recorded_battles(name, when, monkeypatch):
    """A FastBattle's encoder re-reads only the Pokémon that messages and requests changed
    since its previous encoding. At every decision point of real battles the result must be
    byte-equal to reading everything, also when decision points are skipped (changes pile
    up) or when it encodes after every message (between a switch and the request that
    corrects an Illusion), and most blocks must really be kept (otherwise this test proves
    nothing)."""
    import gzip
    import json
    import random

    from test_fastbattle import DATA, FastReplayer, _player
    data = json.load(gzip.open(DATA.parent / name, "rt"))
    p = _player(FastReplayer, data["username"])
    counts = {"rewritten": 0, "blocks": 0, "refits": 0}
    update = enc._Teams.update

    def counting_update(self, battle, changes):
        todo = update(self, battle, changes)
        counts["refits"] += todo is None
        counts["rewritten"] += len(todo) if todo is not None else 0
        counts["blocks"] += len(self.todo())
        return todo
    monkeypatch.setattr(enc._Teams, "update", counting_update)
    rng = random.Random(0)
    n = 0
    for split_messages in data["records"]:
        await p._handle_battle_message([list(m) for m in split_messages])
        b = p.battles[split_messages[0][0][1:]]
        if when != "every message" and not any(m[1:2] == ["request"] for m in split_messages):
            continue
        if when == "60% of requests" and rng.random() < 0.4:
            continue
        s1, s2 = [], []
        m1, m2 = np.zeros(act.N_ACTIONS, dtype=bool), np.zeros(act.N_ACTIONS, dtype=bool)
        inc = enc.encode(b, side_state=s1, mask=m1)
        full = enc.encode(b, side_state=s2, mask=m2, incremental=False)
        assert inc.tobytes() == full.tobytes(), (np.flatnonzero(inc != full), split_messages)
        assert s1 == s2 and m1.tolist() == m2.tolist()
        n += 1
    assert n > 100
    assert counts["rewritten"] < 0.5 * counts["blocks"], counts
    assert counts["refits"] < 0.2 * n, counts


def test_stock_battles_are_read_in_full_every_time():
    """A battle that does not track changes (stock poke-env) keeps no cache: a change made
    behind poke-env's message handlers still shows."""
    b, own, foe = _real_battle()
    own._active = foe._active = True
    own._current_hp, own._max_hp = 200, 200
    assert enc.encode(b)[enc.OWN_TEAM + enc.P_HP] == 1.0
    own._current_hp = 50
    assert enc.encode(b)[enc.OWN_TEAM + enc.P_HP] == 0.25
    assert "_maple_teams" not in b.__dict__
