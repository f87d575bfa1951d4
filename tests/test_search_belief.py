"""search/belief: sampled states from the player's view, on real random battles.

A recording player samples states at every decision of a few real gen4 and gen9 random battles
on the local server and checks each against what Showdown showed it: our side built exactly
(leafhub.js's request equals the real one, field by field: check_ours), the opponent's
revealed facts (species, level, moves seen, item, ability, tera, HP, status, boosts) in every
state. Refusals are by name.
"""

import asyncio
import shutil

import pytest
from poke_env.player import MaxBasePowerPlayer, RandomPlayer

from maple_async.pokeenv.players import player_kwargs, run_id
from maple_async.search.belief import Refusal, build_states, check_ours, sample_states
from maple_async.search.belief.effects import ability_state, forme_of, volatiles
from maple_async.search.belief.opponent import UNKNOWN_ITEM, bench_level, known_opponents, preview_pool, shown_species
from maple_async.search.belief.ours import hidden_power, our_side
from maple_async.search.belief.protocol import Protocol, parse_details, to_id
from maple_async.search.belief.readers import LOCKED_MOVE, Holder, future_moves, locked_move
from maple_async.search.belief.sampling import refuse_early, residual_pending
from maple_async.search.leaves import LeafHub
from maple_async.search.searcher import legal_choices

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js"),
]

K = 3


def check_opponent(battle, state) -> None:
    """Every revealed fact of the opponent's in one sampled state (by field name on failure)."""
    side = state[battle.opponent_role]
    by_name = {s["name"]: (i, s) for i, s in enumerate(side["team"])}
    assert len(side["team"]) == battle._team_size.get(battle.opponent_role, 6)
    names = [to_id(s["species"]) for s in side["team"]]
    assert len(set(names)) == len(names), f"species: {names} twice"
    if "random" not in battle.format:  # a team format's unseen Pokémon stand at its level
        level = max((m.level for m in battle.opponent_team.values()), default=100)
        assert {s["level"] for s in side["team"]} == {level}, f"level: {[s['level'] for s in side['team']]}"
    if battle.teampreview_opponent_team:  # the unseen bench is drawn from what preview showed
        shown = {to_id(m.species) for m in battle.teampreview_opponent_team}
        shown |= {to_id(m.base_species) for m in battle.teampreview_opponent_team}
        for s in side["team"]:
            assert to_id(s["species"]) in shown or to_id(s["species"].split("-")[0]) in shown, \
                f"species: {s['species']} not in team preview {sorted(shown)}"
    for ident, mon in battle.opponent_team.items():
        name = ident.split(": ", 1)[1]
        assert name in by_name, f"species: {name} missing"
        i, s = by_name[name]
        patch = side["pokemon"][i]
        # the forme Showdown last showed: a permanent one (Ogerpon's Tera forme, Mimikyu-Busted)
        # from its detailschange, which poke-env keeps only from the next switch-in
        species = shown_species(Protocol(battle), battle.opponent_role, name, to_id(mon.species))
        assert to_id(s["species"]) == species, f"species: {s['species']} vs {species} ({mon.species})"
        assert s["level"] == mon.level, f"level of {name}"
        moves = {to_id(m) for m in s["moves"]}
        for m in mon.moves:
            assert m in moves or (m == "hiddenpower" and any(x.startswith("hiddenpower") for x in moves)), \
                f"moves: {name}'s {m} not in {moves}"
        if mon.item not in (UNKNOWN_ITEM, None, ""):
            assert to_id(s["item"]) == mon.item, f"item of {name}"
        if mon.item in (None, ""):
            assert patch.get("item") == "", f"item of {name}: gone, not {patch.get('item')!r}"
        if mon.ability:
            assert to_id(s["ability"]) == mon.ability, f"ability of {name}"
        if mon.is_terastallized:
            assert s["teraType"].lower() == mon.tera_type.name.lower(), f"tera of {name}"
        if mon.fainted:
            assert patch["hp"] == 0, f"hp of fainted {name}"
            continue
        assert patch["hpFraction"] == pytest.approx(mon.current_hp_fraction), f"hp of {name}"
        assert patch["status"] == (mon.status.name.lower() if mon.status else ""), f"status of {name}"
        if mon.active:
            assert side["active"] == i, "active"
            assert patch["boosts"] == {k: v for k, v in mon.boosts.items() if v}, f"boosts of {name}"


