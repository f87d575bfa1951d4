"""The command line's flags: one parser per command, and the config keys a command reads as
its flags (``--section.key``, grouped by section, with their meaning, range and default),
read back into a :class:`~maple_async.config.Config`.

One name per concept on every command: a config key is ``--section.key`` wherever it is read
(a few have a short form as well, the same on every command); a spelling that changed
answers with the new one (``--format is now --runner.battle_format``), and a key the command
does not read answers with what it reads. Every option's help ends with its default.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Optional

from .. import config as config_mod
from ..pokeenv.accounts import PASSWORD_ENV, USERNAME_ENV

DESCRIPTION = ("maple-async: recurrent RL agents for Pokémon Showdown. A battle is one game, a battle side one "
               "player's part of it (a self-play battle is two). 'maple-async COMMAND --help' lists the "
               "command's flags, each with its default.")

SHORT_FLAGS = {
    # flag: config key (the same on every command that reads the key)
    "--concurrency": "runner.concurrency",
    "--max-batch-size": "batcher.max_batch_size",
    "--max-wait-ms": "batcher.max_wait_ms",
    "--device": "runner.device",
    "--server": "server.url",
    "--network": "network.kind",
}

# The config keys each command reads (a section stands for all its keys): its flags are these
# and no others. From the code each command runs: eval and curve play checkpoints with their
# own networks (no network or reward flags); play and pretrain alone read runner.opponent;
# bench learns only with --learn (ppo, and the train keys an update reads); serve and ladder
# take the checkpoint's config and change five keys of it.
OUTSIDE_KEYS = ("server.url", "runner.battle_format", "runner.teams", "runner.concurrency", "runner.device")
READS: dict[str, tuple[str, ...]] = {
    "server": ("server.port", "server.home", "server.simulators"),
    "play": ("server", "runner", "batcher", "network", "reward", "ppo.gamma", "train.opponent_teams", "search"),
    "train": ("server", "runner", "batcher", "network", "reward", "ppo", "train"),
    "pretrain": ("server", "runner", "batcher", "network", "reward", "ppo", "train.run_dir",
                 "train.opponent_teams"),
    "eval": ("server", "runner", "batcher", "train.opponent_teams", "search"),
    "bench": ("server", "runner", "batcher", "network", "reward", "ppo", "train.sides_per_update",
              "train.hold_when_behind", "train.opponent_teams"),
    "serve": OUTSIDE_KEYS,
    "ladder": OUTSIDE_KEYS,
    "curve": ("server", "runner", "batcher", "train.opponent_teams", "train.tensorboard", "search"),
    "report": (),
    "engine": ("server.home",),
}
ONLY = {"runner.opponent": ("play", "pretrain")}  # keys fewer commands read than their section

# Spellings that changed, per command (config keys renamed: every command).
MOVED: dict[str, dict[str, str]] = {
    "server": {"--port": "--server.port", "--home": "--server.home", "--simulators": "--server.simulators"},
    "engine": {"--home": "--server.home"},
    "play": {"--opponent": "--runner.opponent"},
    "pretrain": {"--opponent": "--runner.opponent"},
    "eval": {"--opponent": "--opponents"},
    "curve": {"--opponent": "--opponents"},
    "serve": {"--format": "--runner.battle_format", "--teams": "--runner.teams"},
    "ladder": {"--format": "--runner.battle_format", "--teams": "--runner.teams"},
}


_FIELDS = {name: f for name, f, _ann in config_mod.declared_keys()}


def command_keys(command: str) -> list[str]:
    """The config keys ``command`` reads, in declaration order."""
    reads = READS[command]
    return [name for name, _f, _ann in config_mod.declared_keys()
            if (name in reads or name.split(".")[0] in reads) and command in ONLY.get(name, (command,))]


def reads_line(command: str) -> str:
    """``the server, runner and search sections and train.opponent_teams``."""
    whole = [s for s in config_mod.SECTIONS if s in READS[command]]
    parts = [f"the {_and(whole)} section{'s' if len(whole) > 1 else ''}"] if whole else []
    parts += [k for k in command_keys(command) if k.split(".")[0] not in whole]
    return _and(parts) if parts else "no config keys"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


class Help(argparse.HelpFormatter):
    """Every option's help ends with its default; the usage line names a command's own flags
    and stands ``[--SECTION.KEY V ...]`` for its config keys."""

    def __init__(self, prog, **kw):
        super().__init__(prog, max_help_position=28, **kw)

    def _get_help_string(self, action):
        text = action.help or ""
        if "(default: " in text or not action.option_strings or action.default is argparse.SUPPRESS:
            return text
        if isinstance(action, argparse._StoreTrueAction):
            shown = "off"
        else:
            shown = "none" if action.default is None else str(action.default).replace("%", "%%")
        return f"{text} (default: {shown})"

    def _format_usage(self, usage, actions, groups, prefix):
        own = [a for a in actions if not isinstance(a, _KeyFlag)]
        text = super()._format_usage(usage, own, groups, prefix)
        if len(own) < len(actions):
            text = text.rstrip("\n") + " [--SECTION.KEY V ...]\n\n"
        return text


class _KeyFlag(argparse._StoreAction):
    """A config key's flag (kept out of the usage line: ``[--SECTION.KEY V ...]`` stands for them)."""


