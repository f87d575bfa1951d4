"""Cheaper poke-env battle state for the players maple-async drives, by subclassing.

poke-env re-reads every Pokémon of the team from each ``|request|`` (about 6.6
``update_from_request`` and 27 ``_add_move`` calls per decision, measured) and each of those
resolves ``Pokemon.moves`` through three properties of its ``MoveSet`` (Transform and Mimic
overrides). For the common case, a Pokémon neither transformed nor mimicking, the resolved
dict *is* the base dict; :class:`FastPokemon` returns it directly and memoises
``Move.retrieve_id``, which is a pure function of the move id. Everything else (transformed
or mimicking Pokémon, new moves) takes poke-env's own path, so the state is the same as
poke-env's: ``tests/test_fastbattle.py`` replays recorded requests through both and
compares every slot. A request also leaves alone the Pokémon whose entry equals the previous
request's and that no message touched since (poke-env would set the same slots to the same
values): about three in four entries of the recorded battles.

Only the battles of our own :class:`~maple_async.pokeenv.players.PolicyPlayer` (through the
:class:`FastBattles` mixin) are converted, by ``__class__`` assignment (layout-compatible:
the subclasses add no slots); the RandomPlayer ceiling that the bench measures against
stays stock poke-env.

A :class:`FastBattle` also records which of its Pokémon may have changed since the encoder
last read them (:func:`take_changes`), so the encoder re-reads only those instead of all
twelve: reading a Pokémon that no message touched since the last decision is mostly cache
misses. Every message handler of poke-env that changes a Pokémon finds it through
``get_pokemon``, except the ones named below (switch-out, end of turn, requests, and the
messages that change a whole side), which mark what they change here; a message type not
known to be handled that way marks everything; a request marks the Pokémon whose entry
changed or whose active flag it corrects. ``tests/test_encoding.py`` replays recorded
battles and compares the encoding from changes with a full read, at every request and
after every message.
"""

from __future__ import annotations

from typing import Dict, Optional

from poke_env.battle import Battle, Move, Pokemon

_MOVE_IDS: Dict[str, str] = {}  # raw move id -> Move.retrieve_id(raw id)

# In a battle's set of changed Pokémon (ids of Pokémon objects): "anything may have changed".
ALL = 0
_CHANGES = "_maple_changes"  # attribute (in the battle's __dict__) holding that set
# The same since the battle's previous request (kept apart: the encoder empties the first).
_TOUCHED = "_maple_touched"

# Message types whose handlers change Pokémon only through ``get_pokemon`` (or change none:
# field, side conditions, battle metadata). ``switch``/``drag`` and ``turn`` are handled by
# the ``switch`` and ``end_turn`` overrides below; anything else (``replace``,
# ``-clearallboost``, ``-cureteam``, ``swap``, ``poke``, ``clearpoke``, unknown types) marks
# every Pokémon as changed.
_LOCAL_MESSAGES = frozenset(Battle.MESSAGES_TO_IGNORE) | {
    "", "switch", "drag", "turn", "-damage", "move", "cant", "-heal", "-boost", "-unboost",
    "-weather", "faint", "-ability", "-start", "-activate", "-status", "rule",
    "-clearboost", "-clearnegativeboost", "-clearpositiveboost", "-copyboost",
    "-curestatus", "-end", "-endability", "-enditem", "-fieldend", "-fieldstart",
    "-formechange", "detailschange", "-invertboost", "-item", "-mega", "-mustrecharge",
    "-prepare", "-primal", "-setboost", "-sethp", "-sideend", "-sidestart", "-singleturn",
    "-singlemove", "-swapboost", "-transform", "-zpower", "gen", "tier", "inactive",
    "player", "raw", "start", "teamsize", "message", "-message", "-immune",
    "-swapsideconditions", "title", "-terastallize"}


class FastPokemon(Pokemon):
    __slots__ = ()

    @property
    def moves(self) -> Dict[str, Move]:
        ms = self._moves
        if ms._transform_moves is None and ms._mimic_move is None:
            return ms._base_moves
        return ms.moves

    def _add_move(self, move_id: str) -> Optional[Move]:
        id_ = _MOVE_IDS.get(move_id)
        if id_ is None:
            id_ = _MOVE_IDS[move_id] = Move.retrieve_id(move_id)
        move = self.moves.get(id_)
        if move is not None:
            return move
        return Pokemon._add_move(self, move_id)


