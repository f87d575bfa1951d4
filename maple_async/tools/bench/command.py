"""The ``bench`` command's run: one measurement per step of a config sweep (a server per
``server.*`` setting), or the machine-scale and battle-pool benches, then the JSON and each
row's errors and warnings.

``opts`` is the command's flags: ``seconds``, ``warmup``, ``repeats``, ``learn``, ``shards``,
``throttle_server``, ``sweep``, ``json``, and for the pool bench ``env``,
``env_concurrency``, ``env_setups``, ``env_opponent``.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from pathlib import Path

from ... import config as config_mod
from ...opponents import split
from ...run.process import setup_process
from .env_bench import run_env_bench
from .machine import throttled
from .output import env_report, problems, progress, report, shards_report, sweep_table, to_json
from .phases import run_bench
from .shards import run_shards_bench
from .sweep import parse_sweep


def with_checkpoint(cfg, path: str):
    """``cfg`` playing (and, with --learn, learning from) a checkpoint's network and weights."""
    from ...learn import checkpoint as ckpt
    cfg.network = ckpt.load_config(path).network
    cfg.train.init = path
    return cfg


def sweep_step(cfg, over: dict):
    """A copy of ``cfg`` with one step's ``section.key=value`` settings, validated."""
    c = copy.deepcopy(cfg)
    for key, raw in over.items():
        parts = key.split(".")
        config_mod.from_dict({parts[0]: {parts[1]: config_mod.parse_override_value(raw)}}, c)
    return config_mod.validate(c)


async def run_command(cfg, opts) -> int:
    """The bench ``opts`` ask for; the exit status (1 when a phase failed)."""
    device = setup_process(cfg)
    if opts.env:
        return await _env_bench(cfg, opts)
    if opts.shards > 1:
        summary = await run_shards_bench(cfg, device, opts.shards, opts.seconds, opts.warmup, opts.learn)
        summary.update(network=cfg.network.kind, device=str(device), concurrency=cfg.runner.concurrency)
        if opts.json != "-":
            print(shards_report(summary))
        return output(opts, [({}, summary)], summary)
    from ...showdown import showdown_for
    combos = parse_sweep(opts.sweep) if opts.sweep else [{}]
    rows, ceilings = [], {}
    async with contextlib.AsyncExitStack() as stack:
        server, server_cfg = None, None
        for over in combos:
            c = sweep_step(cfg, over)
            if c.server != server_cfg:  # a sweep over server.* keys: a server per setting
                await stack.aclose()
                server, server_cfg = await stack.enter_async_context(showdown_for(c.server, quiet=True, runner=c.runner)), c.server
                ceilings = {}
            pgid = server.managed.pid if server.managed is not None else None
            with throttled(pgid, opts.throttle_server):
                summary, ceilings[c.runner.concurrency] = await run_bench(
                    c, device, opts.seconds, opts.warmup, opts.learn, server.url,
                    ceiling=ceilings.get(c.runner.concurrency), repeats=opts.repeats, server_pgid=pgid)
            summary.update(network=c.network.kind, checkpoint=c.train.init, device=str(device),
                           concurrency=c.runner.concurrency,
                           max_wait_ms=c.batcher.max_wait_ms, wait_per_side_ms=c.batcher.wait_per_side_ms,
                           quiet_gaps=c.batcher.quiet_gaps, max_batch_size=c.batcher.max_batch_size,
                           simulators=server.managed.simulators if server.managed is not None else None,
                           transport=config_mod.transport_of(c.server),
                           throttle_server=opts.throttle_server)
            rows.append((over, summary))
            if not opts.sweep and opts.json != "-":
                print(report(summary, f"({c.network.kind}, {device}, concurrency {c.runner.concurrency}, "
                                            f"{summary['transport']} transport)"))
    if opts.sweep and opts.json != "-":
        print(sweep_table(rows))
    return output(opts, rows, rows[0][1] if not opts.sweep else {"sweep": [s for _, s in rows]})


async def _env_bench(cfg, opts) -> int:
    from ...server import server_for
    # poke-env's own environments need a server: every set-up plays on the same one.
    async with server_for(cfg.server, quiet=True) as server:
        pgid = server.managed.pid if server.managed is not None else None
        result = await run_env_bench(
            cfg, server.url, opts.seconds, opts.warmup, opts.repeats,
            [int(c) for c in split(opts.env_concurrency)], split(opts.env_setups),
            server_pgid=pgid, progress=progress, shards=opts.shards, opponent=opts.env_opponent)
    if opts.json != "-":
        print(env_report(result))
    return output(opts, [], result)


def output(opts, rows: list, result: dict) -> int:
    """The JSON, then each row's errors and warnings; exit status 1 when a phase failed."""
    if opts.json == "-":
        print(to_json(result))
    elif opts.json:
        Path(opts.json).write_text(to_json(result) + "\n")
        print(f"[bench] JSON written to {opts.json}")
    failed = False
    for over, summary in rows:
        where = " ".join(f"{k}={v}" for k, v in over.items())
        where = f" ({where})" if where else ""
        errors, warnings = problems(summary)
        for kind, texts in (("warning", warnings), ("error", errors)):
            for text in texts:
                print(f"[bench] {kind}{where}: {text}", file=sys.stderr)
        failed = failed or bool(errors)
    return 1 if failed else 0
