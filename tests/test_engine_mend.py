"""The mend of poke-engine's source (the end of a turn in Showdown's order): as text on a
miniature of the function it changes, and in the built engine on the turns it decides."""

import pytest

from maple_async.search.pokeengine import build, mend
from maple_async.search.pokeengine.pool import EnginePool

MINIATURE = """fn add_end_of_turn_instructions(
) {
    if state.side_one.force_switch || state.side_two.force_switch {
        return;
    }
    let sides = [first_move_side, &first_move_side.get_other_side()];
    // status damage
    for side_ref in sides {
        status(side_ref);
    }

    // ability/item end-of-turn effects
    for side_ref in sides {
        item_end_of_turn(state, side_ref, &mut incoming_instructions);
        ability_end_of_turn(state, side_ref, &mut incoming_instructions);
    }

    // leechseed sap
    for side_ref in sides {
        sap(side_ref);
    }

    // volatile statuses
    for side_ref in sides {
        volatiles(side_ref);
    }
}
"""


def test_the_mend_puts_leftovers_leech_seed_and_status_before_the_other_items():
    out = mend.mended(MINIATURE)
    order = [out.index(x) for x in ("state.trick_room.active", "Items::LEFTOVERS", "sap(side_ref)",
                                    "status(side_ref)", 'feature = "gen4")]\n    {', "ability_end_of_turn",
                                    'not(feature = "gen4"))]\n    {', "volatiles(side_ref)")]
    assert order == sorted(order)
    # gen 4: each Pokémon's group runs its residuals, its other items and abilities; later
    # generations run the other items and abilities for both after the group
    assert out.count("for &side_ref in group.iter()") == 4 and out.count("ability_end_of_turn") == 2
    # Toxic Orb, Flame Orb stay after status damage and Leftovers is not run twice
    assert out.count("if item != Items::LEFTOVERS && item != Items::BLACKSLUDGE") == 2


@pytest.mark.parametrize("broken", ["    // leechseed sap\n", "    for side_ref in sides {\n        sap",
                                    "    let sides = [first_move_side, &first_move_side.get_other_side()];\n"])
def test_a_source_that_is_not_the_pinned_one_fails_by_name(broken):
    with pytest.raises(mend.MendError, match="generate_instructions.rs"):
        mend.mended(MINIATURE.replace(broken, "    // something else\n", 1))

# the part of a move's turn the multi-hit mend changes
MOVE_MINIATURE = (mend.HITS_START + "    match choice.multi_hit() {}\n" + mend.HITS_AFTER_MATCH + mend.HITS_RUN
                  + "        );\n    }\n" + mend.HITS_END
                  + mend.TIE_ONE_FIRST + mend.TIE_TWO_FIRST + " = vec![];\n")


def _mon(id_, item, hp, status="none", moves=("protect",)):
    return {"id": id_, "level": 80, "types": ("normal", "typeless"), "hp": hp, "maxhp": 320, "attack": 200,
            "defense": 200, "special_attack": 200, "special_defense": 200, "speed": 200, "item": item,
            "status": status, "moves": [{"id": m, "pp": 16, "disabled": False} for m in moves]}


async def _turn(gen: int, spec: dict, ours: str, theirs: str) -> dict:
    """The engine's outcomes of one joint choice from ``spec`` (the pool's reply)."""
    async with EnginePool(gen, workers=1) as pool:
        return await pool.request({"op": "instructions", "state": spec, "pairs": [[ours, theirs]]}, 5.0)


@pytest.mark.parametrize("gen", [4, 9])
async def test_a_poisoned_pokemon_at_full_hp_loses_its_poison_damage_leftovers_cannot_heal_first(gen):
    # Showdown: Leftovers at full HP heals nothing, then Toxic takes 1/16. Unmended, the engine
    # took the damage first and Leftovers healed it back: no loss.
    build.ensure(gen)
    spec = {"side_one": {"pokemon": [_mon("snorlax", "leftovers", 320, "toxic")]},
            "side_two": {"pokemon": [_mon("blissey", "none", 320)]}}
    r = await _turn(gen, spec, "protect", "protect")
    assert {after["side_one"]["pokemon"][0]["hp"] for _, after in r["outcomes"][0]} == {320 - 20}


