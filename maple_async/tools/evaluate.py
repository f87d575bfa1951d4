"""Win rates of a policy against a baseline or another checkpoint, with 95% intervals."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..collect.agent import Agent
from ..collect.match import Match
from .. import config as config_mod
from ..config import for_pool
from ..errors import UserError
from ..inference.outside import until_failed
from ..inference.policy import InferencePolicy, policy_from_checkpoint  # noqa: F401 - re-exported
from ..learn.metrics import wilson_interval
from ..opponents import Opponent, played, split, training_label  # noqa: F401 - training_label re-exported
from ..teams import Teams


@dataclass
class EvalResult:
    opponent: str
    battles: int
    wins: int
    losses: int
    ties: int
    seconds: float
    note: str = ""  # the search opponent's counters (searched and refused shares, ms per decision)

    @property
    def win_rate(self) -> float:
        return (self.wins + 0.5 * self.ties) / self.battles if self.battles else 0.0

    @property
    def ci95(self) -> tuple[float, float]:
        return wilson_interval(self.wins + 0.5 * self.ties, self.battles)

    def summary(self) -> str:
        lo, hi = self.ci95
        return (f"win rate {self.win_rate:.3f} (95% CI {lo:.3f}-{hi:.3f}) over {self.battles} battles "
                f"({self.wins}W/{self.losses}L/{self.ties}T) in {self.seconds:.0f}s")

    def line(self) -> str:
        return f"[eval] vs {self.opponent}: {self.summary()}"

    @classmethod
    def of(cls, label: str, results: dict, seconds: float, search=None) -> "EvalResult":
        """From a match's won/lost/tied counts and, where a side searched, its counters."""
        r = results
        return cls(label, r["won"] + r["lost"] + r["tied"], r["won"], r["lost"], r["tied"], seconds,
                   note=search.line() if search is not None else "")


async def evaluate(policy: InferencePolicy, url: str, opponent, n_battles: int, *,
                   batcher_cfg, concurrency: int = 32, battle_format: str = "gen9randombattle",
                   opponent_label: Optional[str] = None,
                   battle_options: Optional[dict] = None, battle_timeout_s: float = 300.0,
                   teams: Optional[Teams] = None, replays=None, device=None,
                   make_agent: Callable[..., Agent] = Agent, search=None, progress=None) -> EvalResult:
    """Play ``n_battles`` against ``opponent``: a baseline's name, a checkpoint file (loaded
    on ``device``, default the policy's, as greedy as it) or another policy
    (:func:`opponent_side`), called ``opponent_label`` in the results.
    ``battle_options``: :func:`~maple_async.pokeenv.players.fast_kwargs` of the config;
    ``teams``: in a team format, the pools both sides draw from; ``replays``: a ReplayWriter.
    ``make_agent``: builds the player's agent (a :class:`~maple_async.collect.search_agent.SearchAgent`
    searches; its leaf process is closed here). ``search``: the ``search`` opponent's keys.
    ``progress``: a :class:`~maple_async.tools.progress.Progress` that follows the match."""
    label = opponent_label or (opponent if isinstance(opponent, str) else "opponent")
    if isinstance(opponent, str) and not played(opponent).is_baseline:  # a checkpoint file
        opponent = opponent_side(played(opponent), policy.device if device is None else device,
                                 policy.greedy, battle_format)
    agent = make_agent(policy, batcher_cfg, name="eval")
    other = opponent if isinstance(opponent, str) else Agent(opponent, batcher_cfg, name="eval-opponent")
    match = Match(url, agent, other, concurrency=concurrency, battle_format=battle_format,
                  battle_options=battle_options, battle_timeout_s=battle_timeout_s, account="evl",
                  labels=(label, "eval"), teams=teams, replays=replays, search=search)
    if progress is not None:
        progress.follow(match.results, f"vs {label}")
    try:
        seconds = await until_failed(match.play(n_battles), [policy, getattr(other, "policy", None)])
    finally:
        if progress is not None:
            progress.settle()
        await match.close(close_batchers=True)
        if hasattr(agent, "close_search"):
            await agent.close_search()
    search = getattr(match.opponent, "search_stats", None) or getattr(agent, "search_stats", None)
    return EvalResult.of(label, match.results, seconds, search)


def opponent_side(opponent: Opponent, device, greedy: bool, battle_format: str):
    """What :func:`evaluate` plays against: a baseline's name, or a checkpoint's policy
    acting as greedily as the player does."""
    if opponent.is_baseline:
        return opponent.spec
    return policy_from_checkpoint(opponent.spec, device, greedy=greedy, battle_format=battle_format)[0]


