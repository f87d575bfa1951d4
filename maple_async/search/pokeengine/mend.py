"""The one change this project makes to poke-engine's source before cargo builds it.

poke-engine 0.0.48 ends a turn (gens 4-9, ``src/genx/generate_instructions.rs``) with status
damage first, then items and abilities, then Leech Seed. Showdown heals with Leftovers and Black
Sludge first, then saps with Leech Seed, then deals poison and burn damage (gen 9: residual
orders 5, 8, 9-10; gen 4: each Pokémon its three in turn, sub-orders 4, 5, 6, the faster
Pokémon first). The order decides the turn whenever a Pokémon at full HP holds Leftovers (the
engine's heal came after the damage, so it never lost the HP) and whenever poison would faint
a Pokémon its Leftovers would have kept. The mend moves those three steps, in Showdown's order,
before the remaining items (Toxic Orb and Flame Orb still come after status damage, as in
Showdown) and abilities. Measured on the agreement corpus in docs/search.md.

It is applied as text, each anchor checked to occur once, so a source that differs from the
pinned one fails the build by name instead of building something else.
"""

from __future__ import annotations

from pathlib import Path

# The mend's revision: part of the build folder's name, so a changed mend builds again.
REVISION = "m1"
FILE = Path("src") / "genx" / "generate_instructions.rs"
ANCHORS = ("    // status damage\n", "    // ability/item end-of-turn effects\n", "    // leechseed sap\n",
           "    // volatile statuses\n")
LOOP = "    for side_ref in sides {\n"
ITEM_CALL = "        item_end_of_turn(state, side_ref, &mut incoming_instructions);\n"
HEALS = "(active_pkmn.item == Items::LEFTOVERS || active_pkmn.item == Items::BLACKSLUDGE)"

RESIDUALS = f'''    // [maple-async mend {REVISION}] Leftovers and Black Sludge, Leech Seed, then status damage, in
    // Showdown's residual order: in gen 4 each Pokemon its three in turn (the faster first), later
    // each step for both; then the other items (Toxic Orb, Flame Orb, berries) and abilities
    #[cfg(feature = "gen4")]
    let groups: Vec<Vec<&SideReference>> = {{
        let one = get_effective_speed(state, &SideReference::SideOne);
        let two = get_effective_speed(state, &SideReference::SideTwo);
        if one > two || (one == two && *sides[0] == SideReference::SideOne) {{
            vec![vec![&SideReference::SideOne], vec![&SideReference::SideTwo]]
        }} else {{
            vec![vec![&SideReference::SideTwo], vec![&SideReference::SideOne]]
        }}
    }};
    #[cfg(not(feature = "gen4"))]
    let groups: Vec<Vec<&SideReference>> = vec![sides.to_vec()];
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


def mended(source: str) -> str:
    """The end-of-turn function's text with the residual steps in Showdown's order."""
    at = [source.find(a) for a in ANCHORS]
    if any(i < 0 or source.count(a) != 1 for i, a in zip(at, ANCHORS)) or at != sorted(at):
        raise MendError(f"{FILE}: the end-of-turn steps are not where poke-engine 0.0.48 has them")
    status, items, seed = source[at[0]:at[1]], source[at[1]:at[2]], source[at[2]:at[3]]
    if not (status.count(LOOP) == items.count(LOOP) == seed.count(LOOP) == 1 and items.count(ITEM_CALL) == 1):
        raise MendError(f"{FILE}: an end-of-turn step is not the loop poke-engine 0.0.48 has")
    one_side = "    for &side_ref in group.iter() {\n"
    items = items.replace(ITEM_CALL, "        let item = state.get_side(side_ref).get_active().item;\n"
                                     "        if item != Items::LEFTOVERS && item != Items::BLACKSLUDGE {\n"
                                     "    " + ITEM_CALL + "        }\n")
    return (source[:at[0]] + RESIDUALS + seed.replace(LOOP, one_side) + status.replace(LOOP, one_side)
            + "    }\n\n" + items + source[at[3]:])


def apply(src: Path) -> None:
    """Mend an unpacked poke-engine source folder in place."""
    path = Path(src) / FILE
    path.write_text(mended(path.read_text()))
