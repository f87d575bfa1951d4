"""The command line's flags: one parser per command, and every config key as a flag
(``--section.key``, grouped by section, with its meaning, range and default) read back into
a :class:`~maple_async.config.Config`."""

from __future__ import annotations

import argparse
from typing import Any

from .. import config as config_mod
from ..pokeenv.accounts import PASSWORD_ENV, USERNAME_ENV

DESCRIPTION = "``maple-async`` command line: server, play, train, pretrain, eval, bench, report, serve, ladder."

SHORT_FLAGS = {
    # flag: config key
    "--concurrency": "runner.concurrency",
    "--max-batch-size": "batcher.max_batch_size",
    "--max-wait-ms": "batcher.max_wait_ms",
    "--device": "runner.device",
    "--server": "server.url",
    "--network": "network.kind",
    "--opponent": "runner.opponent",
}


def add_config_flags(p: argparse.ArgumentParser, skip: tuple = ()) -> None:
    """``--config`` and one ``--section.key`` flag per config key, grouped by section, each
    with its meaning and default (and its short form where it has one)."""
    p.add_argument("--config", help="YAML config (see config/*.yaml); flags override it")
    short = {k: f for f, k in SHORT_FLAGS.items() if f not in skip}
    groups: dict[str, argparse._ArgumentGroup] = {}
    for name, f, _ann in config_mod.declared_keys():
        section = name.split(".")[0]
        if section not in groups:
            groups[section] = p.add_argument_group(f"{section} (config section '{section}')")
        names = [short[name], f"--{name}"] if name in short else [f"--{name}"]
        default = f.default if f.default is not None else "unset"
        meta = f.metadata
        limits = ", ".join(f"{w} {meta[b]:g}" for b, w in (("gt", ">"), ("ge", ">="), ("le", "<="))
                           if meta[b] is not None)
        choices = " | ".join(meta["choices"]) if meta["choices"] else ""
        extra = "; ".join(x for x in (choices, limits) if x)
        help_ = meta["help"].replace("%", "%%") + (f" [{extra}]" if extra else "") + f" (default: {default})"
        groups[section].add_argument(*names, dest=name, default=None, metavar="V", help=help_)


def load_config(args: argparse.Namespace, saved: bool = False) -> config_mod.Config:
    """The command's config: ``--config`` (``saved``: a run folder's, perhaps older) and its flags."""
    overrides: dict[str, Any] = {}
    for key, _ann in config_mod.all_keys():
        raw = getattr(args, key, None)
        if raw is not None:
            value = config_mod.parse_override_value(raw)
            if key == "server.url" and value is not None:
                value = str(raw)
            overrides[key] = value
    return config_mod.load(args.config, overrides, saved)


def add_outside_flags(p: argparse.ArgumentParser, concurrency: int) -> None:
    p.add_argument("--checkpoint", default=None, help="the agent to play (or --policy)")
    p.add_argument("--policy", default=None, metavar="MODULE:ATTR",
                   help="instead of a checkpoint: a policy trained outside (module:attr or path/to/file.py:attr)")
    p.add_argument("--server", default=None,
                   help="Showdown URL (default: start a managed loopback server); a non-loopback "
                        "server needs a registered account")
    p.add_argument("--format", default=None, help="battle format (default: the checkpoint's)")
    p.add_argument("--teams", default=None, help="team file or folder for a team format (default: the checkpoint's)")
    p.add_argument("--username", default=None,
                   help=f"loopback servers: the name to log in as (default: maple + a random tag); "
                        f"otherwise ${USERNAME_ENV} or --credentials")
    p.add_argument("--credentials", default=None, metavar="FILE",
                   help=f"'username: NAME' and 'password: SECRET' lines (else ${USERNAME_ENV} and "
                        f"${PASSWORD_ENV}); never printed or saved")
    p.add_argument("--login-url", default=None,
                   help="the login server of a non-loopback server (default: play.pokemonshowdown.com's)")
    p.add_argument("--concurrency", type=int, default=concurrency, help="battles at once")
    p.add_argument("--device", default="cpu", help="inference device (cpu, cuda, auto)")
    p.add_argument("--replays", default=None, metavar="DIR", help="write each battle as a replay into DIR")
    p.add_argument("--greedy", action="store_true", help="argmax actions (default: sample)")
    p.add_argument("--search", action="store_true",
                   help="the checkpoint searches each decision on Showdown's simulator, its value head scoring "
                        "the leaves (a --policy: HP and Pokémon left score them; singles; no search.* flags "
                        "here: the checkpoint config's search section, the defaults unless it set them)")


