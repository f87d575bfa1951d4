"""CPU seconds of one PPO update (Learner.update) on 128 fake battle sides whose lengths
follow a real run's battles, so learner changes are compared without a server.

    .venv/bin/python benchmarks/learner_bench.py [--hidden 128] [--epochs 3] [--minibatch 16]
    PYTHONPATH=OTHER_TREE .venv/bin/python benchmarks/learner_bench.py   # another checkout

Process time (not wall time): steadier beside other work on a small shared machine."""

import argparse
import time

import numpy as np
import torch

from maple_async.config import PPOConfig
from maple_async.learn import networks as nets
from maple_async.learn.learner import Learner
from maple_async.obs import encoding as enc

# Turns of 200 battles of the 30-minute default run (docs/results.md#strength-after-30-minutes-on-2-cores), 2026-11-24;
# decisions per side are about 1.25 x turns (forced switches).
TURNS = [47,29,33,45,28,33,38,46,24,48,29,29,20,31,17,24,28,24,27,17,16,18,18,21,13,14,13,14,20,17,19,37,25,19,11,24,20,19,25,13,31,17,13,27,24,15,22,19,17,16,26,22,16,19,23,22,23,35,22,12,18,15,25,21,29,15,16,23,13,18,11,23,15,26,16,16,18,22,16,17,16,17,30,18,20,15,20,12,84,16,13,25,16,28,28,20,14,17,28,19,19,18,24,12,16,16,20,16,11,15,38,9,15,24,23,15,19,29,17,18,22,21,13,16,24,41,19,23,13,18,16,39,14,21,18,19,16,26,18,19,17,15,17,16,18,20,15,14,7,12,17,15,24,13,15,25,12,26,19,13,22,20,21,17,14,21,16,15,19,24,20,28,19,18,18,25,20,28,21,16,12,23,14,14,13,19,16,19,24,24,18,23,20,17,19,17,17,13,25,27]


def fake_side(rng, n):
    masks = rng.random((n, enc.N_ACTIONS)) < 0.4
    masks[np.arange(n), rng.integers(0, enc.N_ACTIONS, n)] = True
    return {"obs": (rng.random((n, enc.OBS_DIM)) < 0.05).astype(np.float32), "masks": masks,
            "actions": np.array([rng.choice(np.flatnonzero(m)) for m in masks]),
            "logps": np.full(n, -1.0, np.float32), "values": rng.standard_normal(n).astype(np.float32),
            "rewards": rng.standard_normal(n).astype(np.float32) * 0.1, "versions": np.zeros(n, np.int64)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="lstm")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--minibatch", type=int, default=16)
    ap.add_argument("--sides", type=int, default=128)
    ap.add_argument("--updates", type=int, default=6)
    ap.add_argument("--profile", action="store_true",
                    help="one more update under torch's profiler and flop counter: time by op, FLOP/s")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    lengths = [int(t * 1.25) + 1 for t in TURNS]
    batches = [[fake_side(rng, lengths[rng.integers(len(lengths))]) for _ in range(args.sides)]
               for _ in range(3)]
    learner = Learner(nets.build(args.network, hidden_size=args.hidden),
                      PPOConfig(lr=5e-4, epochs=args.epochs, minibatch_sequences=args.minibatch))
    learner.update(batches[0])  # warm-up
    cpu = []
    for i in range(args.updates):
        t = time.process_time()
        learner.update(batches[i % len(batches)])
        cpu.append(time.process_time() - t)
    steps = [sum(len(s["actions"]) for s in b) for b in batches]
    print(f"CPU s per update: median {sorted(cpu)[len(cpu) // 2]:.2f} "
          f"({', '.join(f'{c:.2f}' for c in cpu)}); real steps per update {steps}")
    if args.profile:
        profile(learner, batches[0], sorted(cpu)[len(cpu) // 2])


def profile(learner: Learner, batch: list, cpu_s: float) -> None:
    """Where an update's CPU goes, by op; the flop counter leaves out torch.lstm."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as fc:
        learner.update(batch)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        learner.update(batch)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=40))
    flops = fc.get_total_flops()
    print(f"{flops / 1e9:.1f} GFLOP per update without the LSTM: {flops / cpu_s / 1e9:.1f} GFLOP/s at the median CPU time")


if __name__ == "__main__":
    main()
