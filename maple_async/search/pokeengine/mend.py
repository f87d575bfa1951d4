"""The changes this project makes to poke-engine's source before cargo builds it.

* **The end of the turn** (``src/genx/generate_instructions.rs``). poke-engine 0.0.48 ends a
  turn (gens 4-9) with status damage first, then items and abilities, then Leech Seed. Showdown
  heals with Leftovers and Black Sludge first, then saps with Leech Seed, then deals poison and
  burn damage (gen 9: residual orders 5, 8, 9-10; gen 4: each Pokémon its three in turn,
  sub-orders 4, 5, 6, the faster Pokémon first). The order decides the turn whenever a Pokémon
  at full HP holds Leftovers (the engine's heal came after the damage, so it never lost the HP)
  and whenever poison would faint a Pokémon its Leftovers would have kept. The mend moves those
  three steps, in Showdown's order, before the remaining items (Toxic Orb and Flame Orb still
  come after status damage, as in Showdown) and abilities; in gen 4 each Pokémon runs all of
  them in turn (its Bad Dreams before the slower foe's Leftovers), in the order of speed
  Showdown takes at the end of the turn (before the weather, Tailwind or Trick Room count down;
  Trick Room reverses it). A side with no Pokémon left has ended the battle: no end of turn.
* **Black Sludge** on a Pokémon that is not Poison takes an eighth of its max HP, as Showdown
  does (the engine took a sixteenth, and at most the HP it was missing); **Heal Block** stops
  Leftovers and Black Sludge healing in gens 5-9 (``items.rs``).
* **Multi-hit moves** branch on their hit count as Showdown draws it (2-5 hits: 35/35/15/15%,
  gen 4 3/8, 3/8, 1/8, 1/8; Loaded Dice 4 or 5; Triple Axel and Population Bomb: until a hit
  misses; Triple Axel's hits 20, 40 and 60 base power); the engine hit 3 times always.
* **Speed ties**: the second order plays the choices as they were, not as the first order's
  move left them (a defender's Multiscale counted twice, a Bolt Beak moving first did not double).
* **Tera Shell** (``abilities.rs``): at full HP every damaging move is not very effective, until
  Terapagos terastallizes (on the base power: items still read the move's own effectiveness).

Measured on the agreement corpus in docs/search.md.

It is applied as text, each anchor checked to occur once, so a source that differs from the
pinned one fails the build by name instead of building something else.
"""

from __future__ import annotations

from pathlib import Path

# The mend's revision: part of the build folder's name, so a changed mend builds again.
REVISION = "m3"
FILE = Path("src") / "genx" / "generate_instructions.rs"
ITEMS_FILE = Path("src") / "genx" / "items.rs"
START = "fn add_end_of_turn_instructions(\n"
SIDES = "    let sides = [first_move_side, &first_move_side.get_other_side()];\n"
ANCHORS = ("    // status damage\n", "    // ability/item end-of-turn effects\n", "    // leechseed sap\n",
           "    // volatile statuses\n")
LOOP = "    for side_ref in sides {\n"
ONE_GROUP = "    for &side_ref in group.iter() {\n"
ITEM_CALL = "        item_end_of_turn(state, side_ref, &mut incoming_instructions);\n"
HEALS = "(active_pkmn.item == Items::LEFTOVERS || active_pkmn.item == Items::BLACKSLUDGE)"
SLUDGE = """                let damage_amount =
                    cmp::min(active_pkmn.maxhp / 16, active_pkmn.maxhp - active_pkmn.hp);
"""
SLUDGE_MENDED = f"""                // [maple-async mend {REVISION}] Showdown: an eighth of the max HP
                let damage_amount = cmp::min(active_pkmn.maxhp / 8, active_pkmn.hp);
"""

GROUPS = f'''    // [maple-async mend {REVISION}] the order of the residuals: in gen 4 each Pokemon all of its
    // own in turn, the faster first by the speed before anything below counts down (Trick Room
    // reverses it); later generations each step for both
    #[cfg(feature = "gen4")]
    let groups: Vec<Vec<&SideReference>> = {{
        let one = get_effective_speed(state, &SideReference::SideOne);
        let two = get_effective_speed(state, &SideReference::SideTwo);
        let one_first = if one == two {{
            *sides[0] == SideReference::SideOne
        }} else {{
            (one > two) != state.trick_room.active
        }};
        if one_first {{
            vec![vec![&SideReference::SideOne], vec![&SideReference::SideTwo]]
        }} else {{
            vec![vec![&SideReference::SideTwo], vec![&SideReference::SideOne]]
        }}
    }};
    #[cfg(not(feature = "gen4"))]
    let groups: Vec<Vec<&SideReference>> = vec![sides.to_vec()];
'''

