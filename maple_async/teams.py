"""Teams: team files -> Showdown-validated, packed pools -> one team drawn per battle.

A teams path is a file or a folder of files (sorted; hidden files skipped) in Showdown's
export text, the teambuilder's "Import/Export" view. A file holds one team, or several
separated by the ``=== [format] name ===`` headers Showdown writes. Parsing, validation
and packing are Showdown's own (``Teams.import``, ``TeamValidator``, ``Teams.pack``: what
``pokemon-showdown validate-team`` and ``pack-team`` run), in one ``node`` process for the
whole pool. The same call reads the format's rules (game type, random teams, how many
Pokémon are picked at team preview), so :func:`prepare` refuses triples or multi battles, teams
given to a random format and a team format without teams before any battle starts.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from poke_env.teambuilder import Teambuilder

from . import config as config_mod
from .errors import UserError
from .obs.games import is_doubles_format

SAMPLING = ("uniform", "cycle", "fixed")
_HEADER = re.compile(r"^===\s*(?:\[([^\]]*)\])?\s*(.*?)\s*===\s*$")
_MAX_FILE_BYTES = 4 << 20

# Reads {"format", "teams": [export text]} on stdin; writes the format's rules and, per
# team, Showdown's errors or the packed team (packed before validation, as a client sends it).
_CHECK_JS = r"""
const ps = require(process.argv[1]);
let input = '';
process.stdin.on('data', d => { input += d; });
process.stdin.on('end', () => {
  const req = JSON.parse(input);
  const f = ps.Dex.formats.get(req.format);
  const out = {format: null, teams: []};
  if (f.exists && f.effectType === 'Format') {
    const rt = ps.Dex.formats.getRuleTable(f);
    out.format = {id: f.id, game_type: f.gameType, random: !!f.team,
                  picked: rt.pickedTeamSize || null, team_preview: rt.has('teampreview')};
    if (!f.team && req.teams.length) {
      const v = ps.TeamValidator.get(f.id);
      for (const text of req.teams) {
        let r;
        try {
          const team = ps.Teams.import(text);
          if (!team || !team.length) {
            r = {errors: ['no Pokémon Showdown can read']};
          } else {
            const packed = ps.Teams.pack(team);
            const errors = v.validateTeam(team);
            r = errors ? {errors} : {packed};
          }
        } catch (e) {
          r = {errors: [String((e && e.message) || e)]};
        }
        out.teams.push(r);
      }
    }
  }
  process.stdout.write(JSON.stringify(out));
});
"""


class TeamError(UserError):
    """A format or team problem found before any battle."""


@dataclass(frozen=True)
class FormatInfo:
    """A format's rules as the pinned Showdown reads them."""

    id: str
    game_type: str
    random: bool  # the server builds the teams
    picked: Optional[int]  # Pokémon brought from the team preview (None: the whole team)
    team_preview: bool = False


@dataclass(frozen=True)
class Team:
    source: str  # file it came from
    name: str  # its header's name, or the file's name
    packed: str


@dataclass
class TeamPool:
    """A list of teams and how each battle draws from it."""

    teams: list[Team]
    sampling: str = "uniform"
    seed: Optional[int] = None

    def builder(self, offset: int = 0) -> "PoolTeambuilder":
        return PoolTeambuilder(self, offset)


class PoolTeambuilder(Teambuilder):
    """poke-env asks it for a team before each challenge or acceptance (``yield_team``):
    ``uniform`` draws at random, ``cycle`` goes round the pool (from ``offset``, so two
    players on one pool start on different teams), ``fixed`` always sends the first."""

    def __init__(self, pool: TeamPool, offset: int = 0):
        self.pool = pool
        self._rng = random.Random(None if pool.seed is None else pool.seed + offset)
        self._cycle = itertools.cycle(range(len(pool.teams)))
        for _ in range(offset % max(len(pool.teams), 1)):
            next(self._cycle)

    def yield_team(self) -> str:
        teams = self.pool.teams
        if self.pool.sampling == "fixed":
            return teams[0].packed
        if self.pool.sampling == "cycle":
            return teams[next(self._cycle)].packed
        return self._rng.choice(teams).packed


@dataclass
class Teams:
    """What a run plays with: the format's rules and, in a team format, both sides' pools."""

    format: FormatInfo
    mine: Optional[TeamPool] = None
    theirs: Optional[TeamPool] = None
    sources: dict = field(default_factory=dict)  # "mine"/"theirs" -> path, for messages

    def builders(self, offset: int = 0) -> tuple[Optional[Teambuilder], Optional[Teambuilder]]:
        """A teambuilder for each side of a match (None in a random format)."""
        if self.mine is None:
            return None, None
        return self.mine.builder(offset), self.theirs.builder(offset + 1)


