"""The pool's slots: battle sides in, records out, on the event loop's thread and no other.

Nothing here starts a thread or takes a lock: :class:`~maple_async.env.engine._Engine`
calls it on its loop and carries what it delivers to the caller's thread.

A battle side's life in a slot:

1. Its first decision (the batcher's ``handoff``) takes its battle a free battle index
   (self-play: slots ``2b``, ``2b + 1``; else slot ``b``). While every index is held its
   items wait in ``waiting``: that is what holds the next battle back until the caller
   collects the last one's terminal steps (next-step autoreset).
2. Its decisions, then its end (``ended``) or abandonment (``abandoned``), queue behind the
   slot, which hands the caller one item at a time (``current``). A decision whose side is
   gone or began again (its generation changed) is dropped, its future resolved with
   action -1 so nothing is sent.
3. The caller's ``answer`` resolves the current item: a decision's future gets the
   action; a terminal item releases the side. When every side of a battle is released
   its index is free again and the waiting battles are routed.
4. ``close`` (a reset or the pool's close) drops every item; ``clear`` starts afresh.

The counters that cross threads, each naming a caller's ``send`` by its sequence number
(1, 2, ...):

* ``BattlePool._sent`` (the caller's thread): the sends made so far.
* ``_Slots.answered`` (the loop's thread): the latest send applied to the slots. It never
  decreases, and ``answered <= _sent`` (a send is counted before it is posted).
* ``_Engine.settled_after`` (under the engine's condition): the latest send after which
  the slots found that nothing more can come before the caller answers (``-1``: none).
  ``check_settled`` raises it to ``answered``; every delivery lowers it below ``answered``
  (a record delivered since is not covered by the mark); a reset sets it to ``-1``. So
  ``settled_after <= answered <= _sent``, and ``recv``'s ``settled`` (a bool) is
  ``settled_after >= _sent``: every send applied, then settled, with nothing delivered
  since.
* ``_Slots.with_caller``: decisions flushed and not answered or dropped (the batcher's
  ``held``).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from ..inference.batcher import Decision
from ..obs import games

if TYPE_CHECKING:
    from ..collect.agent import Agent

_OUTCOMES = {1.0: "won", -1.0: "lost", 0.0: "tie"}


def padding_mask(n_actions: int) -> np.ndarray:
    """The mask of a step whose action is ignored (a terminal step, an inactive slot): one
    legal action."""
    mask = np.zeros(n_actions, dtype=bool)
    mask[0] = True
    return mask


@dataclass(slots=True)
class _Item:
    kind: str  # "decide", "end" or "abandon"
    key: tuple
    request: Any = None  # the batcher's request (decide)
    live: Any = None  # the agent's bookkeeping of the side (end)
    reward: float = 0.0
    outcome: float = 0.0


@dataclass(slots=True)
class _Slot:
    env_id: int
    key: Optional[tuple] = None  # the battle side it plays now
    steps: int = 0  # elapsed steps in this battle
    current: Optional[_Item] = None  # the item with the caller
    queue: deque = field(default_factory=deque)
    last_obs: Any = None


@dataclass(slots=True, kw_only=True)
class Record:
    """One slot's step as the caller receives it."""

    env_id: int
    obs: np.ndarray
    mask: np.ndarray
    reward: float
    elapsed_step: int
    kind: str  # preview / move / forced_switch / end
    battle_tag: str
    side: str
    opponent: str
    terminated: bool = False
    truncated: bool = False
    outcome: str = ""  # won / lost / tie on a terminal step
    abandoned: bool = False
    retry: bool = False  # Showdown rejected this slot's previous action: this step replaces it
    battle: Any = None  # for the caller's embed_battle / reward_fn (None: an abandoned side)


def _other_side(key: tuple) -> tuple:
    return (key[0], "p2" if key[1] == "p1" else "p1")


def _side_index(key: tuple) -> int:
    return 1 if key[1] == "p2" else 0


