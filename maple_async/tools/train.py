"""The ``train`` command's run: the learning loop on its transport, then the end-of-training
evaluation (printed, saved as ``eval.json`` and logged to TensorBoard)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from .. import config as config_mod
from ..opponents import parse_eval_opponents, training_label
from ..run.process import setup_process
from .evaluate import EvalTable, evaluate_config


async def run_train(cfg, resume: Optional[str]) -> int:
    from ..run.loop import LearningLoop
    from ..run.transports import make_transport
    from ..showdown import showdown_for

    device = setup_process(cfg)
    loop = LearningLoop(cfg, device, resume=resume)  # a checkpoint that does not fit fails here
    if cfg.train.shards > 1 or cfg.train.backend == "ray":
        await loop.run(make_transport(cfg))  # every shard starts its own server
        if final_eval_wanted(cfg, loop):
            async with showdown_for(cfg.server, runner=cfg.runner) as server:
                await final_eval(cfg, loop, server.url, device)
    else:
        async with showdown_for(cfg.server, runner=cfg.runner) as server:
            await loop.run(make_transport(cfg, server))
            if final_eval_wanted(cfg, loop):
                await final_eval(cfg, loop, server.url, device)
    print(f"[train] done ({loop.stop_reason}); run folder {cfg.train.run_dir}")
    return 0


async def final_eval(cfg, loop, url: str, device) -> None:
    """The end-of-training table: printed, saved as ``eval.json`` in the run folder (the
    report draws it) and logged to TensorBoard as ``eval/<opponent>``."""
    from ..inference.policy import InferencePolicy
    policy = InferencePolicy(loop.learner.network, device, greedy=False)
    table = EvalTable()
    names = config_mod.formats(cfg.runner.battle_format)
    for fmt in names:
        one = config_mod.for_format(config_mod.eval_pool(cfg), fmt)
        if cfg.train.eval_teams:
            print(f"[eval] both sides draw from {one.runner.teams} (train.eval_teams)", flush=True)
        player, tag = ("agent", "") if len(names) == 1 else (f"agent [{fmt}]", f"{fmt}/")
        for opp in parse_eval_opponents(cfg.train.eval_opponents):
            res = await evaluate_config(one, policy, url, opp, cfg.train.eval_battles,
                                        min(cfg.runner.concurrency, 32))
            table.results.append((player, res, training_label(opp, cfg.train)))
            print(table.row(-1), flush=True)
            loop.metrics.scalars(loop.learner.updates, {f"eval/{tag}{opp}": res.win_rate})
    print("\n".join(table.summary()), flush=True)
    data = {"update": loop.learner.updates, "battles": loop.counters["battles"], **table.to_json()}
    (loop.run_dir / "eval.json").write_text(json.dumps(data, indent=2) + "\n")


def final_eval_wanted(cfg, loop) -> bool:
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