def split_texts(text: str, source: str) -> list[tuple[str, str, str]]:
    """(source, name, export text) per team of one file: split at ``=== [fmt] name ===``
    headers; a file without headers is one team named after the file."""
    chunks: list[tuple[str, list[str]]] = []
    name, lines = Path(source).stem, []
    for line in text.splitlines():
        m = _HEADER.match(line.strip())
        if m:
            if any(x.strip() for x in lines):
                chunks.append((name, lines))
            name, lines = (m.group(2) or f"team {len(chunks) + 1}"), []
        else:
            lines.append(line)
    if any(x.strip() for x in lines):
        chunks.append((name, lines))
    return [(source, n, "\n".join(ls).strip() + "\n") for n, ls in chunks]


def read_texts(path: str | Path) -> list[tuple[str, str, str]]:
    """Every team under ``path`` (a file, or a folder's files): (source, name, text)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise TeamError(f"teams path {path} does not exist")
    files = sorted(f for f in p.rglob("*") if f.is_file() and not any(
        part.startswith(".") for part in f.relative_to(p).parts)) if p.is_dir() else [p]
    out = []
    for f in files:
        if f.stat().st_size > _MAX_FILE_BYTES:
            raise TeamError(f"{f}: larger than {_MAX_FILE_BYTES >> 20} MiB, not a team file")
        try:
            text = f.read_text(encoding="utf-8-sig")
        except (UnicodeDecodeError, OSError) as e:
            raise TeamError(f"{f}: not readable as UTF-8 text ({e.__class__.__name__})") from None
        out += split_texts(text, str(f))
    if not out:
        raise TeamError(f"teams path {path} holds no team (expected Showdown export text)")
    return out


def _node_check(battle_format: str, texts: list[str], home: Optional[Path] = None) -> dict:
    from .server import install, which
    pkg = install(home)
    try:
        proc = subprocess.run([which("node"), "-e", _CHECK_JS, str(pkg)],
                              input=json.dumps({"format": battle_format, "teams": texts}),
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise TeamError("Showdown's team validator did not answer in 120 s") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TeamError(f"Showdown's team validator failed: {tail[0]}")
    return json.loads(proc.stdout)


def format_info(battle_format: str, home: Optional[Path] = None) -> FormatInfo:
    """The format's rules; unknown formats, and those neither singles nor gen9 doubles, are refused."""
    return _checked_format(battle_format, _node_check(battle_format, [], home))


def _checked_format(battle_format: str, out: dict) -> FormatInfo:
    f = out.get("format")
    if f is None:
        raise TeamError(f"runner.battle_format '{battle_format}' is not a format of the pinned "
                        f"Showdown (e.g. gen9randombattle, gen9bssregi, gen9ou)")
    info = FormatInfo(**f)
    if info.game_type not in ("singles", "doubles"):
        raise TeamError(f"runner.battle_format '{battle_format}' is a {info.game_type} format; "
                        f"the encoder plays singles and doubles")
    if info.game_type == "doubles" and not info.id.startswith("gen9"):
        raise TeamError(f"runner.battle_format '{battle_format}' is an older generation's doubles "
                        f"format; doubles are played in generation 9 only")
    if (info.game_type == "doubles") != is_doubles_format(battle_format):
        raise TeamError(f"runner.battle_format '{battle_format}' is a {info.game_type} format that "
                        f"poke-env would not play as {info.game_type} (its name decides)")
    return info


def _foreign_headers(texts: list, battle_format: str) -> Optional[str]:
    """The first team whose file header names a format of the other game type (a singles
    team given to a doubles format, or the reverse), as one line; None if none does."""
    doubles = is_doubles_format(battle_format)
    kinds = {True: "doubles", False: "singles"}
    for source in dict.fromkeys(s for s, _, _ in texts):
        try:
            lines = Path(source).read_text(encoding="utf-8-sig").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            m = _HEADER.match(line.strip())
            if m and m.group(1) and is_doubles_format(m.group(1)) != doubles:
                return (f"{source}: team '{m.group(2)}' is written for {m.group(1)} ({kinds[not doubles]}) "
                        f"and {battle_format} is {kinds[doubles]}: give {kinds[doubles]} teams")
    return None


def _pool(battle_format: str, path: str, sampling: str, seed: Optional[int],
          home: Optional[Path]) -> tuple[FormatInfo, TeamPool]:
    texts = read_texts(path)
    out = _node_check(battle_format, [t for _, _, t in texts], home)
    info = _checked_format(battle_format, out)
    foreign = _foreign_headers(texts, battle_format)
    if foreign:
        raise TeamError(foreign)
    if info.random:
        raise TeamError(f"runner.battle_format '{battle_format}' builds random teams: "
                        f"remove the teams ({path}) or pick a team format such as gen9ou")
    teams, bad = [], []
    for (source, name, _), r in zip(texts, out["teams"]):
        if "errors" in r:
            reason = "; ".join(e.strip() for e in r["errors"] if e.strip())[:400]
            bad.append(f"{source}: team '{name}' is not legal in {info.id}: {reason}")
        else:
            teams.append(Team(source, name, r["packed"]))
    if bad:
        more = f" (and {len(bad) - 1} more invalid teams)" if len(bad) > 1 else ""
        raise TeamError(bad[0] + more)
    return info, TeamPool(teams, sampling, seed)