def add_replays_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replays", default=None, metavar="DIR",
                   help="write each battle as a replay (HTML + protocol log) into DIR (newest 1000 kept)")


def add_run_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a training run folder (train.run_dir)")


def server_parser(sub) -> None:
    s = sub.add_parser("server", help="install / start / stop / list managed Showdown servers")
    s.add_argument("action", choices=["install", "start", "stop", "status"])
    s.add_argument("--port", type=int, default=0, help="port (start: 0 = free port)")
    s.add_argument("--home", default=None, help="install folder (default ~/.cache/maple-async)")
    s.add_argument("--simulators", type=int, default=0,
                   help="start: simulator processes (default 0: one per core, at most 8)")


def play_parser(sub) -> None:
    pl = sub.add_parser("play", help="run battles with a network (no learning) and report throughput")
    pl.add_argument("--battles", type=int, default=200)
    pl.add_argument("--policy", default=None, metavar="MODULE:ATTR",
                    help="play an outside policy (module:attr or path/to/file.py:attr) instead of a "
                         "fresh network")
    add_replays_flag(pl)
    pl.add_argument("--search", action="store_true",
                    help="the network searches each decision on Showdown's simulator, its value head scoring "
                         "the leaves (a --policy: HP and Pokémon left score them; singles; what search refuses "
                         "the network plays; search.* keys)")
    add_config_flags(pl)


def train_parser(sub) -> None:
    tr = sub.add_parser("train", help="train with recurrent PPO (see config/*.yaml presets)")
    tr.add_argument("--resume", nargs="?", const="latest", default=None,
                    help="continue from a checkpoint (default: <run_dir>/latest.pt); the run's limits "
                         "(train.total_sides, total_decisions, max_minutes) count what it trained before")
    add_config_flags(tr)


def pretrain_parser(sub) -> None:
    pt = sub.add_parser("pretrain", help="behaviour cloning from a baseline's decisions: a warm start for train")
    pt.add_argument("--teacher", default="heuristics", help="the baseline whose decisions are cloned "
                    "(random | max_power | heuristics; default heuristics)")
    pt.add_argument("--opponent", default="self", help="whom the teacher plays: self (both sides recorded) "
                    "or a baseline")
    pt.add_argument("--battles", type=int, default=2000)
    pt.add_argument("--minutes", type=float, default=0.0, help="stop after this many minutes (0: no limit)")
    pt.add_argument("--epochs", type=int, default=2, help="passes over each round of battles")
    pt.add_argument("--round-sides", type=int, default=256,
                    help="battle sides per round: fitted while the next round is played")
    pt.add_argument("--out", default=None, help="checkpoint path (default <run_dir>/pretrained.pt)")
    add_config_flags(pt, skip=("--opponent",))


