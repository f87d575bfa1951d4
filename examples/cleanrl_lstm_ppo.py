"""Recurrent PPO (LSTM) in CleanRL's single-file style, on maple-async's asynchronous
battle pool (``make_pool``: ``recv`` / ``send``), not its gym face.

Modelled on CleanRL's ``ppo_atari_lstm.py``: the arguments at the top, an ``Agent`` with
``get_states`` / ``get_action_and_value``, rollout storage, GAE, and the loss terms by the
paper's names (advantages, returns, ratio, clipfrac, approx_kl). What the asynchronous pool
changes:

- Slots come back from ``recv`` whenever their side has a decision to make, so the rollout
  is kept per slot: each slot's steps in order, its LSTM state reset when
  ``info["elapsed_step"] == 0`` (a new battle). The reward a record carries is that of the
  slot's previous action (a ``retry`` step replaces the slot's last step, which Showdown
  rejected: that step is dropped and its LSTM state restored); a terminal record closes the slot's trajectory (a truncated one,
  an abandoned battle, is dropped) and the action sent for it only frees the slot.
- An update trains on whole finished battles (each battle side a sequence from a zero LSTM
  state), once they hold ``--steps-per-update`` decisions; battles in flight go on meanwhile
  and their stored log-probabilities stay those of the policy that acted. Invalid actions
  are masked with the mask stored per step, in the update exactly as at collection.
- Self-play by default: both sides of every battle are the learner. ``--opponent`` also takes
  a baseline or a mix, e.g. ``self:0.5,max_power:0.5`` (one pool per entry, sharing one
  Showdown server; the weights split ``--num-battles``).

A cheap CleanRL-style detail: besides the plain linear policy head, each move action is
scored from its own move block (one small scorer shared by the four move slots and their
terastallised twins) and each switch / team-preview pick from its Pokemon block (one scorer
shared by the six), so what the network learns about a move (its damage estimate, a KO)
holds in every slot.

Train 10 minutes on 2 CPU cores, save ``runs/cleanrl_lstm/agent.pt`` and evaluate it over 300
battles each against random and max_power::

    .venv/bin/python examples/cleanrl_lstm_ppo.py --minutes 10 --seed 1

Evaluate the saved weights again (``policy`` loads ``$MAPLE_EXAMPLE_WEIGHTS``, default
``runs/cleanrl_lstm/agent.pt``)::

    MAPLE_EXAMPLE_WEIGHTS=runs/cleanrl_lstm/agent.pt .venv/bin/maple-async eval \\
        --policy examples/cleanrl_lstm_ppo.py:policy --opponents random,max_power --battles 300
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

from maple_async.obs import encoding as enc  # the observation's layout (offsets of its blocks)
from maple_async.obs import actions as act  # the action numbering

OBS_DIM, N_ACTIONS = enc.OBS_DIM, act.N_ACTIONS


@dataclass
class Args:
    seed: int = 1
    """seed of the experiment (torch, numpy, the pool's team draws)"""
    minutes: float = 10.0
    """wall-clock training budget"""
    max_updates: int = 0
    """stop after this many updates (0: only the time limit; for CI)"""
    num_battles: int = 64
    """battles in flight (self-play: two learner slots each)"""
    opponent: str = "self"
    """self, random, max_power, heuristics, or a mix such as self:0.5,max_power:0.5"""
    out: str = "runs/cleanrl_lstm"
    """folder of agent.pt"""
    eval_battles: int = 300
    """battles per baseline (random, max_power) in the final evaluation; 0: skip"""
    battle_format: str = "gen9randombattle"
    """the Showdown format"""

    # Algorithm specific arguments
    learning_rate: float = 5e-4
    """the learning rate of the optimizer"""
    anneal_lr: bool = True
    """linear learning-rate decay over the budget (to 5%)"""
    steps_per_update: int = 3072
    """decisions (in finished battles) per update"""
    gamma: float = 0.99
    """the discount factor gamma (per decision)"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches (of whole battles) per epoch"""
    update_epochs: int = 3
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """whether or not to use a clipped loss for the value function"""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float = 0.0
    """the target KL divergence threshold (0: none)"""
    reward_hp: float = 0.1
    """shaped reward per unit of (own HP fractions - opponent's) change"""
    reward_faint: float = 0.05
    """shaped reward per faint (opponent's +, own -)"""
    embed_dim: int = 256
    """width of the observation encoder (Linear + ReLU)"""
    lstm_dim: int = 128
    """LSTM state width (h and c each)"""
    entity_scorer: bool = True
    """score move / switch actions from their own blocks with shared scorers"""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            parser.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=f.default,
                                metavar="BOOL")
        else:
            kind = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
            parser.add_argument(flag, type=kind, default=f.default)
    return Args(**vars(parser.parse_args()))


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class EntityScorer(nn.Module):
    """Per-action logits from the action's own block: switch i / pick i from own Pokemon
    block i, move j (and move j + tera) from move block j; actions 10-21 (never legal in
    gen9) get 0."""

    def __init__(self, d: int = 32):
        super().__init__()
        self.poke = nn.Sequential(layer_init(nn.Linear(enc.POKE_DIM, d)), nn.ReLU(), layer_init(nn.Linear(d, 1), 0.01))
        self.move = nn.Sequential(layer_init(nn.Linear(enc.MOVE_DIM, d)), nn.ReLU(), layer_init(nn.Linear(d, 1), 0.01))

    def forward(self, x):
        own = x[:, enc.OWN_TEAM:enc.OPP_TEAM].reshape(-1, 6, enc.POKE_DIM)
        moves = x[:, enc.MOVES:enc.FIELD].reshape(-1, 4, enc.MOVE_DIM)
        s = self.poke(own).squeeze(-1)
        m = self.move(moves).squeeze(-1)
        return torch.cat([s, m, s.new_zeros(len(x), 12), m, s], dim=1)


