"""One decision's sampled states: what refuses it first, then our side, the opponent's drawn
teams, the carried effects and the field, put together as ``leafhub.js``'s STATEs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from poke_env.battle import DoubleBattle

from ..leaves import BuiltState, LeafHub, LeafRequestError
from .effects import field_state, futures, side_conditions_of
from .opponent import bench_level, known_opponents, opponent_patch, preview_pool, sets_format
from .ours import our_side
from .protocol import Protocol, Refusal


@dataclass
class Belief:
    """One decision's sampled states, and what building them said."""
    states: list[dict]
    built: list[BuiltState] = field(default_factory=list)
    relaxed: int = 0  # opponent Pokémon whose revealed facts no generator draw agreed with


def refuse_early(battle, request: Optional[dict], forced_switches: bool = True) -> None:
    """What refuses a decision before any state is drawn. ``forced_switches``: a switch after
    our Pokémon fainted is searched (else refused as ``forced_switch``); a switch in the middle
    of a turn (U-turn, Baton Pass, Eject Button: the turn goes on after it) is refused."""
    if isinstance(battle, DoubleBattle):
        raise Refusal("doubles")
    if not request or request.get("wait") or request.get("teamPreview"):
        raise Refusal("no_request")
    if request.get("forceSwitch"):
        active = next((p for p in request.get("side", {}).get("pokemon", []) if p.get("active")), None)
        if active is None or not active.get("condition", "").endswith(" fnt"):
            raise Refusal("midturn_switch")
        if not forced_switches:
            raise Refusal("forced_switch")
    active = (request.get("active") or [{}])[0]
    moves = active.get("moves", [])
    if len(moves) == 1 and moves[0].get("id") == "recharge":
        raise Refusal("recharge")
    if len(moves) == 1 and "maxpp" not in moves[0]:
        raise Refusal("locked_move")


async def build_states(hub: LeafHub, decision: str, fmt: str, states: list, us: str) -> list[BuiltState]:
    """``hub.build``; a timer seen running longer than any draw of its rule allows (a Light
    Clay the sampled set lacks, ...) is refused by name (``timer``)."""
    try:
        return await hub.build(decision, fmt, states, us=us)
    except LeafRequestError as e:
        if "no draw of its timer" in str(e):
            raise Refusal("timer", str(e)) from None
        raise


def residual_pending(battle, request: dict, proto: Protocol) -> bool:
    """Gens 1-3 ask for a faint's switch before the turn's residual (Showdown's runAction): the
    switch-ins, then the residual (Leftovers, weather, poison), then the next turn."""
    if battle.gen > 3 or not request.get("forceSwitch"):
        return False
    turn = proto.last(lambda m: m[1] == "turn")
    return proto.ends_since(turn) == 0


def _index(team: list[dict], side: str, name: str) -> int:
    for i, s in enumerate(team):
        if s.get("name") == name:
            return i
    raise Refusal("source", f"{side} {name} is not in the team")


def _sources(fields_by_id: dict, teams: dict) -> None:
    for fields in fields_by_id.values():
        src = fields.get("source")
        if isinstance(src, list) and len(src) == 2 and isinstance(src[1], str):
            fields["source"] = [src[0], _index(teams[src[0]], *src)]


async def sample_states(hub: LeafHub, battle, k: int, seed: int, forced_switches: bool = True) -> Belief:
    """``k`` STATE dicts of this decision (our side exact, the opponent's drawn);
    ``forced_switches``: as :func:`refuse_early`."""
    request = battle.last_request
    refuse_early(battle, request, forced_switches)
    proto = Protocol(battle)
    ours = our_side(battle, request, proto)
    known = known_opponents(battle, proto)
    fmt = battle.format or battle.battle_tag.split("-")[1]
    size = battle._team_size.get(battle.opponent_role, 6) if battle._team_size else 6
    rng = [(seed >> s) & 0xFFFF for s in (0, 16, 32, 48)]
    try:
        teams, relaxed = await hub.sample(sets_format(battle, fmt), [x[0] for x in known], k, size, rng,
                                          pool=preview_pool(battle, known), level=bench_level(fmt, known))
    except LeafRequestError as e:
        if "no random-battle set" in str(e):
            raise Refusal("species_sets", str(e)) from None
        raise
    role, opp = battle.player_role, battle.opponent_role
    base_field = field_state(battle, proto)
    on_the_way = futures(battle, proto)
    residual = residual_pending(battle, request, proto)
    states = []
    for j, team in enumerate(teams):
        patches = [opponent_patch(mon, name, opp, proto, battle, team[i])
                   for i, (_, mon, name, _) in enumerate(known)]
        active = next((i for i, (_, mon, _, _) in enumerate(known) if mon.active), None)
        if active is None:
            raise Refusal("no_opponent_active")
        theirs = {"name": battle.opponent_username or "opponent", "team": team, "active": active,
                  "pokemon": patches,
                  "conditions": side_conditions_of(battle, opp, proto),
                  "teraUsed": bool(battle.opponent_used_tera) or battle.gen != 9}
        us = {**ours, "conditions": {c: dict(f) for c, f in ours["conditions"].items()}}
        teams = {role: us["team"], opp: team}
        _sources(us["conditions"], teams)
        _sources(theirs["conditions"], teams)
        for side_id, side in ((role, us), (opp, theirs)):
            if side_id in on_the_way:
                f = on_the_way[side_id]
                side["future"] = {**f, "source": _index(teams[f["source"][0]], *f["source"])}
        fld = {**base_field, "pseudoWeather": {p: dict(f) for p, f in base_field["pseudoWeather"].items()}}
        for key in ("weatherSource", "terrainSource"):
            src = fld.get(key)
            if src:
                fld[key] = {"side": src[0], "index": _index(teams[src[0]], src[0], src[1]), "by": src[2]}
            else:
                fld.pop(key, None)
        state = {"seed": [(seed * 7919 + j * 104729 + i * 31) & 0xFFFF for i in range(4)],
                 "turn": battle.turn, role: us, opp: theirs, "field": fld}
        if residual:
            state["residual"] = True
        states.append(state)
    return Belief(states, relaxed=relaxed)