_CACHE: dict = {}


def prepare(runner_cfg, opponent_teams: Optional[str] = None,
            home: Optional[Path] = None) -> Teams:
    """Validate ``runner.battle_format`` and the teams before any battle: raises
    :class:`TeamError` (one line) on an unknown format, one neither singles nor gen9 doubles, teams
    given to a random format, a team format without teams, a missing or empty path, or a
    team Showdown refuses. ``opponent_teams``: the opponents' pool (default: the same)."""
    fmt, path = runner_cfg.battle_format, runner_cfg.teams
    key = (fmt, path, opponent_teams, runner_cfg.team_sampling, runner_cfg.seed,
           _stamp(path), _stamp(opponent_teams))
    if key in _CACHE:
        return _CACHE[key]
    if not path:
        if opponent_teams:
            raise TeamError("train.opponent_teams needs runner.teams too")
        info = format_info(fmt, home)
        if not info.random:
            raise TeamError(f"runner.battle_format '{fmt}' is a team format: give teams with "
                            f"--runner.teams PATH (a file or folder of Showdown export text), "
                            f"e.g. teams/bss (a shipped pool) for gen9bssregi")
        result = Teams(info)
    else:
        info, mine = _pool(fmt, path, runner_cfg.team_sampling, runner_cfg.seed, home)
        theirs = mine
        if opponent_teams and Path(opponent_teams).expanduser().resolve() != Path(path).expanduser().resolve():
            _, theirs = _pool(fmt, opponent_teams, runner_cfg.team_sampling,
                              None if runner_cfg.seed is None else runner_cfg.seed + 7919, home)
        result = Teams(info, mine, theirs, {"mine": path, "theirs": opponent_teams or path})
    _CACHE[key] = result
    return result


def for_config(cfg, quiet: bool = True) -> Teams:
    """:func:`prepare` for a whole config of one format (the opponents' pool from
    ``train.opponent_teams``, Showdown from ``server.home``); prints what was validated
    unless ``quiet``. A config listing several formats: :func:`for_formats`."""
    from .config import for_format, formats
    names = formats(cfg.runner.battle_format)
    if len(names) != 1:
        raise TeamError(f"this command plays one format; runner.battle_format lists {len(names)} "
                        f"({cfg.runner.battle_format}): pick one (--runner.battle_format)")
    cfg = for_format(cfg, names[0])
    home = Path(cfg.server.home).expanduser() if cfg.server.home else None
    teams = prepare(cfg.runner, cfg.train.opponent_teams, home)
    if not quiet:
        print(f"[teams] {describe(teams)}", flush=True)
    return teams


def for_formats(cfg, quiet: bool = True) -> dict:
    """Each listed format's :func:`for_config` (``{format}`` in the team paths stands for it)."""
    from .config import for_format, formats
    return {f: for_config(for_format(cfg, f), quiet) for f in formats(cfg.runner.battle_format)}


def _stamp(path: Optional[str]) -> object:
    """Changes when the files under ``path`` change (so a cached validation is not reused)."""
    if not path:
        return None
    p = Path(path).expanduser()
    if not p.exists():
        return "missing"
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    return tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)


def describe(teams: Teams) -> str:
    """One line for the start of a run."""
    f = teams.format
    if teams.mine is None:
        return f"{f.id}: random teams"
    pick = f", team preview: bring {f.picked}" if f.picked else (", team preview" if f.team_preview else "")
    line = (f"{f.id}: {len(teams.mine.teams)} teams from {teams.sources['mine']} "
            f"({teams.mine.sampling}){pick}")
    if teams.theirs is not teams.mine:
        line += f"; opponents: {len(teams.theirs.teams)} from {teams.sources['theirs']}"
    return line


def check(cfg, quiet: bool = False, eval_pool: bool = False, many: bool = False) -> None:
    """The format's rules and every team, validated by Showdown before anything starts
    (``quiet``: stdout is JSON, say nothing); with ``eval_pool`` (train) ``train.eval_teams`` too.
    ``many``: the command plays every format of a list (train, eval); others refuse a list."""
    for fmt in config_mod.formats(cfg.runner.battle_format) if many else [None]:
        one = cfg if fmt is None else config_mod.for_format(cfg, fmt)
        for_config(one, quiet=quiet)
        if eval_pool and cfg.train.eval_teams and cfg.train.eval_battles:
            for_config(config_mod.for_format(config_mod.eval_pool(cfg), one.runner.battle_format), quiet=quiet)