class Recorder(RandomPlayer):
    """Plays at random; at every decision samples states, builds them and checks them."""

    def __init__(self, hub, **kw):
        super().__init__(**kw)
        self.hub = hub
        self.checked = 0
        self.forced = 0  # switches after a faint, checked
        self.refused = {}
        self.errors = []

    async def choose_move(self, battle):
        try:
            b = await sample_states(self.hub, battle, K, seed=battle.turn * 1000 + self.checked)
            assert len(b.states) == K
            for state in b.states:
                check_opponent(battle, state)
            decision = f"{battle.battle_tag}:{battle.turn}"
            built = await build_states(self.hub, decision, battle.format, b.states, battle.player_role)
            await self.hub.drop(decision)
            real = legal_choices(battle.last_request)
            for one in built:
                try:
                    check_ours(one, battle.last_request, real)
                except Refusal as r:
                    if r.reason != "our_choices":  # a drawn trapping ability may differ by state
                        raise
            self.checked += 1
            self.forced += bool(battle.last_request.get("forceSwitch"))
        except Refusal as r:
            if r.reason == "our_side":
                self.errors.append(str(r))
            self.refused[r.reason] = self.refused.get(r.reason, 0) + 1
        except Exception as e:  # noqa: BLE001 - reported by the test with the battle's context
            self.errors.append(f"turn {battle.turn}: {e!r}")
        return self.choose_random_singles_move(battle)


@pytest.mark.parametrize("fmt", ["gen1randombattle", "gen3randombattle", "gen4randombattle", "gen9randombattle"])
async def test_sampled_states_keep_what_showdown_showed(showdown_url, fmt):
    async with LeafHub() as hub:
        tag = run_id()
        me = Recorder(hub, **player_kwargs(showdown_url, f"blf{tag}a", 1, fmt))
        them = RandomPlayer(**player_kwargs(showdown_url, f"blf{tag}b", 1, fmt))
        await asyncio.wait_for(me.battle_against(them, n_battles=3), 600)
        assert not me.errors, me.errors[:5]
        assert me.checked >= 20, (me.checked, me.refused)
        assert me.forced >= 1, (me.checked, me.refused)  # three battles with no faint of ours checked: unlikely
        # what the states cannot carry, by name; never our side wrong, never a switch after a faint
        assert set(me.refused) <= {"midturn_switch", "locked_move", "recharge", "two_turn_move", "substitute_hp",
                                   "transform", "illusion", "ditto", "timer", "disabled_move",
                                   "species_sets", "source", "no_opponent_active"} | {
            r for r in me.refused if r.startswith("volatile:")}, me.refused


@pytest.mark.parametrize("fmt,teams", [("gen9ou", "teams/ou"), ("gen9bssregi", "teams/bss"),
                                        ("gen4ou", "teams/gen4ou")])
async def test_sampled_states_in_team_formats_keep_what_showdown_showed(showdown_url, fmt, teams):
    """Team formats: our side from a team file's spreads (any EVs, natures); the opponent's bench
    from team preview's species where the generation has one; sets from the generation's random
    battle sets (public data), never the opponent's team file."""
    from maple_async.teams import _pool
    from maple_async.config import PRESETS
    _, pool = _pool(fmt, str(PRESETS / teams), "uniform", 3, None)
    async with LeafHub() as hub:
        tag = run_id()
        me = Recorder(hub, **player_kwargs(showdown_url, f"blt{tag}a", 1, fmt, team=pool.builder(0)))
        them = RandomPlayer(**player_kwargs(showdown_url, f"blt{tag}b", 1, fmt, team=pool.builder(1)))
        await asyncio.wait_for(me.battle_against(them, n_battles=3), 600)
        assert not me.errors, me.errors[:5]
        assert me.checked >= 15, (me.checked, me.refused)
        assert set(me.refused) <= {"midturn_switch", "locked_move", "recharge", "two_turn_move", "substitute_hp",
                                   "transform", "illusion", "ditto", "timer", "disabled_move",
                                   "species_sets", "source", "no_opponent_active"} | {
            r for r in me.refused if r.startswith("volatile:")}, me.refused


class FakeBattle:
    """Just enough of a poke-env battle for refuse_early."""

    def __init__(self, request, fmt="gen4randombattle"):
        self.last_request = request
        self.format = fmt
        self.battle_tag = f"battle-{fmt}-1"


def test_refusals_are_named():
    fainted = {"forceSwitch": [True], "side": {"pokemon": [{"active": True, "condition": "0 fnt"}]}}
    refuse_early(FakeBattle(fainted), fainted)  # the switch after a faint is searched...
    with pytest.raises(Refusal) as r:  # ... where the caller wants it
        refuse_early(FakeBattle(fainted), fainted, forced_switches=False)
    assert r.value.reason == "forced_switch"
    uturn = {"forceSwitch": [True], "side": {"pokemon": [{"active": True, "condition": "120/250"}]}}
    with pytest.raises(Refusal) as r:
        refuse_early(FakeBattle(uturn), uturn)
    assert r.value.reason == "midturn_switch"
    refuse_early(FakeBattle({}, fmt="gen9ou"), {"active": []})  # team formats are searched
    recharge = {"active": [{"moves": [{"move": "Recharge", "id": "recharge"}]}], "side": {}}
    with pytest.raises(Refusal) as r:
        refuse_early(FakeBattle(recharge), recharge)
    assert r.value.reason == "recharge"


class FakeOpponents:
    """A battle whose opponent showed ``species``: enough for known_opponents."""

    def __init__(self, species):
        from poke_env.battle import Pokemon
        self.player_role, self.opponent_role = "p1", "p2"
        self.opponent_team = {f"p2: {species}": Pokemon(gen=9, species=species)}
        self._replay_data = []


