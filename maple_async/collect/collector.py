"""The collector: lanes of battles on one server, emitting finished trajectories.

One lane per opponent kind of ``train.opponents`` (self-play, league, baselines), its
concurrency split by the mix's weights; every lane is a
:class:`~maple_async.collect.match.Match`. The learner's side of every lane is one
:class:`~maple_async.collect.agent.Agent`, so all its battles batch together. Weights arrive
with :meth:`Collector.apply`; finished trajectories leave through ``on_trajectory``.

A server that dies (or stops answering twice in a row), or players that never log in, are
a fault: in-flight battles are abandoned (never trained on), the server is recovered and
new lanes start. The same collector runs in the training process, in a shard's worker
process and in a Ray actor (:mod:`maple_async.run.worker`).
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..config import Config
from ..inference.league import LeaguePolicy
from ..inference.policy import InferencePolicy, resolve_device
from ..learn import networks as nets
from ..opponents import parse_opponent_schedule
from ..pokeenv.players import fast_kwargs, request_round
from ..pokeenv.replays import ReplayWriter
from ..teams import for_formats
from .agent import Agent, Trajectory
from .match import Match, stop_players

_WATCH_PERIOD_S = 2.0  # server health poll
_LOGIN_TIMEOUT_S = 60.0


@dataclass
class Lane:
    name: str
    match: Optional[Match]
    n_battles: int
    task: Optional[asyncio.Task] = None


class Collector:
    """``agent``, ``mix`` and ``opponents``: a caller's own agent (a pool of battles for an
    outside learner) in place of the learner's, its opponent mix, and the agents that
    play the mix's names that are neither ``self``, ``league`` nor a baseline."""

    def __init__(self, cfg: Config, on_trajectory: Optional[Callable[[Trajectory], None]] = None,
                 quiet: bool = False, replay_subdir: str = "", *, agent: Optional[Agent] = None,
                 mix: Optional[dict] = None, opponents: Optional[dict] = None, label: str = "train",
                 device=None):
        self.cfg = cfg
        self.quiet = quiet
        self.label = label
        # One learner battle in train.replay_every kept (each shard its own folder and bound).
        self.replays = (ReplayWriter(Path(cfg.train.run_dir) / "replays" / replay_subdir,
                                     cfg.train.replay_every, cfg.train.replay_keep)
                        if cfg.train.replay_every else None)
        # the schedule's first mix; the learner's messages carry the next (``apply``)
        stages = [(0, mix)] if mix is not None else parse_opponent_schedule(cfg.train.opponents)
        self.mix = stages[0][1]
        self.opponents: dict = dict(opponents or {})
        # validated once per process (the main one checks first): each listed format's teams
        self.formats = for_formats(cfg)
        # the networks' device is the config's (every process resolves it the same way)
        device = resolve_device(cfg.runner.device) if device is None else device
        self.league_policy: Optional[LeaguePolicy] = None
        if any("league" in m for _, m in stages):
            seed = cfg.runner.seed
            self.league_policy = LeaguePolicy(lambda: nets.for_config(cfg), device,
                                              rng=random.Random(None if seed is None else seed + 17))
        self._on_trajectory = on_trajectory
        self.agent = agent or Agent(InferencePolicy(nets.for_config(cfg), device), cfg.batcher,
                                    reward_cfg=cfg.reward, record=True, on_trajectory=self._emit,
                                    name="learner", gamma=cfg.ppo.gamma)
        self.league_agent: Optional[Agent] = None
        if self.league_policy is not None:
            self.league_agent = Agent(self.league_policy, cfg.batcher, name="league")
        self.agents = [a for a in (self.agent, self.league_agent, *self.opponents.values()) if a is not None]
        self._retired: list[Lane] = []  # lanes replaced by set_mix, playing out their battles
        self._switch = False
        self._restart: Optional[tuple] = None  # (between, done) of a pending restart()
        self._running = False  # run() is playing (a restart() needs it)
        self._wake = asyncio.Event()  # a stop request, a fault, or a lane that ended
        self._stop = asyncio.Event()
        self._fault = asyncio.Event()
        self.faults = 0
        self.stop_reason = ""
        self.lanes: list[Lane] = []  # the lanes playing now

    def _print(self, msg: str) -> None:
        if not self.quiet:
            print(msg.replace("[train]", f"[{self.label}]", 1), flush=True)

    def _emit(self, traj: Trajectory) -> None:
        """A learner trajectory against the league names the snapshot it played (``league#id``)."""
        if traj.opponent == "league" and self.league_policy is not None:
            sid = self.league_policy.snapshot_of(traj.key[0])
            if sid is not None:
                traj.opponent = f"league#{sid}"
        self._on_trajectory(traj)

    def apply(self, msg: dict) -> None:
        """New weights from the learner: ``{"weights", "version", "league"}``, and the
        opponent mix of its schedule (``"mix"``) when it has one."""
        self.agent.batcher.set_weights(msg["weights"], msg["version"])
        if self.league_agent is not None and msg.get("league") is not None:
            self.league_agent.batcher.set_weights(msg["league"])
        mix = msg.get("mix")
        if mix is not None and mix != self.mix:
            if self._running:
                self.set_mix(mix, self.opponents)
            else:
                self.mix = dict(mix)

    def pause(self, paused: bool) -> None:
        """Hold every decision (the learner is behind) or let them go again; the time held
        does not count as a battle's silence."""
        for a in self.agents:
            a.batcher.pause(paused)
            if not paused:
                a.touch_live()

    def sides_to_come(self) -> bool:
        """Whether a side of the agent's battles may still ask before any of its live sides
        answers: a battle its players began whose first request has not come, or (self-play)
        one that only one of its two players has seen begin."""
        agent = self.agent
        known = []
        for ln in self.lanes:
            for player in ln.match.players:
                if getattr(player, "agent", None) is not agent:
                    continue
                battles = player.battles
                if any(not b.finished and request_round(b) == 0 for b in battles.values()):
                    return True
                known.append(battles)
        if len(known) == 2:
            for tag, side in agent.live:
                if (tag, "p2" if side == "p1" else "p1") not in agent.live \
                        and not (tag in known[0] and tag in known[1]):
                    return True
        return False

    def request_stop(self, reason: str) -> None:
        if not self._stop.is_set():
            self.stop_reason = reason
            self._stop.set()
            self._wake.set()

    # -- lanes ---------------------------------------------------------------------------
    def make_lanes(self, url: str) -> list[Lane]:
        """One match per format and opponent kind, concurrency split evenly between the
        formats, then by the mix's weights."""
        cfg = self.cfg
        lanes = []
        per_format = 1.0 / len(self.formats)
        for fmt, teams in self.formats.items():
            for name, share in sorted(self.mix.items()):
                share *= per_format
                c = max(1, round(cfg.runner.concurrency * share))
                # Enough battles never to run dry; the learning loop stops the lanes when done.
                n = max(2 * c, math.ceil(cfg.train.total_sides * share * 1.5) + c)
                opponent = {"self": self.agent, "league": self.league_agent, **self.opponents}.get(name, name)
                labels = (name, "learner" if name == "league" else "self")
                match = Match(url, self.agent, opponent, concurrency=c, account=f"mpl{len(lanes)}",
                              battle_format=fmt, battle_options=fast_kwargs(cfg.runner),
                              battle_timeout_s=cfg.runner.battle_timeout_s, labels=labels,
                              teams=teams, replays=self.replays)
                lanes.append(Lane(name if len(self.formats) == 1 else f"{fmt}:{name}", match, n))
        return lanes

    def _start_lanes(self, url: str) -> tuple[list[Lane], list[asyncio.Task]]:
        loop = asyncio.get_running_loop()
        lanes = self.lanes = self.make_lanes(url)
        for ln in lanes:
            ln.task = ln.match.start(ln.n_battles)
            ln.task.add_done_callback(lambda _t: self._wake.set())
        players = [p for ln in lanes for p in ln.match.players]
        tasks = [loop.create_task(self._watch_logins(players))]
        self._print("[train] lanes: " + ", ".join(
            f"{ln.name} (concurrency {ln.match.concurrency})" for ln in lanes))
        return lanes, tasks

    async def _stop_lanes(self, lanes: list[Lane], tasks: list, forfeit: bool, grace_s: float = 10.0) -> None:
        for t in tasks:
            t.cancel()
        for ln in lanes:
            ln.match.halt()  # every lane's battles abandoned before any forfeit goes out
        await asyncio.gather(*(ln.match.close(forfeit=forfeit, grace_s=grace_s) for ln in lanes))

    def set_mix(self, mix: dict, opponents: Optional[dict] = None) -> None:
        """New lanes for ``mix`` (and its ``opponents``' agents) now; the lanes they replace
        start no battle more and close once theirs have ended, and the agents no lane plays
        any more are closed then."""
        for a in (opponents or {}).values():
            if a not in self.agents:
                self.agents.append(a)
        self.mix, self.opponents = dict(mix), dict(opponents or {})
        self._switch = True
        self._wake.set()

    async def restart(self, between: Optional[Callable[[], None]] = None) -> None:
        """End every battle in flight (abandoned, never trained on, and forfeited) and
        start new lanes; ``between`` runs once the old battles are gone and before any new
        one starts. Returns once the old battles are gone; the new lanes start right after."""
        if not self._running:
            raise RuntimeError(f"the collector is not running ({self.stop_reason or 'not started'})")
        done = asyncio.get_running_loop().create_future()
        self._restart = (between, done)
        self._wake.set()
        await asyncio.shield(done)  # a caller that gives up leaves the restart to finish

    def _retired_agents(self) -> list[Agent]:
        """Opponent agents that no lane, current or retiring, plays any more."""
        playing = {id(a) for a in (self.agent, self.league_agent, *self.opponents.values())}
        for ln in [*self.lanes, *self._retired]:
            playing.update(id(a) for a in ln.match.agents)
        return [a for a in self.agents if id(a) not in playing]

    async def _close_retired_agents(self) -> None:
        for a in self._retired_agents():
            self.agents.remove(a)
            await a.batcher.close()
            close = getattr(a.policy, "close", None)
            if close is not None:
                close()

    async def _retire(self, lanes: list[Lane]) -> None:
        for ln in lanes:
            ln.task.cancel()  # no more challenges; the battles in flight play on
        players = [p for ln in lanes for p in ln.match.players]
        deadline = asyncio.get_running_loop().time() + self.cfg.runner.battle_timeout_s
        while (asyncio.get_running_loop().time() < deadline
               and any(not b.finished for p in players for b in p.battles.values())):
            await asyncio.sleep(0.5)
        for ln in lanes:
            if ln.match._watchdog is not None:
                ln.match._watchdog.cancel()
        await stop_players(players, forfeit=True)
        for ln in lanes:
            if ln in self._retired:
                self._retired.remove(ln)
        await self._close_retired_agents()

    # -- watchers ----------------------------------------------------------------------------
    def _flag_fault(self) -> None:
        self._fault.set()
        self._wake.set()

    async def _watch_server(self, server, period_s: Optional[float] = None) -> None:
        """Flag a fault when the server process dies or stops answering twice in a row."""
        misses = 0
        while True:
            await asyncio.sleep(period_s or _WATCH_PERIOD_S)
            if server.managed is not None and not server.managed.alive():
                misses = 2
            else:
                misses = 0 if await server.healthy() else misses + 1
            if misses >= 2:
                self._flag_fault()
                return

    async def _watch_logins(self, players: list, timeout_s: float = _LOGIN_TIMEOUT_S) -> None:
        """A player that never logs in would leave its lane idle forever (seen with 8 servers
        starting at once): treat it as a server fault, so the lanes restart with new accounts."""
        try:
            # return_exceptions: waits cancelled at shutdown leave no unretrieved error behind
            await asyncio.wait_for(asyncio.gather(*(p.ps_client.logged_in.wait() for p in players),
                                                  return_exceptions=True), timeout_s)
        except asyncio.TimeoutError:
            missing = [p.username for p in players if not p.ps_client.logged_in.is_set()]
            self._print(f"[train] not logged in after {timeout_s:.0f}s: {', '.join(missing)}")
            self._flag_fault()

    # -- the run -----------------------------------------------------------------------------
    async def run(self, server) -> None:
        """Play until :meth:`request_stop` (or every lane finished); survive server faults.
        ``server``: a :class:`~maple_async.server.ServerHandle`."""
        loop = asyncio.get_running_loop()
        for a in self.agents:
            a.batcher.start()
        lanes: list[Lane] = []
        tasks: list = []
        self._running = True
        try:
            while not self._stop.is_set():
                self._fault.clear()
                lanes, tasks = self._start_lanes(server.url)
                tasks.append(loop.create_task(self._watch_server(server)))
                await self.until_stop_or_fault(lanes)
                while (self._switch and not self._stop.is_set() and not self._fault.is_set()
                       and self._restart is None):
                    self._switch = False
                    self._retired += lanes
                    tasks.append(loop.create_task(self._retire(lanes)))
                    lanes, more = self._start_lanes(server.url)
                    tasks += more
                    await self.until_stop_or_fault(lanes)
                lanes, self._retired = lanes + self._retired, []
                if self._restart is not None and not self._stop.is_set() and not self._fault.is_set():
                    (between, done), self._restart = self._restart, None
                    self._switch = False
                    await self._stop_lanes(lanes, tasks, forfeit=True)
                    lanes, tasks = [], []
                    await self._close_retired_agents()
                    try:
                        if between is not None:
                            between()
                    except BaseException as e:  # noqa: BLE001 - the caller of restart() gets it
                        done.set_exception(e)
                    else:
                        done.set_result(None)
                    continue
                if not self._fault.is_set() or self._stop.is_set():
                    break
                in_flight = sum(len(a.live) for a in self.agents)
                self._print(f"[train] server fault: abandoning {in_flight} in-flight battle sides "
                            f"(partial trajectories dropped, finished ones kept); recovering the server")
                self.faults += 1
                self._switch = False  # the lanes started after the fault play the new mix already
                await self._stop_lanes(lanes, tasks, forfeit=False)
                lanes, tasks = [], []
                await server.recover()
                self._print(f"[train] server back at {server.url}; resuming")
        finally:
            self._running = False
            await self._stop_lanes(lanes, tasks, forfeit=True)
            for a in self.agents:
                await a.batcher.close()
            if self._restart is not None and not self._restart[1].done():
                self._restart[1].set_exception(RuntimeError(f"the collector stopped: {self.stop_reason}"))

    async def until_stop_or_fault(self, lanes: list[Lane]) -> None:
        """Wait for a stop request or a fault. Lanes that all ended stop the run, unless one
        of them failed: then a fault is expected within a few server polls (the server died
        under it); without one it is a bug, and it is raised."""
        while (not self._stop.is_set() and not self._fault.is_set() and not self._switch
               and self._restart is None):
            await self._wake.wait()
            self._wake.clear()
            if not lanes or not all(ln.task.done() for ln in lanes):
                continue
            failed = [ln for ln in lanes if not ln.task.cancelled() and ln.task.exception()]
            if not failed:
                self.request_stop("all lanes finished")
                continue
            try:
                await asyncio.wait_for(self._fault.wait(), 3 * _WATCH_PERIOD_S)
            except asyncio.TimeoutError:
                raise RuntimeError(f"lane {failed[0].name} failed with the server up") \
                    from failed[0].task.exception()
