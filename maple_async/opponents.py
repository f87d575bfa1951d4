"""Opponent specs, read in one place: strings (and policy objects) to small typed specs.

A spec names whom a side plays: ``self``, the ``league``, a baseline (poke-env's
``random``, ``max_power``, ``heuristics``), a checkpoint file, or a policy trained outside
(``module:attr``, ``path/to/file.py:attr`` or the object itself). Training mixes weight
kinds (``self:0.5,league:0.3,heuristics:0.2``); evaluations list opponents
(``random,max_power,runs/a/latest.pt``). Parsing only: nothing here loads a checkpoint or
imports a policy, so config validation, the CLI and the pools all read specs alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, UserError

BASELINE_NAMES = ("random", "max_power", "heuristics")  # poke-env's players (pokeenv.players.BASELINES)
# Network-free search on Showdown's simulator (maple_async.search): held out, so never in a
# training mix, a teacher or curve's list; eval and play name it.
SEARCH_NAMES = ("search",)
PLAYED_NAMES = BASELINE_NAMES + SEARCH_NAMES
MIX_KINDS = ("self", "league") + BASELINE_NAMES

SELF, LEAGUE, BASELINE, CHECKPOINT, POLICY = "self", "league", "baseline", "checkpoint", "policy"


@dataclass(frozen=True)
class Opponent:
    """One opponent: its ``kind`` and the ``spec`` as given (a name, a path, ``module:attr``
    or a policy object)."""

    kind: str
    spec: Any

    @property
    def name(self) -> str:
        """What results call it: a checkpoint by its file name, a policy by its spec or name."""
        if self.kind == CHECKPOINT:
            return Path(self.spec).name
        if isinstance(self.spec, str):
            return self.spec
        return getattr(self.spec, "name", None) or getattr(self.spec, "__name__", None) or type(self.spec).__name__

    @property
    def is_baseline(self) -> bool:
        return self.kind == BASELINE


def split(text: str) -> list[str]:
    """A comma list, blanks dropped."""
    return [o.strip() for o in text.split(",") if o.strip()]


def is_checkpoint(spec: Any) -> bool:
    """A checkpoint path (an existing file, or a name ending ``.pt``) rather than a policy."""
    return isinstance(spec, (str, Path)) and (str(spec).endswith(".pt") or Path(spec).is_file())


def parse(spec: Any) -> Opponent:
    """Any opponent a pool plays: ``self``, a baseline, a checkpoint, a policy object or
    ``module:attr``."""
    if isinstance(spec, str) and (spec == SELF or spec in BASELINE_NAMES):
        return Opponent(SELF if spec == SELF else BASELINE, spec)
    if is_checkpoint(spec):
        return Opponent(CHECKPOINT, str(spec))
    if isinstance(spec, str) and ":" not in spec:
        raise ValueError(f"opponent {spec!r}: expected self, {', '.join(BASELINE_NAMES)}, a checkpoint file, "
                         f"a policy object or module:attr")
    return Opponent(POLICY, spec)


def played(spec: str) -> Opponent:
    """An opponent that ``evaluate`` plays: a baseline by name, else a checkpoint path."""
    return Opponent(BASELINE if spec in PLAYED_NAMES else CHECKPOINT, spec)


def eval_list(text: str) -> list[Opponent]:
    """eval's ``--opponents``: baselines and checkpoint files, at least one."""
    names = split(text)
    for name in names or [""]:
        if name not in PLAYED_NAMES and not os.path.isfile(name):
            raise UserError(f"--opponents must list {', '.join(PLAYED_NAMES)} or checkpoint files; "
                            f"got {name!r}")
    return [played(n) for n in names]


def baseline_list(text: str) -> list[str]:
    """curve's ``--opponents``: baselines only, at least one."""
    names = split(text)
    if not names:
        raise UserError("--opponents lists no opponent")
    for name in names:
        if name not in BASELINE_NAMES:
            raise UserError(f"--opponents must list {', '.join(BASELINE_NAMES)}; got {name!r}")
    return names


def baseline_player(name: str, against: list[Opponent], battle_format: str, search: bool) -> None:
    """eval's ``--baseline``: a player with no network, against baselines only."""
    if name not in PLAYED_NAMES:
        raise UserError(f"--baseline must be one of {', '.join(PLAYED_NAMES)}; got {name!r}")
    if search:
        raise UserError("--search searches a checkpoint or a --policy; --baseline search is the search player")
    if name in [o.spec for o in against]:
        raise UserError(f"--baseline {name} against itself: both sides' wins would be one player's; "
                        f"leave it out of --opponents")
    checkpoints = [o.spec for o in against if not o.is_baseline]
    if checkpoints:
        raise UserError(f"--baseline plays baselines only; --opponents names {checkpoints[0]!r} "
                        f"(give it as --checkpoint with --opponents {name})")
    for fmt in split(battle_format) if name in SEARCH_NAMES else ():
        search_format(fmt)