@pytest.mark.parametrize("species,reason", [("zoroark", "illusion"), ("zoruahisui", "illusion"),
                                            ("ditto", "ditto")])
def test_an_opponent_that_disguises_or_transforms_is_refused(species, reason):
    battle = FakeOpponents(species)
    for mon in battle.opponent_team.values():
        mon._active = True
    with pytest.raises(Refusal) as r:
        known_opponents(battle, Protocol(battle))
    assert r.value.reason == reason


def test_a_ditto_on_the_bench_is_a_plain_set_on_either_side():
    from poke_env.battle import Pokemon
    battle = FakeOpponents("ditto")  # not active: not transformed (poke-env undoes it on the switch out)
    assert [k["species"] for k, *_ in known_opponents(battle, Protocol(battle))] == ["ditto"]
    for mon in battle.opponent_team.values():  # fainted while active: poke-env leaves it active
        mon._active = True
        mon.faint()
    assert [k["species"] for k, *_ in known_opponents(battle, Protocol(battle))] == ["ditto"]
    ditto = {"ident": "p1: Ditto", "details": "Ditto, L88", "condition": "200/200", "active": False,
             "stats": {"atk": 100, "def": 100, "spa": 100, "spd": 100, "spe": 100}, "moves": ["transform"],
             "baseAbility": "imposter", "item": "choicescarf"}
    ours = FakeOpponents("pikachu")
    ours.get_pokemon = lambda ident: Pokemon(gen=9, species="ditto")
    ours.side_conditions, ours.player_username, ours.used_tera, ours.gen = {}, "us", False, 9
    assert our_side(ours, {"side": {"pokemon": [ditto]}}, Protocol(ours))["team"][0]["species"] == "Ditto"
    with pytest.raises(Refusal) as r:
        our_side(ours, {"side": {"pokemon": [{**ditto, "active": True}]}}, Protocol(ours))
    assert r.value.reason == "ditto"


@pytest.mark.parametrize("weather, fields, active, ruled_out", [
    ({}, {}, True, True),
    ({}, {}, False, False),  # on the bench: its item waits for its switch-in
    ({"SUNNYDAY": 3}, {}, True, False),  # the sun woke it: a Booster Energy would still be held
    ({}, {"ELECTRIC_TERRAIN": 3}, True, False),
    ({"DESOLATELAND": 0}, {}, True, True),  # Showdown's Protosynthesis wakes in sunnyday alone
])
def test_an_active_paradox_with_its_item_unknown_holds_no_booster_energy(weather, fields, active, ruled_out):
    # Booster Energy is used at the switch-in unless the sun or Electric Terrain woke the ability:
    # an active one still unknown never held it (a state that did would boost what never was).
    from poke_env.battle import Field, Weather
    battle = FakeOpponents("ragingbolt")
    battle.weather = {Weather[w]: t for w, t in weather.items()}
    battle.fields = {Field[f]: t for f, t in fields.items()}
    for mon in battle.opponent_team.values():
        mon._active = active
    [(k, *_)] = known_opponents(battle, Protocol(battle))
    assert k["item"] is None
    assert k.get("notItems") == (["boosterenergy"] if ruled_out else None)


def test_our_zoroark_is_refused_until_it_faints():
    zoroark = {"ident": "p1: Zoroark", "details": "Zoroark, L84, M", "condition": "250/250", "active": True,
               "stats": {"atk": 200, "def": 150, "spa": 250, "spd": 150, "spe": 230}, "moves": ["nightdaze"],
               "baseAbility": "illusion", "item": ""}
    ours = FakeOpponents("pikachu")
    with pytest.raises(Refusal) as r:
        our_side(ours, {"side": {"pokemon": [zoroark]}}, Protocol(ours))
    assert r.value.reason == "illusion"
    from poke_env.battle import Pokemon
    ours.get_pokemon = lambda ident: Pokemon(gen=9, species="zoroark")
    ours.side_conditions, ours.player_username, ours.used_tera, ours.gen = {}, "us", False, 9
    fainted = {**zoroark, "condition": "0 fnt", "active": False}
    assert our_side(ours, {"side": {"pokemon": [fainted]}}, Protocol(ours))["team"][0]["species"] == "Zoroark"


def test_their_zoroark_is_refused_until_it_faints():
    battle = FakeOpponents("zoroark")
    with pytest.raises(Refusal):
        known_opponents(battle, Protocol(battle))
    for mon in battle.opponent_team.values():
        mon.faint()
    assert [k["species"] for k, *_ in known_opponents(battle, Protocol(battle))] == ["zoroark"]


