"""``maple-async`` command line: server, play, train, pretrain, eval, bench, report, serve, ladder.

User errors (bad config, unreachable server, missing checkpoint, ...) print one line
``maple-async: error: ...`` and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import sys
import time
from pathlib import Path
from typing import Any, Optional

from . import config as config_mod
from .errors import UserError
from .run.process import run_async, setup_process

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


def _add_config_flags(p: argparse.ArgumentParser, skip: tuple = ()) -> None:
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


def load_config(args: argparse.Namespace) -> config_mod.Config:
    overrides: dict[str, Any] = {}
    for key, _ann in config_mod.all_keys():
        raw = getattr(args, key, None)
        if raw is not None:
            value = config_mod.parse_override_value(raw)
            if key == "server.url" and value is not None:
                value = str(raw)
            overrides[key] = value
    return config_mod.load(args.config, overrides)


def print_config(cfg: config_mod.Config) -> None:
    print("[maple-async] config:")
    for section, values in cfg.to_dict().items():
        print(f"  {section}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    sys.stdout.flush()


def check_teams(cfg: config_mod.Config, quiet: bool = False, eval_pool: bool = False,
                many: bool = False) -> None:
    """The format's rules and every team, validated by Showdown before anything starts
    (``quiet``: stdout is JSON, say nothing); with ``eval_pool`` (train) ``train.eval_teams`` too.
    ``many``: the command plays every format of a list (train, eval); others refuse a list."""
    from .teams import for_config
    for fmt in config_mod.formats(cfg.runner.battle_format) if many else [None]:
        one = cfg if fmt is None else config_mod.for_format(cfg, fmt)
        for_config(one, quiet=quiet)
        if eval_pool and cfg.train.eval_teams and cfg.train.eval_battles:
            for_config(config_mod.for_format(_eval_pool_config(cfg), one.runner.battle_format), quiet=quiet)


def _eval_pool_config(cfg: config_mod.Config) -> config_mod.Config:
    """``cfg`` with ``train.eval_teams`` as both sides' pool (the end-of-training evaluation)."""
    if not cfg.train.eval_teams:
        return cfg
    out = copy.deepcopy(cfg)
    out.runner.teams, out.train.opponent_teams = cfg.train.eval_teams, None
    return out


# -- server -----------------------------------------------------------------------------

def cmd_server(args) -> int:
    from . import server
    home = args.home
    if args.action == "install":
        print(server.install(home))
    elif args.action == "start":
        info = run_async(server.start_detached(args.port, home,
                                               simulators=server.resolve_simulators(args.simulators)))
        print(f"Showdown running at {info['url']} (pid {info['pid']}, log {info['log']}); "
              f"stop with: maple-async server stop --port {info['port']}")
    elif args.action == "stop":
        stopped = server.stop_detached(args.port or None, home)
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


# -- play -------------------------------------------------------------------------------

async def _progress(label: str, get_done, total: int, period: float = 5.0) -> None:
    t0 = time.perf_counter()
    while True:
        await asyncio.sleep(period)
        done = get_done()
        dt = time.perf_counter() - t0
        print(f"[{label}] {done}/{total} battles  {done / dt:.2f} battles/s", flush=True)


def _replay_writer(args):
    from .pokeenv.replays import ReplayWriter
    return ReplayWriter(args.replays) if getattr(args, "replays", None) else None


