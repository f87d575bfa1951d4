"""sb3-contrib's MaskablePPO on maple-async battles, through the Stable-Baselines3 VecEnv face.

``make_sb3_vec_env`` turns a battle pool into an SB3 ``VecEnv`` (one env per battle slot;
self-play by default: both sides of each battle). ``MaskablePPO("MlpPolicy", venv)`` reads the
legal actions through ``env_method("action_masks")``. The face steps on the decision clock: a
step holds every battle side that has a decision (a slot that waits, on a forced switch or
between battles, is a padding step: only action 0 legal, ignored).

It trains as SB3's documentation does, in chunks: ``learn()`` for a third of the time,
sb3-contrib's ``evaluate_policy`` on the same env (which resets it: the battles in flight end),
``learn(reset_num_timesteps=False)`` again, and so on; then saves the model, loads it back and
evaluates the loaded one through ``maple_async.tools.evaluate.evaluate_policy`` against random
and max_power, as a batch callable that runs ``model.predict(obs, action_masks=masks)``.

Train 10 minutes on 2 CPU cores in three chunks, save ``runs/sb3_maskable/model.zip`` and
evaluate it over 300 battles each against random and max_power::

    .venv/bin/python examples/sb3_maskable_ppo.py --minutes 10 --chunks 3 --seed 1

Evaluate the saved model again (``policy`` loads ``$MAPLE_EXAMPLE_MODEL``, default
``runs/sb3_maskable/model.zip``; ``MAPLE_EXAMPLE_DETERMINISTIC=1`` plays its argmax)::

    MAPLE_EXAMPLE_MODEL=runs/sb3_maskable/model.zip .venv/bin/maple-async eval \\
        --policy examples/sb3_maskable_ppo.py:policy --opponents random,max_power --battles 300
"""

from __future__ import annotations

import argparse
import os
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch


class MaskablePolicy:
    """A MaskablePPO model as maple-async's batch callable ``policy(obs, masks) -> actions``."""

    def __init__(self, model=None, path=None, deterministic: bool = False):
        if model is None:
            from sb3_contrib import MaskablePPO
            path = path or os.environ.get("MAPLE_EXAMPLE_MODEL", "runs/sb3_maskable/model.zip")
            # the schedules are not needed to act (and may be pickled from __main__)
            model = MaskablePPO.load(path, device="cpu", custom_objects={
                "learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0})
        self.model = model
        self.deterministic = deterministic
        self.name = "sb3_maskable_argmax" if deterministic else "sb3_maskable"  # eval's rows say which

    def __call__(self, obs, masks):
        actions, _ = self.model.predict(obs, action_masks=masks, deterministic=self.deterministic)
        return np.asarray(actions, dtype=np.int64)


def policy():
    """``maple-async eval --policy examples/sb3_maskable_ppo.py:policy`` (``MAPLE_EXAMPLE_DETERMINISTIC=1``: argmax)."""
    torch.set_num_threads(1)
    return MaskablePolicy(deterministic=os.environ.get("MAPLE_EXAMPLE_DETERMINISTIC", "0") == "1")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0, help="wall-clock training budget (learn() time)")
    p.add_argument("--chunks", type=int, default=3, help="learn() calls, with an evaluate_policy between two")
    p.add_argument("--clock", default="decision", choices=("decision", "flush"),
                   help="the face's step: every side with a decision, or the pool's flush-rule batch")
    p.add_argument("--total-steps", type=int, default=0,
                   help="env steps to train (all slots, padding included), split over the chunks as --minutes is "
                        "(each learn() runs whole rollouts); 0: only the time limit")
    p.add_argument("--num-battles", type=int, default=32, help="battles in flight (self-play: 2 envs each)")
    p.add_argument("--opponent", default="self", help="self, random, max_power or heuristics")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="runs/sb3_maskable")
    p.add_argument("--eval-battles", type=int, default=300, help="per baseline; 0: skip")
    p.add_argument("--between-episodes", type=int, default=16,
                   help="sb3-contrib evaluate_policy episodes between two chunks (0: skip)")
    p.add_argument("--deterministic", action="store_true",
                   help="the final evaluation takes the most probable legal action (SB3 evaluate_policy's "
                        "default) instead of sampling")
    p.add_argument("--battle-format", default="gen9randombattle")
    p.add_argument("--lr", type=float, default=1e-3, help="initial learning rate (decays linearly to 5%%)")
    p.add_argument("--n-steps", type=int, default=64, help="steps per env per rollout")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--n-epochs", type=int, default=4)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--reward-hp", type=float, default=0.1)
    p.add_argument("--reward-faint", type=float, default=0.05)
    return p.parse_args()


