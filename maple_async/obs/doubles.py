"""Observation, actions and orders for gen9 doubles (random doubles, VGC, Doubles OU).

A doubles turn is decided one active slot at a time: slot 1 (position ``a``) first, then
slot 2 seeing slot 1's choice, each a step through the same batcher with the same hidden
state, so the learner sees an ordinary sequence of steps. Showdown gets one order for the
turn (``/choose move 1 2, switch 3``); a slot with a single legal action (a pass, a lone
forced switch) is filled in without asking. ``docs/doubles.md`` compares this with one
joint head over pairs of actions.

Observation (float32, ``OBS_DIM`` long):

========================  ===============  ================================================
block                     size             contents
========================  ===============  ================================================
core                      ``enc.OBS_DIM``  the singles layout (:mod:`.encoding`) for the
                                           deciding slot: own team (active flag: only the
                                           deciding Pokémon), opponent team (active flag:
                                           the foe in position 1, else 2), the deciding
                                           Pokémon's moves in request order, derived
                                           against that foe; field and flags
moves vs foe 2            4 x MOVE_DIM     the same moves, derived against the foe in 2
ally moves                4 x MOVE_DIM     the ally's moves, derived against the foe in 1
ally moves vs foe 2       4 x MOVE_DIM     the ally's moves, derived against the foe in 2
own team vs foe 2         6 x 3            each own Pokémon's matchup columns (offence,
                                           defence, speed) against the foe in 2
doubles                   ``X_DIM``        see below
========================  ===============  ================================================

The doubles block: deciding slot one-hot (2); own team index of the Pokémon in position
1 and 2 (2 x 6 one-hot), opponent slot index of the foes in position 1 and 2 (2 x 6);
the deciding Pokémon's move target types (4 x ``len(TARGETS)`` one-hot, from the request);
the first slot's action this turn (``N_SLOT`` one-hot, only for the second slot); per
Pokémon in positions own 1, own 2, foe 1, foe 2 (4 x 4): present, redirecting (Follow Me,
Rage Powder, Spotlight), first turn out (Fake Out works), protected last turn (a second
Protect may fail); the opponent's team sheet was shown (open team sheets).

Per-slot actions (``N_SLOT`` = 47): 0-5 switch to team slot ``i``; ``6 + 5j + t`` move
``j`` (the request's order) with target ``t``: 0 none (spread, self, field and random
moves), 1 foe in position 1, 2 foe in position 2, 3 ally, 4 self; ``26 + 5j + t`` the same
with terastallization; 46 pass. ``PREVIEW + i`` (47-52): team preview, bring team slot
``i`` next (VGC: four, the first two lead).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from poke_env.battle import Effect, Move

from . import encoding as enc

from . import actions as act

N_SLOT = 47
MOVE0, TERA0, PASS = 6, 26, 46
PREVIEW = 47
N_ACTIONS = PREVIEW + 6
N_TARGETS = 5  # none, foe 1, foe 2, ally, self
# Showdown's move target types (the request's ``target``); the first five take a target.
TARGETS = ("normal", "any", "adjacentFoe", "adjacentAlly", "adjacentAllyOrSelf", "self",
           "allAdjacentFoes", "allAdjacent", "all", "allySide", "foeSide", "allyTeam",
           "randomNormal", "scripted", "allies")
TARGET_INDEX = {t: i for i, t in enumerate(TARGETS)}
# Which target choices (1 foe 1, 2 foe 2, 3 ally, 4 self) each choosable type allows.
_CHOICES = {"normal": (1, 2, 3), "any": (1, 2, 3), "adjacentFoe": (1, 2),
            "adjacentAlly": (3,), "adjacentAllyOrSelf": (3, 4)}
_REDIRECT = (Effect.FOLLOW_ME, Effect.RAGE_POWDER, Effect.SPOTLIGHT)
N_MON_FLAGS = 4

MOVES_B = enc.OBS_DIM
ALLY_MOVES = MOVES_B + 4 * enc.MOVE_DIM
ALLY_MOVES_B = ALLY_MOVES + 4 * enc.MOVE_DIM
OWN_MATCH_B = ALLY_MOVES_B + 4 * enc.MOVE_DIM
N_MATCH = enc.P_MATCH_SPE + 1 - enc.P_MATCH_OFF  # offence, defence, speed
X = OWN_MATCH_B + 6 * N_MATCH
X_SLOT = X
X_OWN_POS = X_SLOT + 2
X_FOE_POS = X_OWN_POS + 12
X_TARGET = X_FOE_POS + 12
X_FIRST = X_TARGET + 4 * len(TARGETS)
X_MONS = X_FIRST + N_SLOT
X_SHEET = X_MONS + 4 * N_MON_FLAGS
X_DIM = X_SHEET + 1 - X
OBS_DIM = X + X_DIM
LAYOUT = (f"maple-obs-doubles/2 obs={OBS_DIM} core={enc.OBS_DIM} poke={enc.POKE_DIM} "
          f"move={enc.MOVE_DIM} extra={X_DIM} actions={N_ACTIONS}")

_FLAGS = enc.FIELD + enc.F_FLAGS
_MOVE_OBJ: dict[str, Optional[Move]] = {}


def _move(move_id: str, mon) -> Optional[Move]:
    """The poke-env Move for a request's move id: the Pokémon's own, else a cached one."""
    move = mon.moves.get(move_id) if mon is not None else None
    if move is not None:
        return move
    if move_id not in _MOVE_OBJ:
        try:
            m = Move(move_id, gen=9)
            # (an id the dex does not know, or a pseudo-move such as recharge: no features)
            _MOVE_OBJ[move_id] = m if "priority" in m.entry and "basePower" in m.entry else None
        except Exception:
            _MOVE_OBJ[move_id] = None
    return _MOVE_OBJ[move_id]


def _request_moves(battle, s: int) -> list:
    """Slot ``s``'s move entries of the current request (``[]`` outside a move request)."""
    active = (battle.last_request or {}).get("active") or ()
    if s >= len(active) or not active[s]:
        return []
    return list(active[s].get("moves") or ())[:4]