RESIDUALS = f'''    // [maple-async mend {REVISION}] Leftovers and Black Sludge, Leech Seed, then status damage, in
    // Showdown's residual order; then the other items (Toxic Orb, Flame Orb, berries) and
    // abilities (gen 4: each Pokemon all of them in turn)
    for group in groups.iter() {{
    for &side_ref in group.iter() {{
        let active_pkmn = state.get_side(side_ref).get_active();
        if active_pkmn.hp > 0 && {HEALS} {{
            item_end_of_turn(state, side_ref, &mut incoming_instructions);
        }}
    }}
'''


class MendError(RuntimeError):
    pass


def _once(text: str, anchor: str, where: Path, start: int = 0) -> int:
    i = text.find(anchor, start)
    if i < 0 or text.find(anchor, i + 1) >= 0 and start == 0:
        raise MendError(f"{where}: {anchor.strip()!r} is not where poke-engine 0.0.48 has it")
    return i


def mended(source: str) -> str:
    """The end-of-turn function's text with the residual steps in Showdown's order."""
    begin = _once(source, START, FILE)
    sides_at = _once(source, SIDES, FILE, begin)
    at = [_once(source, a, FILE) for a in ANCHORS]
    if at != sorted(at) or at[0] < sides_at:
        raise MendError(f"{FILE}: the end-of-turn steps are not where poke-engine 0.0.48 has them")
    status, items, seed = source[at[0]:at[1]], source[at[1]:at[2]], source[at[2]:at[3]]
    if not (status.count(LOOP) == items.count(LOOP) == seed.count(LOOP) == 1 and items.count(ITEM_CALL) == 1):
        raise MendError(f"{FILE}: an end-of-turn step is not the loop poke-engine 0.0.48 has")
    items = items.replace(ITEM_CALL, "        let item = state.get_side(side_ref).get_active().item;\n"
                                     "        if item != Items::LEFTOVERS && item != Items::BLACKSLUDGE {\n"
                                     "    " + ITEM_CALL + "        }\n")
    in_group = (RESIDUALS + seed.replace(LOOP, ONE_GROUP) + status.replace(LOOP, ONE_GROUP)
                + '    #[cfg(feature = "gen4")]\n    {\n' + items.replace(LOOP, ONE_GROUP) + "    }\n    }\n\n")
    after = '    #[cfg(not(feature = "gen4"))]\n    {\n' + items + "    }\n\n"
    end_sides = sides_at + len(SIDES)
    return (source[:end_sides] + GROUPS + source[end_sides:at[0]] + in_group + after + source[at[3]:])


def mended_items(source: str) -> str:
    """Black Sludge on a Pokémon that is not Poison: an eighth of its max HP."""
    _once(source, SLUDGE, ITEMS_FILE)
    return source.replace(SLUDGE, SLUDGE_MENDED)


HITS_START = "    // start multi-hit\n    let hit_count;\n"
HITS_AFTER_MATCH = ("    let (_attacker_side, defender_side) = state.get_both_sides(&attacking_side);\n"
                    "    let defender_active = defender_side.get_active();\n")