def main(args) -> None:
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.evaluation import evaluate_policy as sb3_evaluate
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import configure

    from maple_async.env import make_sb3_vec_env
    from maple_async.tools.evaluate import evaluate_policy

    torch.set_num_threads(1)  # Showdown needs the other core
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget = args.minutes * 60.0
    trained = [0.0]  # learn() seconds so far (evaluation between chunks is not training time)
    stepped = [0]  # env steps so far, over every chunk (SB3's progress is one learn() call's)

    def lr_schedule(progress_remaining: float) -> float:
        """Linear decay to 5% over the time budget or --total-steps, whichever ends first."""
        frac = 1.0 - trained[0] / budget
        if args.total_steps:
            frac = min(frac, 1.0 - stepped[0] / args.total_steps)
        return args.lr * max(0.05, frac)

    class Progress(BaseCallback):
        """Stops at the chunk's time limit; one line per rollout (decisions, battles, win rates)."""

        def __init__(self, until: float):
            super().__init__()
            self.until = until
            self.decisions = 0
            self.sides = 0
            self.outcomes: dict[str, deque] = {}

        def _on_training_start(self) -> None:
            self.t0, self.base = time.time(), trained[0]

        def _on_step(self) -> bool:
            trained[0] = self.base + time.time() - self.t0
            stepped[0] = self.num_timesteps
            self.decisions += sum(i["is_active"] and "outcome" not in i for i in self.locals["infos"])
            for info in self.locals["infos"]:
                outcome = info.get("outcome")
                if outcome:
                    self.sides += 1
                    self.outcomes.setdefault(venv.pool.opponent_name, deque(maxlen=200)).append(
                        {"won": 1.0, "lost": 0.0}.get(outcome, 0.5))
            return trained[0] < self.until

        def _on_rollout_end(self) -> None:
            rates = " ".join(f"{o} {np.mean(v):.2f}" for o, v in self.outcomes.items())
            print(f"[sb3] env steps {self.num_timesteps} | decisions {self.decisions} | sides {self.sides} | "
                  f"{self.decisions / max(trained[0] - self.base, 1e-9):.0f} decisions/s | "
                  f"win rate (last 200) {rates} | {trained[0]:.0f}s trained", flush=True)

    venv = make_sb3_vec_env(args.battle_format, num_battles=args.num_battles, opponent=args.opponent,
                            clock=args.clock, seed=args.seed,
                            **{"reward.hp": args.reward_hp, "reward.faint": args.reward_faint})
    path = out / "model.zip"
    try:
        model = MaskablePPO("MlpPolicy", venv, learning_rate=lr_schedule, n_steps=args.n_steps,
                            batch_size=args.batch_size, n_epochs=args.n_epochs, gamma=args.gamma,
                            gae_lambda=0.95, ent_coef=args.ent_coef, clip_range=0.2,
                            policy_kwargs=dict(net_arch=dict(pi=[256, 128], vf=[256, 128])),
                            seed=args.seed, device="cpu", verbose=0)
        model.set_logger(configure(str(out / "sb3_log"), ["csv"]))  # SB3's train/ stats; no folder in /tmp per learn()
        per_chunk = -(-args.total_steps // args.chunks) if args.total_steps else 10 ** 12
        for chunk in range(args.chunks):
            # reset_num_timesteps=False: SB3 counts on, and this learn() runs per_chunk more steps
            model.learn(total_timesteps=per_chunk, callback=Progress(budget * (chunk + 1) / args.chunks),
                        reset_num_timesteps=chunk == 0)
            if chunk + 1 < args.chunks and args.between_episodes:
                t0 = time.time()
                rewards, lengths = sb3_evaluate(model, venv, n_eval_episodes=args.between_episodes,
                                                use_masking=True, return_episode_rewards=True, warn=False)
                print(f"[sb3] chunk {chunk + 1}/{args.chunks}: evaluate_policy over {len(rewards)} battle sides: "
                      f"mean reward {np.mean(rewards):+.3f}, mean length {np.mean(lengths):.1f} steps "
                      f"({time.time() - t0:.0f}s)", flush=True)
        model.save(path)
    finally:
        venv.close()
    print(f"[sb3] {model.num_timesteps} env steps in {trained[0]:.0f}s of learn(); saved {path}", flush=True)

    if args.eval_battles:
        # what a user evaluates later: the saved file
        loaded = MaskablePolicy(path=str(path), deterministic=args.deterministic)
        table = evaluate_policy(loaded, opponents="random,max_power", battles=args.eval_battles,
                                battle_format=args.battle_format,
                                seed=args.seed)
        for _, res, _ in table.results:
            lo, hi = res.ci95
            print(f"[sb3] vs {res.opponent}: {res.win_rate:.3f} (95% CI {lo:.3f}-{hi:.3f}, "
                  f"{res.battles} battles)", flush=True)


if __name__ == "__main__":
    main(parse_args())
