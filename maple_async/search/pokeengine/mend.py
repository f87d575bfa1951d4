"""The one change this project makes to poke-engine's source before cargo builds it.

poke-engine 0.0.48 ends a turn (gens 4-9, ``src/genx/generate_instructions.rs``) with status
damage first, then items and abilities, then Leech Seed. Showdown heals with Leftovers and Black
Sludge first, then saps with Leech Seed, then deals poison and burn damage (gen 9: residual
orders 5, 8, 9-10; gen 4: each Pokémon its three in turn, sub-orders 4, 5, 6, the faster
Pokémon first). The order decides the turn whenever a Pokémon at full HP holds Leftovers (the
engine's heal came after the damage, so it never lost the HP) and whenever poison would faint
a Pokémon its Leftovers would have kept. The mend moves those three steps, in Showdown's order,
before the remaining items (Toxic Orb and Flame Orb still come after status damage, as in
Showdown) and abilities; in gen 4 each Pokémon runs all of them in turn (its Bad Dreams before
the slower foe's Leftovers), in the order of speed Showdown takes at the end of the turn (before
the weather, Tailwind or Trick Room count down; Trick Room reverses it). It also makes Black
Sludge on a Pokémon that is not Poison take an eighth of its max HP, as Showdown does (the
engine took a sixteenth, and at most the HP it was missing). Measured on the agreement corpus
in docs/search.md.

It is applied as text, each anchor checked to occur once, so a source that differs from the
pinned one fails the build by name instead of building something else.
"""

from __future__ import annotations

from pathlib import Path

# The mend's revision: part of the build folder's name, so a changed mend builds again.
REVISION = "m2"
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


MENDS = {FILE: mended, ITEMS_FILE: mended_items}  # each file mended, and how


def apply(src: Path) -> None:
    """Mend an unpacked poke-engine source folder in place."""
    for name, fn in MENDS.items():
        path = Path(src) / name
        path.write_text(fn(path.read_text()))
