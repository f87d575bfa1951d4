"""Win rates of a policy against a baseline or another checkpoint, with 95% intervals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..collect.agent import Agent
from ..collect.match import Match
from ..config import Config
from ..inference.policy import InferencePolicy
from ..learn import checkpoint as ckpt
from ..learn import networks as nets
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

    def line(self) -> str:
        lo, hi = self.ci95
        return (f"[eval] vs {self.opponent}: win rate {self.win_rate:.3f} (95% CI {lo:.3f}-{hi:.3f}) "
                f"over {self.battles} battles ({self.wins}W/{self.losses}L/{self.ties}T) "
                f"in {self.seconds:.0f}s")


def policy_from_checkpoint(path: str, device, greedy: bool = False) -> tuple[InferencePolicy, Config]:
    from ..config import from_saved
    data = ckpt.load(path)
    cfg = from_saved(data["config"])
    net = nets.from_config(cfg.network)
    ckpt.load_weights(net, data["learner"]["network"], path)
    return InferencePolicy(net, device, greedy=greedy), cfg


async def evaluate(policy: InferencePolicy, url: str, opponent: str, n_battles: int, *,
                   batcher_cfg, concurrency: int = 32, battle_format: str = "gen9randombattle",
                   device="cpu", opponent_label: Optional[str] = None,
                   battle_options: Optional[dict] = None, battle_timeout_s: float = 300.0,
                   teams: Optional[Teams] = None) -> EvalResult:
    """Play ``n_battles`` against a baseline name or another checkpoint's policy.
    ``battle_options``: :func:`~maple_async.pokeenv.players.fast_kwargs` of the config;
    ``teams``: in a team format, the pools both sides draw from."""
    agent = Agent(policy, batcher_cfg, name="eval")
    if opponent in BASELINES:
        other = opponent
    else:
        opp_policy, _ = policy_from_checkpoint(opponent, device, greedy=policy.greedy)
        other = Agent(opp_policy, batcher_cfg, name="eval-opponent")
    match = Match(url, agent, other, concurrency=concurrency, battle_format=battle_format,
                  battle_options=battle_options, battle_timeout_s=battle_timeout_s, account="evl",
                  labels=(opponent, "eval"), teams=teams)
    try:
        seconds = await match.play(n_battles)
    finally:
        await match.close(close_batchers=True)
    r = match.results
    return EvalResult(opponent_label or opponent, r["won"] + r["lost"] + r["tied"], r["won"], r["lost"],
                      r["tied"], seconds)