def test_a_transformed_active_is_refused():
    from poke_env.battle import Pokemon
    battle = FakeOpponents("mew")
    battle._replay_data = [["", "switch", "p2a: Mew", "Mew, L80", "100/100"],
                           ["", "-transform", "p2a: Mew", "p1a: Garchomp"], ["", "turn", "3"]]
    with pytest.raises(Refusal) as r:
        volatiles(Pokemon(gen=4, species="mew"), "p2", "Mew", Protocol(battle), 4)
    assert r.value.reason == "transform"
    # its target keeps nothing of it: our Garchomp is searched once the Mew has gone
    battle._replay_data[:0] = [["", "switch", "p1a: Garchomp", "Garchomp, L80", "100/100"]]
    assert volatiles(Pokemon(gen=4, species="garchomp"), "p1", "Garchomp", Protocol(battle), 4) == {}


def test_a_gen3_faint_before_the_residual_leaves_the_residual_to_come():
    class B:
        def __init__(self, gen, data):
            self.gen, self._replay_data = gen, data
    before = [["", "turn", "5"], ["", "move", "p2a: Snorlax", "Body Slam", "p1a: Jolteon"], ["", "faint", "p1a: Jolteon"]]
    after = before + [["", "-weather", "Sandstorm", "[upkeep]"], ["", "upkeep"]]
    forced = {"forceSwitch": [True]}
    assert residual_pending(B(3, before), forced, Protocol(B(3, before)))
    assert not residual_pending(B(3, after), forced, Protocol(B(3, after)))
    assert not residual_pending(B(4, before), forced, Protocol(B(4, before)))
    assert not residual_pending(B(3, before), {"active": [{}]}, Protocol(B(3, before)))


class FakeReplay:
    def __init__(self, lines):
        self._replay_data = [line.split("|") for line in lines]


def _active(species, *effects):
    from poke_env.battle import Effect, Pokemon
    mon = Pokemon(gen=9, species=species)
    mon._effects = {getattr(Effect, e): 1 for e in effects}
    return mon


@pytest.mark.parametrize("booster", [True, False])
def test_a_paradox_boost_carries_its_stat_and_booster_energy_until_it_ends(booster):
    lines = ["|switch|p2a: Iron Valiant|Iron Valiant|100/100",
             "|-activate|p2a: Iron Valiant|ability: Quark Drive" + ("|[fromitem]" if booster else ""),
             "|-start|p2a: Iron Valiant|quarkdrivespe"]
    want = {"bestStat": "spe", **({"fromBooster": True} if booster else {})}
    for effects in [("QUARK_DRIVE", "QUARKDRIVESPE"), ("QUARKDRIVESPE",), ("QUARK_DRIVE",)]:
        mon = _active("ironvaliant", *effects)
        got = volatiles(mon, "p2", "Iron Valiant", Protocol(FakeReplay(lines)), 9)
        assert got == {"quarkdrive": want}, effects
    # the terrain ended: poke-env keeps QUARKDRIVESPE until a switch, the state has no boost
    ended = lines + ["|-end|p2a: Iron Valiant|Quark Drive"]
    mon = _active("ironvaliant", "QUARKDRIVESPE")
    assert volatiles(mon, "p2", "Iron Valiant", Protocol(FakeReplay(ended)), 9) == {}
    # a boost whose stat the protocol never named is refused by name
    with pytest.raises(Refusal) as r:
        volatiles(mon, "p2", "Iron Valiant", Protocol(FakeReplay(lines[:2])), 9)
    assert r.value.reason == "volatile:quarkdrive"


def test_supreme_overlord_s_count_is_its_ability_state_from_this_switch_in():
    lines = ["|switch|p1a: Kingambit|Kingambit, L50|100/100",
             "|-activate|p1a: Kingambit|ability: Supreme Overlord",
             "|-start|p1a: Kingambit|fallen2|[silent]"]
    mon = _active("kingambit", "SUPREME_OVERLORD", "FALLEN2")
    proto = Protocol(FakeReplay(lines))
    assert volatiles(mon, "p1", "Kingambit", proto, 9) == {}
    assert ability_state(mon, "p1", "Kingambit", proto) == {"fallen": 2}
    # a count from an earlier switch-in is not this one's
    again = Protocol(FakeReplay(lines + ["|switch|p1a: Kingambit|Kingambit, L50|50/100"]))
    with pytest.raises(Refusal):
        ability_state(mon, "p1", "Kingambit", again)


def test_glaive_rush_s_drawback_lasts_only_until_the_user_s_next_turn():
    lines = ["|switch|p2a: Baxcalibur|Baxcalibur|100/100", "|turn|5",
             "|move|p2a: Baxcalibur|Glaive Rush|p1a: Blissey", "|-singlemove|p2a: Baxcalibur|Glaive Rush|[silent]",
             "|turn|6"]
    mon = _active("baxcalibur", "GLAIVE_RUSH")
    assert volatiles(mon, "p2", "Baxcalibur", Protocol(FakeReplay(lines)), 9) == {"glaiverush": {}}
    # fully paralysed the turn after: Showdown dropped it before the move failed, poke-env kept it
    for stale in (lines + ["|cant|p2a: Baxcalibur|par", "|turn|7"],
                  lines + ["|cant|p2a: Baxcalibur|par"]):  # (our faint's switch before turn 7)
        assert volatiles(mon, "p2", "Baxcalibur", Protocol(FakeReplay(stale)), 9) == {}


