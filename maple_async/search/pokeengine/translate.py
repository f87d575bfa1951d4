"""A sampled state in plain terms -> poke-engine's state, and choices both ways.

The input is a built state's snapshot (``describe.js``: every Pokémon's species, level, types,
HP, stats, ability, item, moves with PP, status with its counters, the actives' boosts and
volatiles with their durations, side and slot conditions, weather, terrain and pseudo-weather
with turns left), read off the Showdown battle the belief built; the output is a SPEC, the
nested keyword arguments of the engine's ``State`` / ``Side`` / ``Pokemon`` / ``Move``
constructors, which :mod:`.worker` turns into the engine's objects. Our side is always the
engine's side one.

What the engine models is set, each fact one entry of the tables below; what it cannot hold
either has a documented approximation here (``APPROXIMATED``) or raises
:class:`~maple_async.search.belief.Refusal` with reason ``engine:<what>`` (the policy plays).
Nothing is dropped silently: an effect this module has no entry for refuses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..belief import Refusal
from ..belief.readers import PARADOX_WAKES

STATUS = {"": "none", "fnt": "none", "brn": "burn", "par": "paralyze", "slp": "sleep", "frz": "freeze", "psn": "poison",
          "tox": "toxic"}
WEATHER = {"": "none", "sunnyday": "sun", "raindance": "rain", "sandstorm": "sand", "hail": "hail",
           "snowscape": "snow", "snow": "snow", "desolateland": "harshsun", "primordialsea": "heavyrain"}
TERRAIN = {"": "none", "electricterrain": "electricterrain", "grassyterrain": "grassyterrain",
           "mistyterrain": "mistyterrain", "psychicterrain": "psychicterrain"}
# Side conditions: Showdown id -> (engine field, what its number is).
SIDE_CONDITIONS = {
    "spikes": ("spikes", "layers"), "toxicspikes": ("toxic_spikes", "layers"),
    "stealthrock": ("stealth_rock", "one"), "stickyweb": ("sticky_web", "one"),
    "tailwind": ("tailwind", "duration"), "reflect": ("reflect", "duration"),
    "lightscreen": ("light_screen", "duration"), "auroraveil": ("aurora_veil", "duration"),
    "safeguard": ("safeguard", "duration"), "mist": ("mist", "duration"),
    "luckychant": ("lucky_chant", "duration"),
}
# Slot conditions of the active's slot (the engine keeps them on the side).
SLOT_CONDITIONS = {"healingwish": "healing_wish", "lunardance": "lunar_dance"}
# Volatiles whose engine status has the same name (upper case) and nothing more to carry.
SAME_NAME = {
    "aquaring", "attract", "autotomize", "charge", "curse", "defensecurl", "destinybond", "disable",
    "electrify", "embargo", "flashfire", "focusenergy", "foresight", "gastroacid", "glaiverush", "grudge",
    "healblock", "imprison", "ingrain", "laserfocus", "leechseed", "magnetrise", "minimize", "miracleeye",
    "mustrecharge", "nightmare", "noretreat", "octolock", "partiallytrapped", "powershift", "powertrick",
    "rage", "saltcure", "smackdown", "stockpile", "syrupbomb", "tarshot", "telekinesis", "throatchop",
    "torment", "truant", "uproar", "unburden",
    "reflect", "lightscreen",  # gen 1: volatiles, not side conditions
}
# Volatiles that end with the turn that set them or have no effect at a decision (a decision
# comes between turns): nothing to carry.
TURN_ONLY = {
    "flinch", "protect", "endure", "roost", "helpinghand", "magiccoat", "snatch", "followme", "ragepowder",
    "spotlight", "powder", "banefulbunker", "kingsshield", "spikyshield", "silktrap", "burningbulwark",
    "obstruct", "maxguard", "gem", "trapper", "quash", "beakblast", "focuspunch", "shelltrap",
    "attackedthisturn", "micleberry", "ability:trace", "fling", "rolloutstorage", "substitutebroken",
}
BOOSTS = (("atk", "attack_boost"), ("def", "defense_boost"), ("spa", "special_attack_boost"),
          ("spd", "special_defense_boost"), ("spe", "speed_boost"), ("accuracy", "accuracy_boost"),
          ("evasion", "evasion_boost"))
STATS = (("atk", "attack"), ("def", "defense"), ("spa", "special_attack"), ("spd", "special_defense"),
         ("spe", "speed"))
# A format's rules that Showdown keeps among the field's conditions (Sleep Clause): the engine's
# own rules stand for them.
RULE_SUFFIXES = ("mod", "clause")
PARADOX = {"protosynthesis": "PROTOSYNTHESIS", "quarkdrive": "QUARKDRIVE"}
# What the engine holds only approximately (docs/search.md lists the same).
APPROXIMATED = {
    "sleep": "a sleep not from Rest is the engine's own rule (wake-up chance by turns slept), not "
             "Showdown's drawn duration",
    "hiddenpower": "Hidden Power's power in gens 2-5 is 60 or 70 in the engine (the nearer one)",
    "choicelock": "a choice lock is the other moves disabled until the Pokémon switches",
    "trapped": "Mean Look / Block trap the side at the root only",
}


class Side:
    """One side's part of a SPEC under construction: its fields, the active's volatile names
    and their durations, its side conditions."""

    def __init__(self):
        self.spec: dict = {}
        self.volatiles: set = set()
        self.durations: dict = {}
        self.conditions: dict = {}


@dataclass
class Translation:
    """A SPEC and the maps between our choices (Showdown's words) and the engine's."""
    spec: dict
    to_engine: dict  # "move 2" -> "thunderbolt"
    from_engine: dict  # "thunderbolt" -> "move 2"
    names: dict  # kind -> names the SPEC uses (the engine's worker checks them)
    their_to_engine: dict = field(default_factory=dict)  # the opponent's choices, as to_engine


def type_id(t: str) -> str:
    return "typeless" if t in ("???", "") else t.lower()


def two_types(types: list) -> tuple:
    ts = [type_id(t) for t in types] + ["typeless"]
    return ts[0], ts[1]


def move_id(move: dict, mon: dict, gen: int) -> str:
    mid = move["id"]
    if mid == "hiddenpower" and gen >= 2:
        power = mon.get("hpPower") or 60
        return f"hiddenpower{mon['hpType'].lower()}{70 if gen <= 5 and power >= 65 else 60}"
    return mid


def none_if_empty(x: str) -> str:
    return x if x and x != "noability" else "none"


def pokemon(mon: dict, gen: int, active: bool, side: Side, names: dict) -> dict:
    status = mon.get("status", "")
    if status not in STATUS:
        raise Refusal("engine:status", f"{mon['species']} has status {status!r}")
    st = mon.get("statusState", {})
    rest_turns = sleep_turns = 0
    if status == "slp":
        if st.get("rest"):  # the belief marks Rest's sleep (Showdown's state does not say)
            rest_turns = max(int(st.get("time", 0)), 0)
        else:
            sleep_turns = max(int(st.get("startTime", 0)) - int(st.get("time", 0)), 0)
    if mon.get("addedType"):
        raise Refusal("engine:added_type", f"{mon['species']} has a third type {mon['addedType']}")
    if len(mon["types"]) > 2:
        raise Refusal("engine:types", f"{mon['species']} has types {mon['types']}")
    moves = []
    for m in mon["moves"][:4]:
        mid = move_id(m, mon, gen)
        names["move"].add(mid)
        moves.append({"id": mid, "pp": int(m["pp"]), "disabled": False})
    while len(moves) < 4:
        moves.append({"id": "none", "pp": 0, "disabled": True})
    item = none_if_empty(mon.get("item", ""))
    ability = none_if_empty(mon.get("ability", "")) if gen >= 3 else "none"
    base_ability = none_if_empty(mon.get("baseAbility", "")) if gen >= 3 else "none"
    names["pokemon"].add(mon["species"])
    names["item"].add(item)
    names["ability"].update((ability, base_ability))
    evs = mon.get("evs") or {}
    out = {
        "id": mon["species"], "level": int(mon["level"]),
        "types": two_types(mon["types"]), "base_types": two_types(mon.get("baseTypes") or mon["types"]),
        "hp": int(mon["hp"]), "maxhp": int(mon["maxhp"]),
        "ability": ability, "base_ability": base_ability, "item": item,
        "nature": (mon.get("nature") or "serious").lower(),
        "evs": tuple(int(evs.get(k, 85)) for k in ("hp", "atk", "def", "spa", "spd", "spe")),
        "status": STATUS[status], "rest_turns": rest_turns, "sleep_turns": sleep_turns,
        "weight_kg": float(mon.get("weightkg", 0.0)), "moves": moves,
        "terastallized": bool(mon.get("terastallized")),
        "tera_type": type_id(mon.get("teraType") or "typeless") if gen >= 9 else "typeless",
    }
    for ours, theirs in STATS:
        out[theirs] = int(mon["stats"][ours])
    if status == "tox" and active:
        side.conditions["toxic_count"] = int(st.get("stage", 0))
    return out


# -- the actives' volatiles -------------------------------------------------------------------
def _duration(key: str, field_: str = "duration") -> Callable:
    def carry(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
        side.volatiles.add(key.upper())
        side.durations[key] = int(state.get(field_, 0))
    return carry


def _substitute(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
    side.volatiles.add("SUBSTITUTE")
    side.spec["substitute_health"] = int(state.get("hp", 0))


def _move_index(mon: dict, move: str) -> Optional[int]:
    for i, m in enumerate(mon["moves"]):
        if m["id"] == move:
            return i
    return None


def _last_move(side: Side, mon: dict, move: str, why: str) -> None:
    i = _move_index(mon, move)
    if i is None:
        raise Refusal(f"engine:{why}", f"{mon['species']}'s {why} move {move} is not among its moves")
    side.spec["last_used_move"] = f"move:{i}"


def _used(key: str, field_: str = "duration") -> Callable:
    """An effect Showdown counts down (turns left) and the engine counts up from 0, ending it at
    2: Encore, Taunt, the Outrage lock (the engine's count: 3 - turns left)."""
    def carry(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
        side.volatiles.add(key.upper())
        side.durations[key] = min(max(3 - int(state.get(field_, 3)), 0), 2)
    return carry


def _encore(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
    _used("encore")(side, state, mon, engine_mon)
    _last_move(side, mon, state.get("move", ""), "encore")


def _locked(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
    # Showdown keeps the lock's turns left in trueDuration, beside a 1-turn duration
    _used("lockedmove", "trueDuration")(side, state, mon, engine_mon)
    _last_move(side, mon, state.get("move", ""), "lockedmove")


def _choicelock(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
    move = state.get("move", "")
    if _move_index(mon, move) is None:
        return  # locked into a move it no longer has (Trick, Transform): nothing to disable
    for m, em in zip(mon["moves"], engine_mon["moves"]):
        if m["id"] != move:
            em["disabled"] = True


def _disable(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
    side.volatiles.add("DISABLE")
    i = _move_index(mon, state.get("move", ""))
    if i is not None:
        engine_mon["moves"][i]["disabled"] = True


def _perish(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
    turns = int(state.get("duration", 4))
    if not 1 <= turns <= 4:
        raise Refusal("engine:perishsong", f"perish count {turns}")
    side.volatiles.add(f"PERISH{turns}")


def _stall(side: Side, state: dict, mon: dict, engine_mon: dict, gen: int = 9) -> None:
    """Protect's run: Showdown's counter is 3 to the uses in a row (gens 3-5: 2 to them; gen 2
    halves a chance instead: one use is what the engine checks)."""
    counter = max(int(state.get("counter", 1)), 1)
    if gen <= 2:
        side.conditions["protect"] = 1 if counter > 1 else 0
    else:
        side.conditions["protect"] = int(round(math.log(counter, 2 if gen <= 5 else 3)))


def _paradox(name: str) -> Callable:
    def carry(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
        stat = state.get("bestStat", "")
        if stat not in ("atk", "def", "spa", "spd", "spe"):
            raise Refusal(f"engine:{name}", f"no boosted stat in {state}")
        side.volatiles.add(f"{PARADOX[name]}{stat.upper()}")
    return carry


def _trapped(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
    side.spec["force_trapped"] = True


def _ignore(side: Side, state: dict, mon: dict, engine_mon: dict) -> None:
    pass


# Showdown volatile id -> how the engine's side takes it. One entry per effect the search
# carries; an id with no entry refuses (engine:volatile:<id>).
VOLATILES: dict[str, Callable] = {
    **{v: (lambda name: lambda side, state, mon, em: side.volatiles.add(name.upper()))(v) for v in SAME_NAME},
    **{v: _ignore for v in TURN_ONLY},
    "substitute": _substitute,
    "confusion": _duration("confusion", "time"),
    "taunt": _used("taunt"),
    "yawn": _duration("yawn"),
    "slowstart": _duration("slowstart"),
    "encore": _encore,
    "lockedmove": _locked,
    "choicelock": _choicelock,
    "disable": _disable,
    "perishsong": _perish,
    "stall": _stall,
    "protosynthesis": _paradox("protosynthesis"),
    "quarkdrive": _paradox("quarkdrive"),
    "trapped": _trapped,
    "typechange": _ignore,  # the types themselves are set (Pokemon.types; TYPECHANGE below)
}


# The belief's carried effects (search/belief/effects.py, its ``engine`` column) -> the
# entries here that take each kind: an effect's Showdown id must be a key of its kind's table.
ENGINE_ENTRIES: dict[str, object] = {
    "volatile": VOLATILES,
    "status": STATUS,
    "side": SIDE_CONDITIONS,
    "slot": {"wish": "Side.wish", "futuremove": "Side.future_sight (its user's side)", **SLOT_CONDITIONS},
    "field": {"weather": WEATHER, "terrain": TERRAIN, "pseudoweather": {"trickroom": "State.trick_room"}},
    "types": {"typechange": "Pokemon.types, TYPECHANGE"},
    "derived": {"supremeoverlord": "the engine counts the fainted itself"},
}


BOOST_TABLE = (1, 1.5, 2, 2.5, 3, 3.5, 4)
BEST_STAT_ORDER = ("atk", "def", "spa", "spd", "spe")  # Showdown's, which breaks a tie


def best_stat(mon: dict) -> str:
    """Showdown's ``getBestStat(false, true)``: the highest stat with its boosts, the first of
    atk, def, spa, spd, spe on a tie."""
    boosts = mon.get("boosts") or {}

    def boosted(stat: str) -> int:
        b = max(-6, min(6, int(boosts.get(stat, 0))))
        value = int(mon["stats"][stat])
        return int(value * BOOST_TABLE[b]) if b >= 0 else int(value / BOOST_TABLE[-b])

    return max(BEST_STAT_ORDER, key=lambda s: (boosted(s), -BEST_STAT_ORDER.index(s)))


def _booster_energy(active: dict, engine_mon: dict, side: Side, field_: dict) -> None:
    """An active paradox Pokémon holding Booster Energy with its ability asleep: Showdown uses the
    item at the next update, before any move (the engine never would), so the state the engine
    gets is the one after it: the item gone, the boost on."""
    ability = active.get("ability", "")
    if active.get("item") != "boosterenergy" or ability not in PARADOX_WAKES or active.get("hp", 0) <= 0:
        return
    kind, wakes = PARADOX_WAKES[ability]
    if ability in (active.get("volatiles") or {}) or field_.get(kind, "") == wakes:
        return
    engine_mon["item"] = "none"
    side.volatiles.add(f"{PARADOX[ability]}{best_stat(active).upper()}")


def side_spec(snap_side: dict, gen: int, names: dict, field_: Optional[dict] = None) -> tuple[dict, Optional[dict]]:
    """The engine's Side for one snapshot side; also its active's snapshot. ``field_``: the
    snapshot's field (what wakes a paradox ability)."""
    side = Side()
    mons = snap_side["pokemon"]
    if len(mons) > 6:
        raise Refusal("engine:team_size", f"{len(mons)} Pokémon")
    active_i = snap_side["active"]
    if active_i < 0:
        raise Refusal("engine:no_active")
    engine_mons = [pokemon(m, gen, i == active_i, side, names) for i, m in enumerate(mons)]
    active = mons[active_i]
    ea = engine_mons[active_i]
    side.spec.update({"active_index": str(active_i), "last_used_move": "move:none"})
    if snap_side.get("request") == "switch" and active["hp"] > 0:
        side.spec["force_switch"] = True  # a switch in the middle of a turn (U-turn, Baton Pass)
    if active.get("lastMove"):
        i = _move_index(active, active["lastMove"])
        if i is not None:
            side.spec["last_used_move"] = f"move:{i}"
    for id_, state in (active.get("volatiles") or {}).items():
        carry = VOLATILES.get(id_)
        if carry is None:
            raise Refusal(f"engine:volatile:{id_}", f"{active['species']} has volatile {id_} {state}")
        if carry is _stall:
            _stall(side, state, active, ea, gen)
        else:
            carry(side, state, active, ea)
    counter = int((active.get("abilityState") or {}).get("counter", 0))
    if active.get("ability") == "slowstart" and counter > 0 and "slowstart" not in (active.get("volatiles") or {}):
        # Showdown keeps Slow Start in the ability's state; the engine as a volatile with its own
        # count, one more than Showdown's on the turn it came in (Showdown's first end of turn
        # does not count down, the engine's does)
        _duration("slowstart")(side, {"duration": counter + (0 if active.get("activeTurns") else 1)}, active, ea)
    _booster_energy(active, ea, side, field_ or {})
    if tuple(ea["types"]) != tuple(ea["base_types"]) and gen >= 3:  # gens 1-2 keep no such mark
        side.volatiles.add("TYPECHANGE")
    boosts = active.get("boosts") or {}
    for ours, theirs in BOOSTS:
        side.spec[theirs] = int(boosts.get(ours, 0))
    for id_, state in (snap_side.get("conditions") or {}).items():
        entry = SIDE_CONDITIONS.get(id_)
        if entry is None:
            raise Refusal(f"engine:side_condition:{id_}", f"side condition {id_} {state}")
        key, what = entry
        side.conditions[key] = (int(state.get("layers", 1)) if what == "layers" else 1 if what == "one"
                                else int(state.get("duration", 0)))
    slot = snap_side.get("slot") or {}
    for id_, state in slot.items():
        if id_ == "wish":
            side.spec["wish"] = (int(state.get("duration", 0)), int(state.get("hp", 0)))
        elif id_ == "futuremove":
            continue  # kept on the user's side in the engine: state()
        elif id_ in SLOT_CONDITIONS:
            side.conditions[SLOT_CONDITIONS[id_]] = 1
        else:
            raise Refusal(f"engine:slot_condition:{id_}", f"slot condition {id_} {state}")
    side.spec["pokemon"] = engine_mons
    side.spec["volatile_statuses"] = sorted(side.volatiles)
    names["volatile"].update(side.volatiles)
    side.spec["volatile_status_durations"] = side.durations
    side.spec["side_conditions"] = side.conditions
    return side.spec, active


def future_sight(snap: dict, target: int, spec_sides: list, order: tuple) -> None:
    """Showdown keeps a Future Sight on its target's slot with the turn it ends
    (``endingTurn``), the engine on its user's side (the user's index, whose Special Attack it
    hits with) with the turn ends left: 2 at the decision after its use. ``order``: the
    snapshot's sides in the engine's order (ours first)."""
    state = (snap["sides"][target].get("slot") or {}).get("futuremove")
    if not state:
        return
    if state.get("move", "futuresight") != "futuresight":
        raise Refusal(f"engine:{state['move']}", "the engine keeps Future Sight alone on its way")
    src = state.get("source")
    if not src or "endingTurn" not in state:
        raise Refusal("engine:futuremove", f"a future move with no source or end: {state}")
    user = 0 if src[0] == snap["sides"][0]["id"] else 1
    if user == target:
        raise Refusal("engine:futuremove", "a future move on its user's own side")
    left = int(state["endingTurn"]) - int(snap["turn"]) + 2
    if not 1 <= left <= 3:
        raise Refusal("engine:futuremove", f"{left} turn ends left")
    spec_sides[order.index(user)]["future_sight"] = (left, str(int(src[1])))


def choice_maps(snap_side: dict, gen: int) -> tuple[dict, dict]:
    """Our choices in Showdown's words <-> the engine's, for our side of the snapshot."""
    to_engine, from_engine = {}, {}
    active_i = snap_side["active"]
    active = snap_side["pokemon"][active_i]
    for i, m in enumerate(active["moves"][:4]):
        mid = move_id(m, active, gen)
        for ours, theirs in ((f"move {i + 1}", mid), (f"move {i + 1} terastallize", f"{mid}-tera"),
                             (f"move {i + 1} mega", f"{mid}-mega")):
            to_engine[ours] = theirs
            from_engine[theirs] = ours
    for j, mon in enumerate(snap_side["pokemon"]):
        if j != active_i:
            to_engine[f"switch {j + 1}"] = f"switch {mon['species']}"
            from_engine[f"switch {mon['species']}"] = f"switch {j + 1}"
    return to_engine, from_engine


def translate(snap: dict, us: str, trapped: bool = False) -> Translation:
    """The engine's SPEC of a snapshot with ``us`` (p1 / p2) as side one; ``trapped``: our real
    request says our active cannot switch. Raises Refusal for what the engine cannot hold."""
    gen = int(snap["gen"])
    sides = snap["sides"]
    ours_i = 0 if sides[0]["id"] == us else 1
    order = (ours_i, 1 - ours_i)
    field_ = snap.get("field") or {}
    weather = field_.get("weather", "")
    terrain = field_.get("terrain", "")
    if weather not in WEATHER:
        raise Refusal(f"engine:weather:{weather}")
    if terrain not in TERRAIN:
        raise Refusal(f"engine:terrain:{terrain}")
    pseudo = {k: v for k, v in (field_.get("pseudoWeather") or {}).items() if not k.endswith(RULE_SUFFIXES)}
    trick_room = pseudo.pop("trickroom", None)
    if pseudo:
        raise Refusal(f"engine:field:{sorted(pseudo)[0]}", f"field conditions {sorted(pseudo)}")
    names: dict = {"pokemon": set(), "move": set(), "item": set(), "ability": set(), "volatile": set()}
    specs = []
    for i in order:
        spec, _active = side_spec(sides[i], gen, names, field_)
        specs.append(spec)
    for i in (0, 1):
        future_sight(snap, i, specs, order)
    if trapped:
        specs[0]["force_trapped"] = True
    spec = {
        "side_one": specs[0], "side_two": specs[1],
        "weather": WEATHER[weather], "weather_turns_remaining": int(field_.get("weatherDuration", 0)) or -1,
        "terrain": TERRAIN[terrain], "terrain_turns_remaining": int(field_.get("terrainDuration", 0)) or -1,
        "trick_room": trick_room is not None,
        "trick_room_turns_remaining": int(trick_room.get("duration", 0)) if trick_room else 0,
    }
    if spec["weather"] == "none":
        spec["weather_turns_remaining"] = 0
    if spec["terrain"] == "none":
        spec["terrain_turns_remaining"] = 0
    to_engine, from_engine = choice_maps(sides[ours_i], gen)
    theirs, _ = choice_maps(sides[1 - ours_i], gen)
    return Translation(spec, to_engine, from_engine, {k: sorted(v) for k, v in names.items()}, theirs)
