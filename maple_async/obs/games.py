"""Singles or doubles: the observation and action layout a battle format is played with.

A format is doubles when poke-env builds a ``DoubleBattle`` for it (its name has ``vgc``,
``double`` or ``metronome``); Showdown's own game type is checked against that before any
battle (:func:`maple_async.teams.prepare`). A checkpoint records its layout, and
:func:`check_checkpoint` refuses one from the other game type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UserError
from . import doubles as dbl
from . import encoding as enc
from . import actions as act


@dataclass(frozen=True)
class Game:
    name: str  # "singles" | "doubles"
    obs_dim: int
    n_actions: int
    preview: int  # first team preview action
    layout: str


SINGLES = Game("singles", enc.OBS_DIM, act.N_ACTIONS, act.PREVIEW, enc.LAYOUT)
DOUBLES = Game("doubles", dbl.OBS_DIM, dbl.N_ACTIONS, dbl.PREVIEW, dbl.LAYOUT)
GAMES = (SINGLES, DOUBLES)


def is_doubles_format(battle_format: str) -> bool:
    """poke-env's own test (``Player.format_is_doubles``): the battle class it builds."""
    f = battle_format.lower()
    return "vgc" in f or "double" in f or "metronome" in f


def format_gen(fmt: str) -> int | None:
    """The generation a format's name starts with (``gen4randombattle``: 4), None without one."""
    m = re.match(r"gen([1-9])", fmt)
    return int(m.group(1)) if m else None


def of_format(battle_format: str) -> Game:
    return DOUBLES if is_doubles_format(battle_format) else SINGLES


def of_layout(layout) -> Game | None:
    return next((g for g in GAMES if g.layout == layout), None)


def generations(formats: str) -> list[int]:
    """The generations a comma list of formats names, in order, without repeats."""
    gens = (format_gen(f.strip()) for f in formats.split(",") if f.strip())
    return list(dict.fromkeys(g for g in gens if g is not None))


def check_checkpoint(layout, battle_format: str, path: str = "checkpoint", trained: str = "") -> None:
    """One line when a checkpoint's layout is not the one ``battle_format`` is played with,
    or when it was trained (``trained``: its run's formats) in other generations."""
    want, have = generations(battle_format), generations(trained)
    if have and not set(want) <= set(have):
        gen = lambda gens: ", ".join(map(str, gens))  # noqa: E731
        raise UserError(f"checkpoint {path} was trained on generation {gen(have)} ({trained}) and "
                        f"{battle_format} is generation {gen(want)}: train one on that generation")
    game = of_format(battle_format)
    if layout == game.layout:
        return
    other = of_layout(layout)
    if other is not None:
        raise UserError(f"checkpoint {path} plays {other.name} and {battle_format} is a {game.name} "
                        f"format: use a {game.name} checkpoint")
    raise UserError(f"checkpoint {path} was trained on another observation layout "
                    f"({layout}; this version: {game.layout}): train a new one")