def test_supreme_overlord_s_count_ended_by_a_changed_ability_is_refused():
    lines = ["|switch|p1a: Kingambit|Kingambit|100/100", "|-activate|p1a: Kingambit|ability: Supreme Overlord",
             "|-start|p1a: Kingambit|fallen2|[silent]", "|-end|p1a: Kingambit|fallen2|[silent]"]
    mon = _active("kingambit", "SUPREME_OVERLORD", "FALLEN2")
    with pytest.raises(Refusal) as r:
        ability_state(mon, "p1", "Kingambit", Protocol(FakeReplay(lines)))
    assert r.value.reason == "volatile:supreme_overlord"


class FakePreview:
    def __init__(self, *species):
        from poke_env.battle import Pokemon
        self.teampreview_opponent_team = [Pokemon(gen=9, species=s) for s in species]


def test_team_preview_pool_keeps_the_unseen_and_refuses_a_hidden_zoroark():
    known = [({"species": "kingambit", "level": 50}, None, "Kingambit", "p2")]
    pool = preview_pool(FakePreview("kingambit", "gholdengo", "urshifu"), known)
    assert [p["species"].lower().replace("-", "") for p in pool] == ["gholdengo", "urshifu"]
    with pytest.raises(Refusal) as r:
        preview_pool(FakePreview("kingambit", "zoroarkhisui"), known)
    assert r.value.reason == "illusion"
    assert bench_level("gen9bssregi", known) == 50
    assert bench_level("gen4ou", []) == 100
    assert bench_level("gen9randombattle", known) is None


def test_hidden_power_s_power_is_read_from_the_active_s_request():
    active = {"moves": [{"move": "Flamethrower", "id": "flamethrower"},
                        {"move": "Hidden Power Ice 70", "id": "hiddenpowerice"}]}
    assert hidden_power(active) == 70
    assert hidden_power({"moves": [{"move": "Hidden Power Ice", "id": "hiddenpowerice"}]}) is None


def test_details_keep_shiny():
    assert parse_details("Ludicolo, L85, M, shiny") == {"species": "Ludicolo", "level": 85, "gender": "M",
                                                             "shiny": True}


@pytest.mark.parametrize("effect", ["STICKY_WEB", "POLTERGEIST", "TERA_SHELL", "TOXIC_DEBRIS"])
def test_a_one_turn_activation_poke_env_keeps_needs_nothing(effect):
    """'-activate|p1a: X|move: Sticky Web' (its side condition is carried), Poltergeist's item
    reveal, Tera Shell's resisted hit (the ability itself is in the state), Toxic Debris's spikes
    (a side condition carried): poke-env keeps them as effects until a switch; the state needs none."""
    lines = ["|switch|p1a: Great Tusk|Great Tusk|100/100"]
    mon = _active("greattusk", effect)
    assert volatiles(mon, "p1", "Great Tusk", Protocol(FakeReplay(lines)), 9) == {}


def test_a_changed_type_carries_its_types_and_the_ability_that_changed_it():
    lines = ["|switch|p2a: Greninja|Greninja, L79|100/100", "|turn|3",
             "|move|p2a: Greninja|Grass Knot|p1a: Swampert",
             "|-start|p2a: Greninja|typechange|Grass|[from] ability: Protean"]
    mon = _active("greninja", "TYPECHANGE")
    got = volatiles(mon, "p2", "Greninja", Protocol(FakeReplay(lines)), 9)
    assert got == {"typechange": {"types": ["Grass"], "ability": "protean"}}
    # Protean stays spent after Soak (gen 9: once a switch-in)
    got = volatiles(mon, "p2", "Greninja", Protocol(FakeReplay(
        lines + ["|-start|p2a: Greninja|typechange|Water"])), 9)
    assert got == {"typechange": {"types": ["Water"], "ability": "protean"}}
    soaked = ["|switch|p1a: Heatran|Heatran|100/100", "|-start|p1a: Heatran|typechange|Water"]
    got = volatiles(_active("heatran", "TYPECHANGE"), "p1", "Heatran", Protocol(FakeReplay(soaked)), 9)
    assert got == {"typechange": {"types": ["Water"]}}
    # Reflect Type names no type; a change before this switch-in is not this one's
    for stale in (lines[:3] + ["|-start|p2a: Greninja|typechange|[from] move: Reflect Type|[of] p1a: Swampert"],
                  lines + ["|switch|p2a: Greninja|Greninja, L79|100/100"]):
        with pytest.raises(Refusal) as r:
            volatiles(mon, "p2", "Greninja", Protocol(FakeReplay(stale)), 9)
        assert r.value.reason == "volatile:typechange"


