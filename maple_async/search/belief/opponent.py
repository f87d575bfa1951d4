"""The opponent's facts: what it revealed, kept in every sampled state, and what its unseen
Pokémon are drawn from.

Kept: species in the forme Showdown showed, level, gender, moves seen, item (or that it is
gone, or that it is not a Booster Energy: an active one's would have been used, or that it is
Light Clay: a screen it set outlasted 5 turns), ability, tera,
HP fraction, status, boosts, PP poke-env counted and the carried effects (:mod:`.effects`). Drawn (``leafhub.js``'s ``sample`` op): each seen Pokémon's set by the pinned
generator's ``randomSet`` conditioned on those facts, the unseen bench from team preview's
species or a generator team's.
"""

from __future__ import annotations

from typing import Optional

from .effects import active_patch, status_timer
from .protocol import ILLUSION, Protocol, Refusal, parse_details, to_id
from .readers import PARADOX_WAKES, SCREENS, Holder, outlasted_screen, side_condition_start

UNKNOWN_ITEM = "unknown_item"


def gender_of(mon) -> str:
    """Showdown's letter for a poke-env Pokémon's gender ('' when none or unknown)."""
    return {"MALE": "M", "FEMALE": "F"}.get(mon.gender.name, "") if mon.gender else ""


def known_opponents(battle, proto: Protocol) -> list[dict]:
    """The revealed facts of each opponent Pokémon seen, in poke-env's order."""
    out = []
    role = battle.opponent_role
    for ident, mon in battle.opponent_team.items():
        name = ident.split(": ", 1)[1]
        species = shown_species(proto, role, name, to_id(mon.species))
        if (species in ILLUSION or mon.ability == "illusion") and not mon.fainted:
            # fainted, it disguises nothing any more (what it did in disguise stays counted to
            # the Pokémon it looked like)
            raise Refusal("illusion", f"their {name}")
        if (species == "ditto" or mon.ability == "imposter") and mon.active and not mon.fainted:  # transformed
            raise Refusal("ditto", f"their {name}")
        item = None if mon.item == UNKNOWN_ITEM else (mon.item or "")
        k = {"name": name, "species": species, "level": mon.level,
             "gender": gender_of(mon),
             "moves": list(mon.moves), "item": item, "ability": mon.ability or None,
             "tera": mon.tera_type.name.capitalize() if mon.is_terastallized and mon.tera_type else None}
        if item is None and set_screen_outlasted(battle, proto, role, name):
            k["item"] = "lightclay"
        elif item is None and mon.active and not mon.fainted and not _wakes_paradox(battle):
            k["notItems"] = ["boosterenergy"]
        out.append((k, mon, name, role))
    return out


def set_screen_outlasted(battle, proto: Protocol, role: str, name: str) -> bool:
    """A screen this Pokémon set on its side has lasted past its 5 turns: it holds Light Clay."""
    for cond in getattr(battle, "opponent_side_conditions", None) or {}:
        cid = to_id(cond.name.replace("_", ""))
        if cid not in SCREENS:  # no log to scan
            continue
        start, src = side_condition_start(proto, role, cid)
        if src is not None and src[:2] == (role, name) and outlasted_screen(cid, proto.turns_since(start)):
            return True
    return False


def shown_species(proto: Protocol, role: str, name: str, species: str) -> str:
    """The species Showdown last showed for a Pokémon: a permanent forme change
    (``detailschange``: Mimikyu-Busted, Eiscue-Noice) stays when it leaves the field, and poke-env
    keeps the species it switched in as until it switches in again."""
    i = proto.last(lambda m: m[1] == "detailschange" and proto.mine(m, role, name))
    if i < 0 or i < proto.switched_in(role, name):
        return species  # none, or a switch-in since has shown its details (poke-env's species)
    return to_id(parse_details(proto.events[i][3])["species"])


def _wakes_paradox(battle) -> bool:
    """Sun or Electric Terrain is up: a paradox ability wakes from it and a Booster Energy waits."""
    up = {x.name.lower().replace("_", "") for x in (*(battle.weather or {}), *(battle.fields or {}))}
    return any(wakes in up for _, wakes in PARADOX_WAKES.values())


def opponent_patch(mon, name: str, role: str, proto: Protocol, battle, set_: dict) -> dict:
    """One seen Pokémon's PATCH, given the set drawn for it."""
    patch: dict = {}
    if mon.fainted:  # a revealed loss of its item stays revealed
        return {"hp": 0, "item": ""} if mon.item == "" or mon.item is None else {"hp": 0}
    status = mon.status.name.lower() if mon.status else ""
    gone = mon.item == "" or mon.item is None
    h = Holder(proto, role, name, mon=mon, battle=battle, status=status, item="" if gone else set_.get("item", ""))
    if h.since >= 0:
        patch["beenIn"] = True
    patch["hpFraction"] = mon.current_hp_fraction
    patch["status"] = status
    patch.update(status_timer(h))
    if gone:
        patch["item"] = ""
    pp = []
    for m in set_["moves"]:
        seen = mon.moves.get(to_id(m))
        pp.append(seen.current_pp if seen is not None and seen.current_pp < seen.max_pp else None)
    patch["pp"] = pp
    if mon.is_terastallized and mon.tera_type:
        patch["terastallized"] = mon.tera_type.name.capitalize()
    if mon.active:
        patch.update(active_patch(h))
    return patch


def sets_format(battle, fmt: str) -> str:
    """The generator the opponent's unrevealed sets are drawn from: a random format's own; a team
    format's generation's random format (the public sets the pinned Showdown ships; the
    opponent's team file is never read)."""
    return fmt if "random" in fmt else f"gen{battle.gen}randombattle"


def bench_level(fmt: str, known: list) -> Optional[int]:
    """A team format's unseen Pokémon stand at its level (the seen ones', 100 by default); a
    random format's at their sets'."""
    if "random" in fmt:
        return None
    return max((k["level"] for k, *_ in known if k.get("level")), default=100)


def preview_pool(battle, known: list) -> Optional[list]:
    """The species team preview showed and no switch-in has: the unseen bench is drawn from them
    (a team format with preview; None: no preview, the bench drawn from the generator's teams)."""
    preview = getattr(battle, "teampreview_opponent_team", None)
    if not preview:
        return None
    seen = {to_id(k["species"]) for k, *_ in known}
    seen |= {to_id(getattr(mon, "base_species", "") or "") for _, mon, _, _ in known}
    pool = []
    for mon in preview:
        if to_id(mon.species) in seen or to_id(getattr(mon, "base_species", "") or "") in seen:
            continue
        if to_id(mon.species) in ILLUSION:  # any Pokémon on the field may be it
            raise Refusal("illusion", f"team preview shows their {mon.species}")
        pool.append({"species": mon.species, "level": mon.level, **({"gender": gender_of(mon)} if mon.gender else {})})
    return pool
