"""FastBattle / FastPokemon reach exactly poke-env's state on recorded real battles.

The fixture (tests/data/battles.json.gz, from tests/record_battles.py) holds every battle
message one player received in 6 random battles. Both players below run poke-env's own
message handling on them; only the battle classes differ. After every message, every slot of
the battle and of every Pokémon and move in it must be equal.
"""

import enum
import gzip
import json
from pathlib import Path

import pytest

from poke_env.battle import Battle, Pokemon
from poke_env.player import Player
from poke_env.ps_client import AccountConfiguration

from maple_async.obs.actions import SlotSwitchOrder, action_to_order
from maple_async.pokeenv.fastbattle import FastBattle, FastBattles, FastPokemon, speed_up

DATA = Path(__file__).parent / "data" / "battles.json.gz"


class Replayer(Player):
    """Handles battle messages as poke-env does, but never answers."""

    def choose_move(self, battle):
        raise AssertionError("not called")

    async def _handle_battle_request(self, battle, *a, **kw):
        pass


class FastReplayer(FastBattles, Replayer):
    pass


def _slots(cls):
    names = []
    for c in cls.__mro__:
        s = c.__dict__.get("__slots__", ())
        names.extend([s] if isinstance(s, str) else s)
    return names


def state(x, seen=None):
    """A comparable picture of poke-env objects: slots and attributes, recursively."""
    seen = set() if seen is None else seen
    if x is None or isinstance(x, (bool, int, float, str, enum.Enum)):
        return x
    if isinstance(x, (list, tuple)):
        return [state(v, seen) for v in x]
    if isinstance(x, set):
        return sorted(map(repr, x))
    if isinstance(x, dict):
        return {repr(k): state(v, seen) for k, v in x.items()}
    if id(x) in seen:
        return f"<seen {type(x).__mro__[-2].__name__}>"
    seen.add(id(x))
    names = [n for n in _slots(type(x)) if n not in ("__dict__", "__weakref__", "_logger")]
    attrs = {n: getattr(x, n) for n in names if hasattr(x, n)}
    # (maple-async's own bookkeeping on a FastBattle, "_maple_*", is not poke-env state)
    attrs.update({k: v for k, v in getattr(x, "__dict__", {}).items()
                  if k != "_logger" and not k.startswith("_maple_")})
    # The base class name: FastPokemon and Pokemon must compare equal.
    base = next((c for c in type(x).__mro__ if c.__module__.startswith("poke_env")), type(x))
    return {"class": base.__name__, **{k: state(v, seen) for k, v in attrs.items()}}


def _player(cls, name):
    p = cls(account_configuration=AccountConfiguration(name, None), battle_format="gen9randombattle",
            start_listening=False, max_concurrent_battles=10_000)

    async def send_nothing(*a, **kw):  # e.g. /leave after |win|
        pass
    p.ps_client.send_message = send_nothing
    return p


@pytest.mark.parametrize("name", ["battles.json.gz", "rare_battles.json.gz"])
async def test_fast_battle_state_equals_poke_envs_on_recorded_battles(name, monkeypatch):
    """Also while a FastBattle skips updating the Pokémon whose request entry and state did
    not change since the previous request: most entries must really be skipped (otherwise
    this proves nothing about skipping)."""
    data = json.load(gzip.open(DATA.parent / name, "rt"))
    stock, fast = _player(Replayer, data["username"]), _player(FastReplayer, data["username"])
    requests = switches = 0
    entries = {"given": 0, "updated": 0}
    update = Battle._update_team_from_request

    def counting_update(self, side, strict_battle_tracking=False):
        if type(self) is FastBattle:
            entries["updated"] += len(side["pokemon"])
            entries["given"] += len(self._last_request["side"]["pokemon"])
        return update(self, side, strict_battle_tracking)
    monkeypatch.setattr(Battle, "_update_team_from_request", counting_update)
    for split_messages in data["records"]:
        for p in (stock, fast):
            await p._handle_battle_message([list(m) for m in split_messages])
        tag = split_messages[0][0][1:]
        a, b = stock.battles[tag], fast.battles[tag]
        assert type(a) is Battle and type(b) is FastBattle
        assert state(a) == state(b), split_messages
        # Switch orders: the FastBattle's party slots (recorded while parsing the request)
        # name the slot the stock battle finds by scanning its last request.
        for i in range(len(a.team)):
            assert action_to_order(a, i).message == action_to_order(b, i).message
            switches += isinstance(action_to_order(b, i), SlotSwitchOrder)
        requests += any(len(m) > 1 and m[1] == "request" for m in split_messages)
    assert all(b.finished for b in fast.battles.values())
    if name == "battles.json.gz":
        assert len(fast.battles) == 6 and requests > 100 and switches > 1000
    assert entries["given"] > 500 and entries["updated"] < 0.5 * entries["given"], entries
    mons = [m for b in fast.battles.values() for m in (*b.team.values(), *b.opponent_team.values())]
    assert mons and all(type(m) is FastPokemon for m in mons)