class Agent(nn.Module):
    def __init__(self, embed_dim: int = 256, lstm_dim: int = 128, entity_scorer: bool = True):
        super().__init__()
        self.lstm_dim = lstm_dim
        self.network = nn.Sequential(layer_init(nn.Linear(OBS_DIM, embed_dim)), nn.ReLU())
        self.lstm = nn.LSTM(embed_dim, lstm_dim, batch_first=True)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0)
            elif "weight" in name:
                nn.init.orthogonal_(param, 1.0)
        self.actor = layer_init(nn.Linear(lstm_dim, N_ACTIONS), std=0.01)
        self.critic = layer_init(nn.Linear(lstm_dim, 1), std=1)
        self.scorer = EntityScorer() if entity_scorer else None

    def heads(self, x, hidden):
        logits = self.actor(hidden)
        if self.scorer is not None:
            logits = logits + self.scorer(x)
        return logits, self.critic(hidden).squeeze(-1)

    def step(self, x, lstm_state):
        """One decision for a batch of slots: x [B, OBS], lstm_state (h, c) each [1, B, H]."""
        y, lstm_state = self.lstm(self.network(x).unsqueeze(1), lstm_state)
        logits, value = self.heads(x, y[:, 0])
        return logits, value, lstm_state

    def get_states(self, x, lengths):
        """The masked sequence unroll: x [n, OBS] holds the real steps of len(lengths)
        sequences, back to back; each starts from a zero state (a battle's start), padding
        after a sequence's end is never computed (packed sequences). Returns [n, H]."""
        feats = self.network(x)
        seqs = torch.split(feats, lengths.tolist())
        packed = nn.utils.rnn.pack_sequence(seqs, enforce_sorted=False)
        out, _ = self.lstm(packed)
        padded, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        valid = torch.arange(padded.shape[1])[None, :] < lengths[:, None]
        return padded[valid]  # row-major over (sequence, time): the order of x

    def get_action_and_value(self, x, lengths, masks, actions):
        hidden = self.get_states(x, lengths)
        logits, value = self.heads(x, hidden)
        probs = Categorical(logits=torch.where(masks, logits, torch.tensor(-1e8)))
        return actions, probs.log_prob(actions), probs.entropy(), value


