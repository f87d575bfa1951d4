"""Belief: sampled full battle states from the player's view (issue 62, item 1).

From a poke-env singles battle and its current request, :func:`sample_states` draws ``k``
STATE dicts in ``leafhub.js``'s format:

* **our side exact**, from the request: species, level, gender, moves in slot order, item,
  ability, tera type, HP and status; stats rebuilt by ``leafhub.js`` (the EVs and IVs nearest the
  random formats' 85/31 that give the request's stats); PP from the request (the active) or
  poke-env's count of our uses (the bench); boosts and volatiles from poke-env. ``leafhub.js``
  builds the state and :func:`check_ours` compares its request with the real one, field by field:
  a mismatch refuses the decision.
* **the opponent's revealed facts kept**: species, level, gender, moves seen, item (or that it is
  gone), ability, tera, HP fraction, status, boosts, PP poke-env counted, supported volatiles,
  side conditions, weather, terrain and field conditions, with turns elapsed.
* **the unrevealed drawn from public knowledge**: each seen Pokémon's set by the pinned
  generator's ``randomSet`` conditioned on its revealed facts, the unseen bench from a generator
  team's species not seen (``leafhub.js``'s ``sample`` op); timers the view cannot see (sleep,
  confusion, taunt, screens, weather) drawn in ``leafhub.js`` by the effect's own rule given the
  turns seen, read here from the battle's protocol (``Battle._replay_data``).

What cannot be represented faithfully raises :class:`Refusal` with a short ``reason``
(``doubles``, ``team_format``, ``forced_switch``, ``illusion``, ``transform``, ``ditto``,
``volatile:<name>``, ``locked_move``, ``recharge``, ``two_turn_move``, ``substitute_hp``,
``forme_change``, ...): never approximated silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from poke_env.battle import DoubleBattle, Effect, Field, SideCondition

from .leaves import BuiltState, LeafHub, LeafRequestError

UNKNOWN_ITEM = "unknown_item"
CHOICE_ITEMS = ("choiceband", "choicescarf", "choicespecs")
# Moves that lock the user for 2-3 turns, unseen by poke-env: right after one the state carries
# Showdown's lockedmove (LOCKED_MOVE's, gens 3-9), the rest are refused.
LOCKING_MOVES = {"outrage", "petaldance", "thrash", "uproar", "rollout", "iceball", "ragingfury"}
LOCKED_MOVE = {"outrage", "petaldance", "thrash", "ragingfury"}
# poke-env effects a state sets, and how: a Showdown volatile id and its fields; "seen" is
# filled in from the protocol (failed turns for confusion, turn ends for the others).
VOLATILES = {
    Effect.SUBSTITUTE: ("substitute", {"seen": 0}),
    Effect.CONFUSION: ("confusion", {"seen": None}),
    Effect.LEECH_SEED: ("leechseed", {"source": "foe"}),
    Effect.TAUNT: ("taunt", {"seen": None}),
    Effect.YAWN: ("yawn", {"seen": None}),
    Effect.MAGNET_RISE: ("magnetrise", {"seen": None}),
    Effect.FOCUS_ENERGY: ("focusenergy", {}),
    Effect.AQUA_RING: ("aquaring", {}),
    Effect.INGRAIN: ("ingrain", {}),
    Effect.CURSE: ("curse", {}),
    Effect.NIGHTMARE: ("nightmare", {}),
    Effect.FLASH_FIRE: ("flashfire", {}),
    Effect.ATTRACT: ("attract", {"source": "foe"}),
    Effect.CHARGE: ("charge", {"seen": None}),
    Effect.SALT_CURE: ("saltcure", {}),
    Effect.THROAT_CHOP: ("throatchop", {"seen": None}),
}
# Paradox abilities' boost: the stat it raised and whether Booster Energy started it (it then
# outlasts the weather or terrain), read from the protocol; poke-env keeps the activation
# (QUARK_DRIVE) and the '-start' naming the stat (QUARKDRIVESPE), either may come alone.
PARADOX = {getattr(Effect, f"{name}{stat}"): label
           for label, name in (("quarkdrive", "QUARKDRIVE"), ("protosynthesis", "PROTOSYNTHESIS"))
           for stat in ("ATK", "DEF", "SPA", "SPD", "SPE")}
PARADOX.update({Effect.QUARK_DRIVE: "quarkdrive", Effect.PROTOSYNTHESIS: "protosynthesis"})
# Effects poke-env keeps that live in the ability's state, not a volatile (ability_state):
# Supreme Overlord's activation and its '-start|fallenN'; Slow Start's turns left.
OVERLORD = {Effect.SUPREME_OVERLORD, Effect.FALLEN, Effect.FALLEN1, Effect.FALLEN2, Effect.FALLEN3,
            Effect.FALLEN4, Effect.FALLEN5}
ABILITY_STATES = OVERLORD | {Effect.SLOW_START}
# Effects poke-env keeps that need nothing in the state (already in the species, the request,
# or over by the next turn).
IGNORED_EFFECTS = {getattr(Effect, n) for n in (
    "PROTECT", "ENDURE", "FLINCH", "ROOST", "TRICK", "FOCUS_PUNCH", "FOLLOW_ME", "HELPING_HAND",
    "SNATCH", "MAGIC_COAT", "POWDER", "LEPPA_BERRY", "CUSTAP_BERRY", "QUICK_CLAW", "QUICK_DRAW",
    "FOCUS_BAND", "SKETCH", "SPITE", "CELEBRATE", "IMMUNITY", "INSOMNIA", "LIMBER", "OBLIVIOUS",
    "OWN_TEMPO", "VITAL_SPIRIT", "WATER_VEIL", "SYNCHRONIZE", "FOREWARN", "ROUGH_SKIN",
    "IRON_BARBS", "AFTERMATH", "INNARDS_OUT", "LIQUID_OOZE", "MUMMY", "LINGERING_AROMA",
    "SAFETY_GOGGLES", "PROTECTIVE_PADS", "STICKY_HOLD", "SUCTION_CUPS", "HEAL_BELL",
    "AROMATHERAPY", "BAD_DREAMS", "HEALER", "HYDRATION", "SHED_SKIN", "CUD_CHEW", "TIDY_UP",
    "COURT_CHANGE", "SCREEN_CLEANER", "CRAFTY_SHIELD", "QUICK_GUARD", "WIDE_GUARD", "MAT_BLOCK",
    "FEINT", "LIGHTNING_ROD", "STORM_DRAIN", "TELEPATHY", "SYMBIOSIS", "GUARD_DOG", "DANCER",
    "ELECTRIFY", "HADRON_ENGINE", "ORICHALCUM_PULSE", "FICKLE_BEAM", "STICKY_WEB", "POLTERGEIST",
    "FUTURE_SIGHT", "DOOM_DESIRE")  # (the last two: a slot condition, future_moves)
    if hasattr(Effect, n)}
ILLUSION = {"zoroark", "zorua", "zoroarkhisui", "zoruahisui"}
SWITCH_IN = {"switch", "drag", "replace"}


class Refusal(Exception):
    """A decision whose state cannot be represented faithfully; ``reason`` names why (a short
    key the counters group by), the message says more."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass
class Belief:
    """One decision's sampled states, and what building them said."""
    states: list[dict]
    built: list[BuiltState] = field(default_factory=list)
    relaxed: int = 0  # opponent Pokémon whose revealed facts no generator draw agreed with


def to_id(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def move_id(request_id: str) -> str:
    """A request's move id as a set's: Hidden Power's type stays, its power (and Return's) goes."""
    return re.sub(r"\d+$", "", request_id)


def parse_details(details: str) -> dict:
    parts = [p.strip() for p in details.split(",")]
    out = {"species": parts[0], "level": 100, "gender": ""}
    for p in parts[1:]:
        if p.startswith("L") and p[1:].isdigit():
            out["level"] = int(p[1:])
        elif p in ("M", "F"):
            out["gender"] = p
        elif p.startswith("tera:"):
            out["tera"] = p[5:]
        elif p == "shiny":
            out["shiny"] = True
    return out


def parse_condition(condition: str) -> tuple[int, int, str]:
    """'123/250 par' -> (123, 250, 'par'); '0 fnt' -> (0, 0, 'fnt')."""
    hp, _, status = condition.partition(" ")
    if "/" not in hp:
        return 0, 0, status or "fnt"
    cur, mx = hp.split("/")
    return int(cur), int(mx), status


# -- the protocol, read back ------------------------------------------------------------------
class Protocol:
    """The battle's messages (poke-env's ``_replay_data``), searched for what poke-env does not
    keep: when an effect started, how many turns or failed moves it has seen, who set it."""

    def __init__(self, battle):
        self.events = [m for m in battle._replay_data if len(m) > 1]

    @staticmethod
    def who(ident: str) -> tuple[str, str]:
        """'p2a: Gyarados' -> ('p2', 'Gyarados')."""
        side, _, name = ident.partition(": ")
        return side[:2], name

    def last(self, test, before: Optional[int] = None) -> int:
        end = len(self.events) if before is None else before
        for i in range(end - 1, -1, -1):
            if test(self.events[i]):
                return i
        return -1

    def count(self, test, after: int) -> int:
        return sum(1 for m in self.events[after + 1:] if test(m))

    def turns_since(self, i: int) -> int:
        return self.count(lambda m: m[1] == "turn", i)

    def ends_since(self, i: int) -> int:
        """Turn ends (residuals: '|upkeep|') after event ``i``."""
        return self.count(lambda m: m[1] == "upkeep", i)

    def switched_in(self, side: str, name: str) -> int:
        return self.last(lambda m: m[1] in SWITCH_IN and self.who(m[2]) == (side, name))

    def mine(self, m: list, side: str, name: str, pos: int = 2) -> bool:
        return len(m) > pos and self.who(m[pos]) == (side, name)

    def source_before(self, i: int) -> Optional[tuple[str, str, str]]:
        """Who set what started at event ``i``: its ``[of]`` Pokémon (an ability or item) or the
        user of the last move before it; (side, name, "ability" | "move")."""
        m = self.events[i]
        of = [p[5:] for p in m if p.startswith("[of] ")]
        if of and any(p.startswith("[from] ability:") for p in m):
            return (*self.who(of[0]), "ability")
        j = self.last(lambda e: e[1] == "move", before=i)
        if j >= 0:
            return (*self.who(self.events[j][2]), "move")
        return None


# -- our side ---------------------------------------------------------------------------------
def our_side(battle, request: dict, proto: Protocol) -> dict:
    role = battle.player_role
    team, patches = [], []
    active_req = (request.get("active") or [{}])[0]
    for i, p in enumerate(request["side"]["pokemon"]):
        det = parse_details(p["details"])
        hp, maxhp, status = parse_condition(p["condition"])
        name = p["ident"].split(": ", 1)[1]
        if to_id(det["species"]) in ILLUSION or to_id(p.get("baseAbility", "")) == "illusion":
            raise Refusal("illusion", f"our {name}")
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
        patch: dict = {"hp": hp, "status": status if status in ("slp", "tox", "psn", "brn", "par", "frz") else ""}
        if proto.switched_in(role, name) >= 0:
            patch["beenIn"] = True
        if status == "slp":
            patch.update(sleep_patch(proto, role, name, battle.gen))
        if status == "tox":
            patch["statusState"] = {"stage": toxic_stage(proto, role, name)}
        if p.get("terastallized"):
            patch["terastallized"] = p["terastallized"]
        if p.get("active") and p.get("ability") and p["ability"] != p.get("baseAbility"):
            patch["ability"] = p["ability"]  # Trace, Skill Swap, ...: the request says what it has now
        if p.get("active") and hp == 0:  # fainted in the turn that ended: its switch is the decision
            patch["pp"] = [bench_pp(mon, m) for m in moves]
        elif p.get("active"):
            patch["pp"] = [m.get("pp") for m in active_req.get("moves", [])]  # in slot order
            patch["boosts"] = {k: v for k, v in mon.boosts.items() if v}
            patch["activeTurns"] = mon._active_turns
            patch["volatiles"] = volatiles(mon, role, name, proto, battle.gen)
            ability = ability_state(mon, role, name, proto)
            if ability:
                patch["abilityState"] = ability
            if s["item"] in CHOICE_ITEMS:
                last = last_move(proto, role, name)
                if last:
                    patch["volatiles"]["choicelock"] = {"move": last}
        else:
            patch["pp"] = [bench_pp(mon, m) for m in moves]
        patches.append(patch)
    return {"name": battle.player_username, "team": team, "active": 0, "pokemon": patches,
            "conditions": side_conditions(battle.side_conditions, role, battle, proto),
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


# -- timers and volatiles, from the protocol --------------------------------------------------
def sleep_patch(proto: Protocol, side: str, name: str, gen: int) -> dict:
    start = proto.last(lambda m: m[1] == "-status" and proto.mine(m, side, name) and m[3] == "slp")
    seen = proto.count(lambda m: m[1] == "cant" and proto.mine(m, side, name) and m[3] == "slp", start)
    rest = start >= 0 and any("Rest" in p for p in proto.events[start][4:])
    if rest and gen >= 3:
        return {"statusState": {"time": max(1, 3 - seen), "startTime": 3}}
    return {"statusSeen": seen}


def toxic_stage(proto: Protocol, side: str, name: str) -> int:
    start = max(proto.switched_in(side, name),
                proto.last(lambda m: m[1] == "-status" and proto.mine(m, side, name) and m[3] == "tox"))
    return proto.count(lambda m: m[1] == "-damage" and proto.mine(m, side, name)
                       and any(p == "[from] psn" for p in m[4:]), start)


def last_move(proto: Protocol, side: str, name: str) -> Optional[str]:
    """The last move this Pokémon chose since it switched in (not one called by another)."""
    start = proto.switched_in(side, name)
    i = proto.last(lambda m: m[1] == "move" and proto.mine(m, side, name)
                   and not any(p.startswith("[from]") for p in m[4:]))
    return to_id(proto.events[i][3]) if i > start else None


def volatiles(mon, side: str, name: str, proto: Protocol, gen: int) -> dict:
    """The Showdown volatiles of an active Pokémon from what poke-env tracks; refuses the rest."""
    since = proto.switched_in(side, name)
    for m in proto.events[since + 1:]:
        if m[1] == "-transform" and proto.mine(m, side, name):  # its target keeps nothing of it
            raise Refusal("transform", name)
        if m[1] == "-formechange" and proto.mine(m, side, name):
            raise Refusal("forme_change", f"{name} {m[3]}")
    if mon.must_recharge:
        raise Refusal("recharge", name)
    if mon.preparing:
        raise Refusal("two_turn_move", name)
    out: dict = {}
    for effect in mon.effects:
        if effect in IGNORED_EFFECTS or effect in ABILITY_STATES or effect.ends_on_turn:
            continue
        if effect == Effect.GLAIVE_RUSH:
            # Showdown drops it before the user's next move, even one it cannot make (a 'cant'
            # poke-env does not clear it on): only a Glaive Rush its user has not acted since counts
            i = proto.last(lambda m: m[1] == "-singlemove" and proto.mine(m, side, name)
                           and to_id(m[3]) == "glaiverush")
            if i > since and not proto.count(lambda m: m[1] in ("move", "cant") and proto.mine(m, side, name), i):
                out["glaiverush"] = {}
            continue
        if effect == Effect.HEAL_BLOCK:
            out["healblock"] = psychic_noise(side, name, proto, since)
            continue
        if effect == Effect.TYPECHANGE:
            out["typechange"] = typechange(side, name, proto, since)
            continue
        if effect in PARADOX:
            boost = paradox(PARADOX[effect], side, name, proto, since)
            if boost is not None:
                out[PARADOX[effect]] = boost
            continue
        if effect not in VOLATILES:
            raise Refusal(f"volatile:{effect.name.lower()}", name)
        vid, fields = VOLATILES[effect]
        fields = dict(fields)
        label = effect.name.lower().replace("_", "")
        start = proto.last(lambda m: m[1] == "-start" and proto.mine(m, side, name)
                           and to_id(m[3]).endswith(label.replace("move", "")))
        if effect == Effect.SUBSTITUTE:
            hit = proto.count(lambda m: m[1] == "-activate" and proto.mine(m, side, name)
                              and "substitute" in to_id(m[3]) and "[damage]" in m[4:], start)
            if hit:
                raise Refusal("substitute_hp", name)
        elif effect == Effect.CONFUSION:
            fields["seen"] = proto.count(lambda m: m[1] == "-activate" and proto.mine(m, side, name)
                                         and to_id(m[3]) == "confusion", start)
        elif "seen" in fields:
            fields["seen"] = proto.turns_since(start) if start >= 0 else 0
        out[vid] = fields
    if mon.protect_counter:
        out["stall"] = {"uses": mon.protect_counter}
    return out


def paradox(label: str, side: str, name: str, proto: Protocol, since: int) -> Optional[dict]:
    """Quark Drive / Protosynthesis: '-start|p1a: X|quarkdrivespe' names the stat; a '[fromitem]'
    on the ability's activation before it, Booster Energy; an '-end' after it (the terrain or
    sun ended): None (poke-env keeps the stat's effect until a switch)."""
    i = proto.last(lambda m: m[1] == "-start" and proto.mine(m, side, name) and to_id(m[3]).startswith(label))
    stat = to_id(proto.events[i][3])[len(label):] if i > since else ""
    if stat not in ("atk", "def", "spa", "spd", "spe"):
        raise Refusal(f"volatile:{label}", f"{name}: no stat seen")
    if proto.last(lambda m: m[1] == "-end" and proto.mine(m, side, name) and to_id(m[3]) == label) > i:
        return None
    j = proto.last(lambda m: m[1] == "-activate" and proto.mine(m, side, name) and label in to_id(m[3]), before=i)
    fields: dict = {"bestStat": stat}
    if j > since and "[fromitem]" in proto.events[j][4:]:
        fields["fromBooster"] = True
    return fields


def psychic_noise(side: str, name: str, proto: Protocol, since: int) -> dict:
    """Heal Block from Psychic Noise (gen 9's only source): two turn ends from its start (a second
    Psychic Noise does not renew it). The Heal Block move (5 turns, or 7: Persistent) is refused."""
    i = proto.last(lambda m: m[1] == "-start" and proto.mine(m, side, name) and to_id(m[3]) == "movehealblock")
    j = proto.last(lambda m: m[1] == "move", before=i) if i > since else -1
    if j < 0 or to_id(proto.events[j][3]) != "psychicnoise":
        raise Refusal("volatile:heal_block", f"{name}: not from Psychic Noise")
    left = 2 - proto.turns_since(i)
    if left <= 0:
        raise Refusal("volatile:heal_block", f"{name}: outlasted its two turns")
    return {"duration": left}


def locked_move(proto: Protocol, i: int, gen: int, status: str, quiet: bool = False) -> Optional[dict]:
    """Outrage, Petal Dance, Thrash, Raging Fury at event ``i``, the last move of the active
    Pokémon: Showdown's lockedmove lasts 2-3 turns, each use after the first marked
    '[from] lockedmove'; the move and the uses in a row ({"move", "used"}: Node draws the length
    given them). None where it is over: its fatigue's confusion, sleep, a turn end since without
    a use (a 'cant'). ``quiet``: a fatigue Showdown would add without a line (already confused,
    Own Tempo, Misty Terrain, Safeguard), so two uses may have ended it: refused. Refused too:
    Uproar, Rollout, Ice Ball (locks of their own), gens 1-2's rules, a gen 1-3 faint's switch
    before the turn's residual, a lock begun by another move (Metronome, Dancer), a last use
    that did not hit (a miss, Protect, an immunity, an absorbing ability: it may end the lock)."""
    m = proto.events[i]
    side, name = proto.who(m[2])
    move = to_id(m[3])
    if move not in LOCKED_MOVE or gen < 3:
        raise Refusal("locked_move", f"{name}: {move}")
    ends = proto.ends_since(i)
    if ends > 1:
        return None
    if ends == 0:
        raise Refusal("locked_move", f"{name}: its turn's residual to come")
    if any(p.startswith("[") and to_id(p) != "fromlockedmove" for p in m[4:]):  # [miss], [from]move: Metronome
        raise Refusal("locked_move", f"{name}: {' '.join(m[4:])}")
    stop = next((j for j in range(i + 1, len(proto.events))
                 if proto.events[j][1] in ("move", "cant", "upkeep", "turn", "switch", "drag")), len(proto.events))
    foe = "p1" if side == "p2" else "p2"
    hit = any(len(e) > 2 and proto.who(e[2])[0] == foe and (
        (e[1] == "-damage" and not any(p.startswith("[") for p in e[4:]))
        or (e[1] in ("-activate", "-end") and len(e) > 3 and "substitute" in to_id(e[3])))
        for e in proto.events[i + 1:stop])
    if not hit:
        raise Refusal("locked_move", f"{name}: its last {move} did not hit")
    if status == "slp" or proto.count(lambda e: e[1] == "-start" and proto.mine(e, side, name)
                                      and to_id(e[3]) == "confusion" and "[fatigue]" in e[4:], i):
        return None
    used, j = 1, i
    while any(to_id(p) == "fromlockedmove" for p in proto.events[j][4:]):
        used += 1
        j = proto.last(lambda e: e[1] == "move" and proto.mine(e, side, name), before=j)
        if j < 0 or to_id(proto.events[j][3]) != move:
            raise Refusal("locked_move", f"{name}: a lock with no start")
    if used > 2 or (used == 2 and quiet):  # its end may have come with no fatigue line
        raise Refusal("locked_move", f"{name}: {used} uses, its fatigue not seen")
    return {"move": move, "used": used}


def typechange(side: str, name: str, proto: Protocol, since: int) -> dict:
    """'-start|p2a: Greninja|typechange|Water|[from] ability: Protean': the types it has now, and
    the ability that changed them (spent until its next switch-in in gen 9); Reflect Type names
    no type ('-start|...|typechange|[from] move: Reflect Type|[of] ...'): refused."""
    m: list = []
    spent = None  # Protean / Libero stay spent after a later change by a move (Soak, Burn Up)
    for e in proto.events[since + 1:]:
        if e[1] == "-start" and proto.mine(e, side, name) and len(e) > 3 and to_id(e[3]) == "typechange":
            m = e
            by = next((to_id(p.split(":", 1)[1]) for p in e[5:] if p.startswith("[from] ability:")), None)
            spent = by if by in ("protean", "libero") else spent
    if len(m) < 5 or not m[4] or m[4].startswith("["):
        raise Refusal("volatile:typechange", f"{name}: no type named")
    return {"types": m[4].split("/"), **({"ability": spent} if spent else {})}


def ability_state(mon, side: str, name: str, proto: Protocol) -> Optional[dict]:
    """What an active Pokémon's ability counted that its state must carry: Supreme Overlord's
    fallen allies ('-start|p1a: Kingambit|fallen3', the count it took at its switch-in), Slow
    Start's turns left ("counter")."""
    since = proto.switched_in(side, name)
    out = slow_start(side, name, proto, since)
    if OVERLORD & set(mon.effects):
        out = {**(out or {}), **overlord(side, name, proto, since)}
    return out


def slow_start(side: str, name: str, proto: Protocol, since: int) -> Optional[dict]:
    """Slow Start counts 5 turn ends from its '-start' (a switch-in's, or its ability's return),
    but only those of turns it was in for from their start (not its switch-in turn's, nor a gen 1-3
    faint's switch before the residual); its '-end' ends it (a built start would begin it afresh)."""
    i = proto.last(lambda m: m[1] == "-start" and proto.mine(m, side, name) and to_id(m[3]) == "abilityslowstart")
    if i <= since:
        return None
    if proto.last(lambda m: m[1] == "-end" and proto.mine(m, side, name) and to_id(m[3]) == "slowstart") > i:
        return {"counter": 0}
    ends = [j for j in range(i + 1, len(proto.events)) if proto.events[j][1] == "upkeep"]
    # the first turn end counts where a turn began between its switch-in and it
    entered_during = bool(ends) and not any(proto.events[j][1] == "turn" for j in range(since + 1, ends[0]))
    return {"counter": max(5 - len(ends) + entered_during, 0)}


def overlord(side: str, name: str, proto: Protocol, since: int) -> dict:
    i = proto.last(lambda m: m[1] == "-start" and proto.mine(m, side, name) and to_id(m[3]).startswith("fallen"))
    n = to_id(proto.events[i][3])[len("fallen"):] if i > since else ""
    if not n.isdigit():
        raise Refusal("volatile:supreme_overlord", f"{name}: no count seen")
    if proto.last(lambda m: m[1] == "-end" and proto.mine(m, side, name) and to_id(m[3]).startswith("fallen")) > i:
        raise Refusal("volatile:supreme_overlord", f"{name}: its count ended (its ability changed)")
    return {"fallen": int(n)}


def side_conditions(conditions: dict, side: str, battle, proto: Protocol) -> dict:
    out = {}
    for cond, value in conditions.items():
        cid = to_id(cond.name.replace("_", ""))
        if cond in (SideCondition.SPIKES, SideCondition.TOXIC_SPIKES):
            out[cid] = {"layers": value}
            continue
        start = proto.last(lambda m: m[1] == "-sidestart" and m[2].startswith(side)
                           and to_id(m[3]).endswith(cid))
        fields: dict = {"elapsed": proto.turns_since(start) if start >= 0 else battle.turn - value}
        src = proto.source_before(start) if start >= 0 else None
        if src is not None:
            fields["source"] = list(src[:2])  # resolved to a team index by the caller
        out[cid] = fields
    return out


FUTURE_MOVES = {"futuresight", "doomdesire"}


def future_moves(proto: Protocol, gen: int) -> dict:
    """The Future Sight / Doom Desire on its way to each side ('-start|p2a: Slowking|move: Future
    Sight'): side -> {"move", "source": [side, name], "residuals": the turn ends left before it
    hits (it hits at the third after its use)}; one that hit ('-end' on the slot) is gone. Gens
    2-4 fixed its damage at use, against that turn's target: refused (``future_move``)."""
    out: dict = {}
    for i, m in enumerate(proto.events):
        move = to_id(m[3]).removeprefix("move") if m[1] == "-start" and len(m) > 3 else ""
        if move not in FUTURE_MOVES:
            continue
        side, name = proto.who(m[2])
        target = "p2" if side == "p1" else "p1"
        left = 3 - proto.ends_since(i)
        hit = proto.count(lambda e: e[1] == "-end" and e[2].startswith(target) and len(e) > 3
                          and to_id(e[3]).removeprefix("move") == move, i)
        if left > 0 and not hit:
            out[target] = {"move": move, "source": [side, name], "residuals": left}
        else:
            out.pop(target, None)
    if out and gen <= 4:
        raise Refusal("future_move", ", ".join(f["move"] for f in out.values()))
    return out


def field_state(battle, proto: Protocol) -> dict:
    f: dict = {"pseudoWeather": {}}
    for weather in battle.weather:
        wid = to_id(weather.name)
        f["weather"] = wid
        i = proto.last(lambda m: m[1] == "-weather" and to_id(m[2]) == wid and "[upkeep]" not in m[3:])
        if i >= 0:
            f["weatherElapsed"] = proto.turns_since(i)
            f["weatherSource"] = proto.source_before(i)
    for fld in battle.fields:
        fid = to_id(fld.name)
        i = proto.last(lambda m: m[1] == "-fieldstart" and to_id(m[2]).endswith(fid))
        if fld.is_terrain:
            f["terrain"] = fid
            if i >= 0:
                f["terrainElapsed"] = proto.turns_since(i)
                f["terrainSource"] = proto.source_before(i)
        else:
            f["pseudoWeather"][fid] = {"elapsed": proto.turns_since(i) if i >= 0 else 0}
    return f


# -- the opponent -----------------------------------------------------------------------------
def gender_of(mon) -> str:
    """Showdown's letter for a poke-env Pokémon's gender ('' when none or unknown)."""
    return {"MALE": "M", "FEMALE": "F"}.get(mon.gender.name, "") if mon.gender else ""


def known_opponents(battle, proto: Protocol) -> list[dict]:
    """The revealed facts of each opponent Pokémon seen, in poke-env's order."""
    out = []
    role = battle.opponent_role
    for ident, mon in battle.opponent_team.items():
        name = ident.split(": ", 1)[1]
        species = to_id(mon.species)
        if species in ILLUSION or mon.ability == "illusion":
            raise Refusal("illusion", f"their {name}")
        if (species == "ditto" or mon.ability == "imposter") and mon.active and not mon.fainted:  # transformed
            raise Refusal("ditto", f"their {name}")
        item = None if mon.item == UNKNOWN_ITEM else (mon.item or "")
        k = {"name": name, "species": species, "level": mon.level,
             "gender": gender_of(mon),
             "moves": list(mon.moves), "item": item, "ability": mon.ability or None,
             "tera": mon.tera_type.name.capitalize() if mon.is_terastallized and mon.tera_type else None}
        out.append((k, mon, name, role))
    return out


def opponent_patch(mon, name: str, role: str, proto: Protocol, battle, set_: dict) -> dict:
    patch: dict = {}
    if mon.fainted:  # a revealed loss of its item stays revealed
        return {"hp": 0, "item": ""} if mon.item == "" or mon.item is None else {"hp": 0}
    if proto.switched_in(role, name) >= 0:
        patch["beenIn"] = True
    patch["hpFraction"] = mon.current_hp_fraction
    status = mon.status.name.lower() if mon.status else ""
    patch["status"] = status
    if status == "slp":
        patch.update(sleep_patch(proto, role, name, battle.gen))
    if status == "tox":
        patch["statusState"] = {"stage": toxic_stage(proto, role, name)}
    if mon.item == "" or mon.item is None:
        patch["item"] = ""
    pp = []
    for m in set_["moves"]:
        seen = mon.moves.get(to_id(m))
        pp.append(seen.current_pp if seen is not None and seen.current_pp < seen.max_pp else None)
    patch["pp"] = pp
    if mon.is_terastallized and mon.tera_type:
        patch["terastallized"] = mon.tera_type.name.capitalize()
    if mon.active:
        patch["boosts"] = {k: v for k, v in mon.boosts.items() if v}
        patch["activeTurns"] = mon._active_turns
        patch["volatiles"] = volatiles(mon, role, name, proto, battle.gen)
        ability = ability_state(mon, role, name, proto)
        if ability:
            patch["abilityState"] = ability
        last = last_move(proto, role, name)
        i = proto.last(lambda m: m[1] == "move" and proto.mine(m, role, name))
        if i > proto.switched_in(role, name) and to_id(proto.events[i][3]) in LOCKING_MOVES:
            quiet = (Effect.CONFUSION in mon.effects or mon.ability == "owntempo"
                     or Field.MISTY_TERRAIN in battle.fields
                     or SideCondition.SAFEGUARD in battle.opponent_side_conditions)
            lock = locked_move(proto, i, battle.gen, status, quiet)
            if lock:
                patch["volatiles"]["lockedmove"] = lock
        if to_id(set_.get("item", "")) in CHOICE_ITEMS and last and "item" not in patch:
            patch["volatiles"]["choicelock"] = {"move": last}
    return patch


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


# -- the whole -------------------------------------------------------------------------------
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


def residual_pending(battle, request: dict, proto: Protocol) -> bool:
    """Gens 1-3 ask for a faint's switch before the turn's residual (Showdown's runAction): the
    switch-ins, then the residual (Leftovers, weather, poison), then the next turn."""
    if battle.gen > 3 or not request.get("forceSwitch"):
        return False
    turn = proto.last(lambda m: m[1] == "turn")
    return proto.ends_since(turn) == 0


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
    futures = future_moves(proto, battle.gen)
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
                  "conditions": side_conditions(battle.opponent_side_conditions, opp, battle, proto),
                  "teraUsed": bool(battle.opponent_used_tera) or battle.gen != 9}
        us = {**ours, "conditions": {c: dict(f) for c, f in ours["conditions"].items()}}
        teams = {role: us["team"], opp: team}
        _sources(us["conditions"], teams)
        _sources(theirs["conditions"], teams)
        for side_id, side in ((role, us), (opp, theirs)):
            if side_id in futures:
                f = futures[side_id]
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