def test_a_future_sight_on_its_way_counts_the_turn_ends_left_until_it_hits():
    used = ["|turn|4", "|switch|p2a: Slowking|Slowking, L84|100/100", "|turn|5",
            "|move|p2a: Slowking|Future Sight|p1a: Garchomp", "|-start|p2a: Slowking|move: Future Sight",
            "|upkeep|"]
    want = {"move": "futuresight", "source": ["p2", "Slowking"]}
    assert future_moves(Protocol(FakeReplay(used + ["|turn|6"])), 9) == {"p1": {**want, "residuals": 2}}
    later = used + ["|turn|6", "|switch|p2a: Blissey|Blissey|100/100", "|upkeep|", "|turn|7"]
    assert future_moves(Protocol(FakeReplay(later)), 9) == {"p1": {**want, "residuals": 1}}
    hit = later + ["|-end|p1a: Garchomp|move: Future Sight", "|-damage|p1a: Garchomp|40/100", "|upkeep|", "|turn|8"]
    assert future_moves(Protocol(FakeReplay(hit)), 9) == {}
    # our Doom Desire in the bare words of gens 2-4 and base ('-start|...|Doom Desire'); its target
    # fainted: no '-end', gone all the same
    ours = ["|turn|2", "|move|p1a: Jirachi|Doom Desire|p2a: Blissey", "|-start|p1a: Jirachi|Doom Desire",
            "|upkeep|", "|turn|3"]
    assert future_moves(Protocol(FakeReplay(ours)), 5) == {
        "p2": {"move": "doomdesire", "source": ["p1", "Jirachi"], "residuals": 2}}
    gone = ours + ["|upkeep|", "|turn|4", "|faint|p2a: Blissey", "|upkeep|", "|turn|5"]
    assert future_moves(Protocol(FakeReplay(gone)), 4) == {}
    # gens 2-4 fixed the damage at use, against that turn's target: a state built later cannot know it
    with pytest.raises(Refusal) as r:
        future_moves(Protocol(FakeReplay(ours)), 4)
    assert r.value.reason == "future_move"


def test_heal_block_from_psychic_noise_lasts_two_turn_ends_and_the_move_s_is_refused():
    lines = ["|switch|p1a: Blissey|Blissey|100/100", "|turn|4", "|move|p2a: Indeedee|Psychic Noise|p1a: Blissey",
             "|-damage|p1a: Blissey|80/100", "|-start|p1a: Blissey|move: Heal Block", "|upkeep|", "|turn|5"]
    mon = _active("blissey", "HEAL_BLOCK")
    assert volatiles(mon, "p1", "Blissey", Protocol(FakeReplay(lines)), 9) == {"healblock": {"duration": 1}}
    # a second Psychic Noise the next turn does not renew it (no second '-start')
    again = lines + ["|move|p2a: Indeedee|Psychic Noise|p1a: Blissey", "|-damage|p1a: Blissey|60/100"]
    assert volatiles(mon, "p1", "Blissey", Protocol(FakeReplay(again)), 9) == {"healblock": {"duration": 1}}
    move = [x.replace("Psychic Noise", "Heal Block") for x in lines]
    with pytest.raises(Refusal) as r:
        volatiles(mon, "p1", "Blissey", Protocol(FakeReplay(move)), 7)
    assert r.value.reason == "volatile:heal_block"


def test_an_outrage_lock_carries_its_uses_and_ends_or_is_refused_by_the_protocol():
    start = ["|switch|p2a: Garchomp|Garchomp, L80|100/100", "|turn|4",
             "|move|p2a: Garchomp|Outrage|p1a: Blissey", "|-damage|p1a: Blissey|60/100", "|upkeep|", "|turn|5"]
    again = start + ["|move|p2a: Garchomp|Outrage|p1a: Blissey|[from] lockedmove", "|-damage|p1a: Blissey|20/100",
                     "|upkeep|", "|turn|6"]

    def lock(lines, gen=9, status="", quiet=False):
        proto = Protocol(FakeReplay(lines))
        i = proto.last(lambda m: m[1] == "move" and proto.mine(m, "p2", "Garchomp"))
        return locked_move(proto, i, gen, status, quiet)

    assert lock(start) == {"move": "outrage", "used": 1}
    assert lock(again) == {"move": "outrage", "used": 2}
    assert lock(start, gen=4) == {"move": "outrage", "used": 1}
    # over: its fatigue's confusion, or asleep at the turn's end
    assert lock(again[:-2] + ["|-start|p2a: Garchomp|confusion|[fatigue]", "|upkeep|", "|turn|6"]) is None
    assert lock(start, status="slp") is None
    # a turn it could not act in (paralysed) ran the lock out at that turn's end, then our faint
    assert lock(start[:-1] + ["|cant|p2a: Garchomp|par", "|faint|p1a: Blissey", "|upkeep|"]) is None
    # two uses and a fatigue Showdown adds with no line (already confused, Own Tempo, Misty Terrain)
    assert lock(start, quiet=True) == {"move": "outrage", "used": 1}
    with pytest.raises(Refusal):
        lock(again, quiet=True)
    refused = [start[:3] + ["|-miss|p2a: Garchomp|p1a: Blissey"] + start[4:],
               start[:2] + ["|move|p2a: Garchomp|Outrage|p1a: Blissey|[miss]"] + start[4:],
               start[:3] + ["|-activate|p1a: Blissey|move: Protect"] + start[4:],
               start[:3] + ["|-activate|p1a: Blissey|move: Mat Block"] + start[4:],
               start[:3] + ["|-start|p1a: Blissey|ability: Flash Fire"] + start[4:],
               start[:4] + ["|faint|p1a: Blissey"],  # gen 3: a faint's switch before the residual
               start[:2] + ["|move|p2a: Garchomp|Outrage|p1a: Blissey|[from]move: Metronome"] + start[3:],
               [x.replace("Outrage", "Rollout") for x in start]]
    for lines in refused:
        with pytest.raises(Refusal) as r:
            lock(lines)
        assert r.value.reason == "locked_move", lines
    with pytest.raises(Refusal):
        lock(start, gen=2)


