"""The poke-env players maple-async runs: its policy's (:class:`PolicyPlayer`) and the
baselines, their accounts, and their shutdown."""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass
from typing import Any, Awaitable, Optional, Protocol

from poke_env.player import MaxBasePowerPlayer, Player, RandomPlayer, SimpleHeuristicsPlayer
from poke_env.ps_client import AccountConfiguration, ServerConfiguration

from .coalesce import coalesce_sends, fair_receive
from .fastbattle import FastBattles

BASELINES = {"random": RandomPlayer, "max_power": MaxBasePowerPlayer,
             "heuristics": SimpleHeuristicsPlayer}
# Finished battles are dropped from poke-env's ``Player.battles`` (which otherwise keeps
# them forever) after this delay, once no late message can still ask for them.
FORGET_FINISHED_AFTER_S = 10.0
SERVER_ERROR_LEVEL = 25  # poke-env logs Showdown's |error| lines at this level


class ErrorCounts(Protocol):
    """Where a player counts Showdown's ``|error|`` lines (an agent's stats, or
    :class:`ServerErrors`)."""

    invalid_choices: int
    unavailable_choices: int
    other_server_errors: int


class Listener(Protocol):
    """Told when a battle side waits on Showdown (a battle pool's slots)."""

    def side_waits(self) -> None: ...


class Driver(Protocol):
    """What our players need of the policy that drives them (``collect.agent.Agent`` is
    one): its decisions, what it records, its counters and its listener. A protocol, so
    this layer needs nothing from the one above it."""

    stats: ErrorCounts
    listener: Optional[Listener]

    def choose(self, battle, opponent: str) -> Awaitable[Any]: ...

    def preview(self, battle, opponent: str) -> Awaitable[str]: ...

    def imitate(self, battle, opponent: str, order) -> Any: ...

    def finished(self, battle) -> None: ...


class _ServerErrorCounter(logging.Filter):
    """poke-env reports Showdown's ``|error|`` lines only through its logger (level 25).

    Counts them by kind; the expected [Unavailable choice] lines are not printed, nor other
    records below ``show_from`` (the player's own level before it was lowered to count: poke-env
    warns at every gen 1 partial-trapping move).
    """

    def __init__(self, stats: ErrorCounts, show_from: int = logging.NOTSET):
        super().__init__()
        self.stats = stats
        self.show_from = show_from

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != SERVER_ERROR_LEVEL or not str(record.msg).startswith("Error message"):
            return record.levelno >= self.show_from
        text = str(record.args[0]) if record.args else ""
        if "[Unavailable choice]" in text:
            self.stats.unavailable_choices += 1
            return False
        if "[Invalid choice]" in text:
            self.stats.invalid_choices += 1
        else:
            self.stats.other_server_errors += 1
        return True



@dataclass
class ServerErrors:
    """Showdown's |error| lines to one player, by kind (what a baseline is told)."""
    invalid_choices: int = 0
    unavailable_choices: int = 0
    other_server_errors: int = 0


class _QuietErrorCounter(_ServerErrorCounter):
    """Counts a baseline's |error| lines and prints only what poke-env prints at ERROR."""

    def filter(self, record: logging.LogRecord) -> bool:
        return super().filter(record) and record.levelno >= logging.ERROR


class PolicyPlayer(FastBattles, Player):
    """A poke-env Player whose decisions come from a :class:`Driver` (an agent's batcher).
    Its battles parse requests faster than stock poke-env, to the same state (see
    :mod:`.fastbattle`)."""

    # poke-env answers 1 request in 1000 with /choose default by itself, behind the agent's
    # back: the step the agent recorded would not be the one played.
    DEFAULT_CHOICE_CHANCE = 0.0

    def __init__(self, agent: Driver, opponent_name: str = "self", fast_battles: bool = True,
                 track_changes: bool = True, coalesce: bool = True, fair: bool = True,
                 open_team_sheets: bool = False, **kwargs):
        super().__init__(**{**kwargs, "accept_open_team_sheet": open_team_sheets})
        self.fast_battles = fast_battles
        self.track_changes = track_changes
        quiet_logger(self)
        if coalesce:
            coalesce_sends(self.ps_client)
        if fair:
            fair_receive(self.ps_client)
        self.agent = agent
        self.opponent_name = opponent_name
        # Let |error| records reach the logger so they are counted (and shown).
        level = self.logger.getEffectiveLevel()
        if level > SERVER_ERROR_LEVEL:
            self.logger.setLevel(SERVER_ERROR_LEVEL)
        self.logger.addFilter(_ServerErrorCounter(agent.stats, show_from=level))
        self.results = {"won": 0, "lost": 0, "tied": 0}  # survives forgetting battles
        self.replays = None  # a ReplayWriter: finished battles kept as replays
        self.on_finished = None  # called with each finished battle (serve and ladder report them)

    def choose_move(self, battle):
        return self.agent.choose(battle, self.opponent_name)

    async def _handle_battle_message(self, split_messages) -> None:
        for m in split_messages:
            if len(m) > 2:
                if m[1] == "request" and m[2] and '"update":true' not in m[2]:
                    count_request(self._battles.get(split_messages[0][0][1:]))
                elif m[1] == "showteam" and self.accept_open_team_sheet:  # a flag of the observation
                    battle = await self._get_battle(split_messages[0][0])
                    if m[2] != battle.player_role:
                        battle.__dict__["_maple_sheet"] = True
        await super()._handle_battle_message(split_messages)

    def teampreview(self, battle):
        return self.agent.preview(battle, self.opponent_name)

    async def _handle_battle_request(self, battle, maybe_default_order: bool = False):
        if battle._wait and self.agent.listener is not None:  # asks nothing: a pool's step may be whole
            self.agent.listener.side_waits()
        await super()._handle_battle_request(battle, maybe_default_order)

    def _battle_finished_callback(self, battle) -> None:
        settle(self, battle)
        if self.replays is not None:
            self.replays.finished(battle, self.opponent_name)  # "": the opponent's user name
        if self.on_finished is not None:
            self.on_finished(battle)
        forget_later(self, battle)