class _Refuse(argparse.Action):
    """A flag this command answers with one line and exit status 2: a spelling that changed,
    or a config key it does not read."""

    def __init__(self, option_strings, dest, message: str, **kw):
        super().__init__(option_strings, argparse.SUPPRESS, nargs="?", default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS)
        self.message = message

    def __call__(self, parser, namespace, values, option_string=None):
        parser.exit(2, f"maple-async: error: {self.message}\n")


def key_help(name: str, default: Optional[str] = None, extra: str = "") -> str:
    """A key's declared meaning, ``extra`` for this command, its range and its default
    (``default``: how this command's default reads, when it is not the key's)."""
    f = _FIELDS[name]
    meta = f.metadata
    limits = ", ".join(f"{w} {meta[b]:g}" for b, w in (("gt", ">"), ("ge", ">="), ("le", "<="))
                       if meta[b] is not None)
    choices = " | ".join(meta["choices"]) if meta["choices"] else ""
    ranges = "; ".join(x for x in (choices, limits) if x)
    if default is None:
        default = "unset" if f.default is None else str(f.default)
    return (meta["help"] + extra + (f" [{ranges}]" if ranges else "")).replace("%", "%%") + f" (default: {default})"


def add_key_flag(group, name: str, default: Optional[str] = None, extra: str = "") -> None:
    """``--section.key V`` (after its short form, where it has one)."""
    short = [f for f, k in SHORT_FLAGS.items() if k == name]
    group.add_argument(*short, f"--{name}", dest=name, default=None, metavar="V", action=_KeyFlag,
                       help=key_help(name, default, extra))


def add_config_flags(p: argparse.ArgumentParser, command: str, defaults: Optional[dict] = None,
                     extra: Optional[dict] = None, config_file: bool = True) -> None:
    """The flags of the config keys ``command`` reads, grouped by section (``--config`` first
    unless not ``config_file``); ``defaults``/``extra``: per key, how this command's default
    reads and what it adds to the key's meaning. Every other key, the short forms of keys it
    does not read and the spellings that changed are refused with one line."""
    defaults, extra = defaults or {}, extra or {}
    keys = command_keys(command)
    if config_file:
        p.add_argument("--config", metavar="NAME",
                       help="a preset by name (quick, default, bss, ...: maple_async/presets), a YAML file "
                            "or a run's config.yaml; flags override it; keys this command does not read are "
                            "ignored (default: none: the defaults below)")
    groups: dict[str, Any] = {}
    for name in keys:
        section = name.split(".")[0]
        if section not in groups:
            groups[section] = p.add_argument_group(f"{section} (config section '{section}')")
        add_key_flag(groups[section], name, defaults.get(name), extra.get(name, ""))
    refuse(p, command)