def eval_parser(sub) -> None:
    ev = sub.add_parser("eval", help="win rate (95%% CI) of a checkpoint against a baseline or checkpoint")
    ev.add_argument("--checkpoint", default=None, help="the checkpoint to evaluate (or --policy)")
    ev.add_argument("--policy", default=None, metavar="MODULE:ATTR",
                    help="instead of a checkpoint: a policy trained outside (module:attr or "
                         "path/to/file.py:attr; a batch callable, see docs/env.md)")
    ev.add_argument("--baseline", default=None, metavar="NAME",
                    help="instead of a checkpoint: a player with no network against the baselines in "
                         "--opponents (search: the network-free search player, search.* keys; random, "
                         "max_power, heuristics)")
    ev.add_argument("--opponents", default=None,
                    help="comma list of random | max_power | heuristics | search | checkpoint PATH: one row per "
                         "opponent (labelled held out / in training from the checkpoint's mix), ratings; "
                         "checkpoints also play each other")
    ev.add_argument("--opponent", default="random", help="one opponent (the same as --opponents X)")
    ev.add_argument("--json", default=None, help="write the results and ratings as JSON to PATH (- : stdout)")
    ev.add_argument("--battles", type=int, default=200)
    add_replays_flag(ev)
    ev.add_argument("--greedy", action="store_true",
                    help="argmax actions (default: sample, as in training; greedy recurrent "
                         "policies can fall into deterministic switch loops)")
    ev.add_argument("--search", action="store_true",
                    help="the checkpoint searches each decision on Showdown's simulator, its value head "
                         "scoring the leaves (a --policy: HP and Pokémon left score them; row agent+search; "
                         "singles; what search refuses the policy plays; search.* keys)")
    add_config_flags(ev, skip=("--opponent",))


def bench_parser(sub) -> None:
    be = sub.add_parser("bench", help="throughput vs the RandomPlayer ceiling on the same server, same run")
    be.add_argument("--seconds", type=float, default=30.0, help="measured window per phase")
    be.add_argument("--warmup", type=float, default=8.0,
                    help="unmeasured ramp-up per phase, seconds (and at least until as many battles "
                         "as run at once have finished)")
    be.add_argument("--json", nargs="?", const="-", default=None,
                    help="write the result as one JSON object to PATH (no PATH: stdout only)")
    be.add_argument("--learn", action="store_true", help="also measure with PPO updates running")
    be.add_argument("--repeats", type=int, default=1,
                    help="measure ceiling and maple-async this many times, interleaved, and pool "
                         "the windows (a shared small machine drifts between phases)")
    be.add_argument("--shards", type=int, default=1,
                    help="machine scale: N processes, each with its own managed server, measure the "
                         "ceiling and maple-async at the same time (and, with --learn, the training "
                         "loop with N shards); totals and per shard")
    be.add_argument("--throttle-server", type=float, default=0.0, metavar="FRACTION",
                    help="stop the managed server for this fraction of every 20 ms (a slower "
                         "simulator, for both the ceiling and maple-async; default 0)")
    be.add_argument("--checkpoint", default=None, metavar="PATH",
                    help="play (and with --learn, start learning) with this checkpoint's network and "
                         "weights instead of fresh ones: a trained agent's battles are shorter")
    be.add_argument("--env", action="store_true",
                    help="the battle pool for outside learners (async API and Gymnasium face, "
                         "random-legal consumer) against the ceiling and poke-env's own environments")
    be.add_argument("--env-concurrency", default="64,128",
                    help="with --env: battles in flight of the pool (--shards N adds the first with N shards)")
    be.add_argument("--env-opponent", default=None, choices=("random", "max_power", "heuristics"),
                    help="with --env: also the pool against this baseline (the learner's side alone counted)")
    be.add_argument("--env-setups", default="single,dummy2,dummy8,subproc2,subproc8",
                    help="with --env: poke-env set-ups (SingleAgentWrapper stepped alone, SB3 DummyVecEnv "
                         "and SubprocVecEnv with N envs); empty: none")
    be.add_argument("--sweep", default=None,
                    help='e.g. "concurrency=8,32,128 max_wait_ms=0,2,10" (prints a table)')
    add_config_flags(be)


def serve_parser(sub) -> None:
    sv = sub.add_parser("serve", help="log a checkpoint's agent in and accept challenges (a person or a bot)")
    sv.add_argument("--battles", type=int, default=0, help="stop after this many battles (default 0: never)")
    add_outside_flags(sv, concurrency=8)


