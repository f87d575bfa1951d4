"""A trained agent outside training: ``serve`` (log in and accept challenges, any number at
once through one batcher) and ``ladder`` (rated battles on the server's ladder, and the
rating the server reports).

Both log in with :mod:`maple_async.pokeenv.accounts` (a loopback server needs no password;
any other gets the normal login and spaced messages) and print one line per finished battle.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Callable, Optional

from poke_env.data.normalize import to_id_str

from ..collect.agent import Agent
from ..collect.match import start_agents, stop_players
from ..errors import UserError
from ..pokeenv.accounts import Credentials, is_loopback, throttle_sends
from ..pokeenv.players import PolicyPlayer, fast_kwargs, player_kwargs
from ..pokeenv.replays import ReplayWriter, result_word

LOGIN_TIMEOUT_S = 30.0
RATING_WAIT_S = 15.0  # the ladder's rating line comes after the battle's |win|
_RATING = re.compile(r"^(.+?)'s rating: (\d+) &rarr; <strong>(\d+)</strong>")


class ServePlayer(PolicyPlayer):
    """Our policy behind a user name: challenges in another format are refused, with a line."""

    async def _handle_challenge_request(self, split_message):
        # |pm|!user|receiver|/challenge FORMAT|...
        user = split_message[2].strip()
        fmt = split_message[5] if len(split_message) >= 6 else ""
        if to_id_str(user) != to_id_str(self.username) and fmt and fmt != self._format:
            print(f"[serve] refused a {fmt} challenge from {user.lstrip('+%@*&#~ ')}: "
                  f"serving {self._format}", flush=True)
            await self.ps_client.send_message(f"/reject {to_id_str(user)}")
            return
        await super()._handle_challenge_request(split_message)


@dataclass
class Session:
    """What serve and ladder share: the agent, its player, the counts."""

    agent: Agent
    player: ServePlayer
    url: str
    concurrency: int


def open_session(cfg, policy, url: str, creds: Credentials, concurrency: int, teams,
                 replays: Optional[str], login_url: Optional[str], label: str,
                 make_agent: Callable[..., Agent] = Agent) -> Session:
    """``make_agent``: builds the agent (a :class:`~maple_async.collect.search_agent.SearchAgent`
    searches)."""
    remote = not is_loopback(url)
    agent = make_agent(policy, cfg.batcher, name=label)
    fast = fast_kwargs(cfg.runner)
    if remote:  # one message per send, spaced by throttle_sends
        fast["coalesce"] = False
    team = teams.builders(0)[0] if teams is not None else None
    player = ServePlayer(agent, "", **fast,
                         **player_kwargs(url, creds.username, concurrency, cfg.runner.battle_format, team,
                                         password=creds.password, login_url=login_url if remote else None))
    if remote:
        throttle_sends(player.ps_client)
    if replays:
        player.replays = ReplayWriter(replays)
    return Session(agent, player, url, concurrency)


async def logged_in(session: Session) -> None:
    try:
        await asyncio.wait_for(session.player.ps_client.logged_in.wait(), LOGIN_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise UserError(f"could not log in to {session.url} as {session.player.username} within "
                        f"{LOGIN_TIMEOUT_S:.0f}s (wrong password, name taken, or no websocket)") from None


def battle_line(prefix: str, battle, results: dict) -> str:
    return (f"[{prefix}] {battle.battle_tag} vs {battle.opponent_username}: {result_word(battle)} in "
            f"{battle.turn} turns ({results['won']}W/{results['lost']}L/{results['tied']}T)")


async def _run(session: Session, body, timeout_s: float) -> None:
    """Start the batcher and a watchdog, run ``body``, then forfeit and close whatever is left."""
    guard = start_agents([session.agent], [session.player], timeout_s)
    try:
        await logged_in(session)
        await body
    finally:
        guard.cancel()
        await stop_players([session.player], [session.agent])


async def serve(session: Session, n_battles: int, timeout_s: float = 300.0) -> dict:
    """Accept challenges until ``n_battles`` have been accepted and played (0: forever)."""
    player = session.player
    player.on_finished = lambda b: print(battle_line("serve", b, player.results), flush=True)

    async def body():
        print(f"[serve] logged in as {player.username} on {session.url}: accepting "
              f"{player.format} challenges, up to {session.concurrency} at once"
              + (f", {n_battles} in all" if n_battles else " (Ctrl-C stops)"), flush=True)
        print(f"[serve] to challenge it yourself, open {session.url} in a browser (Showdown's client, "
              f"online) and challenge {player.username}", flush=True)
        await player.accept_challenges(None, n_battles or 10**9)

    await _run(session, body(), timeout_s)
    return dict(player.results)


def rating_lines(battle, username: str) -> list[tuple[int, int]]:
    """(before, after) of ``username``'s rating in this battle's ``|raw|`` lines."""
    out = []
    for msg in battle._replay_data:
        if len(msg) > 2 and msg[1] == "raw":
            m = _RATING.match(msg[2])
            if m and to_id_str(m.group(1)) == to_id_str(username):
                out.append((int(m.group(2)), int(m.group(3))))
    return out


async def ladder(session: Session, n_battles: int, timeout_s: float = 300.0) -> dict:
    """Play ``n_battles`` rated battles one after another; returns results and the rating."""
    player = session.player
    battles: list = []

    def finished(b) -> None:
        battles.append(b)
        print(battle_line("ladder", b, player.results), flush=True)

    player.on_finished = finished
    refused: list = []  # the server's popup when the format has no ladder there

    def popups(record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "Popup message received" in text and "ladderable" in text:
            refused.append(text.split("|popup|")[-1].strip())
        return True

    player.logger.addFilter(popups)

    async def body():
        print(f"[ladder] logged in as {player.username} on {session.url}: searching {n_battles} "
              f"rated {player.format} battles", flush=True)
        search = asyncio.ensure_future(player.ladder(n_battles))
        while not search.done():
            if refused:
                search.cancel()
                raise UserError(f"{session.url} refused the search: {refused[0]}")
            await asyncio.wait([search], timeout=0.2)
        await search
        # The server posts the new rating after the battle ends; wait for the last one's.
        deadline = asyncio.get_running_loop().time() + RATING_WAIT_S
        while battles and not rating_lines(battles[-1], player.username):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.2)

    await _run(session, body(), timeout_s)
    changes = [r for b in battles for r in rating_lines(b, player.username)]
    return {**player.results, "rating_start": changes[0][0] if changes else None,
            "rating": changes[-1][1] if changes else None, "rated_battles": len(changes)}


def outside_config(checkpoint: Optional[str], *, server: Optional[str], fmt: Optional[str],
                   teams: Optional[str], concurrency: int, device: str):
    """The checkpoint's own config (network, batcher, battle options) with this command's
    server, format, teams, concurrency and device, and today's search defaults (a checkpoint
    carries the search settings of the code that saved it); a default config for an outside policy."""
    from .. import config as config_mod
    from ..learn import checkpoint as ckpt
    cfg = ckpt.load_config(checkpoint) if checkpoint else config_mod.Config()
    cfg.server = config_mod.ServerConfig()
    cfg.search = config_mod.SearchConfig()  # how to search is this command's, not the training run's
    if server:
        cfg.server.url = server
    if fmt and fmt != cfg.runner.battle_format:
        keep = cfg.runner.teams if cfg.runner.teams and "{format}" in cfg.runner.teams else None
        cfg.runner.battle_format, cfg.runner.teams = fmt, keep
    names = config_mod.formats(cfg.runner.battle_format)
    if len(names) == 1:  # {format} in its pool's path stands for the one format played
        cfg = config_mod.for_format(cfg, names[0])
    cfg.runner.teams = teams or config_mod.teams_here(cfg.runner.teams, cfg.runner.battle_format)
    cfg.runner.concurrency = concurrency
    cfg.runner.device = device
    return config_mod.validate(cfg)


async def run_outside(cfg, label: str, spec: str, *, n_battles: int, server: Optional[str] = None,
                      credentials: Optional[str] = None, username: Optional[str] = None,
                      login_url: Optional[str] = None, replays: Optional[str] = None,
                      greedy: bool = False, search=None) -> int:
    """``serve`` or ``ladder`` (``label``): log the agent of ``spec`` (a checkpoint or an outside
    policy) in (a managed loopback server unless ``server``), play, print its summary.
    ``search``: a :class:`~maple_async.config.SearchConfig`: the checkpoint searches its
    decisions (:func:`~maple_async.tools.evaluate.searching`); its line is printed at the end."""
    from ..inference.outside import policy_for, until_failed
    from ..pokeenv.accounts import DEFAULT_LOGIN_URL, credentials_for
    from ..pokeenv.players import run_id
    from ..run.process import setup_process
    from ..server import server_for
    from ..teams import for_config

    creds = credentials_for(server or "127.0.0.1", credentials, username or f"maple{run_id()}")
    device = setup_process(cfg)
    policy, ckpt_cfg = policy_for(spec, device, greedy=greedy, battle_format=cfg.runner.battle_format)
    make_agent = Agent
    if search is not None:
        from .evaluate import searching
        make_agent = searching(search, ckpt_cfg)
    teams = for_config(cfg)
    # A real server: a ladder and challenges from people are the point of these commands.
    async with server_for(cfg.server) as running:
        session = open_session(cfg, policy, running.url, creds, cfg.runner.concurrency, teams,
                               replays, login_url or DEFAULT_LOGIN_URL, label, make_agent)
        try:
            if label == "serve":
                try:
                    await until_failed(serve(session, n_battles, cfg.runner.battle_timeout_s), [policy])
                finally:  # Ctrl-C is how a serve without --battles ends: say what it played
                    r = session.player.results
                    print(f"[serve] done: {r['won']}W/{r['lost']}L/{r['tied']}T", flush=True)
            else:
                r = await until_failed(ladder(session, n_battles, cfg.runner.battle_timeout_s), [policy])
                rating = (f"rating {r['rating']} on the server's {cfg.runner.battle_format} ladder "
                          f"({r['rating_start']} before the first battle)" if r["rating"] is not None
                          else "the server reported no rating (its ladder may be disabled)")
                print(f"[ladder] {creds.username}: {r['won']}W/{r['lost']}L/{r['tied']}T in "
                      f"{r['won'] + r['lost'] + r['tied']} battles; {rating}")
        finally:  # the leaf process goes with the session, however it ended
            if search is not None:
                from ..collect.search_agent import NAME
                await session.agent.close_search()
                print(f"[{label}] {NAME}: {session.agent.search_stats.line()}", flush=True)
    if replays:
        print(f"[{label}] replays in {replays}")
    return 0