def refuse(p: argparse.ArgumentParser, command: str) -> None:
    """The spellings that changed and the config keys ``command`` does not read, each answered
    with one line."""
    taken = set(p._option_string_actions)
    moved = {**MOVED.get(command, {}), **{f"--{o}": f"--{n}" for o, n in config_mod.RENAMED.items()}}
    for old, new in moved.items():
        if old not in taken:
            p.add_argument(old, action=_Refuse, message=f"{old} is now {new}")
    reads = reads_line(command)
    for name, _f, _ann in config_mod.declared_keys():
        flags = [f"--{name}"] + [f for f, k in SHORT_FLAGS.items() if k == name]
        why = (f"{name} is read by {_and(list(ONLY[name]))} alone" if name in ONLY
               else f"{command} does not read {name}")
        for flag in flags:
            if flag not in p._option_string_actions:
                spelled = f" ({flag})" if flag != f"--{name}" else ""
                p.add_argument(flag, action=_Refuse, message=f"{why}{spelled}: {command} reads {reads}")


def flag_values(args: argparse.Namespace, keys=None) -> dict[str, Any]:
    """The config keys given as flags, as YAML scalars (``3``, ``0.5``, ``true``, ``null``)."""
    out: dict[str, Any] = {}
    for key in keys or [k for k, _ann in config_mod.all_keys()]:
        raw = getattr(args, key, None)
        if raw is not None:
            value = config_mod.parse_override_value(raw)
            if key == "server.url" and value is not None:
                value = str(raw)
            out[key] = value
    return out


def load_config(args: argparse.Namespace) -> config_mod.Config:
    """The command's config: ``--config`` and its flags. A run folder's ``config.yaml`` (beside
    its checkpoints) is read as saved: written before a key was renamed, it loads as it is."""
    path = getattr(args, "config", None)
    run = path is not None and Path(path).name == "config.yaml" and (
        (Path(path).parent / "checkpoints").is_dir() or (Path(path).parent / "latest.pt").exists())
    cfg = config_mod.load(path, flag_values(args), saved=run)
    if cfg.server.home:  # the whole run's home: Showdown, the search's leaf processes, poke-engine's builds
        os.environ["MAPLE_ASYNC_HOME"] = str(Path(cfg.server.home).expanduser().resolve())
    return cfg


def add_outside_flags(p: argparse.ArgumentParser, command: str, concurrency: int, why: str) -> None:
    p.add_argument("--checkpoint", default=None, metavar="PATH", help="the agent to play (or --policy)")
    p.add_argument("--policy", default=None, metavar="MODULE:ATTR",
                   help="instead of a checkpoint: a policy trained outside (module:attr or path/to/file.py:attr)")
    p.add_argument("--username", default=None,
                   help=f"loopback servers: the name to log in as; otherwise ${USERNAME_ENV} or --credentials "
                        f"(default: maple + a random tag on a loopback server)")
    p.add_argument("--credentials", default=None, metavar="FILE",
                   help=f"'username: NAME' and 'password: SECRET' lines (else ${USERNAME_ENV} and "
                        f"${PASSWORD_ENV}); never printed or saved")
    p.add_argument("--login-url", default=None, metavar="URL",
                   help="the login server of a non-loopback server (default: play.pokemonshowdown.com's)")
    add_replays_flag(p)
    p.add_argument("--greedy", action="store_true", help="argmax actions (off: sample, as in training)")
    p.add_argument("--search", action="store_true",
                   help="the checkpoint searches each decision with the default search settings (engine auto: "
                        "poke-engine where built or buildable, else Showdown's simulator; never the settings "
                        "saved in the checkpoint; a --policy on Showdown's: HP and Pokémon left score the "
                        "leaves; singles; no search.* flags here)")
    add_config_flags(p, command, config_file=False, defaults={
        "runner.battle_format": "the checkpoint's",
        "runner.teams": "the checkpoint's, where its files are here", "runner.concurrency": str(concurrency),
        "runner.device": "cpu"}, extra={
        "server.url": "; a non-loopback server needs a registered account",
        "runner.concurrency": f"; {command}: {why}"})
    p.set_defaults(outside_concurrency=concurrency)


def add_replays_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replays", default=None, metavar="DIR",
                   help="write each battle as a replay (HTML + protocol log) into DIR (newest 1000 kept)")


def add_run_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a training run folder (train.run_dir)")


def _parser(sub, name: str, help_: str) -> argparse.ArgumentParser:
    about = help_.replace("%%", "%")
    return sub.add_parser(name, help=help_, description=about[0].upper() + about[1:] + ".", formatter_class=Help,
                          allow_abbrev=False)