def as_greedy(policy: InferencePolicy, greedy: bool) -> InferencePolicy:
    """A loaded checkpoint's policy acting as greedily as its opponent (the same network)."""
    return policy if policy.greedy == greedy else InferencePolicy(policy.network, policy.device, greedy=greedy)


def bradley_terry(games: dict, anchor: Optional[str] = None, iters: int = 2000) -> dict[str, float]:
    """Ratings on the Elo scale (400 log10 of Bradley-Terry strengths) from ``games``:
    ``{(a, b): (a's wins, ties counted half; battles)}``. Every pair gets one virtual drawn
    battle (so a 300-0 record stays finite); ``anchor`` (default: the first player) is 1000."""
    players = sorted({p for pair in games for p in pair})
    wins = dict.fromkeys(players, 0.0)
    n: dict = {}
    for (a, b), (w, battles) in games.items():
        wins[a] += w + 0.5
        wins[b] += battles - w + 0.5
        n[a, b] = n.get((a, b), 0) + battles + 1
        n[b, a] = n[a, b]
    strength = dict.fromkeys(players, 1.0)
    for _ in range(iters):  # Hunter's MM iteration
        new = {}
        for i in players:
            denom = sum(n[i, j] / (strength[i] + strength[j]) for j in players if (i, j) in n)
            new[i] = wins[i] / denom if denom else strength[i]
        mean = math.exp(sum(math.log(v) for v in new.values()) / len(new))
        done = all(abs(new[p] / mean - strength[p]) < 1e-10 for p in players)
        strength = {p: v / mean for p, v in new.items()}
        if done:
            break
    base = strength[anchor if anchor in strength else players[0]]
    return {p: 1000.0 + 400.0 * math.log10(strength[p] / base) for p in players}


@dataclass
class EvalTable:
    """Every checkpoint against every opponent (and the other checkpoints), with ratings."""

    results: list = field(default_factory=list)  # (player, EvalResult, label)

    def games(self) -> dict:
        return {(p, r.opponent): (r.wins + 0.5 * r.ties, r.battles) for p, r, _ in self.results}

    def anchor(self) -> str:
        """The player rated 1000: random when it played, else the first opponent."""
        opponents = [r.opponent for _, r, _ in self.results]
        return "random" if "random" in opponents else opponents[0]

    def ratings(self) -> dict[str, float]:
        return bradley_terry(self.games(), self.anchor())

    def row(self, i: int) -> str:
        """One result's line: who played whom, labelled held out / in training."""
        player, r, label = self.results[i]
        return f"[eval] {player} vs {r.opponent} ({label}): {r.summary()}"

    def add(self, player: str, res: EvalResult, label: str, quiet: bool, who: str) -> None:
        """Record a result; unless ``quiet``, print its row and any search counters (as ``who``'s)."""
        self.results.append((player, res, label))
        if not quiet:
            print(self.row(-1), flush=True)
            if res.note:
                print(f"[eval] {who}: {res.note}", flush=True)

    def lines(self) -> list[str]:
        return [self.row(i) for i in range(len(self.results))] + self.summary()

    def summary(self) -> list[str]:
        """The ratings line, and with several checkpoints the matrix."""
        out = []
        ratings = self.ratings()
        out.append(f"[eval] ratings (Bradley-Terry, Elo scale, {self.anchor()} = 1000): " + ", ".join(
            f"{p} {v:.0f}" for p, v in sorted(ratings.items(), key=lambda kv: -kv[1])))
        players = list(dict.fromkeys(p for p, _, _ in self.results))
        if len(players) > 1:
            cols = list(dict.fromkeys(r.opponent for _, r, _ in self.results))
            rate = {(p, r.opponent): r.win_rate for p, r, _ in self.results}
            width = max(len(c) for c in cols + players) + 2
            out.append("[eval] win rate of row against column:")
            out.append(" " * width + "".join(c.rjust(width) for c in cols))
            for p in players:
                out.append(p.ljust(width) + "".join(
                    (f"{rate[p, c]:.3f}" if (p, c) in rate else "-").rjust(width) for c in cols))
        return out

    def to_json(self) -> dict:
        return {"results": [{"player": p, "opponent": r.opponent, "label": label, "battles": r.battles,
                             "wins": r.wins, "losses": r.losses, "ties": r.ties,
                             "win_rate": r.win_rate, "ci95": list(r.ci95), "seconds": r.seconds}
                            for p, r, label in self.results],
                "ratings": self.ratings()}


