"""Composite battle reward, counted once.

The reward of decision *t* is the change of the shaped quantities between decision *t*
and decision *t+1* (or the battle's end), plus the win/loss term once at the end. Each
component's running sum is kept so that per-component totals can be logged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from . import encoding as enc

COMPONENTS = ("win", "hp", "faint", "turn")


def side_state(battle) -> tuple[float, int, float, int]:
    """(own HP fraction sum, own fainted, opponent HP fraction sum with unrevealed
    Pokémon at full HP, opponent fainted) over the Pokémon in battle that the observation
    holds (six a side; not those left home or only previewed).
    :func:`maple_async.obs.encoding.encode` computes the same while encoding, from the same
    helpers; this is the stand-alone version."""
    benched = enc.left_home(battle)
    own = [m for m in list(battle.team.values())[:6] if id(m) not in benched]
    opp, n_seen = enc.opponent_slots(battle)
    seen = opp[:min(n_seen, 6)]
    own_hp = sum(m.current_hp_fraction for m in own)
    opp_hp = sum(m.current_hp_fraction for m in seen)
    # Opponents not seen yet are at full HP.
    opp_hp += max(enc.opponent_team_size(battle) - n_seen, 0)
    return own_hp, sum(m.fainted for m in own), opp_hp, sum(m.fainted for m in seen)


class RewardWeights(Protocol):
    """What the tracker reads of ``config.RewardConfig`` (obs/ sits below config.py)."""

    win: float
    hp: float
    faint: float
    turn_penalty: float
    shaping: str


@dataclass
class RewardTracker:
    """``cfg.shaping``: ``difference`` pays each decision the change of the shaped
    quantities (they sum to the final margin); ``potential`` pays gamma Phi(s') - Phi(s) with
    Phi the same quantities and Phi(end) = 0."""

    cfg: RewardWeights
    gamma: float = 0.99
    totals: dict = field(default_factory=lambda: dict.fromkeys(COMPONENTS, 0.0))
    _last: tuple | None = None

    @staticmethod
    def _shaped(battle, state=None) -> tuple[float, float]:
        own_hp, own_f, opp_hp, opp_f = state if state else side_state(battle)
        return own_hp - opp_hp, float(opp_f - own_f)

    def step(self, battle, state=None) -> float:
        """Reward earned since the previous call (0 on the first); call once per decision.
        ``state``: the battle's :func:`side_state` if already known (the encoder fills it)."""
        return self._step(self._shaped(battle, state) if self.cfg.hp or self.cfg.faint else None)

    def _step(self, now) -> float:
        hp = faint = 0.0
        if now is not None:
            if self._last is not None:
                g = self.gamma if self.cfg.shaping == "potential" else 1.0
                hp = self.cfg.hp * (g * now[0] - self._last[0])
                faint = self.cfg.faint * (g * now[1] - self._last[1])
            self._last = now
        turn = -self.cfg.turn_penalty
        self.totals["hp"] += hp
        self.totals["faint"] += faint
        self.totals["turn"] += turn
        return hp + faint + turn

    def final(self, battle) -> float:
        """Reward for the last decision's outcome: shaped change plus win/loss (once)."""
        end = None
        if self.cfg.hp or self.cfg.faint:
            # potential: Phi(end) = 0, so the shaped terms telescope to -Phi(start) = 0
            end = (0.0, 0.0) if self.cfg.shaping == "potential" else self._shaped(battle)
        r = self._step(end) + self.cfg.turn_penalty  # no turn penalty after the end
        self.totals["turn"] += self.cfg.turn_penalty
        win = self.cfg.win if battle.won else (-self.cfg.win if battle.lost else 0.0)
        self.totals["win"] += win
        return r + win
