"""Win rates of a policy against a baseline or another checkpoint, with 95% intervals."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ..collect.agent import Agent
from ..collect.match import Match
from ..config import for_pool
from ..inference.outside import until_failed
from ..inference.policy import InferencePolicy, policy_from_checkpoint  # noqa: F401 - re-exported
from ..learn.metrics import wilson_interval
from ..pokeenv.players import BASELINES
from ..teams import Teams


@dataclass
class EvalResult:
    opponent: str
    battles: int
    wins: int
    losses: int
    ties: int
    seconds: float

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


async def evaluate(policy: InferencePolicy, url: str, opponent: str, n_battles: int, *,
                   batcher_cfg, concurrency: int = 32, battle_format: str = "gen9randombattle",
                   device="cpu", opponent_label: Optional[str] = None,
                   battle_options: Optional[dict] = None, battle_timeout_s: float = 300.0,
                   teams: Optional[Teams] = None, replays=None) -> EvalResult:
    """Play ``n_battles`` against a baseline name or another checkpoint's policy.
    ``battle_options``: :func:`~maple_async.pokeenv.players.fast_kwargs` of the config;
    ``teams``: in a team format, the pools both sides draw from; ``replays``: a ReplayWriter."""
    agent = Agent(policy, batcher_cfg, name="eval")
    if opponent in BASELINES:
        other = opponent
    else:
        opp_policy, _ = policy_from_checkpoint(opponent, device, greedy=policy.greedy,
                                               battle_format=battle_format)
        other = Agent(opp_policy, batcher_cfg, name="eval-opponent")
    match = Match(url, agent, other, concurrency=concurrency, battle_format=battle_format,
                  battle_options=battle_options, battle_timeout_s=battle_timeout_s, account="evl",
                  labels=(opponent_label or opponent, "eval"), teams=teams, replays=replays)
    try:
        seconds = await until_failed(match.play(n_battles), [policy, getattr(other, "policy", None)])
    finally:
        await match.close(close_batchers=True)
    r = match.results
    return EvalResult(opponent_label or opponent, r["won"] + r["lost"] + r["tied"], r["won"], r["lost"],
                      r["tied"], seconds)


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


def training_label(opponent: str, train_cfg) -> str:
    """Whether ``opponent`` was in the checkpoint's training mix ("in training"), the
    teacher its weights were cloned from ("teacher (cloned)"), or neither ("held out");
    another checkpoint is "checkpoint"."""
    from ..config import parse_opponent_mix
    if opponent not in BASELINES:
        return "checkpoint"
    if opponent in parse_opponent_mix(train_cfg.opponents):
        return "in training"
    return "teacher (cloned)" if opponent == train_cfg.teacher else "held out"


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
        opponents = [o.strip() for o in opponents.split(",") if o.strip()]

    async def run() -> EvalTable:
        from ..inference.outside import OutsidePolicy
        from ..pokeenv.players import fast_kwargs
        from ..teams import for_config
        table = EvalTable()
        me = OutsidePolicy(policy)
        async with showdown_for(cfg.server, quiet=True, runner=cfg.runner) as server:
            for opp in opponents:
                res = await evaluate(me, server.url, opp, battles, batcher_cfg=cfg.batcher,
                                     concurrency=concurrency, battle_format=cfg.runner.battle_format,
                                     opponent_label=opp if opp in BASELINES else None,
                                     battle_options=fast_kwargs(cfg.runner),
                                     battle_timeout_s=cfg.runner.battle_timeout_s, teams=for_config(cfg))
                table.results.append((me.name, res, "outside policy"))
                if not quiet:
                    print(table.row(-1), flush=True)
        if not quiet:
            print("\n".join(table.summary()), flush=True)
        return table

    return run_async(run())