def _write_moves(w, base: int, entries: list, mon) -> None:
    for j, e in enumerate(entries):
        move = _move(e.get("id") or "", mon)
        if move is None:
            w[base + j * enc.MOVE_DIM + enc.M_PRESENT] = 1.0
        else:
            row, _ = enc._MOVE_STATICS[move._gen].get(move.id) or enc._move_static(move)
            w[base + j * enc.MOVE_DIM:base + (j + 1) * enc.MOVE_DIM] = row
        if not e.get("disabled"):
            w[base + j * enc.MOVE_DIM + enc.M_AVAILABLE] = 1.0
        maxpp = e.get("maxpp")
        w[base + j * enc.MOVE_DIM + enc.M_PP] = (e.get("pp") or 0) / maxpp if maxpp else 1.0


class Turn:
    """One request of a doubles battle, read once: the shared part of both slots'
    observations, and what their masks and the order need."""

    __slots__ = ("battle", "base", "mons", "own_pos", "foe_pos", "actives", "foes", "entries",
                 "switches", "force", "can_tera", "trapped", "commanding", "_moves", "_deciding")

    def __init__(self, battle, side_state: Optional[list] = None):
        if not battle.__dict__.get("_maple_tera_known"):
            enc.learn_tera_types(battle)
        self.battle = battle
        out = self.base = np.zeros(OBS_DIM, dtype=np.float32)
        w = memoryview(out)
        request = battle.last_request or {}
        mons = self.mons = list(battle.team.values())
        opp, n_seen = enc.opponent_slots(battle)
        benched = enc.left_home(battle)
        actives = self.actives = battle.active_pokemon if not battle.teampreview else [None, None]
        foes = self.foes = battle.opponent_active_pokemon if not battle.teampreview else [None, None]
        index = {id(m): i for i, m in enumerate(mons[:6])}
        opp_index = {id(m): i for i, m in enumerate(opp[:6])}
        self.own_pos = [index.get(id(m), -1) if m is not None else -1 for m in actives]
        self.foe_pos = [opp_index.get(id(m), -1) if m is not None else -1 for m in foes]
        # a slot replacing a fainted Pokémon is marked by it, as in singles, so the switch-in
        # decision gets its matchups against the foes (poke-env drops it from the actives)
        self._deciding = list(self.own_pos)
        if any(battle.force_switch) and battle.player_role:
            for p, c in enumerate("ab"):
                gone = battle._active_pokemon.get(battle.player_role + c)
                if self._deciding[p] < 0 and gone is not None and gone.fainted:
                    self._deciding[p] = index.get(id(gone), -1)
        _, sums = enc.write_teams(w, mons, opp, n_seen, benched, mark_active=False)
        target = self.foe_pos[0] if self.foe_pos[0] >= 0 else self.foe_pos[1]
        if target >= 0:
            w[enc.OPP_TEAM + target * enc.POKE_DIM + enc.P_ACTIVE] = 1.0
        n_team = len(mons) - len(benched)
        opp_size = enc.opponent_team_size(battle)
        if side_state is not None:
            side_state[:] = (sums[0], sums[1], sums[2] + max(opp_size - n_seen, 0), sums[3])
        enc.write_field(battle, w)
        w[_FLAGS + 1] = float(battle.opponent_used_tera)
        w[_FLAGS + 4] = battle.turn / 50.0
        w[_FLAGS + 5] = (min(n_team, 6) - sums[1]) / 6.0
        w[_FLAGS + 6] = (opp_size - sums[3]) / 6.0
        enc.write_generation(battle, w)
        for p, i in enumerate(self.own_pos):
            if i >= 0:
                w[X_OWN_POS + 6 * p + i] = 1.0
        for p, i in enumerate(self.foe_pos):
            if i >= 0:
                w[X_FOE_POS + 6 * p + i] = 1.0
        for p, mon in enumerate((*actives, *foes)):
            if mon is None:
                continue
            base = X_MONS + p * N_MON_FLAGS
            w[base] = 1.0
            effects = mon.effects
            if effects:
                w[base + 1] = float(any(e in effects for e in _REDIRECT))
            w[base + 2] = float(mon._active_turns == 1)
            # poke-env ends Protect at |turn|, before the request: what is left is its counter
            w[base + 3] = float(mon._protect_counter > 0)
        w[X_SHEET] = float(bool(battle.__dict__.get("_maple_sheet")))
        self.entries = [_request_moves(battle, 0), _request_moves(battle, 1)]
        side = request.get("side") or {}
        self.commanding = [bool(e.get("commanding")) for e in (side.get("pokemon") or ())[:2]]
        self.force = list(battle.force_switch) if any(battle.force_switch) else [False, False]
        self.can_tera = list(battle.can_tera)
        self.trapped = list(battle.trapped)
        self.switches = [{id(m) for m in battle.available_switches[s]} for s in (0, 1)]
        self._moves = None

    def wait(self) -> bool:
        return bool(self.battle._wait)

    # -- per slot ---------------------------------------------------------------------------

    def obs(self, s: int, first: int = -1) -> np.ndarray:
        """Slot ``s``'s observation (``first``: slot 1's action this turn, for slot 2)."""
        out = self.base.copy()
        w = memoryview(out)
        i = self._deciding[s]
        if i >= 0:
            w[enc.OWN_TEAM + i * enc.POKE_DIM + enc.P_ACTIVE] = 1.0
        if self._moves is None:  # both slots' move blocks, read once per turn
            self._moves = np.zeros((2, 4 * enc.MOVE_DIM), dtype=np.float32)
            for k in (0, 1):
                _write_moves(memoryview(self._moves[k]), 0, self.entries[k], self.actives[k])
        mine, ally = self._moves[s], self._moves[1 - s]
        out[enc.MOVES:enc.FIELD] = mine
        out[MOVES_B:ALLY_MOVES] = mine
        out[ALLY_MOVES:ALLY_MOVES_B] = ally
        out[ALLY_MOVES_B:OWN_MATCH_B] = ally
        entries = self.entries[s]
        for j, e in enumerate(entries):
            t = TARGET_INDEX.get(e.get("target"))
            if t is not None:
                w[X_TARGET + j * len(TARGETS) + t] = 1.0
        w[X_SLOT + s] = 1.0
        if s == 1 and first >= 0:
            w[X_FIRST + first] = 1.0
        tera = self.can_tera[s] and not (s == 1 and TERA0 <= first < PASS)
        w[_FLAGS + 0] = float(tera)
        w[_FLAGS + 2] = float(self.force[s])
        w[_FLAGS + 3] = float(self.trapped[s])
        return out

    def mask(self, s: int, first: int = -1, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Legal actions of slot ``s`` given slot 1's ``first`` (what Showdown accepts:
        no pass for a Pokémon that can act, no second switch to the same Pokémon, no
        second terastallization, targets only where the move's type takes one)."""
        if out is None:
            out = np.zeros(N_ACTIONS, dtype=bool)
        else:
            out.fill(False)
        if self.battle._wait:
            return out
        taken = first if s == 1 and 0 <= first < 6 else -1
        switches = self.switches[s]
        if any(self.force):
            if self.force[s]:
                for i, mon in enumerate(self.mons[:6]):
                    if i != taken and id(mon) in switches:
                        out[i] = True
            if not out[:6].any():
                out[PASS] = True
            return out
        mon = self.actives[s]
        entries = self.entries[s]
        if mon is None or (s < len(self.commanding) and self.commanding[s]) or not entries:
            out[PASS] = True  # fainted, commanding, or nothing asked of this slot
            return out
        if not self.trapped[s]:
            for i, m in enumerate(self.mons[:6]):
                if i != taken and id(m) in switches:
                    out[i] = True
        ally = self.actives[1 - s] is not None
        foes = (self.foes[0] is not None, self.foes[1] is not None)
        for j, e in enumerate(entries):
            if e.get("disabled"):
                continue
            choices = _CHOICES.get(e.get("target"))
            base = MOVE0 + 5 * j
            if choices is None or len(entries) == 1 and e.get("id") in ("recharge", "struggle"):
                out[base] = True
                continue
            for t in choices:
                if t == 1 and foes[0] or t == 2 and foes[1] or t == 3 and ally or t == 4:
                    out[base + t] = True
            if not out[base:base + 5].any():  # no target present: Showdown retargets
                out[base + choices[0]] = True
        if self.can_tera[s] and not (s == 1 and TERA0 <= first < PASS):
            out[TERA0:PASS] = out[MOVE0:TERA0]
        if not out.any():
            out[PASS] = True
        return out

    def part(self, s: int, action: int) -> str:
        """One slot's part of the order."""
        if action < 6:
            return f"switch {switch_slot(self.battle, action)}"
        if action >= PASS:
            return "pass"
        m = action - MOVE0
        tera, m = m >= 20, m % 20
        j, t = divmod(m, 5)
        text = f"move {j + 1}"
        if t:
            loc = (1, 2, -(2 - s), -(1 + s))[t - 1]  # ally of slot 1 is -2, self is -1
            text += f" {loc}"
        return text + (" terastallize" if tera else "")

    def order(self, actions: list) -> "TextOrder":
        return TextOrder("/choose " + ", ".join(self.part(s, a) for s, a in enumerate(actions)))


def switch_slot(battle, i: int) -> int:
    """The party slot (1-based, the request's order) of team slot ``i``."""
    ident = list(battle.team)[i]
    side = (battle.last_request or {}).get("side") or {}
    for slot, entry in enumerate(side.get("pokemon") or (), start=1):
        if entry.get("ident") == ident:
            return slot
    return i + 1


class TextOrder:
    """A whole turn's order as Showdown reads it."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message

    def __str__(self) -> str:
        return self.message


def mask_pairs(turn: Turn) -> list[tuple[int, int]]:
    """Every (slot 1, slot 2) action pair the masks allow (tests; the joint-head count)."""
    pairs = []
    m0 = turn.mask(0)
    for a in np.flatnonzero(m0):
        for b in np.flatnonzero(turn.mask(1, int(a))):
            pairs.append((int(a), int(b)))
    return pairs


# -- team preview ---------------------------------------------------------------------------

def preview_mask(battle, picks: list, out: Optional[np.ndarray] = None) -> np.ndarray:
    return act.preview_mask(battle, picks, out, PREVIEW, N_ACTIONS)


def encode_preview(battle, picks: list, n_picks: int, mask: Optional[np.ndarray] = None) -> np.ndarray:
    """One team preview pick: both teams as previewed, picked so far "in battle", the
    preview flag and the picks left (VGC: 4 of 6; the first two lead). The battle is read
    once per preview request; each pick copies it."""
    d = battle.__dict__
    rqid = (battle.last_request or {}).get("rqid")
    cached = d.get("_maple_preview")
    if cached is None or cached[0] != rqid:
        cached = d["_maple_preview"] = (rqid, Turn(battle).base)
    out = cached[1].copy()
    for i in range(min(len(battle.team), 6)):
        out[enc.OWN_TEAM + i * enc.POKE_DIM + enc.P_IN_BATTLE] = 1.0 if i in picks else 0.0
    out[_FLAGS + enc.FLAG_PREVIEW] = 1.0
    out[_FLAGS + enc.FLAG_PICKS_LEFT] = (n_picks - len(picks)) / 6.0
    if mask is not None:
        preview_mask(battle, picks, mask)
    return out