HITS_END = "    combine_duplicate_instructions(&mut final_instructions);\n    return;\n}\n"
HITS_BRANCHES = f"""    // start multi-hit
    // [maple-async mend {REVISION}] a move of 2-5 hits branches on its count as Showdown draws it
    // (gens 5-9: 2 and 3 at 35%, 4 and 5 at 15%; gen 4: 3/8, 3/8, 1/8, 1/8; Loaded Dice: 4 or 5,
    // even; Skill Link: 5; Triple Axel and Population Bomb: until a hit misses); the rest of the
    // move runs once per count. Unmended: 3 hits (4 with Loaded Dice; Population Bomb 6), always
    let attacker_side = state.get_side_immutable(&attacking_side);
    let attacker = attacker_side.get_active_immutable();
    let hit_branches: Vec<(i8, f32)> = match choice.multi_hit() {{
        MultiHitMove::TwoToFiveHits => {{
            if attacker.ability == Abilities::SKILLLINK {{
                vec![(5, 1.0)]
            }} else if attacker.item == Items::LOADEDDICE {{
                vec![(4, 0.5), (5, 0.5)]
            }} else if cfg!(feature = "gen4") {{
                vec![(2, 0.375), (3, 0.375), (4, 0.125), (5, 0.125)]
            }} else {{
                vec![(2, 0.35), (3, 0.35), (4, 0.15), (5, 0.15)]
            }}
        }}
        // each hit after the first checks accuracy, and the move stops at the first miss;
        // Skill Link and Loaded Dice check it once (Loaded Dice: Population Bomb hits 4-10)
        MultiHitMove::TripleAxel | MultiHitMove::PopulationBomb => {{
            let most: i8 = if choice.multi_hit() == MultiHitMove::TripleAxel {{ 3 }} else {{ 10 }};
            if attacker.ability == Abilities::SKILLLINK
                || (attacker.item == Items::LOADEDDICE && most == 3)
            {{
                vec![(most, 1.0)]
            }} else if attacker.item == Items::LOADEDDICE {{
                (4..=10).map(|n| (n, 1.0 / 7.0)).collect()
            }} else {{
                let lens = if attacker.item == Items::WIDELENS {{ 1.1 }} else {{ 1.0 }};
                let p = ((choice.accuracy / 100.0) * lens
                    * boosted_accuracy(attacker_side.accuracy_boost))
                .min(1.0);
                let mut counts = vec![];
                let mut reach = 1.0;
                for n in 1..most {{
                    counts.push((n, reach * (1.0 - p)));
                    reach *= p;
                }}
                counts.push((most, reach));
                counts.retain(|&(_, chance)| chance > 0.0);
                counts
            }}
        }}
        _ => vec![(0, 1.0)],
    }};
    let every_count_instructions = incoming_instructions;
    for (branch_index, &(branch_hits, branch_chance)) in hit_branches.iter().enumerate() {{
    let mut incoming_instructions = every_count_instructions.clone();
    incoming_instructions.update_percentage(branch_chance);
    if branch_index > 0 {{
        // the previous count's moves reversed the state to before these instructions
        state.apply_instructions(&incoming_instructions.instruction_list);
    }}
    let hit_count;
"""
HITS_COUNT = "    let hit_count = if branch_hits > 0 { branch_hits } else { hit_count };\n"
HITS_RUN = "    if incoming_instructions.percentage != 0.0 {\n        run_move(\n"
HITS_AXEL = f"""    // [maple-async mend {REVISION}] Triple Axel's hits are 20, 40 and 60 base power where the engine
    // gives each 40: its n hits deal (n + 1) / 4 of n hits at 40 (the roll that kills stays)
    let axel_scale = if choice.multi_hit() == MultiHitMove::TripleAxel && branch_hits > 0 {{
        (branch_hits as f32 + 1.0) / 4.0
    }} else {{
        1.0
    }};
    let regular_damage = (regular_damage as f32 * axel_scale) as i16;
    let branch_damage = if branch_damage >= state
        .get_side_immutable(&attacking_side.get_other_side())
        .get_active_immutable()
        .hp
    {{
        branch_damage
    }} else {{
        (branch_damage as f32 * axel_scale) as i16
    }};
"""

HEAL_BLOCK_AT = ("    let attacking_side = state.get_side(side_ref);\n"
                 "    let active_pkmn = attacking_side.get_active();\n")
HEAL_BLOCK = (f"    // [maple-async mend {REVISION}] Heal Block stops Leftovers and Black Sludge healing (gen 4's\n"
              "    // blocks only moves that heal, Leech Seed and Wish)\n"
              "    let heal_blocked = cfg!(not(feature = \"gen4\")) && state.get_side(side_ref).volatile_statuses\n"
              "        .contains(&super::state::PokemonVolatileStatus::HEALBLOCK);\n")
SLUDGE_HEALS = "            if active_pkmn.has_type(&PokemonType::POISON) {\n                if active_pkmn.hp < active_pkmn.maxhp {\n"
LEFTOVERS_HEALS = ("        Items::LEFTOVERS => {\n            let attacker = state.get_side(side_ref).get_active();\n"
                   "            if attacker.hp < attacker.maxhp {\n")


def mended_hits(source: str) -> str:
    """A move of 2-5 hits branches on its count, as Showdown draws it."""
    start = _once(source, HITS_START, FILE)
    after_match = _once(source, HITS_AFTER_MATCH, FILE)
    run = _once(source, HITS_RUN, FILE)
    end = _once(source, HITS_END, FILE, after_match)
    if not start < after_match < run < end:
        raise MendError(f"{FILE}: the multi-hit count is not where poke-engine 0.0.48 has it")
    return (source[:start] + HITS_BRANCHES + source[start + len(HITS_START):after_match] + HITS_COUNT
            + source[after_match:run] + HITS_AXEL + source[run:end] + "    }\n" + source[end:])


