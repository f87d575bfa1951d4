"""The effects a sampled state carries: one table, :data:`EFFECTS`.

Each entry is one effect (a lock, Slow Start, Future Sight, a type change, a screen, ...) and
says, in its columns, where a STATE holds it (``holds``: a Pokémon's ``volatiles``, its
``abilityState`` or ``status`` fields, a side's ``conditions`` or ``future``, the field's
``weather``, ``terrain`` or ``pseudoWeather``), when it is read (``on``), how the protocol is
read (``read``, in :mod:`.readers`: the fields, or None where it is not on now; what it
cannot read faithfully raises :class:`~.protocol.Refusal`), how Showdown's state takes it
(``showdown``: the patch of ``leafhub/patch.js``'s ``PATCHES`` that applies those fields), the
poke-env effects that are it, and how poke-engine's state takes it (``engine``: an entry of
:data:`maple_async.search.pokeengine.translate.ENGINE_ENTRIES`, read off the built state). ``tests/test_search_effects.py`` pins every entry: a
protocol snippet, the fields its reader gives through the belief's own path, and the Node
patch those fields reach. Adding an effect is an entry here (and a reader where none fits)
and a case there.

When each is read (``on``): ``effect``: an active Pokémon's, once for each poke-env effect of
the entry it shows (in poke-env's order); ``active``: every active Pokémon's, the reader
saying whether it is on; ``lastmove``: an active Pokémon's, from its last move, after the
rest; ``pokemon``: every Pokémon's (its status's timer); ``side``: each side's; ``battle``:
once for the battle (the field, and the future move on its way to either side). A poke-env
effect that no entry names and :data:`IGNORED_EFFECTS` does not list refuses the decision
(``volatile:<name>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from poke_env.battle import Effect

from .protocol import Protocol, Refusal, parse_details
from .readers import (OVERLORD, Holder, choice_lock, confusion, from_foe, future_move, glaive_rush, lock,
                      no_fields, overlord, paradox, psychic_noise, pseudo_weather, side_conditions, sleep,
                      slow_start, stall, substitute, terrain, toxic, turns_seen, typechange, weather)

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
    "TERA_SHELL", "TOXIC_DEBRIS",
    "FUTURE_SIGHT", "DOOM_DESIRE",  # (these two: a slot condition, the futuremove entry)
    # an ability's one-time activation whose change the forme carries (forme_of)
    # (not Battle Bond: gen 9's is a boost once a battle, a flag the state does not carry)
    "DISGUISE", "ICE_FACE", "TERA_SHIFT", "ZERO_TO_HERO")
    if hasattr(Effect, n)}


@dataclass(frozen=True)
class Carried:
    """One carried effect (the columns: the module's docstring)."""
    name: str  # the effect: Showdown's id where it has one
    holds: str  # where a STATE holds it
    on: str  # when it is read
    read: Callable[[Holder, str], Optional[dict]]  # (holder, name) -> fields, None: not on
    showdown: str  # leafhub/patch.js's PATCHES: how Showdown's state takes the fields
    # how poke-engine's state takes it, read off the built state's snapshot: the kind of entry
    # of search/pokeengine/translate.py's ENGINE_ENTRIES that handles the effect's Showdown id
    # (volatile, status, side, slot, field, types; "derived": the engine counts it itself)
    engine: str
    pokeenv: tuple = ()  # the poke-env effects that are it


# -- the table --------------------------------------------------------------------------------
PARADOX = {label: (getattr(Effect, effect),) + tuple(getattr(Effect, f"{label.upper()}{stat}")
                                                    for stat in ("ATK", "DEF", "SPA", "SPD", "SPE"))
           for label, effect in (("quarkdrive", "QUARK_DRIVE"), ("protosynthesis", "PROTOSYNTHESIS"))}

EFFECTS: tuple[Carried, ...] = (
    #       name               holds            on          read             showdown         engine      pokeenv
    Carried("substitute",      "volatiles",     "effect",   substitute,      "drawnVolatile", "volatile", (Effect.SUBSTITUTE,)),
    Carried("confusion",       "volatiles",     "effect",   confusion,       "drawnVolatile", "volatile", (Effect.CONFUSION,)),
    Carried("leechseed",       "volatiles",     "effect",   from_foe,        "volatile",      "volatile", (Effect.LEECH_SEED,)),
    Carried("taunt",           "volatiles",     "effect",   turns_seen,      "drawnVolatile", "volatile", (Effect.TAUNT,)),
    Carried("yawn",            "volatiles",     "effect",   turns_seen,      "drawnVolatile", "volatile", (Effect.YAWN,)),
    Carried("magnetrise",      "volatiles",     "effect",   turns_seen,      "drawnVolatile", "volatile", (Effect.MAGNET_RISE,)),
    Carried("focusenergy",     "volatiles",     "effect",   no_fields,       "volatile",      "volatile", (Effect.FOCUS_ENERGY,)),
    Carried("aquaring",        "volatiles",     "effect",   no_fields,       "volatile",      "volatile", (Effect.AQUA_RING,)),
    Carried("ingrain",         "volatiles",     "effect",   no_fields,       "volatile",      "volatile", (Effect.INGRAIN,)),
    Carried("curse",           "volatiles",     "effect",   no_fields,       "volatile",      "volatile", (Effect.CURSE,)),
    Carried("nightmare",       "volatiles",     "effect",   no_fields,       "volatile",      "volatile", (Effect.NIGHTMARE,)),
    Carried("flashfire",       "volatiles",     "effect",   no_fields,       "volatile",      "volatile", (Effect.FLASH_FIRE,)),
    Carried("attract",         "volatiles",     "effect",   from_foe,        "volatile",      "volatile", (Effect.ATTRACT,)),
    Carried("charge",          "volatiles",     "effect",   turns_seen,      "drawnVolatile", "volatile", (Effect.CHARGE,)),
    Carried("saltcure",        "volatiles",     "effect",   no_fields,       "volatile",      "volatile", (Effect.SALT_CURE,)),
    Carried("throatchop",      "volatiles",     "effect",   turns_seen,      "drawnVolatile", "volatile", (Effect.THROAT_CHOP,)),
    Carried("glaiverush",      "volatiles",     "effect",   glaive_rush,     "volatile",      "volatile", (Effect.GLAIVE_RUSH,)),
    Carried("healblock",       "volatiles",     "effect",   psychic_noise,   "volatile",      "volatile", (Effect.HEAL_BLOCK,)),
    Carried("typechange",      "volatiles",     "effect",   typechange,      "typechange",    "types",    (Effect.TYPECHANGE,)),
    Carried("quarkdrive",      "volatiles",     "effect",   paradox,         "volatile",      "volatile", PARADOX["quarkdrive"]),
    Carried("protosynthesis",  "volatiles",     "effect",   paradox,         "volatile",      "volatile", PARADOX["protosynthesis"]),
    Carried("stall",           "volatiles",     "active",   stall,           "stall",         "volatile"),
    Carried("lockedmove",      "volatiles",     "lastmove", lock,            "lockedmove",    "volatile"),
    Carried("choicelock",      "volatiles",     "lastmove", choice_lock,     "volatile",      "volatile"),
    Carried("slowstart",       "abilityState",  "active",   slow_start,      "abilityState",  "volatile", (Effect.SLOW_START,)),
    Carried("supremeoverlord", "abilityState",  "active",   overlord,        "abilityState",  "derived",  OVERLORD),
    Carried("slp",             "status",        "pokemon",  sleep,           "status",        "status"),
    Carried("tox",             "status",        "pokemon",  toxic,           "status",        "status"),
    Carried("sideconditions",  "conditions",    "side",     side_conditions, "sideCondition", "side"),
    Carried("futuremove",      "future",        "battle",   future_move,     "futuremove",    "slot"),
    Carried("weather",         "weather",       "battle",   weather,         "weather",       "field"),
    Carried("terrain",         "terrain",       "battle",   terrain,         "terrain",       "field"),
    Carried("pseudoweather",   "pseudoWeather", "battle",   pseudo_weather,  "pseudoWeather", "field"),
)
BY_NAME = {e.name: e for e in EFFECTS}
SHOWN = {effect: e for e in EFFECTS for effect in e.pokeenv}  # poke-env's effect -> its entry


def _read(h: Holder, on: str, holds: tuple = ()) -> dict:
    """The fields of every entry read ``on`` this (held in ``holds``, where given) that is on
    now, by its name, in the table's order."""
    out: dict = {}
    for e in EFFECTS:
        if e.on == on and (not holds or e.holds in holds):
            fields = e.read(h, e.name)
            if fields is not None:
                out[e.name] = fields
    return out


def _merged(h: Holder, on: str, holds: tuple = ()) -> dict:
    """:func:`_read`'s fields, merged (those of a patch, a side or the field)."""
    out: dict = {}
    for fields in _read(h, on, holds).values():
        out.update(fields)
    return out


# -- what a Pokémon's patch, a side and the battle carry ------------------------------------------
def volatiles(mon, side: str, name: str, proto: Protocol, gen: int) -> dict:
    """The Showdown volatiles of an active Pokémon from what poke-env tracks; refuses the rest."""
    h = Holder(proto, side, name, mon=mon, gen=gen)
    for m in proto.events[h.since + 1:]:
        if m[1] == "-transform" and h.mine(m):  # its target keeps nothing of it
            raise Refusal("transform", name)
    if mon.must_recharge:
        raise Refusal("recharge", name)
    if mon.preparing:
        raise Refusal("two_turn_move", name)
    out: dict = {}
    for effect in mon.effects:
        if effect in IGNORED_EFFECTS or effect.ends_on_turn:
            continue
        entry = SHOWN.get(effect)
        if entry is None:
            raise Refusal(f"volatile:{effect.name.lower()}", name)
        if entry.on == "effect":  # (the others: an ability's state, read below)
            fields = entry.read(h, entry.name)
            if fields is not None:
                out[entry.name] = fields
    out.update(_read(h, "active", ("volatiles",)))
    return out


def forme_of(h: Holder) -> Optional[dict]:
    """The forme an active Pokémon changed to since its switch-in, the last change Showdown
    showed: ``-formechange`` (Stance Change, Hunger Switch, Shields Down, Gulp Missile, Flower
    Gift, Zen Mode: it ends with the switch-out) or ``detailschange`` (Disguise, Ice Face, Tera
    Shift, Shaymin-Sky frozen: it stays). None when it changed none."""
    i = h.proto.last(lambda m: m[1] in ("-formechange", "detailschange") and h.mine(m))
    if i <= h.since:
        return None
    species = parse_details(h.proto.events[i][3])["species"]
    # a change a status caused (Shaymin-Sky frozen) is a detailschange, then a -formechange
    permanent = h.proto.last(lambda m: m[1] == "detailschange" and h.mine(m)
                             and parse_details(m[3])["species"] == species) > h.since
    return {"species": species, "permanent": permanent}


def move_locks(h: Holder) -> dict:
    """The volatiles an active Pokémon's last move left it (a lock)."""
    return _read(h, "lastmove")


def ability_state(mon, side: str, name: str, proto: Protocol) -> Optional[dict]:
    """What an active Pokémon's ability counted that its state must carry: Supreme Overlord's
    fallen allies, Slow Start's turns left ("counter")."""
    return _merged(Holder(proto, side, name, mon=mon), "active", ("abilityState",)) or None


def active_patch(h: Holder) -> dict:
    """An active Pokémon's patch fields: its boosts, turns in, volatiles and ability state."""
    mon = h.mon
    patch = {"boosts": {k: v for k, v in mon.boosts.items() if v}, "activeTurns": mon._active_turns,
             "volatiles": volatiles(mon, h.side, h.name, h.proto, h.gen)}
    ability = ability_state(mon, h.side, h.name, h.proto)
    if ability:
        patch["abilityState"] = ability
    forme = forme_of(h)
    if forme:
        patch["forme"] = forme
    patch["volatiles"].update(move_locks(h))
    return patch


def status_timer(h: Holder) -> dict:
    """A Pokémon's status's timer, as patch fields (sleep's turns, toxic's stage)."""
    return _merged(h, "pokemon")


def side_conditions_of(battle, side: str, proto: Protocol) -> dict:
    """A side's conditions (SIDE's ``conditions``)."""
    return _merged(Holder(proto, side, battle=battle), "side")


def field_state(battle, proto: Protocol) -> dict:
    """The field (FIELD): weather, terrain and the rest, each with its turns and source."""
    return {"pseudoWeather": {}, **_merged(Holder(proto, battle=battle), "battle",
                                           ("weather", "terrain", "pseudoWeather"))}


def futures(battle, proto: Protocol) -> dict:
    """The future moves on their way to each side (side -> SIDE's ``future``)."""
    return _merged(Holder(proto, battle=battle), "battle", ("future",))
