"""search/belief/effects.py's table of carried effects, one case per entry.

Each entry is read from a protocol snippet through the belief's own path (its reader called,
its fields as a STATE carries them), and those fields reach, in leafhub's patch table
(search/leafhub/patch.js), the patch the entry names. A new entry needs a case here.
"""

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from poke_env.battle import Effect, Field, Pokemon, SideCondition, Weather

from maple_async.search.belief import effects
from maple_async.search.belief.protocol import Protocol
from maple_async.search.belief.readers import Holder

PATCH_JS = Path(effects.__file__).parents[1] / "leafhub" / "patch.js"


@dataclasses.dataclass
class Case:
    lines: list  # after the holder's switch-in
    want: dict  # the fields read
    who: str = "p1a: Blissey"  # the Pokémon that holds it
    effects: tuple = ()  # poke-env's, on it
    status: str = ""
    item: str = ""
    mon: dict = dataclasses.field(default_factory=dict)  # poke-env's attributes, set on it
    battle: dict = dataclasses.field(default_factory=dict)


def shown(effect, start, want, turns=0, who="p1a: Blissey"):
    """A volatile poke-env shows, begun by ``start`` ``turns`` turns ago."""
    return Case([start] + ["|turn|9"] * turns, want, who, (effect,))


CASES = {
    "substitute": shown("SUBSTITUTE", "|-start|p1a: Blissey|Substitute", {"seen": 0}),
    "confusion": Case(["|-start|p2a: Gengar|confusion", "|turn|5", "|-activate|p2a: Gengar|confusion",
                       "|move|p2a: Gengar|Shadow Ball|p1a: Blissey"], {"seen": 1}, "p2a: Gengar", ("CONFUSION",)),
    "leechseed": shown("LEECH_SEED", "|-start|p1a: Blissey|move: Leech Seed", {"source": "foe"}),
    "taunt": shown("TAUNT", "|-start|p1a: Blissey|move: Taunt", {"seen": 1}, turns=1),
    "yawn": shown("YAWN", "|-start|p1a: Blissey|move: Yawn|[of] p2a: Slowking", {"seen": 1}, turns=1),
    "magnetrise": shown("MAGNET_RISE", "|-start|p1a: Blissey|Magnet Rise", {"seen": 2}, turns=2),
    "focusenergy": shown("FOCUS_ENERGY", "|-start|p1a: Blissey|move: Focus Energy", {}),
    "aquaring": shown("AQUA_RING", "|-start|p1a: Blissey|Aqua Ring", {}),
    "ingrain": shown("INGRAIN", "|-start|p1a: Blissey|move: Ingrain", {}),
    "curse": shown("CURSE", "|-start|p1a: Blissey|Curse|[of] p2a: Gengar", {}),
    "nightmare": shown("NIGHTMARE", "|-start|p1a: Blissey|Nightmare", {}),
    "flashfire": shown("FLASH_FIRE", "|-start|p1a: Blissey|ability: Flash Fire", {}),
    "attract": shown("ATTRACT", "|-start|p1a: Blissey|Attract|[from] ability: Cute Charm|[of] p2a: Clefable",
                     {"source": "foe"}),
    "charge": shown("CHARGE", "|-start|p1a: Blissey|Charge", {"seen": 0}),
    "saltcure": shown("SALT_CURE", "|-start|p1a: Blissey|Salt Cure", {}),
    "throatchop": shown("THROAT_CHOP", "|-start|p1a: Blissey|Throat Chop|[silent]", {"seen": 1}, turns=1),
    "glaiverush": Case(["|turn|5", "|move|p2a: Baxcalibur|Glaive Rush|p1a: Blissey",
                        "|-singlemove|p2a: Baxcalibur|Glaive Rush|[silent]", "|turn|6"], {},
                       "p2a: Baxcalibur", ("GLAIVE_RUSH",)),
    "healblock": Case(["|turn|4", "|move|p2a: Indeedee|Psychic Noise|p1a: Blissey", "|-damage|p1a: Blissey|80/100",
                       "|-start|p1a: Blissey|move: Heal Block", "|upkeep|", "|turn|5"], {"duration": 1},
                      effects=("HEAL_BLOCK",)),
    "typechange": Case(["|turn|3", "|move|p2a: Greninja|Grass Knot|p1a: Swampert",
                        "|-start|p2a: Greninja|typechange|Grass|[from] ability: Protean"],
                       {"types": ["Grass"], "ability": "protean"}, "p2a: Greninja", ("TYPECHANGE",)),
    "quarkdrive": Case(["|-activate|p2a: Iron Valiant|ability: Quark Drive|[fromitem]",
                        "|-start|p2a: Iron Valiant|quarkdrivespe"], {"bestStat": "spe", "fromBooster": True},
                       "p2a: Iron Valiant", ("QUARK_DRIVE", "QUARKDRIVESPE")),
    "protosynthesis": Case(["|-activate|p1a: Great Tusk|ability: Protosynthesis",
                            "|-start|p1a: Great Tusk|protosynthesisatk"], {"bestStat": "atk"},
                           "p1a: Great Tusk", ("PROTOSYNTHESISATK",)),
    "stall": Case(["|move|p1a: Blissey|Protect|p1a: Blissey", "|-singleturn|p1a: Blissey|Protect"], {"uses": 1},
                  effects=("PROTECT",), mon={"_protect_counter": 1}),
    "lockedmove": Case(["|turn|4", "|move|p2a: Garchomp|Outrage|p1a: Blissey", "|-damage|p1a: Blissey|60/100",
                        "|upkeep|", "|turn|5"], {"move": "outrage", "used": 1}, "p2a: Garchomp"),
    "choicelock": Case(["|move|p1a: Blissey|Seismic Toss|p2a: Gengar"], {"move": "seismictoss"}, item="choicescarf"),
    "slowstart": Case(["|-start|p2a: Regigigas|ability: Slow Start", "|turn|1", "|upkeep|", "|turn|2"],
                      {"counter": 4}, "p2a: Regigigas", ("SLOW_START",)),
    "supremeoverlord": Case(["|-activate|p1a: Kingambit|ability: Supreme Overlord",
                             "|-start|p1a: Kingambit|fallen2|[silent]"], {"fallen": 2}, "p1a: Kingambit",
                            ("SUPREME_OVERLORD", "FALLEN2")),
    "slp": Case(["|-status|p1a: Blissey|slp", "|turn|3", "|cant|p1a: Blissey|slp"], {"statusSeen": 1}, status="slp"),
    "tox": Case(["|-status|p2a: Gengar|tox", "|upkeep|", "|-damage|p2a: Gengar|88/100 tox|[from] psn"],
                {"statusState": {"stage": 1}}, "p2a: Gengar", status="tox"),
    "sideconditions": Case(["|turn|3", "|move|p1a: Blissey|Reflect|p1a: Blissey", "|-sidestart|p1: us|Reflect",
                            "|turn|4"], {"reflect": {"elapsed": 1, "source": ["p1", "Blissey"]}},
                           battle={"side_conditions": {SideCondition.REFLECT: 3}}),
    "futuremove": Case(["|turn|5", "|move|p2a: Slowking|Future Sight|p1a: Blissey",
                        "|-start|p2a: Slowking|move: Future Sight", "|upkeep|", "|turn|6"],
                       {"p1": {"move": "futuresight", "source": ["p2", "Slowking"], "residuals": 2}}, "p2a: Slowking"),
    "weather": Case(["|turn|2", "|-weather|SunnyDay|[from] ability: Drought|[of] p2a: Torkoal", "|upkeep|", "|turn|3"],
                    {"weather": "sunnyday", "weatherElapsed": 1, "weatherSource": ("p2", "Torkoal", "ability")},
                    "p2a: Torkoal", battle={"weather": {Weather.SUNNYDAY: 2}}),
    "terrain": Case(["|-fieldstart|move: Electric Terrain|[from] ability: Electric Surge|[of] p1a: Pincurchin"],
                    {"terrain": "electricterrain", "terrainElapsed": 0,
                     "terrainSource": ("p1", "Pincurchin", "ability")},
                    "p1a: Pincurchin", battle={"fields": {Field.ELECTRIC_TERRAIN: 1}}),
    "pseudoweather": Case(["|move|p1a: Blissey|Trick Room|p1a: Blissey", "|-fieldstart|move: Trick Room|[of] p1a: Blissey",
                           "|upkeep|", "|turn|3"], {"pseudoWeather": {"trickroom": {"elapsed": 1}}},
                          battle={"fields": {Field.TRICK_ROOM: 2}}),
}