def sample(logits, masks, greedy=False):
    masked = torch.where(masks, logits, torch.tensor(-1e8))
    if greedy:
        return masked.argmax(-1), None
    probs = Categorical(logits=masked)
    actions = probs.sample()
    return actions, probs.log_prob(actions)


class LSTMPolicy:
    """The trained agent as maple-async's recurrent batch callable:
    ``policy(obs, masks, hidden) -> (actions, new_hidden)``, hidden = [h, c] (2 x lstm_dim)."""

    name = "cleanrl_lstm"

    def __init__(self, path=None, greedy: bool = False):
        path = path or os.environ.get("MAPLE_EXAMPLE_WEIGHTS", "runs/cleanrl_lstm/agent.pt")
        data = torch.load(path, map_location="cpu")
        self.agent = Agent(**data["net"])
        self.agent.load_state_dict(data["state_dict"])
        self.agent.eval()
        self.h = self.agent.lstm_dim
        self.hidden_dim = 2 * self.h
        self.greedy = greedy

    @torch.no_grad()
    def __call__(self, obs, masks, hidden):
        hidden = torch.as_tensor(np.asarray(hidden, dtype=np.float32))
        state = (hidden[None, :, :self.h].contiguous(), hidden[None, :, self.h:].contiguous())
        logits, _, (h, c) = self.agent.step(torch.as_tensor(obs), state)
        actions, _ = sample(logits, torch.as_tensor(masks), self.greedy)
        return actions.numpy().astype(np.int64), torch.cat([h[0], c[0]], 1).numpy()


def policy():
    """``maple-async eval --policy examples/cleanrl_lstm_ppo.py:policy``."""
    torch.set_num_threads(1)
    return LSTMPolicy()


def parse_mix(spec: str, num_battles: int) -> list[tuple[str, int]]:
    parts = []
    for item in spec.split(","):
        name, _, w = item.strip().partition(":")
        parts.append((name, float(w) if w else 1.0))
    total = sum(w for _, w in parts)
    out = [(name, max(1, round(num_battles * w / total))) for name, w in parts]
    return out


def gae(rewards, values, gamma, lam):
    """Advantages and returns of one finished battle side (terminal at its end)."""
    advantages = np.zeros_like(rewards)
    lastgaelam = 0.0
    for t in reversed(range(len(rewards))):
        nextvalues = values[t + 1] if t + 1 < len(rewards) else 0.0
        delta = rewards[t] + gamma * nextvalues - values[t]
        advantages[t] = lastgaelam = delta + gamma * lam * lastgaelam
    return advantages, advantages + values


