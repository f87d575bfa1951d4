"""How the protocol is read for each carried effect: the readers of :mod:`.effects`' table.

A reader takes the :class:`Holder` of an effect (a Pokémon, a side or the field, with the
battle's :class:`~.protocol.Protocol`) and the entry's name, and gives the fields a STATE holds
it with, or None where it is not on now; what it cannot read faithfully raises
:class:`~.protocol.Refusal`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from poke_env.battle import Effect, Field, SideCondition

from .protocol import Protocol, Refusal, to_id

CHOICE_ITEMS = ("choiceband", "choicescarf", "choicespecs")
# Moves that lock the user for 2-3 turns, unseen by poke-env: right after one the state carries
# Showdown's lockedmove (LOCKED_MOVE's, gens 3-9), the rest are refused.
LOCKING_MOVES = {"outrage", "petaldance", "thrash", "uproar", "rollout", "iceball", "ragingfury"}
LOCKED_MOVE = {"outrage", "petaldance", "thrash", "ragingfury"}
FUTURE_MOVES = {"futuresight", "doomdesire"}


@dataclass
class Holder:
    """What holds an effect, as the protocol shows it: a Pokémon (``name``, poke-env's ``mon``,
    ``since``: the event of its last switch-in), a side, or the field (no name)."""
    proto: Protocol
    side: str = ""  # "p1" | "p2"
    name: str = ""
    mon: Any = None
    battle: Any = None
    gen: int = 9
    status: str = ""
    item: str = ""  # the item its state holds (ours: the request's; theirs: the drawn set's, "" when gone)
    since: int = -1

    def __post_init__(self):
        if self.battle is not None:
            self.gen = self.battle.gen
        if self.name:
            self.since = self.proto.switched_in(self.side, self.name)

    @property
    def ours(self) -> bool:
        return self.battle is not None and self.side == self.battle.player_role

    def mine(self, m: list) -> bool:
        return self.proto.mine(m, self.side, self.name)

    def last_start(self, test) -> int:
        """This Pokémon's last '-start' whose effect (to_id) passes ``test``."""
        return self.proto.last(lambda m: m[1] == "-start" and self.mine(m) and test(to_id(m[3])))


# -- readers: an active Pokémon's volatiles -------------------------------------------------
def no_fields(h: Holder, effect: str) -> dict:
    return {}


def from_foe(h: Holder, effect: str) -> dict:
    """Set by the foe's active Pokémon (Leech Seed's healing, Attract's target)."""
    return {"source": "foe"}


def turns_seen(h: Holder, effect: str) -> dict:
    """A timer Node draws by the effect's rule, given the turns since its '-start'."""
    start = h.last_start(lambda e: e.endswith(effect))
    return {"seen": h.proto.turns_since(start) if start >= 0 else 0}


def confusion(h: Holder, effect: str) -> dict:
    """Confusion's timer counts the turns it was tested ('-activate|...|confusion')."""
    start = h.last_start(lambda e: e.endswith(effect))
    return {"seen": h.proto.count(lambda m: m[1] == "-activate" and h.mine(m) and to_id(m[3]) == "confusion", start)}


def substitute(h: Holder, effect: str) -> dict:
    """A substitute as made (Node runs its start: a quarter of the HP); one hit since cannot be
    told: refused (``substitute_hp``)."""
    start = h.last_start(lambda e: e.endswith(effect))
    hit = h.proto.count(lambda m: m[1] == "-activate" and h.mine(m) and "substitute" in to_id(m[3])
                        and "[damage]" in m[4:], start)
    if hit:
        raise Refusal("substitute_hp", h.name)
    return {"seen": 0}


def glaive_rush(h: Holder, effect: str) -> Optional[dict]:
    """Showdown drops it before the user's next move, even one it cannot make (a 'cant' poke-env
    does not clear it on): only a Glaive Rush its user has not acted since counts."""
    proto = h.proto
    i = proto.last(lambda m: m[1] == "-singlemove" and h.mine(m) and to_id(m[3]) == "glaiverush")
    if i > h.since and not proto.count(lambda m: m[1] in ("move", "cant") and h.mine(m), i):
        return {}
    return None