def mended_heal_block(source: str) -> str:
    """Heal Block stops Leftovers and Black Sludge healing, as in Showdown."""
    for anchor in (HEAL_BLOCK_AT, SLUDGE_HEALS, LEFTOVERS_HEALS):
        _once(source, anchor, ITEMS_FILE)
    return (source.replace(HEAL_BLOCK_AT, HEAL_BLOCK + HEAL_BLOCK_AT)
            .replace(SLUDGE_HEALS, SLUDGE_HEALS.replace("active_pkmn.maxhp {", "active_pkmn.maxhp && !heal_blocked {"))
            .replace(LEFTOVERS_HEALS, LEFTOVERS_HEALS.replace("attacker.maxhp {", "attacker.maxhp && !heal_blocked {")))


END_TURN_SWITCH = "    if state.side_one.force_switch || state.side_two.force_switch {\n        return;\n    }\n"
BATTLE_OVER = (f"    // [maple-async mend {REVISION}] a side with no Pokemon left ends the battle: Showdown plays\n"
               "    // nothing after it, no residual (a burn after the last foe fainted)\n"
               "    if state.battle_is_over() != 0.0 {\n        return;\n    }\n")


def mended_battle_end(source: str) -> str:
    """No end of turn once a side has no Pokémon left."""
    begin = _once(source, START, FILE)
    at = _once(source, END_TURN_SWITCH, FILE, begin)
    return source[:at] + BATTLE_OVER + source[at:]


TIE_ONE_FIRST = "            // side_one moves first\n"
TIE_TWO_FIRST = "            // side_two moves first\n            let mut side_two_moves_first_si"
TIE_KEEP = (f"            // [maple-async mend {REVISION}] each order of a speed tie plays the choices as they\n"
            "            // were: the first order's moves change them in place (its Multiscale, Technician,\n"
            "            // Tera Shell would count twice in the second)\n"
            "            let (tie_side_one_choice, tie_side_two_choice) =\n"
            "                (side_one_choice.clone(), side_two_choice.clone());\n")
TIE_RESTORE = ("            let mut side_one_choice = tie_side_one_choice;\n"
               "            let mut side_two_choice = tie_side_two_choice;\n")


def mended_speed_tie(source: str) -> str:
    """A speed tie's second order plays the choices unchanged by the first."""
    one = _once(source, TIE_ONE_FIRST, FILE)
    two = _once(source, TIE_TWO_FIRST, FILE)
    if not one < two:
        raise MendError(f"{FILE}: a speed tie's two orders are not where poke-engine 0.0.48 has them")
    return source[:one] + TIE_KEEP + source[one:two] + TIE_RESTORE + source[two:]


ABILITIES_FILE = Path("src") / "genx" / "abilities.rs"
MULTISCALE = ("        Abilities::MULTISCALE => {\n            if target_pkmn.hp == target_pkmn.maxhp {\n"
              "                attacker_choice.base_power /= 2.0;\n")
TERA_SHELL = f"""        // [maple-async mend {REVISION}] Tera Shell: at full HP every damaging move it is not immune
        // to is not very effective (Showdown's onEffectiveness: -1, whatever it was); a Terapagos
        // that terastallized is Terapagos-Stellar, without it. Approximated on the base power:
        // items that read the effectiveness (Expert Belt, resist berries) still see it unchanged
        Abilities::TERASHELL => {{
            if target_pkmn.hp == target_pkmn.maxhp
                && !target_pkmn.terastallized
                && attacker_choice.category != MoveCategory::Status
                && attacker_choice.move_id != Choices::STRUGGLE
            {{
                let effectiveness = type_effectiveness_modifier(&attacker_choice.move_type, &target_pkmn);
                if effectiveness > 0.0 {{
                    attacker_choice.base_power *= 0.5 / effectiveness;
                }}
            }}
        }}
"""


def mended_tera_shell(source: str) -> str:
    """Tera Shell, which the engine lists but does not play."""
    _once(source, MULTISCALE, ABILITIES_FILE)
    return source.replace(MULTISCALE, TERA_SHELL + MULTISCALE)


# each file mended, and how, in order
MENDS = {FILE: (mended, mended_hits, mended_battle_end, mended_speed_tie), ITEMS_FILE: (mended_items, mended_heal_block),
         ABILITIES_FILE: (mended_tera_shell,)}


def apply(src: Path) -> None:
    """Mend an unpacked poke-engine source folder in place."""
    for name, fns in MENDS.items():
        path = Path(src) / name
        text = path.read_text()
        for fn in fns:
            text = fn(text)
        path.write_text(text)