def main(args: Args) -> None:
    from maple_async.env import make_pool
    from maple_async.tools.evaluate import evaluate_policy

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # Showdown needs the other core
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    net_kwargs = dict(embed_dim=args.embed_dim, lstm_dim=args.lstm_dim, entity_scorer=args.entity_scorer)
    agent = Agent(**net_kwargs)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # env setup: one pool per opponent in the mix, all on the first pool's Showdown server
    pools = []
    options = {"reward.hp": args.reward_hp, "reward.faint": args.reward_faint}
    for i, (opp, n) in enumerate(parse_mix(args.opponent, args.num_battles)):
        server = pools[0].server_url if pools else None
        pools.append(make_pool(args.battle_format, num_battles=n, opponent=opp, server=server,
                               seed=args.seed + i, **options))
    H = args.lstm_dim
    lstm_h = [np.zeros((p.num_envs, H), np.float32) for p in pools]
    lstm_c = [np.zeros((p.num_envs, H), np.float32) for p in pools]
    prev_h = [np.zeros((p.num_envs, H), np.float32) for p in pools]  # the state before the last step
    prev_c = [np.zeros((p.num_envs, H), np.float32) for p in pools]
    slots = [[defaultdict(list) for _ in range(p.num_envs)] for p in pools]  # per-slot trajectory
    print(f"[cleanrl] {sum(p.num_envs for p in pools)} slots in {len(pools)} pool(s): "
          + ", ".join(f"{p.opponent_name} x{p.num_battles}" for p in pools), flush=True)

    # rollout storage: finished battle sides since the last update
    batch: list[dict] = []
    batch_steps = 0
    outcomes: dict[str, deque] = defaultdict(lambda: deque(maxlen=200))
    lengths = deque(maxlen=200)
    global_step, sides, dropped, update = 0, 0, 0, 0
    start_time = time.time()
    budget = args.minutes * 60.0
    for p in pools:
        p.async_reset()

    def collect(pi: int, timeout):
        """One recv of pool pi: act for its pending slots, close finished trajectories."""
        nonlocal batch_steps, global_step, sides, dropped
        pool = pools[pi]
        obs, reward, terminated, truncated, info = pool.recv(timeout=timeout)
        ids = info["env_id"]
        if not len(ids):
            return
        done = terminated | truncated
        for k, e in enumerate(ids):
            traj = slots[pi][e]
            if info["elapsed_step"][k] == 0 and not done[k]:  # a new battle: fresh state
                traj.clear()
                lstm_h[pi][e] = 0.0
                lstm_c[pi][e] = 0.0
            elif info["retry"][k] and traj["actions"]:
                # Showdown rejected the slot's last action: this step replaces it, from the
                # LSTM state before it (so the update's unroll sees what collection saw)
                for v in traj.values():
                    v.pop()
                lstm_h[pi][e] = prev_h[pi][e]
                lstm_c[pi][e] = prev_c[pi][e]
            elif traj["rewards"]:
                traj["rewards"][-1] += float(reward[k])  # the reward of the slot's last action
            if done[k]:
                if terminated[k] and traj["actions"]:
                    side = {key: np.asarray(v) for key, v in traj.items()}
                    batch.append(side)
                    batch_steps += len(side["actions"])
                    sides += 1
                    lengths.append(len(side["actions"]))
                    score = {"won": 1.0, "lost": 0.0}.get(info["outcome"][k], 0.5)
                    outcomes[info["opponent"][k]].append(score)
                elif truncated[k]:
                    dropped += 1
                traj.clear()
        act = np.flatnonzero(~done)
        actions = np.zeros(len(ids), dtype=np.int64)  # ignored for terminal slots
        if len(act):
            e = ids[act]
            x = torch.as_tensor(obs["observation"][act])
            m = torch.as_tensor(obs["action_mask"][act])
            with torch.no_grad():
                state = (torch.as_tensor(lstm_h[pi][e])[None], torch.as_tensor(lstm_c[pi][e])[None])
                logits, value, (h, c) = agent.step(x, state)
                a, logprob = sample(logits, m)
            prev_h[pi][e] = lstm_h[pi][e]
            prev_c[pi][e] = lstm_c[pi][e]
            lstm_h[pi][e] = h[0].numpy()
            lstm_c[pi][e] = c[0].numpy()
            actions[act] = a.numpy()
            for j, (k, slot) in enumerate(zip(act, e)):
                traj = slots[pi][slot]
                traj["obs"].append(obs["observation"][k])
                traj["masks"].append(obs["action_mask"][k])
                traj["actions"].append(int(actions[k]))
                traj["logprobs"].append(float(logprob[j]))
                traj["values"].append(float(value[j]))
                traj["rewards"].append(0.0)
            global_step += len(act)
        pool.send(actions, ids)

    try:
        while True:
            # ROLLOUT: play until the finished battles hold steps_per_update decisions
            timeout = None if len(pools) == 1 else 0.005
            while batch_steps < args.steps_per_update and time.time() - start_time < budget:
                for pi in range(len(pools)):
                    collect(pi, timeout)
            if batch_steps < args.steps_per_update:
                break  # out of time
            update += 1
            frac = 1.0 - max((time.time() - start_time) / budget,
                             update / args.max_updates if args.max_updates else 0.0)
            lr = args.learning_rate * max(0.05, frac) if args.anneal_lr else args.learning_rate
            optimizer.param_groups[0]["lr"] = lr

            # bootstrap: GAE per battle side (each ends in a terminal step)
            for side in batch:
                side["advantages"], side["returns"] = gae(side["rewards"].astype(np.float32),
                                                          side["values"].astype(np.float32),
                                                          args.gamma, args.gae_lambda)

            # optimizing the policy and value network on minibatches of whole battle sides
            t_update = time.time()
            sideinds = np.arange(len(batch))
            clipfracs = []
            for epoch in range(args.update_epochs):
                np.random.shuffle(sideinds)
                for mbinds in np.array_split(sideinds, args.num_minibatches):
                    mb = [batch[i] for i in mbinds]
                    b_lengths = torch.as_tensor([len(s["actions"]) for s in mb])
                    b_obs = torch.as_tensor(np.concatenate([s["obs"] for s in mb]))
                    b_masks = torch.as_tensor(np.concatenate([s["masks"] for s in mb]))
                    b_actions = torch.as_tensor(np.concatenate([s["actions"] for s in mb]))
                    b_logprobs = torch.as_tensor(np.concatenate([s["logprobs"] for s in mb]), dtype=torch.float32)
                    b_values = torch.as_tensor(np.concatenate([s["values"] for s in mb]), dtype=torch.float32)
                    b_advantages = torch.as_tensor(np.concatenate([s["advantages"] for s in mb]))
                    b_returns = torch.as_tensor(np.concatenate([s["returns"] for s in mb]))

                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                        b_obs, b_lengths, b_masks, b_actions)
                    logratio = newlogprob - b_logprobs
                    ratio = logratio.exp()

                    with torch.no_grad():
                        # calculate approx_kl http://joschu.net/blog/kl-approx.html
                        old_approx_kl = (-logratio).mean()
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                    mb_advantages = b_advantages
                    if args.norm_adv:
                        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                    # Policy loss
                    pg_loss1 = -mb_advantages * ratio
                    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                    # Value loss
                    if args.clip_vloss:
                        v_loss_unclipped = (newvalue - b_returns) ** 2
                        v_clipped = b_values + torch.clamp(newvalue - b_values, -args.clip_coef, args.clip_coef)
                        v_loss_clipped = (v_clipped - b_returns) ** 2
                        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                    else:
                        v_loss = 0.5 * ((newvalue - b_returns) ** 2).mean()

                    entropy_loss = entropy.mean()
                    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()

                if args.target_kl and approx_kl > args.target_kl:
                    break

            y_pred = np.concatenate([s["values"] for s in batch])
            y_true = np.concatenate([s["returns"] for s in batch])
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
            elapsed = time.time() - start_time
            rates = " ".join(f"{o} {np.mean(v):.2f}" for o, v in sorted(outcomes.items()))
            print(f"update {update} | steps {global_step} | sides {sides} | {global_step / elapsed:.0f} steps/s"
                  f" | win rate (last 200) {rates} | len {np.mean(lengths):.0f} | lr {lr:.1e}"
                  f" | pg {pg_loss.item():.3f} v {v_loss.item():.3f} ent {entropy_loss.item():.2f}"
                  f" kl {approx_kl.item():.4f} old_kl {old_approx_kl.item():.4f} clipfrac {np.mean(clipfracs):.3f}"
                  f" ev {explained_var:.2f} | update {time.time() - t_update:.1f}s", flush=True)
            batch.clear()
            batch_steps = 0
            if args.max_updates and update >= args.max_updates:
                break
    finally:
        for p in reversed(pools):  # the first pool owns the server
            p.close()

    path = out / "agent.pt"
    torch.save({"net": net_kwargs, "state_dict": agent.state_dict(), "args": dataclasses.asdict(args)}, path)
    print(f"[cleanrl] {update} updates, {global_step} steps, {sides} battle sides ({dropped} abandoned) in "
          f"{time.time() - start_time:.0f}s; saved {path}", flush=True)

    if args.eval_battles:
        table = evaluate_policy(LSTMPolicy(path), opponents="random,max_power", battles=args.eval_battles,
                                seed=args.seed)
        for _, res, _ in table.results:
            lo, hi = res.ci95
            print(f"[cleanrl] vs {res.opponent}: {res.win_rate:.3f} (95% CI {lo:.3f}-{hi:.3f}, "
                  f"{res.battles} battles)", flush=True)


if __name__ == "__main__":
    main(parse_args())