def psychic_noise(h: Holder, effect: str) -> dict:
    """Heal Block from Psychic Noise (gen 9's only source): two turn ends from its start (a second
    Psychic Noise does not renew it). The Heal Block move (5 turns, or 7: Persistent) is refused."""
    proto = h.proto
    i = h.last_start(lambda e: e == "movehealblock")
    j = proto.last(lambda m: m[1] == "move", before=i) if i > h.since else -1
    if j < 0 or to_id(proto.events[j][3]) != "psychicnoise":
        raise Refusal("volatile:heal_block", f"{h.name}: not from Psychic Noise")
    left = 2 - proto.turns_since(i)
    if left <= 0:
        raise Refusal("volatile:heal_block", f"{h.name}: outlasted its two turns")
    return {"duration": left}


def typechange(h: Holder, effect: str) -> dict:
    """'-start|p2a: Greninja|typechange|Water|[from] ability: Protean': the types it has now, and
    the ability that changed them (spent until its next switch-in in gen 9); Reflect Type names
    no type ('-start|...|typechange|[from] move: Reflect Type|[of] ...'): refused."""
    m: list = []
    spent = None  # Protean / Libero stay spent after a later change by a move (Soak, Burn Up)
    for e in h.proto.events[h.since + 1:]:
        if e[1] == "-start" and h.mine(e) and len(e) > 3 and to_id(e[3]) == "typechange":
            m = e
            by = next((to_id(p.split(":", 1)[1]) for p in e[5:] if p.startswith("[from] ability:")), None)
            spent = by if by in ("protean", "libero") else spent
    if len(m) < 5 or not m[4] or m[4].startswith("["):
        raise Refusal("volatile:typechange", f"{h.name}: no type named")
    return {"types": m[4].split("/"), **({"ability": spent} if spent else {})}


# What wakes a paradox ability without its Booster Energy (Showdown's ids; Protosynthesis:
# sunnyday alone, not Desolate Land): (the field's kind, the id that wakes it).
PARADOX_WAKES = {"protosynthesis": ("weather", "sunnyday"), "quarkdrive": ("terrain", "electricterrain")}


def paradox(h: Holder, effect: str) -> Optional[dict]:
    """Quark Drive / Protosynthesis: '-start|p1a: X|quarkdrivespe' names the stat; a '[fromitem]'
    on the ability's activation before it, Booster Energy (it then outlasts the weather or
    terrain); an '-end' after it (the terrain or sun ended): None (poke-env keeps the stat's
    effect until a switch)."""
    proto = h.proto
    i = h.last_start(lambda e: e.startswith(effect))
    stat = to_id(proto.events[i][3])[len(effect):] if i > h.since else ""
    if stat not in ("atk", "def", "spa", "spd", "spe"):
        raise Refusal(f"volatile:{effect}", f"{h.name}: no stat seen")
    if proto.last(lambda m: m[1] == "-end" and h.mine(m) and to_id(m[3]) == effect) > i:
        return None
    j = proto.last(lambda m: m[1] == "-activate" and h.mine(m) and effect in to_id(m[3]), before=i)
    fields: dict = {"bestStat": stat}
    if j > h.since and "[fromitem]" in proto.events[j][4:]:
        fields["fromBooster"] = True
    return fields


def stall(h: Holder, effect: str) -> Optional[dict]:
    """Protect's counter after its uses in a row."""
    return {"uses": h.mon.protect_counter} if h.mon.protect_counter else None


# -- readers: from the last move ------------------------------------------------------------
def last_move(proto: Protocol, side: str, name: str) -> Optional[str]:
    """The last move this Pokémon chose since it switched in (not one called by another)."""
    start = proto.switched_in(side, name)
    i = proto.last(lambda m: m[1] == "move" and proto.mine(m, side, name)
                   and not any(p.startswith("[from]") for p in m[4:]))
    return to_id(proto.events[i][3]) if i > start else None