def ladder_parser(sub) -> None:
    ld = sub.add_parser("ladder", help="play rated battles on the server's ladder and print the rating")
    ld.add_argument("--battles", type=int, default=10)
    add_outside_flags(ld, concurrency=1)


def curve_parser(sub) -> None:
    cu = sub.add_parser("curve", help="evaluate a run's saved checkpoints against baselines: win rate by "
                                      "training minutes, battle sides and decisions (RUN_DIR/curve.csv)")
    add_run_dir(cu)
    cu.add_argument("--opponents", default="heuristics",
                    help="comma list of random | max_power | heuristics (each labelled held out / in "
                         "training from the run's mix)")
    cu.add_argument("--points", type=int, default=6,
                    help="checkpoints spread evenly over the run's training time, the last included")
    cu.add_argument("--minutes", default=None,
                    help="instead: the checkpoints nearest these minutes of training, e.g. 30,60,120")
    cu.add_argument("--sides", default=None,
                    help="instead: the checkpoints nearest these battle-side counts, e.g. 10000,30000 "
                         "(runs compared at equal battles: this machine's speed moves from day to day)")
    cu.add_argument("--decisions", default=None,
                    help="instead: the checkpoints nearest these counts of decisions trained on (steps, as "
                         "published curves count them), e.g. 1e6,2e6,4e6,6e6,1e7")
    cu.add_argument("--battles", type=int, default=300, help="battles per checkpoint and opponent")
    cu.add_argument("--greedy", action="store_true", help="argmax actions (default: sample, as in training)")
    cu.add_argument("--search", action="store_true",
                    help="each checkpoint searches its decisions on Showdown's simulator, its value head scoring "
                         "the leaves (rows 'OPPONENT [agent+search]', apart from the plain ones; singles; "
                         "search.* keys)")
    add_config_flags(cu, skip=("--opponent",))


def report_parser(sub) -> None:
    rp = sub.add_parser("report", help="draw a run's learning curves and evaluation table (PNG or HTML)")
    add_run_dir(rp)
    rp.add_argument("--out", default=None, help="report.png (default: RUN_DIR/report.png) or report.html")
    rp.add_argument("--by-decisions", action="store_true",
                    help="only the curve by decisions trained on (maple-async curve --decisions), beside "
                         "the published curve of the same format and opponent where there is one")


# One function per command, in the order --help lists them: each adds its parser and flags.
def engine_parser(sub) -> None:
    e = sub.add_parser("engine", help="poke-engine, search's fast engine: build it per generation, show what is "
                                      "built, measure its agreement with Showdown")
    e.add_argument("action", choices=["install", "status", "agree"])
    e.add_argument("--gens", default="4,9", help="install: the generations to build (default: 4,9)")
    e.add_argument("--home", default=None, help="install folder (default ~/.cache/maple-async)")
    e.add_argument("positions", nargs="*", help="agree: JSON-lines files of positions (written by search.record)")
    e.add_argument("--pairs", type=int, default=4, help="agree: joint choices drawn per position (default: 4)")
    e.add_argument("--seeds", type=int, default=200,
                   help="agree: times Showdown plays each joint choice (default: 200)")
    e.add_argument("--seed", type=int, default=1, help="agree: the draws' seed (default: 1)")
    e.add_argument("--json", default=None, metavar="PATH", help="agree: every compared joint choice, as JSON")
    e.add_argument("--corpus", default=None, metavar="PATH",
                   help="agree: the positions with Showdown's outcomes, for the engine alone to replay (tests)")


COMMAND_PARSERS = (server_parser, play_parser, train_parser, pretrain_parser, eval_parser, bench_parser,
                   serve_parser, ladder_parser, curve_parser, report_parser, engine_parser)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="maple-async", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True)
    for add_parser in COMMAND_PARSERS:
        add_parser(sub)
    return p
