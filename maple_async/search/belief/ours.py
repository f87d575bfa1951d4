"""Our side of a sampled state, exact: rebuilt from the request, and checked against it.

The request gives species, level, gender, moves in slot order, item, ability, tera type, HP,
status and stats; ``leafhub.js`` fits the EVs and IVs (nearest the random formats' 85/31) that
give those stats. PP come from the request (the active) or poke-env's count of our uses (the
bench); boosts and the carried effects from poke-env and the protocol (:mod:`.effects`). Once
built, :func:`check_ours` compares the state's request with the real one, field by field: a
mismatch refuses the decision.
"""

from __future__ import annotations

import re
from typing import Optional

from ..leaves import BuiltState
from .effects import active_patch, side_conditions_of, status_timer
from .protocol import ILLUSION, Protocol, Refusal, move_id, parse_condition, parse_details, to_id
from .readers import Holder

STATUSES = ("slp", "tox", "psn", "brn", "par", "frz")


def our_side(battle, request: dict, proto: Protocol) -> dict:
    role = battle.player_role
    team, patches = [], []
    active_req = (request.get("active") or [{}])[0]
    for i, p in enumerate(request["side"]["pokemon"]):
        det = parse_details(p["details"])
        hp, maxhp, status = parse_condition(p["condition"])
        name = p["ident"].split(": ", 1)[1]
        if (to_id(det["species"]) in ILLUSION or to_id(p.get("baseAbility", "")) == "illusion") and status != "fnt":
            raise Refusal("illusion", f"our {name}")  # fainted, it disguises nothing any more
        if to_id(det["species"]) == "ditto" and p.get("active"):  # on the bench it is a plain set
            raise Refusal("ditto", f"our {name}")
        moves = [move_id(m) for m in p["moves"]]
        s = {"name": name, "species": det["species"], "level": det["level"], "gender": det["gender"],
             "moves": moves, "item": p.get("item", ""), "ability": p.get("baseAbility", ""),
             "fit": {"hp": maxhp, **p["stats"]}}
        if p.get("teraType"):
            s["teraType"] = p["teraType"]
        if det.get("shiny"):  # in the details the request is compared on
            s["shiny"] = True
        if maxhp == 0:  # fainted: its HP is not shown, its other stats are
            s["fit"]["hp"] = None
        power = hidden_power(active_req) if p.get("active") and battle.gen < 6 else None
        if power:
            s["fitHpPower"] = power
        team.append(s)
        mon = battle.get_pokemon(p["ident"])
        h = Holder(proto, role, name, mon=mon, battle=battle, status=status, item=s["item"])
        patch: dict = {"hp": hp, "status": status if status in STATUSES else ""}
        if h.since >= 0:
            patch["beenIn"] = True
        patch.update(status_timer(h))
        if p.get("terastallized"):
            patch["terastallized"] = p["terastallized"]
        if p.get("active") and p.get("ability") and p["ability"] != p.get("baseAbility"):
            patch["ability"] = p["ability"]  # Trace, Skill Swap, ...: the request says what it has now
        if p.get("active") and hp == 0:  # fainted in the turn that ended: its switch is the decision
            patch["pp"] = [bench_pp(mon, m) for m in moves]
        elif p.get("active"):
            patch["pp"] = [m.get("pp") for m in active_req.get("moves", [])]  # in slot order
            patch.update(active_patch(h))
        else:
            patch["pp"] = [bench_pp(mon, m) for m in moves]
        patches.append(patch)
    return {"name": battle.player_username, "team": team, "active": 0, "pokemon": patches,
            "conditions": side_conditions_of(battle, role, proto),
            "teraUsed": bool(battle.used_tera) or not any(p.get("teraType") for p in request["side"]["pokemon"])}


def bench_pp(mon, move: str) -> Optional[int]:
    m = mon.moves.get(move) or mon.moves.get(to_id(move))
    return None if m is None else m.current_pp


def hidden_power(active: dict) -> Optional[int]:
    """Hidden Power's power in gens 2-5, named only by the active's request ('Hidden Power Ice 70')."""
    for move in active.get("moves", []):
        m = re.fullmatch(r"Hidden Power \w+ (\d+)", move.get("move", ""))
        if m:
            return int(m.group(1))
    return None


def check_ours(built: BuiltState, request: dict, real_choices: list[str]) -> None:
    """The built state's request agrees with the real one on every field of our side."""
    mine = built.request["side"]["pokemon"]
    theirs = request["side"]["pokemon"]
    if len(mine) != len(theirs):
        raise Refusal("our_side", f"{len(mine)} Pokémon built, {len(theirs)} in the request")
    for a, b in zip(mine, theirs):
        for key in ("ident", "details", "condition", "stats", "moves", "item", "baseAbility", "ability", "teraType"):
            if key in b and a.get(key) != b.get(key):
                raise Refusal("our_side", f"{b['ident']} {key}: built {a.get(key)!r}, real {b.get(key)!r}")
    want = (request.get("active") or [{}])[0].get("moves", [])
    got = (built.request.get("active") or [{}])[0].get("moves", [])
    for a, b in zip(got, want):
        if a.get("pp") == b.get("pp") and a.get("disabled", False) != b.get("disabled", False):
            # choice lock, Taunt, Disable, Encore, Torment...: an effect the states do not carry
            raise Refusal("disabled_move", f"move {b.get('id')}: disabled {b.get('disabled')!r} in the "
                                           f"request, {a.get('disabled', False)!r} in the built state")
        if (a.get("pp"), a.get("disabled", False), a.get("move")) != (b.get("pp"), b.get("disabled", False), b.get("move")):
            raise Refusal("our_side", f"move {b.get('id')}: built {a}, real {b}")
    if sorted(built.ours) != sorted(real_choices):
        raise Refusal("our_choices", f"built {built.ours}, real {real_choices}")