async def test_in_gen_4_each_pokemon_ends_its_turn_in_turn_the_faster_first():
    # Showdown gen 4: the faster Jumpluff heals by Leftovers (310 -> 320, full) and takes Toxic
    # (-40), then the slower seeded Snorlax's Leech Seed heals it (+20): 300. Step by step for
    # both (gens 5-9) the sap finds it full: 280; unmended (damage, Leftovers, sap): 310.
    build.ensure(4)
    fast = {**_mon("jumpluff", "leftovers", 310, "toxic"), "speed": 300}
    seeded = {**_mon("snorlax", "none", 160), "maxhp": 160}
    spec = {"side_one": {"pokemon": [fast], "side_conditions": {"toxic_count": 1}},
            "side_two": {"pokemon": [seeded], "volatile_statuses": ["LEECHSEED"]}}
    r = await _turn(4, spec, "protect", "protect")
    assert {after["side_one"]["pokemon"][0]["hp"] for _, after in r["outcomes"][0]} == {300}


@pytest.mark.parametrize("text, mended", [(MINIATURE, True), ("fn main() {}\n", False)])
def test_the_pinned_sdist_is_unpacked_and_mended_once_or_the_build_stops_by_name(tmp_path, text, mended):
    import io
    import tarfile
    sdists = tmp_path / "sdist"
    sdists.mkdir()
    with tarfile.open(sdists / f"poke_engine-{build.ENGINE_VERSION}.tar.gz", "w:gz") as tar:
        data = (text + MOVE_MINIATURE).encode()
        items = mend.HEAL_BLOCK_AT + mend.SLUDGE_HEALS + mend.SLUDGE + mend.LEFTOVERS_HEALS
        for name, body in ((mend.FILE, data), (mend.ITEMS_FILE, items.encode()),
                           (mend.ABILITIES_FILE, mend.MULTISCALE.encode())):
            info = tarfile.TarInfo(f"poke_engine-{build.ENGINE_VERSION}/{name}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    if not mended:
        with pytest.raises(build.EngineUnavailable, match="cannot be mended"):
            build.mended_source(tmp_path, {})
        assert not (tmp_path / "src").exists()
        return
    src = build.mended_source(tmp_path, {})
    assert src == tmp_path / "src" and "[maple-async mend" in (src / mend.FILE).read_text()
    (sdists / f"poke_engine-{build.ENGINE_VERSION}.tar.gz").unlink()  # once: not read again
    assert build.mended_source(tmp_path, {}) == src


def test_black_sludge_mended_to_an_eighth_of_the_max_hp():
    assert "maxhp / 8, active_pkmn.hp" in mend.mended_items("x\n" + mend.SLUDGE)
    with pytest.raises(mend.MendError, match="items.rs"):
        mend.mended_items("fn nothing() {}\n")


async def test_in_gen_4_trick_room_reverses_the_order_pokemon_end_their_turn_in():
    # The same turn as above under Trick Room: the slower Snorlax first, its sap finds Jumpluff
    # at 310 (+10, full), then Jumpluff: Leftovers (full), Toxic: 280.
    build.ensure(4)
    fast = {**_mon("jumpluff", "leftovers", 310, "toxic"), "speed": 300}
    seeded = {**_mon("snorlax", "none", 160), "maxhp": 160}
    spec = {"side_one": {"pokemon": [fast], "side_conditions": {"toxic_count": 1}},
            "side_two": {"pokemon": [seeded], "volatile_statuses": ["LEECHSEED"]},
            "trick_room": True, "trick_room_turns_remaining": 3}
    r = await _turn(4, spec, "protect", "protect")
    assert {after["side_one"]["pokemon"][0]["hp"] for _, after in r["outcomes"][0]} == {280}


async def test_in_gen_4_a_faster_bad_dreams_comes_before_the_slower_foes_leftovers():
    # Showdown gen 4: Darkrai (faster) deals an eighth to the sleeping Snorlax at full HP (-40),
    # then Snorlax's Leftovers heals 20: 300. Leftovers first for both would leave 280.
    build.ensure(4)
    darkrai = {**_mon("darkrai", "none", 320), "speed": 300, "ability": "baddreams"}
    snorlax = {**_mon("snorlax", "leftovers", 320, "sleep"), "sleep_turns": 0}
    spec = {"side_one": {"pokemon": [darkrai]}, "side_two": {"pokemon": [snorlax]}}
    r = await _turn(4, spec, "protect", "protect")
    # (Snorlax may wake and act, which changes nothing here: Protect)
    assert {after["side_two"]["pokemon"][0]["hp"] for _, after in r["outcomes"][0]} == {300}


async def test_black_sludge_on_a_pokemon_that_is_not_poison_takes_an_eighth():
    build.ensure(9)
    spec = {"side_one": {"pokemon": [_mon("snorlax", "blacksludge", 320)]},
            "side_two": {"pokemon": [_mon("blissey", "none", 320)]}}
    r = await _turn(9, spec, "protect", "protect")
    assert {after["side_one"]["pokemon"][0]["hp"] for _, after in r["outcomes"][0]} == {280}


def _hit_shares(outcomes, side="side_two"):
    """The chance of each HP the defender ends on, the most hits (lowest HP) last."""
    shares: dict = {}
    for p, after in outcomes:
        hp = after[side]["pokemon"][0]["hp"]
        shares[hp] = shares.get(hp, 0.0) + p / 100.0
    return [round(shares[hp], 4) for hp in sorted(shares, reverse=True)]


@pytest.mark.parametrize("gen, item, ability, shares", [
    (9, "none", "none", [0.35, 0.35, 0.15, 0.15]),           # Showdown gens 5-9: [2x7, 3x7, 4x3, 5x3]
    (9, "loadeddice", "none", [0.5, 0.5]),                   # fewer than 4 becomes 5 - random(2)
    (9, "none", "skilllink", [1.0]),
    (4, "none", "none", [0.375, 0.375, 0.125, 0.125]),       # gen 4: [2, 2, 2, 3, 3, 3, 4, 5]
])
async def test_a_move_of_2_to_5_hits_branches_on_its_count_as_showdown_draws_it(gen, item, ability, shares):
    # Unmended, the engine hit 3 times always (4 with Loaded Dice). Shell Armor: no crit branch.
    build.ensure(gen)
    attacker = {**_mon("cloyster", item, 300, moves=("bulletseed",)), "ability": ability, "attack": 100}
    wall = {**_mon("blissey", "none", 700, moves=("splash",)), "maxhp": 700, "defense": 400, "ability": "shellarmor"}
    spec = {"side_one": {"pokemon": [attacker]}, "side_two": {"pokemon": [wall]}}
    r = await _turn(gen, spec, "bulletseed", "splash")
    got = _hit_shares(r["outcomes"][0])
    assert got == pytest.approx(shares, abs=1e-3), got
    # and each count's damage is that many hits: the drops stand as 2 : 3 : 4 : 5 (or 4 : 5)
    drops = sorted({700 - after["side_two"]["pokemon"][0]["hp"] for _, after in r["outcomes"][0]})
    first = {1.0: 5, 0.5: 4}.get(shares[0], 2)
    assert [d / drops[0] * first for d in drops] == pytest.approx(list(range(first, first + len(drops))), abs=0.05)


@pytest.mark.parametrize("gen, healed", [(9, 0), (4, 20)])
@pytest.mark.parametrize("item, types", [("leftovers", ("normal", "typeless")), ("blacksludge", ("poison", "typeless"))])
async def test_heal_block_stops_leftovers_and_black_sludge_healing(item, types, gen, healed):
    # Showdown: Heal Block's onTryHeal stops the item's heal (Psychic Noise, gen 9); gen 4's
    # Heal Block blocks only moves that heal, Leech Seed and Wish (mods/gen4), not items
    build.ensure(gen)
    mon = {**_mon("muk", item, 200), "types": types}
    spec = {"side_one": {"pokemon": [mon], "volatile_statuses": ["HEALBLOCK"]},
            "side_two": {"pokemon": [_mon("blissey", "none", 320, moves=("splash",))]}}
    r = await _turn(gen, spec, "protect", "splash")
    assert {after["side_one"]["pokemon"][0]["hp"] for _, after in r["outcomes"][0]} == {200 + healed}


@pytest.mark.parametrize("move, item, shares", [
    ("tripleaxel", "none", [0.1, 0.09, 0.081, 0.729]),  # a miss; then each further hit at 90%, to a miss
    ("tripleaxel", "loadeddice", [0.1, 0.9]),           # Loaded Dice: accuracy checked once
    ("populationbomb", "none", [0.1] + [0.9 ** k * 0.1 for k in range(1, 10)] + [0.9 ** 10]),
])
async def test_triple_axel_and_population_bomb_hit_until_one_misses(move, item, shares):
    build.ensure(9)
    attacker = {**_mon("weavile", item, 300, moves=(move,)), "attack": 100}
    wall = {**_mon("blissey", "none", 700, moves=("splash",)), "maxhp": 700, "defense": 400, "ability": "shellarmor"}
    spec = {"side_one": {"pokemon": [attacker]}, "side_two": {"pokemon": [wall]}}
    r = await _turn(9, spec, move, "splash")
    assert _hit_shares(r["outcomes"][0]) == pytest.approx(shares, abs=1e-3)


async def test_triple_axel_s_hits_grow_20_40_60():
    # Showdown: basePowerCallback 20 * hit, so 1, 2 and 3 hits deal about 1 : 3 : 6
    build.ensure(9)
    attacker = {**_mon("weavile", "none", 300, moves=("tripleaxel",)), "attack": 300}
    wall = {**_mon("blissey", "none", 700, moves=("splash",)), "maxhp": 700, "defense": 100, "ability": "shellarmor"}
    spec = {"side_one": {"pokemon": [attacker]}, "side_two": {"pokemon": [wall]}}
    r = await _turn(9, spec, "tripleaxel", "splash")
    drops = sorted({700 - a["side_two"]["pokemon"][0]["hp"] for _, a in r["outcomes"][0]} - {0})
    assert len(drops) == 3 and [d / drops[2] for d in drops] == pytest.approx([1 / 6, 1 / 2, 1], abs=0.04), drops


@pytest.mark.parametrize("gen", [4, 9])
async def test_no_end_of_turn_once_the_last_foe_has_fainted(gen):
    # Showdown ends the battle at the faint: the burn never hurts the winner. Unmended: -1/16
    # (gen 4: 1/8).
    build.ensure(gen)
    ours = {**_mon("snorlax", "none", 200, "burn", moves=("tackle",)), "speed": 300}
    last = {**_mon("blissey", "none", 1, moves=("splash",)), "speed": 100}
    spec = {"side_one": {"pokemon": [ours]}, "side_two": {"pokemon": [last]}}
    r = await _turn(gen, spec, "tackle", "splash")
    assert {(a["side_one"]["pokemon"][0]["hp"], a["side_two"]["pokemon"][0]["hp"]) for _, a in r["outcomes"][0]} == {(200, 0)}


@pytest.mark.parametrize("fn, where", [(mend.mended_hits, "generate_instructions.rs"),
                                       (mend.mended_battle_end, "generate_instructions.rs"),
                                       (mend.mended_speed_tie, "generate_instructions.rs"),
                                       (mend.mended_tera_shell, "abilities.rs"),
                                       (mend.mended_heal_block, "items.rs")])
def test_each_mend_fails_by_name_on_a_source_that_is_not_the_pinned_one(fn, where):
    with pytest.raises(mend.MendError, match=where):
        fn("fn nothing() {}\n")


async def test_tera_shell_at_full_hp_makes_every_damaging_move_not_very_effective():
    # Showdown: Terapagos-Terastal at full HP takes Close Combat (2x on Normal) at 0.5x; below
    # full HP the move is super effective again. Unmended, Tera Shell did nothing.
    build.ensure(9)
    drops = {}
    for ability in ("terashell", "none"):
        for hp in (700, 699):
            wall = {**_mon("terapagosterastal", "none", hp, moves=("splash",)), "maxhp": 700, "defense": 400,
                    "ability": ability}
            attacker = {**_mon("conkeldurr", "none", 300, moves=("closecombat",)), "attack": 150}
            spec = {"side_one": {"pokemon": [attacker]}, "side_two": {"pokemon": [wall]}}
            r = await _turn(9, spec, "closecombat", "splash")
            drops[ability, hp] = sum(p / 100 * (hp - a["side_two"]["pokemon"][0]["hp"]) for p, a in r["outcomes"][0])
    assert drops["terashell", 700] / drops["none", 700] == pytest.approx(0.25, abs=0.03)
    assert drops["terashell", 699] == pytest.approx(drops["none", 699], rel=0.01)
    # terastallized, it is Terapagos-Stellar, without Tera Shell (its tera type kept Normal here)
    wall = {**_mon("terapagosterastal", "none", 700, moves=("splash",)), "maxhp": 700, "defense": 400,
            "ability": "terashell", "terastallized": True, "tera_type": "normal"}
    spec = {"side_one": {"pokemon": [attacker]}, "side_two": {"pokemon": [wall]}}
    r = await _turn(9, spec, "closecombat", "splash")
    tera = sum(p / 100 * (700 - a["side_two"]["pokemon"][0]["hp"]) for p, a in r["outcomes"][0])
    assert tera == pytest.approx(drops["none", 700], rel=0.01)


async def test_a_speed_tie_plays_both_orders_with_the_same_moves():
    # Unmended, the order where the slower-listed side moved first played choices the first
    # order had already changed: Multiscale halved the damage twice.
    build.ensure(9)
    lands = {}
    for speed in (300, 200):  # faster, then tied
        wall = {**_mon("dragonite", "none", 700, moves=("splash",)), "maxhp": 700, "defense": 400,
                "ability": "multiscale"}
        attacker = {**_mon("conkeldurr", "none", 300, moves=("closecombat",)), "attack": 150, "speed": speed}
        spec = {"side_one": {"pokemon": [attacker]}, "side_two": {"pokemon": [wall]}}
        r = await _turn(9, spec, "closecombat", "splash")
        lands[speed] = {a["side_two"]["pokemon"][0]["hp"] for _, a in r["outcomes"][0]}
    assert lands[200] == lands[300] and len(lands[300]) == 2  # a roll and a crit


async def test_in_a_speed_tie_bolt_beak_doubles_in_the_order_it_moves_first():
    # Unmended, the first order (side one first) left side two's choice marked as moving second,
    # so in the second order its Bolt Beak did not double though it moved first.
    build.ensure(9)
    ours = {**_mon("snorlax", "none", 320, moves=("splash",)), "speed": 200, "ability": "shellarmor"}
    theirs = {**_mon("dracozolt", "none", 320, moves=("boltbeak",)), "speed": 200}
    spec = {"side_one": {"pokemon": [ours]}, "side_two": {"pokemon": [theirs]}}
    r = await _turn(9, spec, "splash", "boltbeak")
    shares = _hit_shares(r["outcomes"][0], side="side_one")  # by HP left: the doubled hit last
    assert shares == pytest.approx([0.5, 0.5], abs=0.01), shares