def evaluate_policy(policy, opponents=("random", "max_power", "heuristics"), battles: int = 300, *,
                    config=None, concurrency: int = 32, quiet: bool = False, **options) -> EvalTable:
    """Evaluate an outside policy (an object, ``module:attr`` or ``file.py:attr``; see
    :mod:`maple_async.inference.outside`) against baselines and checkpoints, as
    ``maple-async eval --policy`` does: a managed loopback server unless ``server=URL``;
    ``config`` and ``**options`` as :class:`maple_async.env.BattlePool` takes them
    (``battle_format=``, ``teams=``, ``seed=``, any config key). Returns the table; prints
    its lines unless ``quiet``."""
    from ..run.process import run_async
    from ..showdown import showdown_for
    fmt = options.pop("battle_format", "gen9randombattle")
    cfg = for_pool(fmt, concurrency, options.pop("teams", None), options.pop("server", None),
                      options.pop("seed", None), config, options)
    if isinstance(opponents, str):
        opponents = split(opponents)

    async def run() -> EvalTable:
        from ..inference.outside import OutsidePolicy
        from ..pokeenv.players import fast_kwargs
        from ..teams import for_config
        table = EvalTable()
        me = OutsidePolicy(policy)
        async with showdown_for(cfg.server, quiet=True, runner=cfg.runner) as server:
            for opp in map(played, opponents):
                side = opponent_side(opp, "cpu", me.greedy, cfg.runner.battle_format)
                res = await evaluate(me, server.url, side, battles, batcher_cfg=cfg.batcher,
                                     concurrency=concurrency, battle_format=cfg.runner.battle_format,
                                     opponent_label=opp.spec,
                                     battle_options=fast_kwargs(cfg.runner),
                                     battle_timeout_s=cfg.runner.battle_timeout_s, teams=for_config(cfg))
                table.add(me.name, res, "outside policy", quiet, res.opponent)
        if not quiet:
            print("\n".join(table.summary()), flush=True)
        return table

    return run_async(run())


async def evaluate_config(cfg, policy, url: str, opponent, n_battles: int, concurrency: int,
                          label: Optional[str] = None, replays=None,
                          make_agent: Callable[..., Agent] = Agent, progress=None) -> EvalResult:
    """:func:`evaluate` with the config's batcher, format, teams and battle options."""
    from ..pokeenv.players import fast_kwargs
    from ..teams import for_config
    return await evaluate(policy, url, opponent, n_battles, batcher_cfg=cfg.batcher, concurrency=concurrency,
                          battle_format=cfg.runner.battle_format, opponent_label=label,
                          battle_options=fast_kwargs(cfg.runner), battle_timeout_s=cfg.runner.battle_timeout_s,
                          teams=for_config(cfg), replays=replays, make_agent=make_agent, search=cfg.search,
                          progress=progress)


def checkpoint_format(cfg, checkpoint: str, keep_teams: bool = False, quiet: bool = False):
    """``cfg`` playing ``checkpoint``'s own format and, unless ``keep_teams``, its teams where
    they are here (not the default gen 9 one)."""
    from ..learn import checkpoint as ckpt
    saved = ckpt.load_config(checkpoint).runner
    cfg.runner.battle_format = saved.battle_format
    if not keep_teams:
        cfg.runner.teams = config_mod.teams_here(saved.teams, saved.battle_format)
    cfg = config_mod.validate(cfg)
    if not quiet:
        print(f"[eval] {saved.battle_format}: the checkpoint's format (--runner.battle_format plays another)")
    return cfg


def searching(search, ckpt_cfg) -> Callable[..., Agent]:
    """A factory of the searching agent for a checkpoint (its leaves scored as its value head
    was trained: its ``reward`` section and ``ppo.gamma``)."""
    import functools
    from ..collect.search_agent import SearchAgent
    return functools.partial(SearchAgent, search_config=search,
                             value_reward=ckpt_cfg.reward if ckpt_cfg is not None else None,
                             value_gamma=ckpt_cfg.ppo.gamma if ckpt_cfg is not None else 0.99)


async def run_baseline_eval(cfg, name: str, opponents: list[Opponent], n_battles: int, *,
                            json_path: Optional[str] = None, replays_dir: Optional[str] = None) -> int:
    """``eval --baseline NAME``: a player with no network (``search``: the network-free search
    player with the config's ``search`` keys) against each baseline, in every format of the
    config; rows, ratings and JSON as :func:`run_eval` prints them."""
    from ..pokeenv.players import fast_kwargs
    from ..run.process import setup_process
    from ..showdown import showdown_for
    from ..teams import for_config
    from .progress import Progress, stream_for
    if replays_dir:
        raise UserError("--replays records a network's battles; --baseline has none")
    setup_process(cfg)  # runner.seed and the process's settings, as run_eval
    table = EvalTable()
    quiet = json_path == "-"
    names = config_mod.formats(cfg.runner.battle_format)
    progress = Progress("eval", n_battles * len(names) * len(opponents), stream=stream_for(json_path))
    async with showdown_for(cfg.server, quiet=quiet, runner=cfg.runner) as server, progress.shown():
        for fmt in names:
            one = config_mod.for_format(cfg, fmt)
            tag = "" if len(names) == 1 else f" [{fmt}]"
            for o in opponents:
                match = Match(server.url, name, o.spec, concurrency=cfg.runner.concurrency, battle_format=fmt,
                              battle_options=fast_kwargs(one.runner), battle_timeout_s=one.runner.battle_timeout_s,
                              account="evl", teams=for_config(one), search=one.search)
                progress.follow(match.results, f"vs {o.spec}")
                try:
                    seconds = await match.play(n_battles)
                finally:
                    progress.settle()
                    await match.close()  # closes the search player's leaf process too
                res = EvalResult.of(o.spec, match.results, seconds, getattr(match.me, "search_stats", None))
                table.add(name + tag, res, "no network", quiet, name)
    _finish(table, json_path, None)
    return 0