class _Slots:
    """The slots on the event loop's thread: battle sides in, records out.

    It is the pool agent's listener (battle sides that end or are abandoned) and its
    batcher's sink (flushed decisions). A battle takes a free battle index at its first
    decision (waiting for one while every index is held, which is what holds the next
    battle back until the caller collects the last one's terminal steps); a slot
    delivers one item at a time, in order."""

    def __init__(self, num_battles: int, sides: int, deliver: Callable[[Record], None],
                 settle: Callable[[int], None], game: games.Game = games.SINGLES):
        self.num_battles = num_battles
        self.sides = sides
        self.preview, self.n_actions = game.preview, game.n_actions
        self.deliver = deliver
        self.settle = settle
        self.agent: Optional[Agent] = None
        # whether a side of a begun battle may still ask (the collector knows its players)
        self.sides_to_come: Callable[[], bool] = lambda: False
        self.answered = 0  # the caller's latest send applied here (its sequence number)
        self.clear()

    def clear(self) -> None:
        """Every slot free, nothing delivered or waiting (a new pool, or a reset)."""
        self.slots = [_Slot(i) for i in range(self.num_battles * self.sides)]
        self.free = deque(range(self.num_battles))
        self.battle_of: dict[str, int] = {}
        self.released: dict[int, set] = {}
        self.ended_early: OrderedDict = OrderedDict()  # tag -> sides that ended with no slot
        self.slot_of: dict[tuple, int] = {}
        self.waiting: deque = deque()  # first items of battles without an index yet
        self.with_caller = 0  # decisions flushed and not answered
        self.closing = False

    # -- from the agent and its batcher --------------------------------------------------
    def handoff(self, batch: list) -> None:
        self.with_caller += len(batch)
        for r in batch:
            self._route(_Item("decide", r.key, request=r))
        self.check_settled()

    def ended(self, key: tuple, live, outcome: float, reward: float) -> None:
        if live is None:
            self._no_slot_end(key)
        else:
            self._route(_Item("end", key, live=live, reward=reward, outcome=outcome))
        self.check_settled()

    def abandoned(self, key: tuple, live) -> None:
        self._route(_Item("abandon", key, live=live))
        self.check_settled()

    def side_waits(self) -> None:
        """A battle side waits on Showdown: its request asked nothing, or it answered."""
        self.check_settled()

    def check_settled(self) -> None:
        """Tell the caller when nothing more can come before it answers: every live battle
        side is with the caller (or queued behind a slot it holds), or answered its latest
        request (or was told to wait) while its opponent's side is with the caller: Showdown
        goes on once both sides chose."""
        if self.closing or self.agent is None:
            return
        live, slots, slot_of = self.agent.live, self.slots, self.slot_of
        queued = {item.key for item in self.waiting}

        def held(key) -> bool:
            env_id = slot_of.get(key)
            return key in queued if env_id is None else slots[env_id].current is not None

        for key, side in live.items():
            if held(key):
                continue
            done = side.waits_in()
            if done is None:
                return  # a decision of this side is on its way
            other_key = _other_side(key)
            other = live.get(other_key)
            if other is None or not held(other_key) or other.rounds() > done:
                return  # Showdown goes on without us, or has begun a new round
        if self.sides_to_come():
            return
        self.settle(self.answered)

    # -- routing ---------------------------------------------------------------------------
    def _route(self, item: _Item) -> None:
        if self.closing or self._stale(item):  # a stale decision's battle is gone: it must not hold an index
            self._drop(item)
            return
        env_id = self.slot_of.get(item.key)
        if env_id is None:
            if item.kind != "decide":  # it never reached the caller: nothing to end
                kept: deque = deque()
                for w in self.waiting:
                    if w.key == item.key:
                        self._drop(w)
                    else:
                        kept.append(w)
                self.waiting = kept
                self._no_slot_end(item.key)
                return
            tag = item.key[0]
            b = self.battle_of.get(tag)
            if b is None:
                if not self.free:
                    self.waiting.append(item)
                    return
                b = self.battle_of[tag] = self.free.popleft()
                self.released[b] = set(self.ended_early.pop(tag, ()))
            env_id = b * self.sides + (_side_index(item.key) if self.sides == 2 else 0)
            slot = self.slots[env_id]
            slot.key, slot.steps = item.key, 0
            self.slot_of[item.key] = env_id
        slot = self.slots[env_id]
        slot.queue.append(item)
        if slot.current is None:
            self._next(slot)

    def _no_slot_end(self, key: tuple) -> None:
        b = self.battle_of.get(key[0])
        if b is None:
            self.ended_early.setdefault(key[0], set()).add(_side_index(key))
            while len(self.ended_early) > 4096:
                self.ended_early.popitem(last=False)
        else:
            self._side_released(key[0], b, _side_index(key))

    def _drop(self, item: _Item) -> None:
        """An item that will never reach the caller: its decision (if any) is released."""
        if item.kind == "decide":
            self.with_caller -= 1
            fut = item.request.future
            if not fut.done():
                fut.set_result(Decision(-1, 0.0, 0.0, 0))

    def _stale(self, item: _Item) -> bool:
        if item.kind != "decide":
            return False
        live = self.agent.live.get(item.key)
        return live is None or live.generation != item.request.generation

    def _next(self, slot: _Slot) -> None:
        while slot.queue:
            item = slot.queue.popleft()
            if self._stale(item):
                self._drop(item)
                continue
            slot.current = item
            self.deliver(self._record(slot, item))
            return

    def _record(self, slot: _Slot, item: _Item) -> Record:
        """The item as the caller receives it (its ``embed_battle`` / ``reward_fn`` run
        on the caller's thread, on ``battle``)."""
        key = item.key
        if item.kind == "decide":
            r = item.request
            live = self.agent.live[key]
            battle = live.battle
            reward = 0.0 if slot.steps == 0 else live.reward  # a battle's first step follows no action
            live.reward = 0.0  # (doubles: a turn's second step has none of its own)
            if r.mask[self.preview:].any():
                kind = "preview"
            else:
                fs = battle.force_switch
                kind = "forced_switch" if (any(fs) if isinstance(fs, list) else fs) else "move"
            slot.last_obs = r.obs
            return Record(env_id=slot.env_id, obs=r.obs, mask=r.mask, reward=reward, elapsed_step=slot.steps,
                          kind=kind, battle_tag=key[0], side=key[1], opponent=live.opponent,
                          retry=live.retry and slot.steps > 0, battle=battle)
        mask = padding_mask(self.n_actions)  # whatever is sent for a terminal step is ignored
        live = item.live
        if item.kind == "end":
            return Record(env_id=slot.env_id, obs=slot.last_obs, mask=mask, reward=item.reward, terminated=True,
                          elapsed_step=slot.steps, kind="end", battle_tag=key[0], side=key[1],
                          opponent=live.opponent, outcome=_OUTCOMES.get(item.outcome, "tie"), battle=live.battle)
        return Record(env_id=slot.env_id, obs=slot.last_obs, mask=mask, reward=0.0, truncated=True,
                      elapsed_step=slot.steps, kind="end", battle_tag=key[0], side=key[1], opponent=live.opponent,
                      abandoned=True)

    # -- from the caller -------------------------------------------------------------------
    def answer(self, pairs: list, seq: int = 0) -> None:
        if self.closing:
            return  # a reset or close dropped these slots' items already
        self.answered = max(self.answered, seq)
        for env_id, action in pairs:
            slot = self.slots[env_id]
            item, slot.current = slot.current, None
            if item is None:
                continue
            if item.kind == "decide":
                self.with_caller -= 1
                if not item.request.future.done():
                    item.request.future.set_result(Decision(int(action), 0.0, 0.0, 0))
                slot.steps += 1
            else:
                self._release(slot)
            self._next(slot)
        self.check_settled()

    def _release(self, slot: _Slot) -> None:
        key, slot.key, slot.steps = slot.key, None, 0
        self.slot_of.pop(key, None)
        b = self.battle_of.get(key[0])
        if b is not None:
            self._side_released(key[0], b, _side_index(key))

    def _side_released(self, tag: str, b: int, side: int) -> None:
        done = self.released.setdefault(b, set())
        done.add(side if self.sides == 2 else 0)
        if len(done) < self.sides:
            return
        del self.battle_of[tag]
        del self.released[b]
        self.free.append(b)
        waiting, self.waiting = self.waiting, deque()
        for item in waiting:
            self._route(item)

    def close(self) -> None:
        self.closing = True
        for slot in self.slots:
            for item in [slot.current, *slot.queue]:
                if item is not None:
                    self._drop(item)
            slot.current = None
            slot.queue.clear()
        for item in self.waiting:
            self._drop(item)
        self.waiting.clear()