class LockTruth(MaxBasePowerPlayer):
    """Plays the strongest move (Outrage often); at each decision compares the lock the sampled
    state carries with the opponent's own request of the same round (one move, no PP shown)."""

    def __init__(self, hub, **kw):
        super().__init__(**kw)
        self.hub = hub
        self.foe = None
        self.carried = 0
        self.wrong = []

    async def choose_move(self, battle):
        req = battle.last_request
        if req.get("forceSwitch"):
            return super().choose_move(battle)
        # Showdown numbers each side's request in turn: p1's round n, p2's n + 1
        want = req.get("rqid", 0) + (1 if battle.player_role == "p1" else -1)
        theirs = self.foe.battles.get(battle.battle_tag)
        for _ in range(200):
            if theirs is not None and theirs.last_request.get("rqid") == want:
                break
            await asyncio.sleep(0.01)
        if theirs is None or theirs.last_request.get("rqid") != want:
            return super().choose_move(battle)
        moves = (theirs.last_request.get("active") or [{}])[0].get("moves", [])
        locked = len(moves) == 1 and "maxpp" not in moves[0] and moves[0]["id"] in LOCKED_MOVE
        try:
            b = await sample_states(self.hub, battle, 1, seed=battle.turn)
            side = b.states[0][battle.opponent_role]
            carried = "lockedmove" in ((side["pokemon"][side["active"]] or {}).get("volatiles") or {})
            self.carried += carried
            if carried != locked:
                self.wrong.append((battle.battle_tag, battle.turn, carried, locked))
        except Refusal:
            pass
        return super().choose_move(battle)


async def test_a_lock_the_state_carries_is_the_opponent_s_own(showdown_url):
    """Against the truth: the opponent's request shows its lock, the state must carry it."""
    fmt = "gen4randombattle"
    async with LeafHub() as hub:
        tag = run_id()
        me = LockTruth(hub, **player_kwargs(showdown_url, f"lkt{tag}a", 4, fmt))
        them = MaxBasePowerPlayer(**player_kwargs(showdown_url, f"lkt{tag}b", 4, fmt))
        me.foe = them
        await asyncio.wait_for(me.battle_against(them, n_battles=30), 600)
        assert not me.wrong, me.wrong[:5]
        assert me.carried >= 1, me.carried  # 30 battles of max power with no lock: unlikely


def test_an_actives_forme_is_the_last_change_since_its_switch_in():
    lead = ["|switch|p2a: Aegislash|Aegislash, L84|100/100", "|turn|1"]

    def forme(lines, name="Aegislash", effects=()):
        battle = FakeReplay(lines)
        mon = _active(to_id(name), *effects)
        assert volatiles(mon, "p2", name, Protocol(battle), 9) == {}  # never refused
        return forme_of(Holder(Protocol(battle), "p2", name, mon=mon, gen=9))

    assert forme(lead) is None
    blade = lead + ["|move|p2a: Aegislash|Shadow Ball|p1a: Snorlax",
                    "|-formechange|p2a: Aegislash|Aegislash-Blade||[from] ability: Stance Change", "|turn|2"]
    assert forme(blade) == {"species": "Aegislash-Blade", "permanent": False}
    shield = blade + ["|-formechange|p2a: Aegislash|Aegislash||[from] ability: Stance Change", "|turn|3"]
    assert forme(shield) == {"species": "Aegislash", "permanent": False}
    assert forme(blade + ["|switch|p2a: Aegislash|Aegislash, L84|100/100"]) is None  # it ended with the switch-out
    busted = ["|switch|p2a: Mimikyu|Mimikyu, L80, F|100/100", "|-activate|p2a: Mimikyu|ability: Disguise",
              "|detailschange|p2a: Mimikyu|Mimikyu-Busted, L80, F"]
    assert forme(busted, "Mimikyu", ("DISGUISE",)) == {"species": "Mimikyu-Busted", "permanent": True}
    frozen = ["|switch|p2a: Shaymin|Shaymin-Sky, L80|100/100", "|-status|p2a: Shaymin|frz",
              "|detailschange|p2a: Shaymin|Shaymin, L80", "|-formechange|p2a: Shaymin|Shaymin|[msg]"]
    assert forme(frozen, "Shaymin") == {"species": "Shaymin", "permanent": True}  # a status's change stays