# One function per command, in the order --help lists them: each adds its parser and flags.
def server_parser(sub) -> None:
    s = _parser(sub, "server", "install, start, stop or show (status) managed Showdown servers")
    s.add_argument("action", choices=["install", "start", "stop", "status"])
    add_config_flags(s, "server", config_file=False, extra={
        "server.port": "; stop: the server on this port (0: every one)",
        "server.simulators": " (start)"})


def play_parser(sub) -> None:
    pl = _parser(sub, "play", "run battles with a network (no learning) and report throughput")
    pl.add_argument("--battles", type=int, default=200, metavar="N", help="battles to play")
    pl.add_argument("--policy", default=None, metavar="MODULE:ATTR",
                    help="play an outside policy (module:attr or path/to/file.py:attr) instead of a "
                         "fresh network (default: none: a fresh network)")
    add_replays_flag(pl)
    pl.add_argument("--search", action="store_true",
                    help="the network searches each decision on Showdown's simulator, its value head scoring "
                         "the leaves (a --policy: HP and Pokémon left score them; singles; what search refuses "
                         "the network plays; search.* keys)")
    add_config_flags(pl, "play")


def train_parser(sub) -> None:
    tr = _parser(sub, "train", "train with recurrent PPO (presets: --config quick, default, ...)")
    tr.add_argument("--resume", nargs="?", const="latest", default=None, metavar="PATH",
                    help="continue from a checkpoint (no PATH: <run_dir>/latest.pt); the run's limits "
                         "(train.total_sides, total_decisions, max_minutes) count what it trained before "
                         "(default: none: a new run)")
    add_config_flags(tr, "train")


def pretrain_parser(sub) -> None:
    pt = _parser(sub, "pretrain", "behaviour cloning from a baseline's decisions: a warm start for train")
    pt.add_argument("--teacher", default="heuristics",
                    help="the baseline whose decisions are cloned: random | max_power | heuristics")
    pt.add_argument("--battles", type=int, default=2000, metavar="N", help="battles the teacher plays")
    pt.add_argument("--minutes", type=float, default=0.0, metavar="MINUTES",
                    help="stop after this many minutes (0: no limit)")
    pt.add_argument("--epochs", type=int, default=2, metavar="N", help="passes over each round of battles")
    pt.add_argument("--round-sides", type=int, default=256, metavar="N",
                    help="battle sides per round: fitted while the next round is played")
    pt.add_argument("--out", default=None, metavar="PATH", help="checkpoint path (default: <run_dir>/pretrained.pt)")
    add_config_flags(pt, "pretrain", extra={"runner.opponent": "; pretrain: whom the teacher plays "
                                                                "(self: both sides recorded)"})


def eval_parser(sub) -> None:
    ev = _parser(sub, "eval", "win rate (95%% CI) of a checkpoint against baselines and checkpoints")
    ev.add_argument("--checkpoint", default=None, metavar="PATH",
                    help="the checkpoint to evaluate (or --policy, --baseline)")
    ev.add_argument("--policy", default=None, metavar="MODULE:ATTR",
                    help="instead of a checkpoint: a policy trained outside (module:attr or "
                         "path/to/file.py:attr; a batch callable, see docs/env.md)")
    ev.add_argument("--baseline", default=None, metavar="NAME",
                    help="instead of a checkpoint: a player with no network against the baselines in "
                         "--opponents (search: the network-free search player, search.* keys; random, "
                         "max_power, heuristics)")
    ev.add_argument("--opponents", default="random", metavar="LIST",
                    help="comma list of random | max_power | heuristics | search | checkpoint PATH: one row per "
                         "opponent (labelled held out / in training from the checkpoint's mix), ratings; "
                         "checkpoints also play each other")
    ev.add_argument("--battles", type=int, default=200, metavar="N", help="battles per opponent")
    ev.add_argument("--json", default=None, metavar="PATH",
                    help="write the results and ratings as JSON to PATH (-: stdout, the rest then silent)")
    add_replays_flag(ev)
    ev.add_argument("--greedy", action="store_true",
                    help="argmax actions (off: sample, as in training; greedy recurrent "
                         "policies can fall into deterministic switch loops)")
    ev.add_argument("--search", action="store_true",
                    help="the checkpoint searches each decision on Showdown's simulator, its value head "
                         "scoring the leaves (a --policy: HP and Pokémon left score them; row agent+search; "
                         "singles; what search refuses the policy plays; search.* keys)")
    add_config_flags(ev, "eval", defaults={"runner.battle_format": "the checkpoint's, else gen9randombattle"})