class FakeBattle:
    """What the readers read of a poke-env battle: its protocol, roles, conditions and field."""

    def __init__(self, lines, **kw):
        self._replay_data = [line.split("|") for line in lines]
        self.player_role, self.opponent_role, self.gen, self.turn = "p1", "p2", 9, 4
        self.side_conditions, self.opponent_side_conditions, self.weather, self.fields = {}, {}, {}, {}
        self.__dict__.update(kw)


def read(entry, case: Case):
    """The entry's fields from the case's snippet, by the path the belief reads it."""
    side, name = Protocol.who(case.who)
    battle = FakeBattle([f"|switch|{case.who}|{name}|100/100"] + case.lines, **case.battle)
    proto = Protocol(battle)
    mon = Pokemon(gen=9, species=name.lower().replace(" ", ""))
    mon._effects = {getattr(Effect, e): 1 for e in case.effects}
    for k, v in case.mon.items():
        setattr(mon, k, v)
    holder = Holder(proto, side, name, mon=mon, battle=battle, status=case.status, item=case.item)
    if entry.holds == "volatiles" and entry.on != "lastmove":
        return effects.volatiles(mon, side, name, proto, battle.gen).get(entry.name)
    if entry.holds == "abilityState":
        return effects.ability_state(mon, side, name, proto)
    if entry.on == "lastmove":
        return effects.move_locks(holder).get(entry.name)
    if entry.on == "pokemon":
        return effects.status_timer(holder)
    if entry.on == "side":
        return effects.side_conditions_of(battle, side, proto)
    if entry.holds == "future":
        return effects.futures(battle, proto)
    return {k: v for k, v in effects.field_state(battle, proto).items() if k.startswith(entry.holds)}