def test_battle_bonds_once_a_battle_boost_is_refused():
    # gen 9's Battle Bond boosts once a battle (Showdown's bondTriggered): not carried
    with pytest.raises(Refusal) as r:
        volatiles(_active("greninjabond", "BATTLE_BOND"), "p2", "Greninja", Protocol(FakeReplay([])), 9)
    assert r.value.reason == "volatile:battle_bond"


def test_a_permanent_forme_stays_on_the_bench():
    # Mimikyu busted while active, then switched out: poke-env keeps "mimikyu" until it is back,
    # the drawn set must be the busted forme's (its Disguise is gone)
    from poke_env.battle import Pokemon
    battle = FakeOpponents("mimikyu")
    battle.opponent_team = {"p2: Mimikyu": Pokemon(gen=9, species="mimikyu"),
                            "p2: Gholdengo": Pokemon(gen=9, species="gholdengo")}
    battle._replay_data = [line.split("|") for line in [
        "|switch|p2a: Mimikyu|Mimikyu, L80, F|100/100", "|-activate|p2a: Mimikyu|ability: Disguise",
        "|detailschange|p2a: Mimikyu|Mimikyu-Busted, L80, F", "|switch|p2a: Gholdengo|Gholdengo, L77|100/100"]]

    def species():
        return {k["name"]: k["species"] for k, *_ in known_opponents(battle, Protocol(battle))}

    assert species() == {"Mimikyu": "mimikyubusted", "Gholdengo": "gholdengo"}
    # back on the field its switch-in shows the forme, which poke-env then keeps as its species
    battle._replay_data.append("|switch|p2a: Mimikyu|Mimikyu-Busted, L80, F|80/100".split("|"))
    battle.opponent_team["p2: Mimikyu"] = Pokemon(gen=9, species="mimikyubusted")
    assert species()["Mimikyu"] == "mimikyubusted"


def test_slow_start_counts_the_turn_ends_it_was_in_for_from_their_start():
    lead = ["|switch|p2a: Regigigas|Regigigas, L84|100/100", "|-start|p2a: Regigigas|ability: Slow Start", "|turn|1"]
    mon = _active("regigigas", "SLOW_START")

    def state(lines):
        return ability_state(mon, "p2", "Regigigas", Protocol(FakeReplay(lines)))

    assert state(lead) == {"counter": 5}
    assert state(lead + ["|upkeep|", "|turn|2", "|upkeep|", "|turn|3"]) == {"counter": 3}
    # switched in during turn 4: that turn's end does not count (it was not in from the turn's start)
    mid = ["|turn|4"] + lead[:2] + ["|upkeep|", "|turn|5"]
    assert state(mid) == {"counter": 5}
    assert state(mid + ["|upkeep|", "|turn|6"]) == {"counter": 4}
    # its end: nothing left (a built start would begin it again at 5)
    mon._effects = {}
    assert state(mid + ["|upkeep|", "|-end|p2a: Regigigas|Slow Start", "|turn|6"]) == {"counter": 0}
    assert state(["|switch|p2a: Snorlax|Snorlax|100/100", "|turn|1"]) is None
    # its ability back during turn 4 (Neutralizing Gas gone), in since turn 1: turn 4's end counts
    back = lead + ["|upkeep|", "|turn|2", "|upkeep|", "|turn|3", "|upkeep|", "|turn|4",
                   "|-start|p2a: Regigigas|ability: Slow Start", "|upkeep|", "|turn|5"]
    assert state(back) == {"counter": 4}


@pytest.mark.parametrize("turns, clay", [(7, True), (5, True), (4, False)])
def test_a_screen_that_outlasted_five_turns_was_set_with_light_clay(turns, clay):
    # Showdown: a screen lasts 5 turns, 8 with the setter's Light Clay; a state drawn without it
    # could not be built ("no draw of its timer outlasts 7 turns seen")
    from poke_env.battle import SideCondition
    battle = FakeOpponents("ninetalesalola")
    battle.weather, battle.fields = {}, {}
    battle.opponent_side_conditions = {SideCondition.AURORA_VEIL: 1}
    lines = ["|turn|1", "|move|p2a: ninetalesalola|Aurora Veil|p2a: ninetalesalola",
             "|-sidestart|p2: them|move: Aurora Veil"] + [f"|turn|{t}" for t in range(2, 2 + turns)]
    battle._replay_data = [line.split("|") for line in lines]
    [(k, *_)] = known_opponents(battle, Protocol(battle))
    assert k["item"] == ("lightclay" if clay else None)
    # set by another Pokémon of theirs: nothing follows for this one
    battle._replay_data[1] = "|move|p2a: grimmsnarl|Aurora Veil|p2a: grimmsnarl".split("|")
    [(k, *_)] = known_opponents(battle, Protocol(battle))
    assert k["item"] is None