def count_request(battle) -> None:
    """One more request of Showdown's for this side (both sides get one per round, a wait
    included; a request re-sent as an update is not counted). The first request can come
    with the battle's first message, before the battle exists: :func:`request_round` counts
    it then."""
    if battle is not None:
        d = battle.__dict__
        d["_maple_round"] = request_round(battle) + 1


def request_round(battle) -> int:
    """How many rounds of requests this side has had."""
    n = battle.__dict__.get("_maple_round")
    return n if n is not None else (1 if battle.last_request else 0)


class ForgetfulBaseline:
    """Mixin for baseline players: count decisions and finished battles (the bench's
    ceiling reads them), and drop finished battles so long runs stay bounded."""

    n_decisions = 0
    n_finished = 0

    @property
    def results(self) -> dict:
        """Wins, losses and ties of the battles finished so far (eval's baseline side)."""
        return self.__dict__.setdefault("_maple_results", {"won": 0, "lost": 0, "tied": 0})

    def choose_move(self, battle):
        self.n_decisions += 1
        return super().choose_move(battle)

    def teampreview(self, battle):
        self.n_decisions += 1  # a request answered, as the agent counts its team preview
        return super().teampreview(battle)

    def _battle_finished_callback(self, battle) -> None:
        self.n_finished += 1
        self.results["won" if battle.won else "lost" if battle.lost else "tied"] += 1
        forget_later(self, battle)


class ImitatedBaseline:
    """Mixin before a baseline (and after :class:`FastBattles`): the baseline plays, and an
    :class:`Agent` records each of its decisions as a trajectory step (behaviour cloning's
    data, with our observation, mask and reward)."""

    agent: Driver
    opponent_name = ""

    def choose_move(self, battle):
        return self.agent.imitate(battle, self.opponent_name, super().choose_move(battle))

    def _battle_finished_callback(self, battle) -> None:
        settle(self, battle)
        forget_later(self, battle)


def settle(player, battle) -> None:
    """A finished battle of a player an agent drives or records: the result counted, the
    agent told (its trajectory ends here)."""
    player.results["won" if battle.won else "lost" if battle.lost else "tied"] += 1
    player.agent.finished(battle)


def make_teacher(name: str, agent: Driver, opponent_name: str, server_url: str, account: str,
                 concurrency: int, battle_format: str, team=None) -> Player:
    """Baseline ``name`` playing, ``agent`` recording its decisions."""
    if name not in BASELINES:
        raise ValueError(f"unknown teacher '{name}' (known: {', '.join(BASELINES)})")
    cls = type(f"Teacher{BASELINES[name].__name__}", (FastBattles, ImitatedBaseline, BASELINES[name]), {})
    player = cls(**player_kwargs(server_url, account, concurrency, battle_format, team))
    player.agent, player.opponent_name = agent, opponent_name
    player.results = {"won": 0, "lost": 0, "tied": 0}
    quiet_logger(player)
    return player


def forget_later(player: Player, battle) -> None:
    loop = asyncio.get_running_loop()
    loop.call_later(FORGET_FINISHED_AFTER_S, player.battles.pop, battle.battle_tag, None)


class _ReapingTaskSet(set):
    """poke-env's set of message-handler tasks. A handler that fails has already logged its
    error through poke-env's logger; marking the exception retrieved here stops asyncio from
    printing it again as "Task exception was never retrieved" (e.g. every ``/leave`` that
    meets a websocket we closed at shutdown)."""

    def discard(self, task) -> None:
        if task.done() and not task.cancelled():
            task.exception()
        super().discard(task)