async def _play(cfg, n_battles: int, replays=None, policy_spec: Optional[str] = None) -> int:
    from .collect.agent import Agent
    from .collect.match import play
    from .inference.outside import until_failed
    from .inference.policy import InferencePolicy
    from .learn import networks as nets
    from .pokeenv.players import fast_kwargs
    from .showdown import showdown_for
    from .teams import for_config

    device = setup_process(cfg)
    if policy_spec:
        from .inference.outside import OutsidePolicy
        policy = OutsidePolicy(policy_spec)
    else:
        policy = InferencePolicy(nets.for_config(cfg), device)
    agent = Agent(policy, cfg.batcher, reward_cfg=cfg.reward, record=False)
    async with showdown_for(cfg.server, runner=cfg.runner) as server:
        sides = 2 if cfg.runner.opponent == "self" else 1
        prog = asyncio.get_running_loop().create_task(
            _progress("play", lambda: agent.stats.battles // sides, n_battles))
        try:
            res = await until_failed(play(agent, server.url, n_battles, opponent=cfg.runner.opponent,
                                          concurrency=cfg.runner.concurrency,
                                          battle_format=cfg.runner.battle_format,
                                          battle_timeout_s=cfg.runner.battle_timeout_s,
                                          battle_options=fast_kwargs(cfg.runner), teams=for_config(cfg),
                                          replays=replays), [policy])
        finally:
            prog.cancel()
            await agent.batcher.close()
    print(f"[play] {res.battles} battles in {res.seconds:.1f}s: {res.battles_per_s:.2f} battles/s, "
          f"{res.decisions_per_s:.0f} decisions/s, mean batch {res.mean_batch_size:.1f}, "
          f"win rate {res.wins / max(res.battles, 1):.3f} ({res.wins}W/{res.losses}L/{res.ties}T) "
          f"{'policy=' + policy.name if policy_spec else 'network=' + cfg.network.kind} device={device} "
          f"concurrency={cfg.runner.concurrency} "
          f"opponent={cfg.runner.opponent}")
    print(f"[play] hidden states left: {len(agent.hidden)}, fallbacks: {agent.stats.fallbacks}, "
          f"[Invalid choice] errors: {agent.stats.invalid_choices}, [Unavailable choice] "
          f"(hidden trapping): {agent.stats.unavailable_choices}, re-decisions: {agent.stats.retries}"
          + (f", {cfg.runner.opponent}'s [Invalid choice] errors: {res.opponent_invalid_choices}"
             if res.opponent_invalid_choices is not None else ""))
    return 0


def cmd_play(args) -> int:
    cfg = load_config(args)
    if args.battles < 1:
        raise UserError("--battles must be >= 1")
    print_config(cfg)
    check_teams(cfg)
    replays = _replay_writer(args)
    code = run_async(_play(cfg, args.battles, replays, args.policy))
    if replays is not None:
        print(f"[play] {replays.written} replays in {replays.folder}")
    return code


# -- train / eval -----------------------------------------------------------------------

async def _evaluate(cfg, policy, url: str, opponent: str, n_battles: int, device, concurrency: int,
                    label: Optional[str] = None, replays=None):
    """:func:`~maple_async.tools.evaluate.evaluate` with the config's batcher, format, teams
    and battle options."""
    from .pokeenv.players import fast_kwargs
    from .teams import for_config
    from .tools.evaluate import evaluate
    return await evaluate(policy, url, opponent, n_battles, batcher_cfg=cfg.batcher, concurrency=concurrency,
                          battle_format=cfg.runner.battle_format, device=device, opponent_label=label,
                          battle_options=fast_kwargs(cfg.runner), battle_timeout_s=cfg.runner.battle_timeout_s,
                          teams=for_config(cfg), replays=replays)


async def _final_eval(cfg, loop, url: str, device) -> None:
    """The end-of-training table: printed, saved as ``eval.json`` in the run folder (the
    report draws it) and logged to TensorBoard as ``eval/<opponent>``."""
    import json

    from .inference.policy import InferencePolicy
    from .tools.evaluate import EvalTable, training_label
    policy = InferencePolicy(loop.learner.network, device, greedy=False)
    table = EvalTable()
    names = config_mod.formats(cfg.runner.battle_format)
    for fmt in names:
        one = config_mod.for_format(_eval_pool_config(cfg), fmt)
        if cfg.train.eval_teams:
            print(f"[eval] both sides draw from {one.runner.teams} (train.eval_teams)", flush=True)
        player, tag = ("agent", "") if len(names) == 1 else (f"agent [{fmt}]", f"{fmt}/")
        for opp in config_mod.parse_eval_opponents(cfg.train.eval_opponents):
            res = await _evaluate(one, policy, url, opp, cfg.train.eval_battles, device,
                                  min(cfg.runner.concurrency, 32))
            table.results.append((player, res, training_label(opp, cfg.train)))
            print(table.row(-1), flush=True)
            loop.metrics.scalars(loop.learner.updates, {f"eval/{tag}{opp}": res.win_rate})
    print("\n".join(table.summary()), flush=True)
    data = {"update": loop.learner.updates, "battles": loop.counters["battles"], **table.to_json()}
    (loop.run_dir / "eval.json").write_text(json.dumps(data, indent=2) + "\n")


def _final_eval_wanted(cfg, loop) -> bool:
    """The end-of-training evaluation, unless none is asked for or a signal stopped the run
    (Ctrl-C means now: the command that runs it later is printed instead)."""
    if not cfg.train.eval_battles:
        return False
    if loop.stop_reason.startswith("signal"):
        run_dir = Path(cfg.train.run_dir)
        pool = f" --runner.teams {cfg.train.eval_teams}" if cfg.train.eval_teams else ""
        print(f"[train] no final evaluation ({loop.stop_reason}); to run it: maple-async eval "
              f"--config {run_dir / 'config.yaml'} --checkpoint {run_dir / 'latest.pt'}{pool} "
              f"--opponents {cfg.train.eval_opponents} --battles {cfg.train.eval_battles}")
        return False
    return True


async def _train(cfg, resume: Optional[str]) -> int:
    from .run.loop import LearningLoop
    from .run.transports import make_transport
    from .showdown import showdown_for

    device = setup_process(cfg)
    loop = LearningLoop(cfg, device, resume=resume)  # a checkpoint that does not fit fails here
    if cfg.train.shards > 1 or cfg.train.backend == "ray":
        await loop.run(make_transport(cfg, device))  # every shard starts its own server
        if _final_eval_wanted(cfg, loop):
            async with showdown_for(cfg.server, runner=cfg.runner) as server:
                await _final_eval(cfg, loop, server.url, device)
    else:
        async with showdown_for(cfg.server, runner=cfg.runner) as server:
            await loop.run(make_transport(cfg, device, server))
            if _final_eval_wanted(cfg, loop):
                await _final_eval(cfg, loop, server.url, device)
    print(f"[train] done ({loop.stop_reason}); run folder {cfg.train.run_dir}")
    return 0


def cmd_train(args) -> int:
    from .learn import checkpoint as ckpt
    cfg = load_config(args)
    resume = args.resume
    if resume == "latest":
        resume = str(Path(cfg.train.run_dir) / "latest.pt")
    print_config(cfg)
    if resume or cfg.train.init:  # a checkpoint of other generations is refused before Showdown validates teams
        ckpt.load(resume or cfg.train.init, cfg.runner.battle_format)
    check_teams(cfg, eval_pool=True, many=True)
    return run_async(_train(cfg, resume))


async def _pretrain(cfg, args) -> int:
    from .showdown import showdown_for
    from .tools.pretrain import pretrain

    device = setup_process(cfg)
    async with showdown_for(cfg.server, runner=cfg.runner) as server:
        path = await pretrain(cfg, device, server.url, args.teacher, args.battles, opponent=args.opponent,
                              epochs=args.epochs, round_sides=args.round_sides, out=args.out,
                              max_minutes=args.minutes)
    conf = f" --config {args.config}" if args.config else ""
    print(f"[pretrain] continue with PPO: maple-async train{conf} --train.init {path}")
    return 0


def cmd_pretrain(args) -> int:
    from .pokeenv.players import BASELINES
    cfg = load_config(args)
    if args.teacher not in BASELINES or (args.opponent != "self" and args.opponent not in BASELINES):
        raise UserError(f"--teacher and --opponent must be one of {', '.join(BASELINES)} (--opponent also self)")
    if args.battles < 1 or args.epochs < 1 or args.round_sides < 1 or args.minutes < 0:
        raise UserError("--battles, --epochs and --round-sides must be >= 1, --minutes >= 0")
    print_config(cfg)
    check_teams(cfg)
    return run_async(_pretrain(cfg, args))


def _list(text: str) -> list[str]:
    return [o.strip() for o in text.split(",") if o.strip()]


def _eval_opponents(args) -> list[str]:
    return _list(args.opponents or args.opponent)


async def _eval(cfg, args) -> int:
    import json

    from .pokeenv.players import BASELINES
    from .showdown import showdown_for
    from .inference.outside import policy_for
    from .tools.evaluate import EvalTable, training_label

    device = setup_process(cfg)
    opponents = _eval_opponents(args)
    baselines = [o for o in opponents if o in BASELINES]
    checkpoints = list(dict.fromkeys([args.checkpoint or args.policy]
                                     + [o for o in opponents if o not in BASELINES]))
    short = {c: Path(c).name for c in checkpoints}
    if len(set(short.values())) < len(short):
        short = {c: c for c in checkpoints}
    loaded = {c: policy_for(c, device, greedy=args.greedy, battle_format=cfg.runner.battle_format)
              for c in checkpoints}
    table = EvalTable()
    quiet = args.json == "-"
    replays = _replay_writer(args)
    names = config_mod.formats(cfg.runner.battle_format)
    async with showdown_for(cfg.server, quiet=quiet, runner=cfg.runner) as server:
        # Every checkpoint against every baseline and every later checkpoint (a round robin
        # without baseline-vs-baseline games): the first checkpoint's row is the headline.
        # Several formats: each one's rows, the format named beside the player.
        for fmt in names:
            one = config_mod.for_format(cfg, fmt)
            for i, c in enumerate(checkpoints):
                policy, ckpt_cfg = loaded[c]
                for o in baselines + checkpoints[i + 1:]:
                    res = await _evaluate(one, policy, server.url, o, args.battles, device,
                                          cfg.runner.concurrency, label=short.get(o, o), replays=replays)
                    label = training_label(o, ckpt_cfg.train) if ckpt_cfg is not None else "outside policy"
                    tag = "" if len(names) == 1 else f" [{fmt}]"  # each format's players apart
                    res.opponent += tag if o not in BASELINES else ""
                    table.results.append((short[c] + tag, res, label))
                    if not quiet:
                        print(table.row(-1), flush=True)
    if args.json:
        text = json.dumps(table.to_json(), indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    if not quiet:
        print("\n".join(table.summary()))
        if replays is not None:
            print(f"[eval] {replays.written} replays in {replays.folder}")
    return 0


def eval_config(args) -> config_mod.Config:
    """eval's config; a checkpoint evaluated with no --config or --runner.battle_format plays
    its own format (and its teams, where they are here), not the default gen 9 one."""
    cfg = load_config(args)
    if args.checkpoint and args.config is None and getattr(args, "runner.battle_format", None) is None:
        from .learn import checkpoint as ckpt
        saved = config_mod.from_saved(ckpt.load(args.checkpoint)["config"]).runner
        cfg.runner.battle_format = saved.battle_format
        if getattr(args, "runner.teams", None) is None:
            cfg.runner.teams = config_mod.teams_here(saved.teams, saved.battle_format)
        cfg = config_mod.validate(cfg)
        if args.json != "-":
            print(f"[eval] {saved.battle_format}: the checkpoint's format (--runner.battle_format plays another)")
    return cfg


def cmd_eval(args) -> int:
    cfg = eval_config(args)
    if args.battles < 1:
        raise UserError("--battles must be >= 1")
    import os

    from .pokeenv.players import BASELINES
    if bool(args.checkpoint) == bool(args.policy):
        raise UserError("eval needs --checkpoint PATH or --policy module:attr (one of them)")
    for opponent in _eval_opponents(args) or [""]:
        if opponent not in BASELINES and not os.path.isfile(opponent):
            raise UserError(f"--opponents must list {', '.join(BASELINES)} or checkpoint files; "
                            f"got {opponent!r}")
    check_teams(cfg, quiet=args.json == "-", many=True)
    return run_async(_eval(cfg, args))


# -- bench ------------------------------------------------------------------------------

async def _bench(cfg, args) -> int:
    import contextlib
    import copy

    from .showdown import showdown_for
    from .server import server_for
    from .tools import bench

    device = setup_process(cfg)
    if args.env:
        from .tools import envbench
        # poke-env's own environments need a server: every set-up plays on the same one.
        async with server_for(cfg.server, quiet=True) as server:
            pgid = server.managed.pid if server.managed is not None else None
            result = await envbench.run_env_bench(
                cfg, server.url, args.seconds, args.warmup, args.repeats,
                [int(c) for c in _list(args.env_concurrency)], _list(args.env_setups),
                server_pgid=pgid, progress=bench.progress, shards=args.shards, opponent=args.env_opponent)
        if args.json != "-":
            print(envbench.env_report(result))
        return _bench_output(args, [], result)
    if args.shards > 1:
        summary = await bench.run_shards_bench(cfg, device, args.shards, args.seconds, args.warmup, args.learn)
        summary.update(network=cfg.network.kind, device=str(device), concurrency=cfg.runner.concurrency)
        if args.json != "-":
            print(bench.shards_report(summary))
        return _bench_output(args, [({}, summary)], summary)
    combos = bench.parse_sweep(args.sweep) if args.sweep else [{}]
    rows, ceilings = [], {}
    async with contextlib.AsyncExitStack() as stack:
        server, server_cfg = None, None
        for over in combos:
            c = copy.deepcopy(cfg)
            for key, raw in over.items():
                config_mod.from_dict({key.split(".")[0]: {key.split(".")[1]: config_mod.parse_override_value(raw)}}, c)
            config_mod.validate(c)
            if c.server != server_cfg:  # a sweep over server.* keys: a server per setting
                await stack.aclose()
                server, server_cfg = await stack.enter_async_context(showdown_for(c.server, quiet=True, runner=c.runner)), c.server
                ceilings = {}
            pgid = server.managed.pid if server.managed is not None else None
            with bench.throttled(pgid, args.throttle_server):
                summary, ceilings[c.runner.concurrency] = await bench.run_bench(
                    c, device, args.seconds, args.warmup, args.learn, server.url,
                    ceiling=ceilings.get(c.runner.concurrency), repeats=args.repeats, server_pgid=pgid)
            summary.update(network=c.network.kind, checkpoint=c.train.init, device=str(device),
                           concurrency=c.runner.concurrency,
                           max_wait_ms=c.batcher.max_wait_ms, wait_per_side_ms=c.batcher.wait_per_side_ms,
                           quiet_gaps=c.batcher.quiet_gaps, max_batch_size=c.batcher.max_batch_size,
                           simulators=server.managed.simulators if server.managed is not None else None,
                           transport=config_mod.transport_of(c.server),
                           throttle_server=args.throttle_server)
            rows.append((over, summary))
            if not args.sweep and args.json != "-":
                print(bench.report(summary, f"({c.network.kind}, {device}, concurrency {c.runner.concurrency}, "
                                            f"{summary['transport']} transport)"))
    if args.sweep and args.json != "-":
        print(bench.sweep_table(rows))
    return _bench_output(args, rows, rows[0][1] if not args.sweep else {"sweep": [s for _, s in rows]})


def _bench_output(args, rows: list, result: dict) -> int:
    """The JSON, then each row's errors and warnings; exit status 1 when a phase failed."""
    from .tools import bench
    if args.json == "-":
        print(bench.to_json(result))
    elif args.json:
        Path(args.json).write_text(bench.to_json(result) + "\n")
        print(f"[bench] JSON written to {args.json}")
    failed = False
    for over, summary in rows:
        where = " ".join(f"{k}={v}" for k, v in over.items())
        where = f" ({where})" if where else ""
        errors, warnings = bench.problems(summary)
        for kind, texts in (("warning", warnings), ("error", errors)):
            for text in texts:
                print(f"[bench] {kind}{where}: {text}", file=sys.stderr)
        failed = failed or bool(errors)
    return 1 if failed else 0


def cmd_bench(args) -> int:
    cfg = load_config(args)
    if args.seconds <= 0 or args.warmup < 0 or args.repeats < 1:
        raise UserError("--seconds must be > 0, --warmup >= 0 and --repeats >= 1")
    if args.shards < 1 or (args.shards > 1 and not args.env
                           and (args.sweep or args.repeats > 1 or args.throttle_server)):
        raise UserError("--shards must be >= 1, and --shards N > 1 takes no --sweep, --repeats or --throttle-server")
    if not 0 <= args.throttle_server < 1 or (args.throttle_server and cfg.server.url):
        raise UserError("--throttle-server must be in [0, 1) and needs a managed server (no --server)")
    if args.checkpoint:
        from .config import from_saved
        from .learn import checkpoint as ckpt
        cfg.network = from_saved(ckpt.load(args.checkpoint)["config"]).network
        cfg.train.init = args.checkpoint
    check_teams(cfg, quiet=args.json == "-")
    return run_async(_bench(cfg, args))


# -- report ---------------------------------------------------------------------------

async def _curve(cfg, args, run_dir: Path, points: list) -> int:
    from .learn.metrics import MetricsLog
    from .showdown import showdown_for
    from .tools import curve
    from .tools.evaluate import policy_from_checkpoint, training_label

    device = setup_process(cfg)
    opponents = _list(args.opponents)
    out = run_dir / "curve.csv"
    rows = curve.read_rows(out)
    todo = [(p, o) for p in points for o in opponents if not curve.done(rows, p.update, o, args.battles)]
    print(f"[curve] {len(points)} checkpoints x {len(opponents)} opponents, {args.battles} battles each: "
          f"{len(todo)} to play ({len(points) * len(opponents) - len(todo)} already in {out})", flush=True)
    tb = MetricsLog(run_dir, cfg.train.tensorboard, quiet=True) if todo else None
    loaded: dict = {}  # the checkpoint being played, read once for all its opponents
    try:
        async with showdown_for(cfg.server, runner=cfg.runner) as server:
            for p, o in todo:
                if p.update not in loaded:
                    loaded = {p.update: policy_from_checkpoint(str(p.path), device, greedy=args.greedy,
                                                               battle_format=cfg.runner.battle_format)}
                policy, ckpt_cfg = loaded[p.update]
                res = await _evaluate(cfg, policy, server.url, o, args.battles, device, cfg.runner.concurrency)
                label = training_label(o, ckpt_cfg.train)
                rows.append(curve.row_of(p, res, label))
                curve.append_row(out, rows[-1])
                if tb is not None:
                    tb.scalars(p.update, {f"curve/{o}": res.win_rate})
                print(f"[curve] update {p.update} ({p.minutes:.1f} min, {p.sides} sides, "
                      f"{p.decisions / 1e6:.2f}M decisions) vs {o} ({label}): "
                      f"{res.summary()}", flush=True)
    finally:
        if tb is not None:
            tb.close()
    chosen = {p.update for p in points}
    print("\n".join("[curve] " + line for line in curve.table(
        [r for r in rows if int(r["update"]) in chosen and r["opponent"] in opponents])))
    print(f"[curve] {out}; drawn by maple-async report {run_dir}")
    return 0


def cmd_curve(args) -> int:
    from .tools import curve
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a folder (give a training run folder, e.g. runs/default)")
    if args.config is None and (run_dir / "config.yaml").exists():
        args.config = str(run_dir / "config.yaml")  # the run's format, teams and battle options
    cfg = load_config(args)
    if args.battles < 1 or args.points < 1:
        raise UserError("--battles and --points must be >= 1")
    from .pokeenv.players import BASELINES
    if not _list(args.opponents):
        raise UserError("--opponents lists no opponent")
    for o in _list(args.opponents):
        if o not in BASELINES:
            raise UserError(f"--opponents must list {', '.join(BASELINES)}; got {o!r}")
    if sum(bool(a) for a in (args.minutes, args.sides, args.decisions)) > 1:
        raise UserError("give one of --minutes, --sides and --decisions")
    try:
        minutes = [float(m) for m in _list(args.minutes)] if args.minutes else None
    except ValueError:
        raise UserError(f"--minutes takes a comma list of numbers, e.g. 30,60,120; got {args.minutes!r}") from None
    try:
        sides = [int(s) for s in _list(args.sides)] if args.sides else None
    except ValueError:
        raise UserError(f"--sides takes a comma list of whole numbers, e.g. 10000,30000; got {args.sides!r}") from None
    try:
        decisions = [int(float(d)) for d in _list(args.decisions)] if args.decisions else None
    except (ValueError, OverflowError):
        raise UserError(f"--decisions takes a comma list of numbers, e.g. 1e6,2e6,6e6; "
                        f"got {args.decisions!r}") from None
    saved = curve.saved_points(run_dir)
    curve.fill_decisions(run_dir / "curve.csv", saved)  # points played before the decisions axis
    points = curve.select(saved, minutes, args.points, sides, decisions)
    check_teams(cfg)
    return run_async(_curve(cfg, args, run_dir, points))


def cmd_report(args) -> int:
    from .tools.report import write
    print(f"[report] written: {write(args.run_dir, args.out, args.by_decisions)}")
    return 0


# -- serve / ladder ---------------------------------------------------------------------

def _outside_config(args) -> config_mod.Config:
    """The checkpoint's own config (network, batcher, battle options) with this command's
    server, format, teams, concurrency and device; a default server section otherwise."""
    from .learn import checkpoint as ckpt
    if bool(args.checkpoint) == bool(args.policy):
        raise UserError("give --checkpoint PATH or --policy module:attr (one of them)")
    cfg = config_mod.from_saved(ckpt.load(args.checkpoint)["config"]) if args.checkpoint else config_mod.Config()
    cfg.server = config_mod.ServerConfig()
    if args.server:
        cfg.server.url = args.server
    if args.format and args.format != cfg.runner.battle_format:
        keep = cfg.runner.teams if cfg.runner.teams and "{format}" in cfg.runner.teams else None
        cfg.runner.battle_format, cfg.runner.teams = args.format, keep
    names = config_mod.formats(cfg.runner.battle_format)
    if len(names) == 1:  # {format} in its pool's path stands for the one format played
        cfg = config_mod.for_format(cfg, names[0])
    cfg.runner.teams = args.teams or config_mod.teams_here(cfg.runner.teams, cfg.runner.battle_format)
    cfg.runner.concurrency = args.concurrency
    cfg.runner.device = args.device
    return config_mod.validate(cfg)


async def _outside(cfg, args, label: str):
    """Log the checkpoint's agent in (managed loopback server unless --server), run the
    command, print its summary."""
    from .pokeenv.accounts import DEFAULT_LOGIN_URL, credentials_for
    from .pokeenv.players import run_id
    from .server import server_for
    from .teams import for_config
    from .inference.outside import policy_for, until_failed
    from .tools import serve as srv

    creds = credentials_for(args.server or "127.0.0.1", args.credentials, args.username or f"maple{run_id()}")
    device = setup_process(cfg)
    policy, _ = policy_for(args.checkpoint or args.policy, device, greedy=args.greedy,
                           battle_format=cfg.runner.battle_format)
    teams = for_config(cfg)
    # A real server: a ladder and challenges from people are the point of these commands.
    async with server_for(cfg.server) as server:
        session = srv.open_session(cfg, policy, server.url, creds, cfg.runner.concurrency, teams,
                                   args.replays, args.login_url or DEFAULT_LOGIN_URL, label)
        if label == "serve":
            try:
                await until_failed(srv.serve(session, args.battles, cfg.runner.battle_timeout_s), [policy])
            finally:  # Ctrl-C is how a serve without --battles ends: say what it played
                r = session.player.results
                print(f"[serve] done: {r['won']}W/{r['lost']}L/{r['tied']}T", flush=True)
        else:
            r = await until_failed(srv.ladder(session, args.battles, cfg.runner.battle_timeout_s), [policy])
            rating = (f"rating {r['rating']} on the server's {cfg.runner.battle_format} ladder "
                      f"({r['rating_start']} before the first battle)" if r["rating"] is not None
                      else "the server reported no rating (its ladder may be disabled)")
            print(f"[ladder] {creds.username}: {r['won']}W/{r['lost']}L/{r['tied']}T in "
                  f"{r['won'] + r['lost'] + r['tied']} battles; {rating}")
    if args.replays:
        print(f"[{label}] replays in {args.replays}")
    return 0


def cmd_serve(args) -> int:
    if args.battles < 0 or args.concurrency < 1:
        raise UserError("--battles must be >= 0 and --concurrency >= 1")
    cfg = _outside_config(args)
    check_teams(cfg)
    return run_async(_outside(cfg, args, "serve"))


def cmd_ladder(args) -> int:
    if args.battles < 1:
        raise UserError("--battles must be >= 1")
    cfg = _outside_config(args)
    check_teams(cfg)
    return run_async(_outside(cfg, args, "ladder"))


def _add_outside_flags(p: argparse.ArgumentParser, concurrency: int) -> None:
    from .pokeenv.accounts import PASSWORD_ENV, USERNAME_ENV
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


# -- entry point ------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="maple-async", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("server", help="install / start / stop / list managed Showdown servers")
    s.add_argument("action", choices=["install", "start", "stop", "status"])
    s.add_argument("--port", type=int, default=0, help="port (start: 0 = free port)")
    s.add_argument("--home", default=None, help="install folder (default ~/.cache/maple-async)")
    s.add_argument("--simulators", type=int, default=0,
                   help="start: simulator processes (default 0: one per core, at most 8)")
    s.set_defaults(func=cmd_server)

    pl = sub.add_parser("play", help="run battles with a network (no learning) and report throughput")
    pl.add_argument("--battles", type=int, default=200)
    pl.add_argument("--policy", default=None, metavar="MODULE:ATTR",
                    help="play an outside policy (module:attr or path/to/file.py:attr) instead of a "
                         "fresh network")
    pl.add_argument("--replays", default=None, metavar="DIR",
                    help="write each battle as a replay (HTML + protocol log) into DIR (newest 1000 kept)")
    _add_config_flags(pl)
    pl.set_defaults(func=cmd_play)

    tr = sub.add_parser("train", help="train with recurrent PPO (see config/*.yaml presets)")
    tr.add_argument("--resume", nargs="?", const="latest", default=None,
                    help="continue from a checkpoint (default: <run_dir>/latest.pt); the run's limits "
                         "(train.total_battles, total_decisions, max_minutes) count what it trained before")
    _add_config_flags(tr)
    tr.set_defaults(func=cmd_train)

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
    _add_config_flags(pt, skip=("--opponent",))
    pt.set_defaults(func=cmd_pretrain)

    ev = sub.add_parser("eval", help="win rate (95%% CI) of a checkpoint against a baseline or checkpoint")
    ev.add_argument("--checkpoint", default=None, help="the checkpoint to evaluate (or --policy)")
    ev.add_argument("--policy", default=None, metavar="MODULE:ATTR",
                    help="instead of a checkpoint: a policy trained outside (module:attr or "
                         "path/to/file.py:attr; a batch callable, see docs/env.md)")
    ev.add_argument("--opponents", default=None,
                    help="comma list of random | max_power | heuristics | checkpoint PATH: one row per "
                         "opponent (labelled held out / in training from the checkpoint's mix), ratings; "
                         "checkpoints also play each other")
    ev.add_argument("--opponent", default="random", help="one opponent (the same as --opponents X)")
    ev.add_argument("--json", default=None, help="write the results and ratings as JSON to PATH (- : stdout)")
    ev.add_argument("--battles", type=int, default=200)
    ev.add_argument("--replays", default=None, metavar="DIR",
                    help="write each battle as a replay (HTML + protocol log) into DIR (newest 1000 kept)")
    ev.add_argument("--greedy", action="store_true",
                    help="argmax actions (default: sample, as in training; greedy recurrent "
                         "policies can fall into deterministic switch loops)")
    _add_config_flags(ev, skip=("--opponent",))
    ev.set_defaults(func=cmd_eval)

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
    _add_config_flags(be)
    be.set_defaults(func=cmd_bench)

    sv = sub.add_parser("serve", help="log a checkpoint's agent in and accept challenges (a person or a bot)")
    sv.add_argument("--battles", type=int, default=0, help="stop after this many battles (default 0: never)")
    _add_outside_flags(sv, concurrency=8)
    sv.set_defaults(func=cmd_serve)

    ld = sub.add_parser("ladder", help="play rated battles on the server's ladder and print the rating")
    ld.add_argument("--battles", type=int, default=10)
    _add_outside_flags(ld, concurrency=1)
    ld.set_defaults(func=cmd_ladder)

    cu = sub.add_parser("curve", help="evaluate a run's saved checkpoints against baselines: win rate by "
                                      "training minutes, battle sides and decisions (RUN_DIR/curve.csv)")
    cu.add_argument("run_dir", help="a training run folder (train.run_dir)")
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
    _add_config_flags(cu, skip=("--opponent",))
    cu.set_defaults(func=cmd_curve)

    rp = sub.add_parser("report", help="draw a run's learning curves and evaluation table (PNG or HTML)")
    rp.add_argument("run_dir", help="a training run folder (train.run_dir)")
    rp.add_argument("--out", default=None, help="report.png (default: RUN_DIR/report.png) or report.html")
    rp.add_argument("--by-decisions", action="store_true",
                    help="only the curve by decisions trained on (maple-async curve --decisions), beside "
                         "the published curve of the same format and opponent where there is one")
    rp.set_defaults(func=cmd_report)

    return p


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
        return args.func(args)
    except UserError as e:
        print(f"maple-async: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("maple-async: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
