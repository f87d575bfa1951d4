"""Where the CPU of a battle goes, on each transport: Showdown's simulator processes, its other
processes (main, sockets, team validator, ...), and this process, per battle and per decision.

    .venv/bin/python benchmarks/transport_split.py [--config default] [--checkpoint A.pt]
        [--seconds 30] [--warmup 10] [--repeats 2]

maple-async self-play (one agent, both sides) at runner.concurrency, a window per transport
per round, alternating which goes first. Prints one JSON line per window and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from maple_async import config as config_mod  # noqa: E402
from maple_async.collect.agent import Agent  # noqa: E402
from maple_async.collect.match import Match  # noqa: E402
from maple_async.pokeenv.players import fast_kwargs  # noqa: E402
from maple_async.run.process import run_async, setup_process  # noqa: E402
from maple_async.nodeproc import group_processes  # noqa: E402
from maple_async.showdown import showdown_for  # noqa: E402
from maple_async.teams import for_config  # noqa: E402
from maple_async.tools.bench import bench_policy  # noqa: E402

def roles(pgids) -> dict:
    """CPU seconds by role of the live processes in these process groups."""
    out = {"simulator": 0.0, "server_other": 0.0}
    for _pid, cmd, cpu in group_processes(pgids) or ():
        # room-battle.js: the server's simulator processes; simhub.js: the simulator transport's
        sim = b"room-battle.js" in cmd or b"simhub.js" in cmd
        out["simulator" if sim else "server_other"] += cpu
    return out


async def window(cfg, device, seconds: float, warmup: float) -> dict:
    async with showdown_for(cfg.server, quiet=True, runner=cfg.runner) as server:
        pgids = server.managed.pid
        agent = Agent(bench_policy(cfg, device), cfg.batcher, reward_cfg=cfg.reward)
        match = Match(server.url, agent, agent, concurrency=cfg.runner.concurrency, account="split",
                      battle_format=cfg.runner.battle_format, battle_options=fast_kwargs(cfg.runner),
                      teams=for_config(cfg))
        match.start(10 ** 7)
        try:
            await asyncio.sleep(warmup)

            def snap():
                r = match.results
                return dict(roles(pgids), ours=time.process_time(), t=time.perf_counter(),
                            battles=r["won"] + r["lost"] + r["tied"], decisions=agent.stats.decisions)
            a = snap()
            await asyncio.sleep(seconds)
            b = snap()
        finally:
            await match.close(close_batchers=True)
    d = {k: b[k] - a[k] for k in a}
    return {"transport": cfg.server.transport, "seconds": d["t"], "battles": d["battles"],
            "decisions": d["decisions"], "simulator_s": d["simulator"], "server_other_s": d["server_other"],
            "ours_s": d["ours"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="default")
    ap.add_argument("--checkpoint")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    cfg = config_mod.load(args.config)
    if args.checkpoint:
        cfg.train.init = args.checkpoint
    device = setup_process(cfg)
    rows = []
    for i in range(args.repeats):
        order = ("websocket", "simulator") if i % 2 == 0 else ("simulator", "websocket")
        for transport in order:
            cfg.server.transport = transport
            row = run_async(window(cfg, device, args.seconds, args.warmup))
            row["round"] = i + 1
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| transport | battles/s | decisions/s | simulator ms/battle, µs/decision | other server ms/battle, "
          "µs/decision | this process ms/battle, µs/decision | machine µs/decision |")
    print("|---|---|---|---|---|---|---|")
    for transport in ("websocket", "simulator"):
        rs = [r for r in rows if r["transport"] == transport]
        s, b, d = (sum(r[k] for r in rs) for k in ("seconds", "battles", "decisions"))
        cells = []
        for k in ("simulator_s", "server_other_s", "ours_s"):
            c = sum(r[k] for r in rs)
            cells.append(f"{1e3 * c / b:.1f}, {1e6 * c / d:.0f}")
        machine = sum(r[k] for r in rs for k in ("simulator_s", "server_other_s", "ours_s"))
        print(f"| {transport} | {b / s:.2f} | {d / s:.0f} | {' | '.join(cells)} | {1e6 * machine / d:.0f} |")


if __name__ == "__main__":
    main()