def choice_lock(h: Holder, effect: str) -> Optional[dict]:
    """A Choice item locks its holder into the last move it chose since it switched in."""
    if to_id(h.item) not in CHOICE_ITEMS:
        return None
    last = last_move(h.proto, h.side, h.name)
    return {"move": last} if last else None


def lock(h: Holder, effect: str) -> Optional[dict]:
    """The opponent locked into Outrage and the like (:func:`locked_move`). Our own lock leaves one
    legal choice: refused before any state is drawn (``locked_move``)."""
    if h.ours:
        return None
    proto, battle = h.proto, h.battle
    i = proto.last(lambda m: m[1] == "move" and h.mine(m))
    if i <= h.since or to_id(proto.events[i][3]) not in LOCKING_MOVES:
        return None
    quiet = (Effect.CONFUSION in h.mon.effects or h.mon.ability == "owntempo"
             or Field.MISTY_TERRAIN in battle.fields
             or SideCondition.SAFEGUARD in battle.opponent_side_conditions)
    return locked_move(proto, i, h.gen, h.status, quiet)


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


# -- readers: an ability's state ------------------------------------------------------------
def slow_start(h: Holder, effect: str) -> Optional[dict]:
    """Slow Start counts 5 turn ends from its '-start' (a switch-in's, or its ability's return),
    but only those of turns it was in for from their start (not its switch-in turn's, nor a gen 1-3
    faint's switch before the residual); its '-end' ends it (a built start would begin it afresh)."""
    proto, since = h.proto, h.since
    i = h.last_start(lambda e: e == "abilityslowstart")
    if i <= since:
        return None
    if proto.last(lambda m: m[1] == "-end" and h.mine(m) and to_id(m[3]) == "slowstart") > i:
        return {"counter": 0}
    ends = [j for j in range(i + 1, len(proto.events)) if proto.events[j][1] == "upkeep"]
    # the first turn end counts where a turn began between its switch-in and it
    entered_during = bool(ends) and not any(proto.events[j][1] == "turn" for j in range(since + 1, ends[0]))
    return {"counter": max(5 - len(ends) + entered_during, 0)}


OVERLORD = (Effect.SUPREME_OVERLORD, Effect.FALLEN, Effect.FALLEN1, Effect.FALLEN2, Effect.FALLEN3,
            Effect.FALLEN4, Effect.FALLEN5)


def overlord(h: Holder, effect: str) -> Optional[dict]:
    """Supreme Overlord's fallen allies ('-start|p1a: Kingambit|fallen3', the count it took at
    its switch-in), where poke-env shows its activation or count."""
    if not set(OVERLORD) & set(h.mon.effects):
        return None
    proto = h.proto
    i = h.last_start(lambda e: e.startswith("fallen"))
    n = to_id(proto.events[i][3])[len("fallen"):] if i > h.since else ""
    if not n.isdigit():
        raise Refusal("volatile:supreme_overlord", f"{h.name}: no count seen")
    if proto.last(lambda m: m[1] == "-end" and h.mine(m) and to_id(m[3]).startswith("fallen")) > i:
        raise Refusal("volatile:supreme_overlord", f"{h.name}: its count ended (its ability changed)")
    return {"fallen": int(n)}


# -- readers: a status's timer ----------------------------------------------------------------
def sleep(h: Holder, effect: str) -> Optional[dict]:
    """Turns it failed to move since it fell asleep (Node draws the timer given them); Rest's
    sleep (gens 3+) is three turns, less those."""
    if h.status != "slp":
        return None
    proto = h.proto
    start = proto.last(lambda m: m[1] == "-status" and h.mine(m) and m[3] == "slp")
    seen = proto.count(lambda m: m[1] == "cant" and h.mine(m) and m[3] == "slp", start)
    rest = start >= 0 and any("Rest" in p for p in proto.events[start][4:])
    if rest and h.gen >= 3:  # ("rest": Showdown's state does not say where a sleep came from)
        return {"statusState": {"time": max(1, 3 - seen), "startTime": 3, "rest": True}}
    return {"statusSeen": seen}


