"""What one joint head over legal action pairs would cost, against the two per-slot steps
maple-async takes (docs/doubles.md): legal actions per slot and legal pairs per turn on
real battles, the mask work for each, and a forward pass with each head size.

    .venv/bin/python benchmarks/doubles_factorisation.py [--battles 64] [--format gen9randomdoublesbattle]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np
import torch

from maple_async import config as C
from maple_async.collect.agent import Agent
from maple_async.collect.match import play
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from maple_async.obs import doubles as dbl
from maple_async.server import server_for
from maple_async.teams import for_config


class Counting(Agent):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.rows = []  # (legal slot 1, legal slot 2 after slot 1's first legal, legal pairs, s two masks, s pairs)

    async def choose(self, battle, opponent):
        if not battle._wait and not battle.teampreview:
            turn = dbl.Turn(battle)
            t0 = time.perf_counter()
            m0 = turn.mask(0)
            a0 = int(np.flatnonzero(m0)[0]) if m0.any() else -1
            m1 = turn.mask(1, a0)
            t1 = time.perf_counter()
            pairs = dbl.mask_pairs(turn)
            t2 = time.perf_counter()
            self.rows.append((int(m0.sum()), int(m1.sum()), len(pairs), t1 - t0, t2 - t1))
        return await super().choose(battle, opponent)


def forward_ms(n_actions: int, entity_head: bool = True, batch: int = 32, reps: int = 200) -> float:
    torch.set_num_threads(1)
    net = nets.build("lstm", 128, obs_dim=dbl.OBS_DIM, n_actions=n_actions, entity_head=entity_head)
    x, h = torch.zeros(batch, dbl.OBS_DIM), net.initial_hidden(batch)
    with torch.inference_mode():
        for _ in range(20):
            net(x, h)
        t = time.perf_counter()
        for _ in range(reps):
            net(x, h)
    return (time.perf_counter() - t) / reps * 1e3


async def main(args) -> None:
    cfg = C.validate(C.load(None, {"runner.battle_format": args.format, "runner.teams": args.teams}))
    agent = Counting(InferencePolicy(nets.for_config(cfg), "cpu"), cfg.batcher)
    async with server_for(cfg.server, quiet=True) as server:
        await play(agent, server.url, args.battles, concurrency=32, battle_format=args.format,
                   teams=for_config(cfg, quiet=True))
    await agent.batcher.close()
    r = np.array(agent.rows)
    q = lambda c: f"mean {r[:, c].mean():.1f}, p50 {np.median(r[:, c]):.0f}, p95 {np.percentile(r[:, c], 95):.0f}, max {r[:, c].max():.0f}"  # noqa: E731
    print(f"{args.format}: {len(r)} turns of {args.battles} battles (self-play, untrained network)")
    print(f"legal actions, slot 1:             {q(0)}")
    print(f"legal actions, slot 2 (given 1):   {q(1)}")
    print(f"legal pairs (a joint head's mask): {q(2)} of {dbl.N_SLOT ** 2} joint actions")
    print(f"mask work per turn: two slot masks {r[:, 3].mean() * 1e6:.0f} us, every legal pair "
          f"{r[:, 4].mean() * 1e6:.0f} us")
    print(f"lstm forward, batch 32: per-slot head ({dbl.N_ACTIONS} outputs) {forward_ms(dbl.N_ACTIONS):.2f} ms "
          f"with the doubles entity head, {forward_ms(dbl.N_ACTIONS, False):.2f} ms without; joint head "
          f"({dbl.N_SLOT ** 2 + 6} outputs, linear only) {forward_ms(dbl.N_SLOT ** 2 + 6, False):.2f} ms")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--battles", type=int, default=64)
    p.add_argument("--format", default="gen9randomdoublesbattle")
    p.add_argument("--teams", default=None)
    asyncio.run(main(p.parse_args()))
