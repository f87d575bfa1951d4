"""What every process that plays battles or learns sets up first, and how it runs its loop."""

from __future__ import annotations

import asyncio
import gc
import random
from typing import Any

_GC_DEFAULT_THRESHOLD = gc.get_threshold()


def run_async(coro) -> Any:
    """Run ``coro`` on a uvloop event loop (asyncio's where uvloop is missing)."""
    try:
        import uvloop
        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.run(coro)


def tune_gc(young_threshold: int) -> None:
    """Fit Python's cyclic garbage collector to a battle process.

    Such a process holds a few hundred thousand long-lived objects (poke-env's data tables,
    torch, the network) and allocates short-lived ones at a high rate (messages, requests,
    orders); with Python's defaults every 700 allocations start a young collection and the
    full ones re-scan everything (docs/experiments.md#the-decision-path has the measurement). With
    ``young_threshold`` > 0 what is alive now is collected once and frozen out of later
    collections, and young collections run every ``young_threshold`` allocations. Reference
    cycles are still collected, only later. 0 restores Python's defaults. Safe to call
    again (the bench does, per phase)."""
    gc.unfreeze()
    if young_threshold <= 0:
        gc.set_threshold(*_GC_DEFAULT_THRESHOLD)
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(young_threshold, *_GC_DEFAULT_THRESHOLD[1:])


def shard_seed(seed: int, shard: int) -> int:
    """The seed of shard worker ``shard`` (a stream of its own, derived from the run's)."""
    return seed + 1000 * (shard + 1)


def setup_battle_process(cfg, seed: bool = False) -> None:
    """torch's CPU threads and the GC setting: every process that plays battles sets these;
    with ``seed``, also seeds torch, numpy and random from ``runner.seed`` (when set)."""
    import torch
    torch.set_num_threads(cfg.runner.torch_threads)
    tune_gc(cfg.runner.gc_young_threshold)
    if seed and cfg.runner.seed is not None:
        import numpy as np
        torch.manual_seed(cfg.runner.seed)
        np.random.seed(cfg.runner.seed)
        random.seed(cfg.runner.seed)


def setup_process(cfg):
    """:func:`setup_battle_process` with the seeds (``runner.seed``); returns the torch device."""
    from ..errors import UserError
    from ..inference.policy import resolve_device
    setup_battle_process(cfg, seed=True)
    try:
        return resolve_device(cfg.runner.device)
    except ValueError as e:
        raise UserError(str(e)) from None