def bench_parser(sub) -> None:
    be = _parser(sub, "bench", "throughput vs the RandomPlayer ceiling on the same server, same run")
    be.add_argument("--seconds", type=float, default=30.0, metavar="SECONDS", help="measured window per phase, seconds")
    be.add_argument("--warmup", type=float, default=8.0, metavar="SECONDS",
                    help="unmeasured ramp-up per phase, seconds (and at least until as many battles "
                         "as run at once have finished)")
    be.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                    help="write the result as one JSON object to PATH (no PATH: stdout only)")
    be.add_argument("--learn", action="store_true",
                    help="also measure with PPO updates running (the ppo keys and train.sides_per_update)")
    be.add_argument("--repeats", type=int, default=1, metavar="N",
                    help="measure ceiling and maple-async this many times, interleaved, and pool "
                         "the windows (a shared small machine drifts between phases)")
    be.add_argument("--shards", type=int, default=1, metavar="N",
                    help="machine scale: N processes, each with its own simulator processes or server, measure "
                         "the ceiling and maple-async at the same time (and, with --learn, the training "
                         "loop with N shards); totals and per shard")
    be.add_argument("--throttle-server", type=float, default=0.0, metavar="FRACTION",
                    help="stop the managed server for this fraction of every 20 ms (a slower "
                         "simulator, for both the ceiling and maple-async)")
    be.add_argument("--checkpoint", default=None, metavar="PATH",
                    help="play (and with --learn, start learning) with this checkpoint's network and "
                         "weights instead of fresh ones: a trained agent's battles are shorter")
    be.add_argument("--env", action="store_true",
                    help="the battle pool for outside learners (async API and Gymnasium face, "
                         "random-legal consumer) against the ceiling and poke-env's own environments")
    be.add_argument("--env-concurrency", default="64,128", metavar="LIST",
                    help="with --env: battles in flight of the pool (--shards N adds the first with N shards)")
    be.add_argument("--env-opponent", default=None, choices=("random", "max_power", "heuristics"),
                    help="with --env: also the pool against this baseline (the learner's side alone counted)")
    be.add_argument("--env-setups", default="single,dummy2,dummy8,subproc2,subproc8", metavar="LIST",
                    help="with --env: poke-env set-ups (SingleAgentWrapper stepped alone, SB3 DummyVecEnv "
                         "and SubprocVecEnv with N envs); empty: none")
    be.add_argument("--sweep", default=None,
                    help='e.g. "concurrency=8,32,128 max_wait_ms=0,2,10" (prints a table)')
    add_config_flags(be, "bench")


def serve_parser(sub) -> None:
    sv = _parser(sub, "serve", "log a checkpoint's agent in and accept challenges (a person or a bot)")
    sv.add_argument("--battles", type=int, default=0, metavar="N", help="stop after this many battles (0: never)")
    add_outside_flags(sv, "serve", 8, "challenges from people arrive a few at a time, and a public server "
                                      "spaces each account's messages, which many battles at once would queue behind")


def ladder_parser(sub) -> None:
    ld = _parser(sub, "ladder", "play rated battles on the server's ladder and print the rating")
    ld.add_argument("--battles", type=int, default=10, metavar="N", help="rated battles to play")
    add_outside_flags(ld, "ladder", 1, "one rated battle at a time, as a person plays the ladder")