def quiet_logger(player: Player) -> None:
    """poke-env gives each player its own stream handler; don't print twice via root, and
    don't print handler errors twice via asyncio."""
    player.logger.propagate = False
    client = player.ps_client
    if isinstance(getattr(client, "_active_tasks", None), set):
        client._active_tasks = _ReapingTaskSet(client._active_tasks)


def _baseline_class(base: type) -> type:
    return type(f"Forgetful{base.__name__}", (ForgetfulBaseline, base), {})


def run_id() -> str:
    """Short random tag: account names are unique per run, so runs never collide."""
    return secrets.token_hex(3)


def fast_kwargs(runner_cfg) -> dict:
    """PolicyPlayer's battle-state options from the ``runner`` config section."""
    return dict(fast_battles=runner_cfg.fast_battles, track_changes=runner_cfg.incremental_encode,
                coalesce=runner_cfg.coalesce_sends, fair=runner_cfg.fair_receive,
                open_team_sheets=runner_cfg.open_team_sheets)


def player_kwargs(server_url: str, name: str, concurrency: int, battle_format: str,
                  team=None, password: Optional[str] = None, login_url: Optional[str] = None,
                  open_team_sheets: bool = False) -> dict:
    """``team``: a poke-env Teambuilder (team formats), asked for a team before each battle.
    ``password`` and ``login_url``: a registered account on a server with normal login.
    ``open_team_sheets``: accept them (VGC; poke-env rejects them otherwise)."""
    from ..server import websocket_url
    # Not a URL: the simulator transport, which gives the player its client after this.
    remote = isinstance(server_url, str)
    return dict(
        team=team,
        account_configuration=AccountConfiguration(name[:18], password),
        server_configuration=ServerConfiguration(
            websocket_url(server_url) if remote else "ws://127.0.0.1:0/simulator", login_url),
        start_listening=remote,
        battle_format=battle_format,
        max_concurrent_battles=concurrency,
        accept_open_team_sheet=open_team_sheets,
        loop=asyncio.get_running_loop(),
        log_level=logging.ERROR,
    )


def make_baseline(name: str, server_url: str, account: str, concurrency: int,
                  battle_format: str, team=None, open_team_sheets: bool = False,
                  base: Optional[type] = None) -> Player:
    """poke-env's baseline ``name``, or ``base``: a player class of the caller's (the search
    opponent's), played and counted the same way."""
    if base is None and name not in BASELINES:
        raise ValueError(f"unknown baseline '{name}' (known: {', '.join(BASELINES)})")
    player = _baseline_class(base or BASELINES[name])(**player_kwargs(server_url, account, concurrency, battle_format, team,
                                                   open_team_sheets=open_team_sheets))
    quiet_logger(player)
    player.errors = ServerErrors()  # a baseline's invalid choices are counted like the agent's
    player.logger.setLevel(SERVER_ERROR_LEVEL)
    player.logger.addFilter(_QuietErrorCounter(player.errors))
    return player


async def forfeit_unfinished(players, skip: Optional[set] = None) -> None:
    """Forfeit every battle still running for these players (best effort); with ``skip``,
    only battles not in it, which are added to it."""
    for p in players:
        for tag, battle in list(p.battles.items()):
            if skip is not None:
                if (p.username, tag) in skip:
                    continue
                skip.add((p.username, tag))
            if not battle.finished:
                try:
                    await p.ps_client.send_message("/forfeit", tag)
                except Exception:  # connection already gone
                    pass


async def close_players(*players: Player) -> None:
    """Close the websockets, then cancel message handlers still waiting on a battle lock
    (otherwise they are garbage-collected while pending, with a warning each)."""
    me = asyncio.current_task()
    for p in players:
        # Handlers still running would log every send to the closed socket and every
        # cancellation ("CancelledError intercepted"); nothing useful is said after this point.
        p.logger.disabled = True
        try:
            await asyncio.wait_for(p.ps_client.stop_listening(), 5.0)
        except Exception:  # already closed / never connected
            pass
        # The listen loop still hands out frames that were buffered before the close (with
        # fair_receive, one per loop iteration), each as a new handler task: wait for it to
        # end, so no handler is created after the ones cancelled below.
        listening = getattr(p.ps_client, "_listening_coroutine", None)
        if listening is not None:  # (wait, not wait_for: how it ended is not ours to raise)
            await asyncio.wait([asyncio.wrap_future(listening)], timeout=5.0)
        handlers = [t for t in getattr(p.ps_client, "_active_tasks", ()) if t is not me]
        for t in handlers:
            t.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        if hasattr(p, "close_search"):  # the search opponent's leaf process
            await p.close_search()


