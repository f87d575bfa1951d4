#!/usr/bin/env python
"""Soak: N self-play battles on one managed server or the simulator transport; prints RSS
and table sizes every 1k.

    .venv/bin/python tests/soak.py --battles 10000 --concurrency 64 [--transport simulator]

Tables watched: per-battle hidden states, live bookkeeping, pending batcher requests,
poke-env's Player.battles (kept forever by poke-env unless dropped; we drop finished
ones after a short delay), and the websocket client's per-battle locks or the simulator
transport's battle routes.
"""

import argparse
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _venue(transport: str):
    from maple_async.server import ShowdownServer
    from maple_async.simulator import Simulators

    class Started:
        async def __aenter__(self):
            self.v = ShowdownServer() if transport == "websocket" else Simulators(2)
            await self.v.start()
            return self.v

        async def __aexit__(self, *exc):
            if transport == "websocket":
                self.v.stop()
            else:
                await self.v.close()
    return Started()


def _routes(venue, players) -> int:
    if hasattr(venue, "_owner"):  # the simulator transport
        return len(venue._owner) + sum(len(p.ps_client.roles) for p in players)
    return sum(len(p.ps_client._battle_locks) for p in players)


async def soak(n: int, concurrency: int, every: int, network: str, transport: str) -> list:
    import torch

    from maple_async.collect.agent import Agent
    from maple_async.collect.match import Match
    from maple_async.config import BatcherConfig
    from maple_async.inference.policy import InferencePolicy
    from maple_async.learn import networks as nets

    torch.set_num_threads(1)
    rows = []
    async with _venue(transport) as srv:
        agent = Agent(InferencePolicy(nets.build(network)), BatcherConfig(max_wait_ms=5))
        match = Match(srv.url, agent, agent, concurrency=concurrency, account="soak")
        p1, p2 = match.players
        task = match.start(n)
        t0, next_mark = time.perf_counter(), every
        while True:
            done = sum(p1.results.values())
            if done >= next_mark or task.done():
                row = {"battles": done, "seconds": round(time.perf_counter() - t0, 1),
                       "rss_mb": round(rss_mb(), 1), "hidden": len(agent.hidden), "live": len(agent.live),
                       "pending": agent.batcher.pending,
                       "poke_env_battles": len(p1.battles) + len(p2.battles),
                       "routes": _routes(srv, (p1, p2)),
                       "latencies_kept": len(agent.stats.latencies)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                next_mark += every
            if task.done():
                break
            await asyncio.sleep(1.0)
        await match.close(close_batchers=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--battles", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--network", default="lstm")
    ap.add_argument("--transport", default="simulator", choices=("simulator", "websocket"))
    a = ap.parse_args()
    import uvloop
    uvloop.run(soak(a.battles, a.concurrency, a.every, a.network, a.transport))
    return 0


if __name__ == "__main__":
    sys.exit(main())