def teacher_and_opponent(teacher: str, opponent: str) -> None:
    """pretrain's ``--teacher`` (a baseline) and ``runner.opponent`` (a baseline or self)."""
    if teacher not in BASELINE_NAMES or (opponent != SELF and opponent not in BASELINE_NAMES):
        raise UserError(f"--teacher and --runner.opponent must be one of {', '.join(BASELINE_NAMES)} "
                        f"(--runner.opponent also self)")


def parse_eval_opponents(spec: str) -> list[str]:
    """``train.eval_opponents``: a comma list of baselines."""
    names = [o.strip() for o in spec.split(",")]
    bad = [o for o in names if o not in BASELINE_NAMES]
    if bad:
        raise ConfigError(f"config key 'train.eval_opponents' lists {', '.join(BASELINE_NAMES)}, got {bad[0]!r}")
    return names


def parse_opponent_mix(spec: str) -> dict[str, float]:
    """Parse ``"self:0.5,league:0.3,heuristics:0.2"`` into normalised weights."""
    mix: dict[str, float] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, weight = part.partition(":")
        name = name.strip()
        if name not in MIX_KINDS:
            raise ConfigError(
                f"config key 'train.opponents': unknown opponent '{name}' "
                f"(known: {', '.join(MIX_KINDS)})"
            )
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            raise ConfigError(
                f"config key 'train.opponents': weight for '{name}' must be a number, "
                f"got {weight!r}"
            ) from None
        if w < 0:
            raise ConfigError(f"config key 'train.opponents': weight for '{name}' is negative")
        mix[name] = mix.get(name, 0.0) + w
    total = sum(mix.values())
    if total <= 0:
        raise ConfigError("config key 'train.opponents' needs at least one positive weight")
    return {k: v / total for k, v in mix.items() if v > 0}


def parse_opponent_schedule(spec: str) -> list[tuple[int, dict[str, float]]]:
    """``train.opponents``: one mix, or mixes that each start at a number of decisions,
    ``"max_power:0.4,self:0.6; @5e5 self:0.8,league:0.2"`` (no ": ", which YAML would read as a
    mapping); a list of (first decision, mix)."""
    stages: list[tuple[int, dict[str, float]]] = []
    for i, part in enumerate(spec.split(";")):
        start, mix = 0.0, part
        if i:
            at, _, mix = part.strip().partition(" ")
            try:
                start = float(at[1:]) if at.startswith("@") else float("nan")
            except ValueError:
                start = float("nan")
            if not start >= 1:  # also NaN
                raise ConfigError(f"config key 'train.opponents': a mix after ';' starts with @ and the decisions "
                                  f"it begins at, as in '@5e5 self:0.8,league:0.2'; got {part.strip()!r}")
            if stages and int(start) <= stages[-1][0]:
                raise ConfigError(f"config key 'train.opponents': the mixes' starts must grow; "
                                  f"{at[1:]} comes after {stages[-1][0]}")
        stages.append((int(start), parse_opponent_mix(mix)))
    return stages


def mix_at(stages: list[tuple[int, dict[str, float]]], decisions: int) -> dict[str, float]:
    """The schedule's mix at ``decisions`` trained on."""
    return [mix for start, mix in stages if start <= decisions][-1]


def mix_names(spec: str) -> set[str]:
    """Every opponent kind some mix of ``train.opponents`` plays."""
    return {name for _, mix in parse_opponent_schedule(spec) for name in mix}


def training_label(opponent: str, train_cfg) -> str:
    """Whether ``opponent`` was in the checkpoint's training mix ("in training"), the
    teacher its weights were cloned from ("teacher (cloned)"), or neither ("held out");
    another checkpoint is "checkpoint"."""
    if opponent in SEARCH_NAMES:
        return "held out"
    if opponent not in BASELINE_NAMES:
        return "checkpoint"
    if opponent in mix_names(train_cfg.opponents):
        return "in training"
    return "teacher (cloned)" if opponent == train_cfg.teacher else "held out"


def search_format(battle_format: str) -> None:
    """The search opponent plays singles: a doubles format (poke-env's test) is refused."""
    f = battle_format.lower()
    if "vgc" in f or "double" in f or "metronome" in f:
        raise UserError(f"the search opponent plays singles only; {battle_format} is a doubles format")


def policy_ref(spec: str) -> tuple[str, str]:
    """``module:attr`` or ``path/to/file.py:attr`` as (module or file, attribute path)."""
    module, sep, attr = spec.rpartition(":")
    if not sep or not module or not attr:
        raise UserError(f"--policy {spec!r}: expected module:attr or path/to/file.py:attr")
    return module, attr