class FastBattle(Battle):
    __slots__ = ()

    def __init__(self, *args, **kwargs):
        _track_changes(self)
        super().__init__(*args, **kwargs)

    def get_pokemon(self, identifier: str, force_self_team: bool = False, details: str = "",
                    request=None) -> Pokemon:
        mon = Battle.get_pokemon(self, identifier, force_self_team, details, request)
        if mon.__class__ is Pokemon:
            mon.__class__ = FastPokemon
        self._maple_changes.add(id(mon))
        self._maple_touched.add(id(mon))
        return mon

    def parse_message(self, split_message) -> None:
        if len(split_message) < 2 or split_message[1] not in _LOCAL_MESSAGES:
            self._maple_changes.add(ALL)
            self._maple_touched.add(ALL)
        Battle.parse_message(self, split_message)

    def switch(self, pokemon_str: str, details: str, hp_status: str) -> None:
        self._mark_actives()  # the side's active Pokémon switches out
        Battle.switch(self, pokemon_str, details, hp_status)

    def end_turn(self, turn: int) -> None:
        self._mark_actives()  # effects that end with the turn
        Battle.end_turn(self, turn)

    def _mark_actives(self) -> None:
        changes, touched = self._maple_changes, self._maple_touched
        for mon in (self.active_pokemon, self.opponent_active_pokemon):
            if mon is not None:
                changes.add(id(mon))
                touched.add(id(mon))

    def parse_request(self, request, strict_battle_tracking: bool = False) -> None:
        # poke-env updates every own Pokémon from its request entry (not via get_pokemon).
        # The update is a function of the entry and of whether the Pokémon is active: one
        # whose entry equals the previous request's, whose active flag agrees with it, and
        # that no message touched since, is left as it was. Such a Pokémon is in the state
        # the same update left it in at the previous request, and poke-env's update only
        # sets slots from the entry (and adds moves it already has), so it is skipped
        # (:meth:`_update_team_from_request`): 4-5 of 6 entries in a typical request.
        entries = (request.get("side") or {}).get("pokemon") or []
        previous = self.__dict__.get("_maple_entries")
        changes = self._maple_changes
        touched = self._maple_touched
        self._maple_touched = set()
        team = self._team
        same = None  # indices of the entries equal to the previous request's
        if previous is None or len(previous) != len(entries):
            changes.add(ALL)
        else:
            same = []
            for k, (new, old) in enumerate(zip(entries, previous)):
                if new != old:
                    for ident in (new.get("ident"), old.get("ident")):
                        mon = team.get(ident)
                        changes.add(ALL if mon is None else id(mon))
                else:
                    same.append(k)
        # Not a function of the entry alone: poke-env also corrects which Pokémon is active
        # (an Illusion that messages took at face value) from the request.
        for new in entries:
            mon = team.get(new.get("ident"))
            if mon is not None and bool(mon._active) != bool(new.get("active")):
                changes.add(id(mon))
                touched.add(id(mon))
        skip = []
        if same and ALL not in touched and not strict_battle_tracking:
            for k in same:
                mon = team.get(entries[k].get("ident"))
                if mon is not None and id(mon) not in touched:
                    skip.append(k)
            if skip and len({e.get("ident") for e in entries}) != len(entries):
                skip = []  # an ident twice: poke-env's updates would overwrite each other
        self._maple_skip = skip
        self._maple_entries = entries
        # The party slot of each Pokémon, for switch orders (read here, while the request
        # is in cache, instead of scanning it again when the order is sent).
        self._maple_slots = {e.get("ident"): k  # (the first, if an ident came twice)
                             for k, e in reversed(list(enumerate(entries, start=1)))}
        Battle.parse_request(self, request, strict_battle_tracking)

    def _update_team_from_request(self, side, strict_battle_tracking: bool = False) -> None:
        skip = self.__dict__.pop("_maple_skip", None)
        if skip:
            side = {**side, "pokemon": [e for k, e in enumerate(side["pokemon"]) if k not in skip]}
        Battle._update_team_from_request(self, side, strict_battle_tracking)


class FastBattles:
    """Player mixin (before ``Player`` in the bases): the battles it creates are
    :class:`FastBattle` while ``fast_battles`` is true (``runner.fast_battles`` in the
    config: off for an A/B, or if a poke-env release breaks the assumptions above), and
    offer their changes to the encoder while ``track_changes`` is also true
    (``runner.incremental_encode``)."""

    fast_battles = True
    track_changes = True

    async def _create_battle(self, split_message):
        battle = await super()._create_battle(split_message)
        if not self.fast_battles:
            return battle
        battle = speed_up(battle)
        if not self.track_changes:
            battle.__dict__["_maple_track"] = False
        return battle


def speed_up(battle):
    """Convert a stock singles :class:`Battle` (and the Pokémon it holds) in place; other
    battle kinds (doubles, subclasses) are returned unchanged."""
    if battle.__class__ is Battle:
        battle.__class__ = FastBattle
        _track_changes(battle)
        for team in (battle._team, battle._opponent_team):
            for mon in team.values():
                if mon.__class__ is Pokemon:
                    mon.__class__ = FastPokemon
    return battle


def _track_changes(battle) -> None:
    battle.__dict__[_CHANGES] = {ALL}
    battle.__dict__[_TOUCHED] = {ALL}
    battle.__dict__["_maple_entries"] = None
    battle.__dict__["_maple_slots"] = None


def take_changes(battle) -> Optional[set]:
    """The ids of the Pokémon of ``battle`` that may have changed since the last call
    (containing :data:`ALL` when any may have), and start a new set; ``None`` for a battle
    that does not track changes (stock poke-env)."""
    d = battle.__dict__
    changes = d.get(_CHANGES)
    if changes is not None:
        d[_CHANGES] = set()
        if d.get("_maple_track") is False:
            return None
    return changes


def party_slots(battle) -> Optional[dict]:
    """Party slot (1-based, the last request's order) by Pokémon ident, as recorded by a
    :class:`FastBattle` when it read the request; None otherwise."""
    return battle.__dict__.get("_maple_slots")