def test_fast_pokemon_moves_follow_transform_and_mimic():
    mon = Pokemon(gen=9, species="ditto")
    mon.__class__ = FastPokemon
    mon._add_move("transform")
    target = Pokemon(gen=9, species="pikachu")
    for m in ("thunderbolt", "quickattack"):
        target._add_move(m)
    assert list(mon.moves) == ["transform"]
    mon._moves._transform_moves = target._moves  # what poke-env's transform does to the set
    assert mon.moves is target.moves and set(mon.base_moves) == {"thunderbolt", "quickattack"}
    # _add_move on a transformed Pokémon goes to the copied set, as in poke-env.
    stock = Pokemon(gen=9, species="ditto")
    stock._moves._transform_moves = target._moves
    assert mon._add_move("thunderbolt") is stock._add_move("thunderbolt")


def test_speed_up_leaves_other_battle_kinds_alone():
    class Custom(Battle):
        pass

    b = Custom("battle-gen9randombattle-1", "me", None, gen=9)
    assert speed_up(b) is b and type(b) is Custom
    s = Battle("battle-gen9randombattle-2", "me", None, gen=9)
    assert type(speed_up(s)) is FastBattle


async def test_fast_battles_off_gives_stock_battles():
    data = json.load(gzip.open(DATA, "rt"))
    p = _player(FastReplayer, data["username"])
    p.fast_battles = False
    first = data["records"][0]
    await p._handle_battle_message([list(m) for m in first])
    assert [type(b) for b in p.battles.values()] == [Battle]


def test_changes_are_marked_by_pokemon_handlers_switches_turns_and_unknown_messages():
    from maple_async.pokeenv.fastbattle import ALL, take_changes
    b = speed_up(Battle("battle-gen9randombattle-3", "me", None, gen=9))
    b._player_role = "p1"
    assert take_changes(b) == {ALL}  # a new battle: nothing has been read yet
    b.parse_message(["", "switch", "p2a: Pikachu", "Pikachu, L84, M", "100/100"])
    pika = b.opponent_team["p2: Pikachu"]
    assert take_changes(b) == {id(pika)} and take_changes(b) == set()
    b.parse_message(["", "-damage", "p2a: Pikachu", "50/100"])
    b.parse_message(["", "-weather", "RainDance"])
    assert take_changes(b) == {id(pika)}
    b.parse_message(["", "switch", "p2a: Snorlax", "Snorlax, L84, M", "100/100"])
    snorlax = b.opponent_team["p2: Snorlax"]
    assert take_changes(b) == {id(pika), id(snorlax)}  # the one switched out too
    b.parse_message(["", "turn", "2"])
    assert take_changes(b) == {id(snorlax)}  # effects that end with the turn
    b.parse_message(["", "-clearallboost"])
    assert ALL in take_changes(b)  # changes Pokémon without naming them
    assert take_changes(Battle("battle-gen9randombattle-4", "me", None, gen=9)) is None


def test_requests_mark_the_pokemon_whose_entry_changed():
    from maple_async.pokeenv.fastbattle import ALL, take_changes
    b = speed_up(Battle("battle-gen9randombattle-5", "me", None, gen=9))

    def entry(name, hp, active):
        return {"ident": f"p1: {name}", "details": f"{name}, L84", "condition": f"{hp}/300",
                "active": active, "stats": {"atk": 200, "def": 200, "spa": 200, "spd": 200,
                                            "spe": 200}, "moves": ["tackle"],
                "baseAbility": "static", "item": "leftovers", "pokeball": "pokeball",
                "ability": "static", "teraType": "Normal", "terastallized": ""}

    def request(pika_hp):
        return {"rqid": 1, "side": {"name": "me", "id": "p1", "pokemon": [
            entry("Pikachu", pika_hp, True), entry("Snorlax", 300, False)]}}
    b.parse_request(request(300))
    assert ALL in take_changes(b)  # the first request
    b.parse_request(request(300))
    assert take_changes(b) == set()
    b.parse_request(request(150))
    pikachu, snorlax = b.team["p1: Pikachu"], b.team["p1: Snorlax"]
    assert take_changes(b) == {id(pikachu)}
    # Messages made Snorlax active (an Illusion taken at face value); the same request
    # again makes it inactive: marked although its entry did not change.
    snorlax._active, pikachu._active = True, False
    b.parse_request(request(150))
    assert take_changes(b) == {id(pikachu), id(snorlax)} and pikachu.active and not snorlax.active


async def test_incremental_encode_off_reads_everything():
    """runner.incremental_encode false: FastBattles that offer no changes to the encoder,
    so each encoding reads every Pokémon."""
    from maple_async.pokeenv.fastbattle import take_changes
    data = json.load(gzip.open(DATA, "rt"))
    p = _player(FastReplayer, data["username"])
    p.track_changes = False
    for split_messages in data["records"][:40]:
        await p._handle_battle_message([list(m) for m in split_messages])
    b = next(iter(p.battles.values()))
    assert type(b) is FastBattle and take_changes(b) is None
