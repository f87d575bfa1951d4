"""A match: two players on one server, built, run and torn down in one place.

Each side is an :class:`~maple_async.collect.agent.Agent` (our policy, through a
:class:`~maple_async.pokeenv.players.PolicyPlayer`) or a baseline's name (``random``,
``max_power``, ``heuristics``). :class:`Match` starts the agents' batchers and a watchdog
that forfeits silent battles; :meth:`Match.close` forfeits what still runs, closes the
sockets and, if asked, the batchers. ``play``, ``eval``, ``bench`` and the training
collector all play through it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from dataclasses import dataclass
from typing import Optional, Union

from ..opponents import SEARCH_NAMES
from ..pokeenv.players import (PolicyPlayer, close_players, forfeit_unfinished, make_baseline,
                               make_teacher, player_kwargs, run_id)
from ..teams import Teams
from .agent import Agent

log = logging.getLogger("maple_async.match")


def _search_baseline(battle_format: str) -> type:
    """The ``search`` opponent's player class, imported when a match plays it: a training
    process never loads the search package."""
    from ..search.player import baseline_class
    return baseline_class(battle_format)


@dataclass
class Teacher:
    """A baseline that plays while ``agent`` records its decisions (behaviour cloning)."""

    name: str
    agent: Agent


Side = Union[Agent, Teacher, str]  # an agent, a recorded baseline, or a baseline's name


class Match:
    """``me`` against ``opponent`` on ``url``, ``concurrency`` battles in flight. ``url``: a
    Showdown server's URL, or :class:`~maple_async.simulator.Simulators` (the simulator
    transport; ``account`` then also keys the battles' seeds).

    ``labels``: what each side's trajectories and statistics call the other (default: the
    baseline's name, or ``self`` when both sides are the same agent).
    ``battle_options``: :func:`~maple_async.pokeenv.players.fast_kwargs` of the config.
    ``teams``: in a team format, the pools ``me`` and ``opponent`` draw a team from per
    battle (:func:`maple_async.teams.for_config`).
    ``replays``: a :class:`~maple_async.pokeenv.replays.ReplayWriter` for ``me``'s battles
    (``me`` must be an agent).
    ``search``: the ``search`` opponent's :class:`~maple_async.config.SearchConfig` (default: the defaults).
    """

    def __init__(self, url: str, me: Side, opponent: Side, *, concurrency: int,
                 battle_format: str = "gen9randombattle", battle_options: Optional[dict] = None,
                 battle_timeout_s: float = 300.0, account: str = "mpl",
                 labels: Optional[tuple[str, str]] = None, teams: Optional[Teams] = None,
                 replays=None, search=None):
        self.concurrency = concurrency
        self.battle_timeout_s = battle_timeout_s
        if labels is None:
            labels = tuple("self" if isinstance(other, Agent) else other for other in (opponent, me))
        tag = run_id()
        fast = battle_options or {}
        sheets = fast.get("open_team_sheets", False)  # the baselines accept them as our players do
        builders = teams.builders(zlib.crc32(account.encode())) if teams is not None else (None, None)

        # A URL, or the simulator transport's processes (battles started here, no challenges).
        self.sims = None if isinstance(url, str) else url
        self.account = account

        def player(side: Side, label: str, suffix: str, team):
            name = f"{account}{tag}{suffix}"
            if isinstance(side, Agent):
                p = PolicyPlayer(side, label, **fast,
                                 **player_kwargs(url, name, concurrency, battle_format, team))
            elif isinstance(side, Teacher):
                p = make_teacher(side.name, side.agent, label, url, name, concurrency, battle_format, team)
            else:
                base = _search_baseline(battle_format) if side in SEARCH_NAMES else None
                p = make_baseline(side, url, name, concurrency, battle_format, team, sheets, base=base)
                if base is not None and search is not None:
                    p.search_config = search
            if self.sims is not None:
                self.sims.attach(p)
            return p

        self.me = player(me, labels[0], "a", builders[0])
        self.opponent = player(opponent, labels[1], "b", builders[1])
        if replays is not None:
            self.me.replays = replays
        self.players = [self.me, self.opponent]
        self.agents = list(dict.fromkeys(s.agent if isinstance(s, Teacher) else s
                                         for s in (me, opponent) if isinstance(s, (Agent, Teacher))))
        self.task: Optional[asyncio.Task] = None
        self._watchdog: Optional[asyncio.Task] = None

    @property
    def results(self) -> dict:
        """``me``'s wins, losses and ties so far."""
        return self.me.results

    def start(self, n_battles: int) -> asyncio.Task:
        """Start the batchers, the watchdog and ``n_battles`` battles; returns their task. A
        second start (more battles with the same players) replaces the first's watchdog."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = start_agents(self.agents, self.players, self.battle_timeout_s)
        if self.sims is not None:
            battles = self.sims.play(self.me, self.opponent, n_battles, self.concurrency, self.account)
        else:
            battles = self.me.battle_against(self.opponent, n_battles=n_battles)
        self.task = asyncio.get_running_loop().create_task(battles, name="maple-match")
        return self.task

    async def play(self, n_battles: int) -> float:
        """Play ``n_battles`` to the end; returns the seconds they took."""
        t0 = time.perf_counter()
        await self.start(n_battles)
        return time.perf_counter() - t0

    def halt(self) -> None:
        """Stop new battles and decisions; abandon in-flight ones (never trained on). Called
        first by :meth:`close`; call it on every match first to stop several at once."""
        for t in (self.task, self._watchdog):
            if t is not None:
                t.cancel()
        # Abandon before forfeiting, so the forfeits' end messages make no trajectories.
        tags = {tag for p in self.players for tag in p.battles}
        for a in self.agents:
            a.closing = True
            for key in [k for k in a.live if k[0] in tags]:
                a.abandon(key)

    async def close(self, forfeit: bool = True, grace_s: float = 0.0, close_batchers: bool = False) -> None:
        """:meth:`halt`, then forfeit what still runs (waiting up to ``grace_s`` for it to
        end) and close the sockets (and the agents' batchers when ``close_batchers``)."""
        self.halt()
        await stop_players(self.players, self.agents if close_batchers else (), forfeit, grace_s)


def start_agents(agents: list[Agent], players: list, timeout_s: float) -> Optional[asyncio.Task]:
    """Start the agents' batchers and a :func:`watchdog` over the players' battles; returns
    the watchdog's task (None without players)."""
    for a in agents:
        a.closing = False
        a.batcher.start()
    if not players:
        return None
    return asyncio.get_running_loop().create_task(
        watchdog(agents, players, timeout_s, period_s=min(5.0, timeout_s / 4)), name="maple-watchdog")


async def stop_players(players: list, agents=(), forfeit: bool = True, grace_s: float = 0.0) -> None:
    """Forfeit the players' unfinished battles (waiting up to ``grace_s`` for them to end),
    close their sockets, then the batchers of ``agents``."""
    if forfeit:
        sent: set = set()
        deadline = time.perf_counter() + grace_s
        while True:
            # A challenge accepted as the match stopped starts a battle now: forfeit it too.
            await forfeit_unfinished(players, skip=sent)
            if time.perf_counter() >= deadline or all(
                    b.finished for p in players for b in p.battles.values()):
                break
            await asyncio.sleep(0.1)
    await close_players(*players)
    for a in agents:
        await a.batcher.close()


def silent_battles(agents: list[Agent], players: list, timeout_s: float, now: float,
                   orphans: dict) -> tuple[dict, dict]:
    """The battles of ``players`` that Showdown left silent for ``timeout_s``: tag -> the
    ``(agent, key)`` of its live sides. Silent: no side of it (in any of ``agents``) has a
    decision pending here, and no request came nor answer went for the timeout. A battle
    with no live side at all (its handling failed before a first decision, or a baseline
    plays both sides) is silent once it stayed on one turn for the timeout: ``orphans[tag]``
    is (since when, that turn). Returns also the new ``orphans``."""
    last: dict = {}  # tag -> its latest request or answer; None while a decision is pending
    sides: dict = {}
    for agent in agents:
        for key, live in agent.live.items():
            tag = key[0]
            sides.setdefault(tag, []).append((agent, key))
            t = last.get(tag, 0.0)
            if t is not None:
                last[tag] = None if live.pending else max(t, live.last_active)
    silent = {tag: sides[tag] for tag, t in last.items() if t is not None and now - t > timeout_s}
    seen: dict = {}
    for p in players:
        for tag, battle in p.battles.items():
            if tag not in last and not battle.finished:
                turn = getattr(battle, "turn", 0)
                since, then = orphans.get(tag, (now, turn))
                seen[tag] = (since if turn == then else now, turn)  # a baseline's battle moving on
                if now - seen[tag][0] > timeout_s:
                    silent[tag] = []
    return silent, seen


async def watchdog(agents: list[Agent], players: list, timeout_s: float, period_s: float = 5.0):
    """Abandon these players' battles that Showdown left silent (:func:`silent_battles`):
    forfeit them and free their state. Time a decision waits on our side is not silence."""
    orphans: dict = {}
    while True:
        await asyncio.sleep(period_s)
        now = time.perf_counter()
        silent, orphans = silent_battles(agents, players, timeout_s, now, orphans)
        for tag, sides in silent.items():
            holders = [p for p in players if tag in p.battles]
            if not holders:
                continue  # another match's battle: its own watchdog forfeits it
            log.warning("battle %s silent for %.0fs: forfeiting and abandoning it", tag, timeout_s)
            for agent, key in sides:
                if key in agent.live:
                    agent.abandon(key)
            if tag in orphans:
                orphans[tag] = (now, orphans[tag][1])  # forfeited: again only if still there a timeout later
            for p in holders:
                try:
                    await p.ps_client.send_message("/forfeit", tag)
                except Exception:
                    pass


class Rates:
    """battles/s and decisions/s from ``battles``, ``decisions`` and ``seconds``."""

    @property
    def battles_per_s(self) -> float:
        return self.battles / self.seconds if self.seconds else 0.0

    @property
    def decisions_per_s(self) -> float:
        return self.decisions / self.seconds if self.seconds else 0.0


@dataclass
class PlayResult(Rates):
    battles: int
    seconds: float
    decisions: int
    mean_batch_size: float
    wins: int
    losses: int
    ties: int
    opponent_invalid_choices: Optional[int] = None  # a baseline opponent's [Invalid choice] errors
    opponent_search: str = ""  # the search opponent's counters


async def play(agent: Agent, server_url: str, n_battles: int, *, opponent: str = "self",
               concurrency: int = 64, battle_format: str = "gen9randombattle",
               battle_timeout_s: float = 300.0, battle_options: Optional[dict] = None,
               teams: Optional[Teams] = None, replays=None, search=None, progress=None) -> PlayResult:
    """Play ``n_battles`` with ``agent`` against itself (``self``) or a baseline. The agent's
    batcher stays open (its owner closes it). ``replays``: a ReplayWriter for the first side;
    ``search``: the ``search`` opponent's keys; ``progress``: a
    :class:`~maple_async.tools.progress.Progress` that follows the match."""
    match = Match(server_url, agent, agent if opponent == "self" else opponent,
                  concurrency=concurrency, battle_format=battle_format, account="maple",
                  battle_options=battle_options, battle_timeout_s=battle_timeout_s, teams=teams,
                  replays=replays, search=search)
    d0, b0, s0 = agent.stats.decisions, agent.batcher.stats.batches, agent.batcher.stats.decisions
    t0 = time.perf_counter()
    if progress is not None:
        progress.follow(match.results, f"vs {opponent}", win_rate=opponent != "self")  # self-play's is a half
    try:
        await match.play(n_battles)
    finally:
        elapsed = time.perf_counter() - t0
        if progress is not None:
            progress.settle()
        await match.close()
    bstats = agent.batcher.stats
    nb = bstats.batches - b0
    r = match.results  # from the first side's view (in self-play both sides are the agent)
    errors = getattr(match.opponent, "errors", None)
    search = getattr(match.opponent, "search_stats", None)
    return PlayResult(r["won"] + r["lost"] + r["tied"], elapsed, agent.stats.decisions - d0,
                      (bstats.decisions - s0) / nb if nb else 0.0, r["won"], r["lost"], r["tied"],
                      errors.invalid_choices if errors is not None else None,
                      search.line() if search is not None else "")
