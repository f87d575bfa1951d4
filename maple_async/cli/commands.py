"""One function per command: read its flags, check them, call into ``tools/``.

User errors (bad config, unreachable server, missing checkpoint, ...) print one line
``maple-async: error: ...`` and exit with status 2, without a traceback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

from .. import config as config_mod
from .. import opponents
from ..errors import UserError
from ..run.process import run_async
from .parser import OUTSIDE_KEYS, build_parser, flag_values, load_config


def check_teams(cfg: config_mod.Config, **options) -> None:
    """:func:`maple_async.teams.check`, imported when a command runs: ``--help`` stays quick."""
    from ..teams import check
    check(cfg, **options)


def print_config(cfg: config_mod.Config) -> None:
    print("[maple-async] config:")
    for section, values in cfg.to_dict().items():
        print(f"  {section}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    sys.stdout.flush()


def _replay_writer(args):
    from ..pokeenv.replays import ReplayWriter
    return ReplayWriter(args.replays) if getattr(args, "replays", None) else None


def cmd_server(args) -> int:
    from .. import server
    cfg = load_config(args).server
    home, port = cfg.home, cfg.port
    if args.action == "install":
        print(server.install(home))
    elif args.action == "start":
        info = run_async(server.start_detached(port, home, simulators=server.resolve_simulators(cfg.simulators)))
        print(f"Showdown running at {info['url']} (pid {info['pid']}, log {info['log']}); "
              f"stop with: maple-async server stop --server.port {info['port']}")
    elif args.action == "stop":
        stopped = server.stop_detached(port or None, home)
        print("stopped: " + (", ".join(map(str, stopped)) if stopped else "nothing running"))
    else:
        infos = server.list_detached(home)
        if not infos:
            print("no managed servers")
        for info in infos:
            healthy = run_async(server.check_health(info["url"])) if info["running"] else False
            print(f"port {info['port']}  pid {info['pid']}  "
                  f"{'running' if info['running'] else 'dead'}  "
                  f"{'healthy' if healthy else 'unhealthy'}  {info['url']}")
    return 0


def cmd_play(args) -> int:
    from ..tools.play import run_play
    cfg = load_config(args)
    if args.battles < 1:
        raise UserError("--battles must be >= 1")
    print_config(cfg)
    check_teams(cfg)
    replays = _replay_writer(args)
    search = _search_config(args, cfg)
    if cfg.runner.opponent in opponents.SEARCH_NAMES:
        _resolve_engine(cfg)
    code = run_async(run_play(cfg, args.battles, replays, args.policy, search=search))
    if replays is not None:
        print(f"[play] {replays.written} replays in {replays.folder}")
    return code


def cmd_train(args) -> int:
    from ..learn import checkpoint as ckpt
    from ..tools.train import run_train
    cfg = load_config(args)
    resume = args.resume
    if resume == "latest":
        resume = str(Path(cfg.train.run_dir) / "latest.pt")
    print_config(cfg)
    if resume or cfg.train.init:  # a checkpoint of other generations is refused before Showdown validates teams
        ckpt.load(resume or cfg.train.init, cfg.runner.battle_format)
    check_teams(cfg, eval_pool=True, many=True)
    return run_async(run_train(cfg, resume))


def cmd_pretrain(args) -> int:
    from ..tools.pretrain import run_pretrain
    cfg = load_config(args)
    opponents.teacher_and_opponent(args.teacher, cfg.runner.opponent)
    if args.battles < 1 or args.epochs < 1 or args.round_sides < 1 or args.minutes < 0:
        raise UserError("--battles, --epochs and --round-sides must be >= 1, --minutes >= 0")
    print_config(cfg)
    check_teams(cfg)
    path = run_async(run_pretrain(cfg, args.teacher, args.battles, opponent=cfg.runner.opponent, epochs=args.epochs,
                                  round_sides=args.round_sides, out=args.out, max_minutes=args.minutes))
    conf = f" --config {args.config}" if args.config else ""
    print(f"[pretrain] continue with PPO: maple-async train{conf} --train.init {path}")
    return 0


def eval_config(args) -> config_mod.Config:
    """eval's config; a checkpoint evaluated with no --config or --runner.battle_format plays
    its own format (and its teams, where they are here), not the default gen 9 one."""
    from ..tools.evaluate import checkpoint_format
    cfg = load_config(args)
    if args.checkpoint and args.config is None and getattr(args, "runner.battle_format", None) is None:
        cfg = checkpoint_format(cfg, args.checkpoint, keep_teams=getattr(args, "runner.teams", None) is not None,
                                quiet=args.json == "-")
    return cfg


def _search_config(args, cfg):
    """``--search``: the config's ``search`` section (its engine settled), or None without
    ``--search``."""
    if not args.search:
        return None
    for fmt in config_mod.formats(cfg.runner.battle_format):
        opponents.search_format(fmt)
    _resolve_engine(cfg)
    return cfg.search


def _resolve_engine(cfg) -> None:
    """Settle ``search.engine`` for the formats played, building poke-engine where it is needed
    (before any battle starts), for ``--search`` and for the ``search`` player."""
    from ..search.engines import resolve
    cfg.search = resolve(cfg.search, config_mod.formats(cfg.runner.battle_format))


def cmd_eval(args) -> int:
    from ..tools import evaluate
    cfg = eval_config(args)
    if args.battles < 1:
        raise UserError("--battles must be >= 1")
    if sum(bool(x) for x in (args.checkpoint, args.policy, args.baseline)) != 1:
        raise UserError("eval needs --checkpoint PATH, --policy module:attr or --baseline NAME (one of them)")
    against = opponents.eval_list(args.opponents)
    if args.baseline:
        opponents.baseline_player(args.baseline, against, cfg.runner.battle_format, args.search)
    if args.baseline in opponents.SEARCH_NAMES or any(o.spec in opponents.SEARCH_NAMES for o in against):
        _resolve_engine(cfg)
    check_teams(cfg, quiet=args.json == "-", many=True)
    if args.baseline:
        return run_async(evaluate.run_baseline_eval(cfg, args.baseline, against, args.battles,
                                                    json_path=args.json, replays_dir=args.replays))
    search = _search_config(args, cfg)
    return run_async(evaluate.run_eval(cfg, args.checkpoint or args.policy, against, args.battles,
                                       greedy=args.greedy, json_path=args.json, replays_dir=args.replays,
                                       search=search))


def cmd_bench(args) -> int:
    from ..tools.bench import command as sweep
    cfg = load_config(args)
    if args.seconds <= 0 or args.warmup < 0 or args.repeats < 1:
        raise UserError("--seconds must be > 0, --warmup >= 0 and --repeats >= 1")
    if args.shards < 1 or (args.shards > 1 and not args.env
                           and (args.sweep or args.repeats > 1 or args.throttle_server)):
        raise UserError("--shards must be >= 1, and --shards N > 1 takes no --sweep, --repeats or --throttle-server")
    if not 0 <= args.throttle_server < 1 or (args.throttle_server and cfg.server.url):
        raise UserError("--throttle-server must be in [0, 1) and needs a managed server (no --server)")
    if args.checkpoint:
        cfg = sweep.with_checkpoint(cfg, args.checkpoint)
    check_teams(cfg, quiet=args.json == "-")
    return run_async(sweep.run_command(cfg, args))


def _numbers(text: Optional[str], flag: str, convert, what: str) -> Optional[list]:
    """A comma list of numbers (None when the flag is not given)."""
    if not text:
        return None
    try:
        return [convert(x) for x in opponents.split(text)]
    except (ValueError, OverflowError):
        raise UserError(f"{flag} takes a comma list of {what}; got {text!r}") from None


def cmd_curve(args) -> int:
    from ..tools import curve
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a folder (give a training run folder, e.g. runs/default)")
    if args.config is None and (run_dir / "config.yaml").exists():
        args.config = str(run_dir / "config.yaml")  # the run's format, teams and battle options
    cfg = load_config(args)
    if args.battles < 1 or args.points < 1:
        raise UserError("--battles and --points must be >= 1")
    search = _search_config(args, cfg)
    against = opponents.baseline_list(args.opponents)
    if sum(bool(a) for a in (args.minutes, args.sides, args.decisions)) > 1:
        raise UserError("give one of --minutes, --sides and --decisions")
    minutes = _numbers(args.minutes, "--minutes", float, "numbers, e.g. 30,60,120")
    sides = _numbers(args.sides, "--sides", int, "whole numbers, e.g. 10000,30000")
    decisions = _numbers(args.decisions, "--decisions", lambda d: int(float(d)), "numbers, e.g. 1e6,2e6,6e6")
    saved = curve.saved_points(run_dir)
    curve.fill_decisions(run_dir / "curve.csv", saved)  # points played before the decisions axis
    points = curve.select(saved, minutes, args.points, sides, decisions)
    check_teams(cfg)
    return run_async(curve.run_curve(cfg, run_dir, points, against, args.battles, args.greedy, search=search))


def cmd_report(args) -> int:
    from ..tools.report import write
    print(f"[report] written: {write(args.run_dir, args.out, args.by_decisions)}")
    return 0


def outside_config(args) -> config_mod.Config:
    """serve's and ladder's config: the checkpoint's own with this command's server, format,
    teams, concurrency and device (each flag checked as its config key is)."""
    from ..tools.serve import outside_config as assemble
    if bool(args.checkpoint) == bool(args.policy):
        raise UserError("give --checkpoint PATH or --policy module:attr (one of them)")
    given = flag_values(args, OUTSIDE_KEYS)
    config_mod.load(None, given)
    return assemble(args.checkpoint, server=given.get("server.url"), fmt=given.get("runner.battle_format"),
                    teams=given.get("runner.teams"),
                    concurrency=given.get("runner.concurrency", args.outside_concurrency),
                    device=given.get("runner.device", "cpu"))


def _outside(args, label: str) -> int:
    from ..tools.serve import run_outside
    cfg = outside_config(args)
    search = _search_config(args, cfg)
    check_teams(cfg)
    return run_async(run_outside(cfg, label, args.checkpoint or args.policy, n_battles=args.battles,
                                 server=cfg.server.url, credentials=args.credentials, username=args.username,
                                 login_url=args.login_url, replays=args.replays, greedy=args.greedy,
                                 search=search))


def cmd_serve(args) -> int:
    if args.battles < 0:
        raise UserError("--battles must be >= 0")
    return _outside(args, "serve")


def cmd_ladder(args) -> int:
    if args.battles < 1:
        raise UserError("--battles must be >= 1")
    return _outside(args, "ladder")


def cmd_engine(args) -> int:
    from ..search.pokeengine import build
    home = load_config(args).server.home
    home = Path(home) if home else None
    if args.action == "install":
        for gen in _numbers(args.gens, "--gens", int, "generations, e.g. 1,4,9") or []:
            print(f"[engine] generation {gen}: {build.ensure(gen, home)}")
    elif args.action == "status":
        print(f"[engine] poke-engine {build.ENGINE_VERSION} in {build.engine_root(home)}; cargo: "
              f"{build.cargo() or 'not found (install Rust to build the engine)'}")
        for gen in build.GENERATIONS:
            print(f"[engine] generation {gen}: {'built' if build.installed(gen, home) else 'not built'}")
    else:
        from ..tools.agree import run_agree
        return run_async(run_agree(args))
    return 0


COMMANDS = {"server": cmd_server, "play": cmd_play, "train": cmd_train, "pretrain": cmd_pretrain,
            "eval": cmd_eval, "bench": cmd_bench, "serve": cmd_serve, "ladder": cmd_ladder,
            "curve": cmd_curve, "report": cmd_report, "engine": cmd_engine}


def _sigterm_as_interrupt(signum, frame):
    # Until an event loop installs its own handler (train: graceful stop), SIGTERM unwinds
    # like Ctrl-C so managed servers are stopped by their context managers.
    raise KeyboardInterrupt


def main(argv: Optional[list[str]] = None) -> int:
    import signal
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except UserError as e:
        print(f"maple-async: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("maple-async: interrupted", file=sys.stderr)
        return 130