def _finish(table: EvalTable, json_path: Optional[str], replays) -> None:
    """The JSON (``-``: on stdout alone), the ratings and the replays' line."""
    quiet = json_path == "-"
    if json_path:
        text = json.dumps(table.to_json(), indent=2)
        if quiet:
            print(text)
        else:
            Path(json_path).write_text(text + "\n")
    if not quiet:
        print("\n".join(table.summary()))
        if replays is not None:
            print(f"[eval] {replays.written} replays in {replays.folder}")


async def run_eval(cfg, player: str, opponents: list[Opponent], n_battles: int, *, greedy: bool = False,
                   json_path: Optional[str] = None, replays_dir: Optional[str] = None,
                   search=None) -> int:
    """``player`` (a checkpoint or an outside policy) and every checkpoint among ``opponents``
    against every baseline and every later checkpoint, in every format of the config: a row
    printed as each finishes, then the ratings (``json_path`` ``-``: only the JSON, on stdout).
    ``search``: a :class:`~maple_async.search.searcher.SearchConfig`: ``player`` searches its
    decisions with its own value head (its rows are ``agent+search``); ``player`` among
    ``opponents`` then plays as itself without search (against it and every baseline)."""
    from ..inference.outside import policy_for
    from ..pokeenv.replays import ReplayWriter
    from ..run.process import setup_process
    from ..showdown import showdown_for
    from .progress import Progress, stream_for

    device = setup_process(cfg)
    baselines = [o for o in opponents if o.is_baseline]
    checkpoints = list(dict.fromkeys([player] + [o.spec for o in opponents if not o.is_baseline]))
    # with --search, the player named among the opponents plays as itself without search
    plain = f"{player} (no search)" if search is not None and player in [o.spec for o in opponents] else None
    short = {c: Path(c).name for c in checkpoints}
    if len(set(short.values())) < len(short):
        short = {c: c for c in checkpoints}
    if plain is not None:
        short[plain] = short[player]
        checkpoints.append(plain)
    if search is not None:
        from ..collect.search_agent import NAME
        short[player] = NAME
    loaded = {c: policy_for(player if c == plain else c, device, greedy=greedy,
                            battle_format=cfg.runner.battle_format) for c in checkpoints}
    table = EvalTable()
    quiet = json_path == "-"
    replays = ReplayWriter(replays_dir) if replays_dir else None
    names = config_mod.formats(cfg.runner.battle_format)
    rows = len(names) * sum(len(baselines) + len(checkpoints) - 1 - i for i in range(len(checkpoints)))
    progress = Progress("eval", n_battles * rows, stream=stream_for(json_path))
    async with showdown_for(cfg.server, quiet=quiet, runner=cfg.runner) as server, progress.shown():
        # No baseline-vs-baseline games: the first checkpoint's row is the headline.
        for fmt in names:
            one = config_mod.for_format(cfg, fmt)
            for i, c in enumerate(checkpoints):
                policy, ckpt_cfg = loaded[c]
                later = [(o, as_greedy(loaded[o][0], policy.greedy)) for o in checkpoints[i + 1:]]
                make_agent = searching(search, ckpt_cfg) if search is not None and c == player else Agent
                for o, side in [(o.spec, o.spec) for o in baselines] + later:
                    res = await evaluate_config(one, policy, server.url, side, n_battles, cfg.runner.concurrency,
                                                label=short.get(o, o), replays=replays, make_agent=make_agent,
                                                progress=progress)
                    label = training_label(o, ckpt_cfg.train) if ckpt_cfg is not None else "outside policy"
                    tag = "" if len(names) == 1 else f" [{fmt}]"  # each format's players apart
                    res.opponent += tag if not isinstance(side, str) else ""  # baselines keep one name
                    table.add(short[c] + tag, res, label, quiet, res.opponent)
    _finish(table, json_path, replays)
    return 0
