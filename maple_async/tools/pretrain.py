"""``maple-async pretrain``: a warm start by behaviour cloning.

A teacher (a poke-env baseline) plays battles through the same runner as training, on one
event loop; an :class:`~maple_async.collect.agent.Agent` records each of its decisions
with our observation, mask and reward. Every ``round_sides`` finished battle sides the
network is fitted to them (:meth:`~maple_async.learn.learner.Learner.clone`: the
teacher's actions, and the discounted return for the value head) while the next
battles are played. The result is a checkpoint that ``train --train.init PATH`` starts PPO
from.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

from ..collect.agent import Agent
from ..collect.match import Match, Teacher
from ..config import Config
from ..inference.policy import InferencePolicy
from ..learn import checkpoint as ckpt
from ..learn import networks as nets
from ..learn.learner import Learner
from ..pokeenv.players import fast_kwargs
from ..errors import UserError
from ..obs import games
from ..teams import for_config
from .progress import Progress


async def pretrain(cfg: Config, device, url: str, teacher: str, n_battles: int, *, opponent: str = "self",
                   epochs: int = 2, round_sides: int = 256, out: Optional[Path] = None,
                   max_minutes: float = 0.0, quiet: bool = False) -> Path:
    """Clone ``teacher`` over ``n_battles`` battles against ``opponent`` (``self``: the
    teacher against itself, both sides recorded), or until ``max_minutes`` (battles still
    running then are dropped); returns the checkpoint's path."""
    if games.is_doubles_format(cfg.runner.battle_format):
        raise UserError(f"pretrain clones singles teachers; {cfg.runner.battle_format} is doubles "
                        f"(train it from scratch: maple-async train)")
    progress = Progress("pretrain", n_battles, seconds=60 * max_minutes)

    def say(message: str) -> None:
        if not quiet:
            progress.clear()
            print(message, flush=True)

    learner = Learner(nets.for_config(cfg), cfg.ppo, device)
    inbox: list = []
    arrived = asyncio.Event()

    def on_trajectory(traj) -> None:
        if len(traj):
            inbox.append(traj)
            if len(inbox) >= round_sides:
                arrived.set()

    # The agent only records: its network is never asked (the teacher decides).
    agent = Agent(InferencePolicy(nets.for_config(cfg), "cpu"), cfg.batcher, reward_cfg=cfg.reward,
                  record=True, on_trajectory=on_trajectory, name="teacher", gamma=cfg.ppo.gamma)
    me = Teacher(teacher, agent)
    other = me if opponent == "self" else opponent
    match = Match(url, me, other, concurrency=cfg.runner.concurrency, battle_format=cfg.runner.battle_format,
                  battle_options=fast_kwargs(cfg.runner), battle_timeout_s=cfg.runner.battle_timeout_s,
                  account="bc", labels=(opponent, teacher), teams=for_config(cfg, quiet=True))
    t0 = time.perf_counter()
    task = match.start(n_battles)
    progress.follow(match.results, f"{teacher} vs {opponent}", win_rate=opponent != "self")
    if not quiet:
        progress.start()
    rounds, sides, steps, last = 0, 0, 0, {}
    try:
        while True:
            out_of_time = bool(max_minutes) and time.perf_counter() - t0 >= 60 * max_minutes
            if out_of_time and not task.done():
                say(f"[pretrain] {max_minutes:g} minutes: no new battles")
                match.halt()  # the battles still running are abandoned, never recorded
            done = task.done()
            if not done and len(inbox) < round_sides:
                arrived.clear()
                left = 60 * max_minutes - (time.perf_counter() - t0) if max_minutes else None
                waiter = asyncio.ensure_future(arrived.wait())
                await asyncio.wait([task, waiter], timeout=left, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                continue
            batch, inbox[:] = list(inbox), []
            if batch:
                last = await asyncio.to_thread(learner.clone, batch, epochs)
                rounds += 1
                sides += len(batch)
                steps += last["steps"]
                say(f"[pretrain] round {rounds} | sides {sides} ({sides / (time.perf_counter() - t0):.1f}/s) | "
                    f"steps {steps} | nll {last['nll']:.3f} | teacher's action {last['accuracy']:.1%} "
                    f"(in sample) | v {last['v_loss']:.3f} | fit {last['seconds']:.1f}s")
            if done and not inbox:
                if not task.cancelled():
                    task.result()  # a failed match raises here
                break
    finally:
        progress.stop()
        await match.close(close_batchers=True)
    seconds = time.perf_counter() - t0
    path = Path(out) if out else Path(cfg.train.run_dir) / "pretrained.pt"
    info = {"teacher": teacher, "opponent": opponent, "battle_sides": sides, "steps": steps, "rounds": rounds,
            "epochs": epochs, "seconds": seconds, "last": last}
    saved = cfg.to_dict()  # what eval's labels read: cloned from the teacher, against its opponent
    saved["train"].update(teacher=teacher, opponents=f"{opponent}:1.0")
    ckpt.save(path, {"config": saved, "learner": learner.state_dict(),
                     "counters": {"battles": 0, "decisions": 0, "version": 0, "seconds": 0.0},
                     "league": [], "pretrain": info})
    unrecorded = agent.stats.fallbacks
    say(f"[pretrain] {sides} battle sides ({steps} decisions, {unrecorded} without an action index) in "
        f"{seconds:.0f}s; checkpoint {path}")
    return path


async def run_pretrain(cfg: Config, teacher: str, n_battles: int, **options) -> Path:
    """:func:`pretrain` on a server of the config's (managed unless one is named)."""
    from ..run.process import setup_process
    from ..showdown import showdown_for
    device = setup_process(cfg)
    async with showdown_for(cfg.server, runner=cfg.runner) as server:
        return await pretrain(cfg, device, server.url, teacher, n_battles, **options)