def test_every_entry_has_its_case_and_every_poke_env_effect_one_entry():
    assert set(CASES) == set(effects.BY_NAME)
    assert len(effects.BY_NAME) == len(effects.EFFECTS)
    named = [e for entry in effects.EFFECTS for e in entry.pokeenv]
    assert len(named) == len(set(named)) == len(effects.SHOWN)
    assert not set(named) & effects.IGNORED_EFFECTS


@pytest.mark.parametrize("entry", effects.EFFECTS, ids=lambda e: e.name)
def test_an_entry_is_read_from_the_protocol_by_its_own_reader(entry, monkeypatch):
    assert callable(entry.read)
    calls = []

    def spy(h, name):
        calls.append(name)
        return entry.read(h, name)

    spied = dataclasses.replace(entry, read=spy)
    monkeypatch.setattr(effects, "EFFECTS", tuple(spied if e is entry else e for e in effects.EFFECTS))
    for effect in entry.pokeenv:
        monkeypatch.setitem(effects.SHOWN, effect, spied)
    assert read(entry, CASES[entry.name]) == CASES[entry.name].want
    assert entry.name in calls


@pytest.fixture(scope="module")
def node_patches():
    """leafhub's patch table, and the patch each case's fields reach there."""
    if shutil.which("node") is None:
        pytest.skip("needs Node.js")
    script = ("const {PATCHES, patchFor} = require(process.argv[1]);"
              "const asks = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "process.stdout.write(JSON.stringify({"
              "patches: Object.keys(PATCHES).filter((k) => typeof PATCHES[k] === 'function'),"
              "reached: Object.fromEntries(Object.entries(asks).map(([k, [h, f]]) => [k, patchFor(h, k, f)]))}));")
    asks = {e.name: [e.holds, CASES[e.name].want] for e in effects.EFFECTS}
    out = subprocess.run(["node", "-e", script, str(PATCH_JS)], input=json.dumps(asks), capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("entry", effects.EFFECTS, ids=lambda e: e.name)
def test_an_entry_s_fields_reach_the_node_patch_it_names(entry, node_patches):
    assert entry.showdown in node_patches["patches"]
    assert node_patches["reached"][entry.name] == entry.showdown


@pytest.mark.parametrize("turns, want", [
    (4, {"elapsed": 4, "source": ["p1", "Ninetales"]}),  # the most a 5-turn screen is seen at
    (5, {"elapsed": 2}),  # past it: Light Clay's, 3 left
    (7, {"elapsed": 4}),  # Light Clay's 8 turns: 1 left, drawn as 5 from no source whatever it holds now
])
def test_a_screen_past_its_five_turns_is_carried_as_light_clay_s(turns, want):
    lines = ["|turn|3", "|move|p1a: Ninetales|Aurora Veil|p1a: Ninetales", "|-sidestart|p1: us|move: Aurora Veil"]
    lines += [f"|turn|{4 + t}" for t in range(turns)]
    battle = FakeBattle(["|switch|p1a: Ninetales|Ninetales-Alola|100/100"] + lines,
                        side_conditions={SideCondition.AURORA_VEIL: 3})
    assert effects.side_conditions_of(battle, "p1", Protocol(battle)) == {"auroraveil": want}
