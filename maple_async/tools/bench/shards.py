"""Machine scale, ``bench --shards N``: N processes, each with its own server, measured in
step; and the training run's loop with N shards."""

from __future__ import annotations

import asyncio
import time

from ...teams import for_config
from .phases import _training_cfg, measure_ceiling, measure_runner
from .output import progress
from .stats import Window, ratio, summarise


def _shard_main(conn, shard: int, cfg_dict: dict, seconds: float, warmup_s: float, barrier) -> None:
    """One shard of the machine-scale bench, in its own process with its own server: its
    figures, or its error, go to the parent over its pipe."""
    from ... import procs
    from ...config import from_saved
    from ...run.process import run_async, setup_process
    if procs.enter_worker() is None:
        return
    try:
        cfg = from_saved(cfg_dict)
        out = run_async(_shard_phases(cfg, setup_process(cfg), seconds, warmup_s, barrier))
    except BaseException:  # the parent reports it; a broken barrier frees the others
        barrier.abort()
        out = procs.Failed.now(shard)
    conn.send(out)


async def _shard_phases(cfg, device, seconds: float, warmup_s: float, barrier) -> dict:
    from ...showdown import showdown_for
    async with showdown_for(cfg.server, quiet=True, runner=cfg.runner) as server:
        pgid = server.managed.pid if server.managed is not None else None
        await asyncio.to_thread(barrier.wait)  # every shard's server is up
        ceiling = await measure_ceiling(server.url, cfg.runner.concurrency, seconds, warmup_s,
                                        cfg.runner.battle_format, pgid, for_config(cfg))
        await asyncio.to_thread(barrier.wait)
        runner = await measure_runner(server.url, cfg, device, seconds, warmup_s, server_pgid=pgid)
    return {"ceiling": ceiling, "runner": runner}


async def _measure_sharded_learning(cfg, device, shards: int, seconds: float, warmup_s: float
                                    ) -> tuple[Window, int]:
    """The training run's loop with ``shards`` worker processes, self-play: a window over the
    shards' counters (battle sides / 2 = battles), and how many shards ran."""
    from ...run.loop import LearningLoop
    from ...run.transports import ProcessTransport
    with _training_cfg(cfg) as c:
        c.train.shards = shards
        loop = LearningLoop(c, device, quiet=True, handle_signals=False)
        tp = ProcessTransport(c, quiet=True)
        task = asyncio.get_running_loop().create_task(loop.run(tp))

        def snap() -> dict:
            tot = {k: sum(sh.stats.get(k) or 0 for sh in tp.shards)
                   for k in ("battles", "decisions", "cpu_s", "server_cpu_s", "batches", "bdec")}
            return {**tot, "learner_cpu_s": time.process_time(), "t": time.perf_counter()}
        try:
            t0 = time.perf_counter()
            while snap()["battles"] < 2 * c.runner.concurrency * len(tp.shards or [1]) \
                    and time.perf_counter() - t0 < 120 + warmup_s and not task.done():
                await asyncio.sleep(0.5)
            await asyncio.sleep(warmup_s)
            s0 = snap()
            await asyncio.sleep(seconds)
            s1 = snap()
        finally:
            loop.request_stop("bench window over")
            await task
    d = {k: s1[k] - s0[k] for k in s0}
    return Window(seconds=d["t"], battles=d["battles"] // 2, decisions=d["decisions"],
                  cpu_s=d["cpu_s"] + d["learner_cpu_s"], server_cpu_s=d["server_cpu_s"],
                  batches=d["batches"], batch_sizes=[d["bdec"] / d["batches"]] if d["batches"] else []
                  ), len(tp.shards)


async def run_shards_bench(cfg, device, shards: int, seconds: float, warmup_s: float,
                           learn: bool) -> dict:
    """``shards`` processes, each with its own server, measure the ceiling (RandomPlayer
    pairs) in step, then maple-async self-play in step; with ``learn``, the training run's
    loop with that many shards. Totals are the machine's; ``per_shard`` lists each shard's."""
    from ... import procs
    from ...server import cores, resolve_simulators
    barrier = procs.CTX.Barrier(shards)
    cfg_dict = cfg.to_dict()
    cfg_dict["server"]["simulators"] = resolve_simulators(cfg.server.simulators, shards)
    progress(f"{shards} shards, each with its own server: ceiling, then maple-async self-play "
             f"(concurrency {cfg.runner.concurrency} each), {seconds:.0f}s windows")
    workers = [procs.spawn(_shard_main, (i, cfg_dict, seconds, warmup_s, barrier), name=f"maple-bench-shard-{i}",
                           duplex=False) for i in range(shards)]
    try:
        limit = 2 * (seconds + warmup_s + 120) + cfg.server.start_timeout_s
        per = await asyncio.to_thread(procs.replies, [conn for _, conn in workers], limit)
    except BaseException:
        procs.stop_all([p for p, _ in workers], timeout=0)  # its shards leave Ctrl-C to it
        raise
    procs.stop_all([p for p, _ in workers], timeout=30)
    failed = [r for r in per if isinstance(r, procs.Failed)]
    if failed:
        raise RuntimeError("bench shard(s) failed: " + "; ".join(f"{r.who}: {r.last_line}" for r in failed)
                           + "".join(f"\n{r.traceback}" for r in failed))
    n_cores = cores()
    out = summarise(Window.side_by_side([r["ceiling"] for r in per]),
                    Window.side_by_side([r["runner"] for r in per]), cores=n_cores)
    out["shards"] = shards
    out["per_shard"] = [summarise(r["ceiling"], r["runner"], cores=max(n_cores // shards, 1)) for r in per]
    runner_cpu = sum(r["runner"].cpu_s for r in per)
    out["cpu_split_us_per_decision"] = {
        "showdown": out["server_cpu_us_per_decision"],
        "shard_processes": 1e6 * runner_cpu / max(out["decisions_per_s"] * out["window_s"], 1)}
    if learn:
        progress(f"the training loop with {shards} shards, learning")
        lw, out["learn_shards"] = await _measure_sharded_learning(cfg, device, shards, seconds, warmup_s)
        out["learn_battles_per_s"] = lw.battles_per_s
        out["learn_ratio"] = ratio(lw.battles_per_s, out["ceiling_battles_per_s"])
        out["learn_decisions_per_s"] = lw.decisions_per_s
        out["learn_cpu_us_per_decision"] = {"showdown": lw.us_per_decision(lw.server_cpu_s),
                                            "shard_processes_and_learner": lw.us_per_decision(lw.cpu_s)}
    return out