def toxic(h: Holder, effect: str) -> Optional[dict]:
    """Toxic's stage: its poison damage since it was poisoned or switched in."""
    if h.status != "tox":
        return None
    proto = h.proto
    start = max(h.since, proto.last(lambda m: m[1] == "-status" and h.mine(m) and m[3] == "tox"))
    return {"statusState": {"stage": proto.count(lambda m: m[1] == "-damage" and h.mine(m)
                                                 and any(p == "[from] psn" for p in m[4:]), start)}}


SCREENS = ("reflect", "lightscreen", "auroraveil")
SCREEN_TURNS, LIGHT_CLAY_TURNS = 5, 8


def side_condition_start(proto: Protocol, side: str, cid: str) -> tuple[int, Optional[tuple]]:
    """Where side condition ``cid`` last started on ``side`` (-1: not in the log) and who set it
    (:meth:`Protocol.source_before`)."""
    start = proto.last(lambda m: m[1] == "-sidestart" and m[2].startswith(side) and to_id(m[3]).endswith(cid))
    return start, (proto.source_before(start) if start >= 0 else None)


def outlasted_screen(cid: str, elapsed: int) -> bool:
    """A screen seen past its 5 turns: it was set with Light Clay (8)."""
    return cid in SCREENS and elapsed >= SCREEN_TURNS


# -- readers: a side's, the field's ------------------------------------------------------------
def side_conditions(h: Holder, effect: str) -> dict:
    """Each side condition poke-env keeps: its layers, or the turns since it started and who set
    it (Node draws its duration by the rule: Light Clay is the setter's)."""
    battle, proto, side = h.battle, h.proto, h.side
    conditions = battle.side_conditions if h.ours else battle.opponent_side_conditions
    out = {}
    for cond, value in conditions.items():
        cid = to_id(cond.name.replace("_", ""))
        if cond in (SideCondition.SPIKES, SideCondition.TOXIC_SPIKES):
            out[cid] = {"layers": value}
            continue
        start, src = side_condition_start(proto, side, cid)
        fields: dict = {"elapsed": proto.turns_since(start) if start >= 0 else battle.turn - value}
        if outlasted_screen(cid, fields["elapsed"]):
            # set with Light Clay, which the setter may have lost since (Knock Off) or never
            # shown: 8 - elapsed left, drawn as 5 from no source
            fields["elapsed"] -= LIGHT_CLAY_TURNS - SCREEN_TURNS
        elif src is not None:
            fields["source"] = list(src[:2])  # resolved to a team index by the caller
        out[cid] = fields
    return out


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


def future_move(h: Holder, effect: str) -> dict:
    """:func:`future_moves`, by the side it is on its way to."""
    return future_moves(h.proto, h.gen)


def weather(h: Holder, effect: str) -> dict:
    f: dict = {}
    for w in h.battle.weather:
        wid = to_id(w.name)
        f["weather"] = wid
        i = h.proto.last(lambda m: m[1] == "-weather" and to_id(m[2]) == wid and "[upkeep]" not in m[3:])
        if i >= 0:
            f["weatherElapsed"] = h.proto.turns_since(i)
            f["weatherSource"] = h.proto.source_before(i)
    return f


def _field_start(h: Holder, fid: str) -> int:
    return h.proto.last(lambda m: m[1] == "-fieldstart" and to_id(m[2]).endswith(fid))


def terrain(h: Holder, effect: str) -> dict:
    f: dict = {}
    for fld in h.battle.fields:
        if fld.is_terrain:
            fid = to_id(fld.name)
            i = _field_start(h, fid)
            f["terrain"] = fid
            if i >= 0:
                f["terrainElapsed"] = h.proto.turns_since(i)
                f["terrainSource"] = h.proto.source_before(i)
    return f


def pseudo_weather(h: Holder, effect: str) -> dict:
    """Trick Room, Gravity, ...: the turns since each started."""
    out = {}
    for fld in h.battle.fields:
        if not fld.is_terrain:
            fid = to_id(fld.name)
            i = _field_start(h, fid)
            out[fid] = {"elapsed": h.proto.turns_since(i) if i >= 0 else 0}
    return {"pseudoWeather": out}