def curve_parser(sub) -> None:
    cu = _parser(sub, "curve", "evaluate a run's saved checkpoints against baselines: win rate by "
                               "training minutes, battle sides and decisions (RUN_DIR/curve.csv)")
    add_run_dir(cu)
    cu.add_argument("--opponents", default="heuristics", metavar="LIST",
                    help="comma list of random | max_power | heuristics (each labelled held out / in "
                         "training from the run's mix)")
    cu.add_argument("--points", type=int, default=6, metavar="N",
                    help="checkpoints spread evenly over the run's training time, the last included")
    cu.add_argument("--minutes", default=None, metavar="LIST",
                    help="instead: the checkpoints nearest these minutes of training, e.g. 30,60,120")
    cu.add_argument("--sides", default=None, metavar="LIST",
                    help="instead: the checkpoints nearest these battle-side counts, e.g. 10000,30000 "
                         "(runs compared at equal battles: this machine's speed moves from day to day)")
    cu.add_argument("--decisions", default=None, metavar="LIST",
                    help="instead: the checkpoints nearest these counts of decisions trained on (steps, as "
                         "published curves count them), e.g. 1e6,2e6,4e6,6e6,1e7")
    cu.add_argument("--battles", type=int, default=300, metavar="N", help="battles per checkpoint and opponent")
    cu.add_argument("--greedy", action="store_true", help="argmax actions (off: sample, as in training)")
    cu.add_argument("--search", action="store_true",
                    help="each checkpoint searches its decisions on Showdown's simulator, its value head scoring "
                         "the leaves (rows 'OPPONENT [agent+search]', apart from the plain ones; singles; "
                         "search.* keys)")
    add_config_flags(cu, "curve", defaults={"runner.battle_format": "the run's (RUN_DIR/config.yaml)"})


def report_parser(sub) -> None:
    rp = _parser(sub, "report", "draw a run's learning curves and evaluation table (PNG or HTML)")
    add_run_dir(rp)
    rp.add_argument("--out", default=None, metavar="PATH",
                    help="report.png or report.html (default: RUN_DIR/report.png)")
    rp.add_argument("--by-decisions", action="store_true",
                    help="only the curve by decisions trained on (maple-async curve --decisions), beside "
                         "the published curve of the same format and opponent where there is one")
    refuse(rp, "report")


def engine_parser(sub) -> None:
    e = _parser(sub, "engine", "poke-engine, search's fast engine: build it per generation, show what is "
                               "built, measure its agreement with Showdown")
    e.add_argument("action", choices=["install", "status", "agree"])
    e.add_argument("positions", nargs="*", help="agree: JSON-lines files of positions (written by search.record)")
    e.add_argument("--gens", default="4,9", metavar="LIST", help="install: the generations to build")
    e.add_argument("--pairs", type=int, default=4, metavar="N", help="agree: joint choices drawn per position")
    e.add_argument("--seeds", type=int, default=200, metavar="N", help="agree: times Showdown plays each joint choice")
    e.add_argument("--seed", type=int, default=1, metavar="N", help="agree: the draws' seed")
    e.add_argument("--json", default=None, metavar="PATH",
                   help="agree: every compared joint choice, as JSON")
    e.add_argument("--corpus", default=None, metavar="PATH",
                   help="agree: the positions with Showdown's outcomes, for the engine alone to replay "
                        "(tests)")
    e.add_argument("--replay", default=None, metavar="PATH",
                   help="agree: a corpus --corpus wrote (JSON, or .json.gz as tests/data has it): the "
                        "engine's outcomes now against the recorded Showdown ones, no Showdown run "
                        "(seconds: an engine or translation change measured)")
    add_config_flags(e, "engine", config_file=False, extra={"server.home": "; poke-engine is built there too"})


COMMAND_PARSERS = (server_parser, play_parser, train_parser, pretrain_parser, eval_parser, bench_parser,
                   serve_parser, ladder_parser, curve_parser, report_parser, engine_parser)


def version() -> str:
    """``--version``: the version and where the package was imported from (as pip says its own)."""
    import sys
    from pathlib import Path

    import maple_async
    return (f"maple-async {maple_async.__version__} from {Path(maple_async.__file__).parent} "
            f"(python {sys.version_info.major}.{sys.version_info.minor})")


class _PrintVersion(argparse.Action):
    """``--version`` printed as one line: argparse's own action wraps a long path."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the version and where the package is, then exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(version())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="maple-async", description=DESCRIPTION)
    p.add_argument("--version", action=_PrintVersion)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_parser in COMMAND_PARSERS:
        add_parser(sub)
    return p
