"""Recurrent PPO (and REINFORCE) on whole battles or truncated-BPTT chunks of them.

Read top to bottom against the PPO paper (Schulman et al. 2017) and CleanRL's
``ppo_atari_lstm.py``:

1. ``compute_gae``      advantages and returns per battle (terminal at the battle's end).
2. ``make_chunks``      sequences = whole battles (``bptt_length = 0``) or chunks of
                        ``bptt_length`` steps cut at multiples of it; never across battles.
3. ``Learner.update``   per epoch: recompute the hidden state at every chunk start with the
                        current weights (zero at each battle start), shuffle *sequences*
                        (never single steps) into minibatches, unroll each padded
                        minibatch from its chunk-start states, and minimise
                        clipped policy loss + value loss - entropy bonus, every term
                        averaged over real (unpadded) steps only, with illegal actions
                        masked exactly as at collection time.

This module does tensor math only; it never touches the network or the event loop.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch
from torch import nn

from ..config import PPOConfig
from ..obs.features import Features, derive
from .networks import PolicyNetwork, masked_logits

ENTROPY_STEP, ENTROPY_COEF_MAX = 1.1, 0.2  # ppo.entropy_target's step per update, and its ceiling


def compute_gae(rewards: np.ndarray, values: np.ndarray, gamma: float, lam: float):
    """GAE for one finished battle: no bootstrap after the last step (it is terminal)."""
    t_len = len(rewards)
    advantages = np.zeros(t_len, dtype=np.float32)
    last = 0.0
    for t in reversed(range(t_len)):
        next_value = values[t + 1] if t + 1 < t_len else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        last = delta + gamma * lam * last
        advantages[t] = last
    return advantages, advantages + values


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    out = np.zeros(len(rewards), dtype=np.float32)
    acc = 0.0
    for t in reversed(range(len(rewards))):
        acc = rewards[t] + gamma * acc
        out[t] = acc
    return out


def make_chunks(lengths: Sequence[int], bptt_length: int) -> list[tuple[int, int, int]]:
    """``(battle, start, end)`` sequences; chunk starts are multiples of ``bptt_length``."""
    chunks = []
    for b, n in enumerate(lengths):
        step = n if bptt_length <= 0 else bptt_length
        for s in range(0, n, max(step, 1)):
            chunks.append((b, s, min(s + step, n)))
    return chunks


@dataclass
class Rollout:
    """Finished battles: observations as their real steps only (``obs_flat [S, obs_dim]``,
    battle ``i`` from row ``offsets[i]``), the rest padded to ``[N, T_max]``; ``valid``
    marks real steps."""

    obs_flat: torch.Tensor
    offsets: torch.Tensor
    masks: torch.Tensor
    actions: torch.Tensor
    logps: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    valid: torch.Tensor
    lengths: list

    @property
    def obs(self) -> torch.Tensor:
        """Padded ``[N, T_max, obs_dim]`` (zeros at padding): truncated BPTT's chunk starts."""
        out = self.obs_flat.new_zeros(*self.valid.shape, self.obs_flat.shape[-1])
        out[self.valid] = self.obs_flat
        return out

    def rows(self, chunks: Sequence) -> torch.Tensor:
        """Rows of ``obs_flat`` for ``(battle, start, end)`` chunks, in order."""
        return torch.cat([torch.arange(s, e, device=self.obs_flat.device) + self.offsets[b] for b, s, e in chunks])

    @classmethod
    def from_trajectories(cls, trajs: Sequence, cfg: PPOConfig, device, features: Features = derive) -> "Rollout":
        """``features``: the acting policy's step on observations (see
        :class:`~maple_async.inference.policy.InferencePolicy`), applied to the real steps."""
        arrs = [t.arrays() if hasattr(t, "arrays") else t for t in trajs]
        lengths = [len(a["actions"]) for a in arrs]
        n, t_max = len(arrs), max(lengths)
        n_act = arrs[0]["masks"].shape[1]
        obs = np.ascontiguousarray(np.concatenate([a["obs"] for a in arrs]), dtype=np.float32)
        masks = np.ones((n, t_max, n_act), bool)  # padding: all legal (keeps softmax finite)
        actions = np.zeros((n, t_max), np.int64)
        logps, values, adv, ret = (np.zeros((n, t_max), np.float32) for _ in range(4))
        valid = np.zeros((n, t_max), bool)
        for i, a in enumerate(arrs):
            k = lengths[i]
            masks[i, :k], actions[i, :k] = a["masks"], a["actions"]
            logps[i, :k], values[i, :k] = a["logps"], a["values"]
            if cfg.algo == "reinforce":
                ret[i, :k] = discounted_returns(a["rewards"], cfg.gamma)
                adv[i, :k] = ret[i, :k] - a["values"]  # REINFORCE with a learned baseline
            else:
                adv[i, :k], ret[i, :k] = compute_gae(a["rewards"], a["values"], cfg.gamma, cfg.gae_lambda)
            valid[i, :k] = True
        if features is not None:
            obs = features(obs)  # what the acting policy saw
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        t = lambda x: torch.from_numpy(x).to(device)  # noqa: E731
        return cls(t(obs), t(offsets), t(masks), t(actions), t(logps), t(values), t(adv), t(ret), t(valid),
                   lengths)


def masked_mean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return (x * valid).sum() / valid.sum().clamp(min=1)


class Learner:
    def __init__(self, network: PolicyNetwork, cfg: PPOConfig, device="cpu", total_updates: int = 1,
                 features: Features = derive):
        self.device = torch.device(device)
        self.network = network.to(self.device)
        self.cfg = cfg
        self.features = features
        self.optimizer = torch.optim.Adam(self.network.parameters(), lr=cfg.lr, eps=1e-5)
        self.total_updates = max(total_updates, 1)
        self.updates = 0
        self.entropy_coef = cfg.entropy_coef  # the schedule moves it each update
        self.entropy_boost = 1.0  # ppo.entropy_target's factor on the schedule's weight
        # Minibatch order: from torch's global stream, which runner.seed seeds.
        self.generator = torch.Generator().manual_seed(int(torch.randint(0, 2 ** 62, ()).item()))

    # -- hidden states at chunk starts, recomputed with the current weights -------------
    @torch.no_grad()
    def chunk_start_hidden(self, ro: Rollout) -> torch.Tensor:
        """``[N, K, H]``: the state before step ``k * bptt_length`` of each battle.

        k = 0 is the battle start: zeros. Later entries come from unrolling the whole
        battle with the current weights.
        """
        net, bptt = self.network, self.cfg.bptt_length
        n, t_max = ro.actions.shape
        if bptt <= 0 or net.hidden_dim == 0:
            return net.initial_hidden(n, self.device).unsqueeze(1)
        k_max = math.ceil(t_max / bptt)
        starts = [net.initial_hidden(n, self.device)]
        h = starts[0]
        obs = ro.obs if k_max > 1 else None  # padded once (a property builds it)
        for k in range(1, k_max):
            _, _, h = net.forward_sequence(obs[:, (k - 1) * bptt:k * bptt], h, return_hidden=True)
            starts.append(h)
        return torch.stack(starts, dim=1)

    # -- one PPO update ------------------------------------------------------------------
    def lr_at(self, progress: float) -> float:
        """The learning rate at ``progress`` (0..1) of the run's budget: constant, or linear
        decay to 5% of ``ppo.lr``."""
        if self.cfg.lr_schedule != "linear":
            return self.cfg.lr
        return self.cfg.lr * max(1.0 - progress, 0.05)

    def entropy_coef_at(self, progress: float) -> float:
        """The entropy bonus's weight at ``progress``: constant, or linear decay to 10%."""
        if self.cfg.entropy_schedule != "linear":
            return self.cfg.entropy_coef
        return self.cfg.entropy_coef * max(1.0 - progress, 0.1)

    def update(self, trajectories: Sequence, progress: Optional[float] = None,
               lr_scale: float = 1.0) -> dict:
        """One PPO update. ``progress``: how much of the run's budget (battles or time,
        whichever ends first) is spent; by default updates / ``total_updates``.
        ``lr_scale``: a smaller step for a smaller batch (the final update's leftovers)."""
        t0 = time.perf_counter()
        cfg, net = self.cfg, self.network
        progress = self.updates / self.total_updates if progress is None else progress
        lr = lr_scale * self.lr_at(progress)
        base_entropy_coef = self.entropy_coef_at(progress)
        self.entropy_coef = self._with_floor(base_entropy_coef)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        net.train()
        ro = Rollout.from_trajectories(trajectories, cfg, self.device, self.features)
        chunks = make_chunks(ro.lengths, cfg.bptt_length)
        epochs = 1 if cfg.algo == "reinforce" else cfg.epochs
        stats = {k: [] for k in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "grad_norm")}

        for batch in self._minibatches(ro, chunks, epochs):
            loss, info = self.loss(**batch)
            info["grad_norm"] = self._step(loss)
            for k in stats:
                stats[k].append(info[k])

        self.updates += 1
        net.eval()
        valid = ro.valid
        y, v = ro.returns[valid], ro.values[valid]
        var_y = torch.var(y)
        metrics = {k: float(np.mean(vs)) for k, vs in stats.items()}
        metrics.update(
            explained_variance=float(1 - torch.var(y - v) / var_y) if var_y > 0 else float("nan"),
            lr=self.optimizer.param_groups[0]["lr"], entropy_coef=self.entropy_coef,
            sequences=len(chunks),
            steps=int(valid.sum()),
            update_s=time.perf_counter() - t0,
        )
        metrics["samples_per_s"] = metrics["steps"] * epochs / metrics["update_s"]
        self._hold_entropy(metrics["entropy"], base_entropy_coef)
        return metrics

    def _with_floor(self, base: float) -> float:
        """The schedule's weight with ``ppo.entropy_target``'s factor (none when the target is
        off, even after a resume that carried one), at most ``ENTROPY_COEF_MAX`` unless the
        schedule's own weight is higher."""
        if self.cfg.entropy_target <= 0:
            return base
        return min(base * self.entropy_boost, max(base, ENTROPY_COEF_MAX))

    def _hold_entropy(self, entropy: float, base: float) -> None:
        """``ppo.entropy_target``: the next update's weight 10% higher after an update below
        the floor (at most ``ENTROPY_COEF_MAX``), 10% lower above it (never under ``base``)."""
        target = self.cfg.entropy_target
        if target <= 0 or base <= 0 or not math.isfinite(entropy):
            return
        step = ENTROPY_STEP if entropy < target else 1.0 / ENTROPY_STEP
        self.entropy_boost = max(min(self.entropy_boost * step, ENTROPY_COEF_MAX / base), 1.0)

    def _minibatches(self, ro: Rollout, chunks: list, epochs: int):
        """Per epoch: chunk-start states with the current weights, then the chunks shuffled
        into minibatches of ``ppo.minibatch_sequences`` sequences, each padded to its own
        longest (not the update's: battle lengths are skewed, and every padded step costs)."""
        for _epoch in range(epochs):
            h_starts = self.chunk_start_hidden(ro)
            order = torch.randperm(len(chunks), generator=self.generator).tolist()
            for i in range(0, len(order), self.cfg.minibatch_sequences):
                mb = [chunks[j] for j in order[i:i + self.cfg.minibatch_sequences]]
                yield self._gather(ro, mb, max(e - s for _, s, e in mb), h_starts)

    def _step(self, loss: torch.Tensor) -> float:
        """One optimiser step on ``loss`` with gradient clipping; returns the gradient norm."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.network.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        return float(grad_norm)

    # -- behaviour cloning ---------------------------------------------------------------
    def clone(self, trajectories: Sequence, epochs: int = 2, lr: Optional[float] = None) -> dict:
        """Behaviour cloning on recorded trajectories (a teacher's decisions): maximise the
        log-probability of each recorded action under the same mask the teacher faced, and
        fit the value head to the discounted return (``ppo.value_coef``)."""
        t0 = time.perf_counter()
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr if lr is None else lr
        self.network.train()
        cfg = dataclasses.replace(self.cfg, algo="reinforce")  # returns: discounted rewards
        ro = Rollout.from_trajectories(trajectories, cfg, self.device, self.features)
        stats: dict = {"nll": [], "accuracy": [], "v_loss": [], "grad_norm": []}
        for b in self._minibatches(ro, make_chunks(ro.lengths, cfg.bptt_length), epochs):
            logits, values = self.network.forward_sequence(b["obs"], b["h0"], detach_every=cfg.bptt_length,
                                                           valid=b["valid"])
            logp_all = torch.log_softmax(masked_logits(logits, b["masks"]), dim=-1)
            valid = b["valid"].float()
            nll = masked_mean(-logp_all.gather(-1, b["actions"].unsqueeze(-1)).squeeze(-1), valid)
            v_loss = 0.5 * masked_mean((values - b["returns"]) ** 2, valid)
            stats["grad_norm"].append(self._step(nll + cfg.value_coef * v_loss))
            stats["nll"].append(nll.item())
            stats["v_loss"].append(v_loss.item())
            stats["accuracy"].append(masked_mean((logp_all.argmax(-1) == b["actions"]).float(), valid).item())
        self.network.eval()
        out = {k: float(np.mean(v)) for k, v in stats.items()}
        out.update(steps=int(ro.valid.sum()), seconds=time.perf_counter() - t0)
        return out

    def _gather(self, ro: Rollout, mb: list, seq_len: int, h_starts: torch.Tensor) -> dict:
        """The chunks of a minibatch: their real steps' observations (``obs [n, obs_dim]``,
        row-major order of ``valid``), everything else padded to ``[B, seq_len]``; padding
        is invalid."""
        b = len(mb)
        idx = torch.tensor([c[0] for c in mb], device=self.device)
        starts = torch.tensor([c[1] for c in mb], device=self.device)
        lens = torch.tensor([c[2] - c[1] for c in mb], device=self.device)
        steps = starts[:, None] + torch.arange(seq_len, device=self.device)[None, :]
        in_chunk = torch.arange(seq_len, device=self.device)[None, :] < lens[:, None]
        steps = torch.where(in_chunk, steps, torch.zeros_like(steps)).clamp(max=ro.actions.shape[1] - 1)
        rows = idx[:, None].expand(b, seq_len)
        k = starts // self.cfg.bptt_length if self.cfg.bptt_length > 0 else torch.zeros_like(starts)
        return dict(
            obs=ro.obs_flat[ro.rows(mb)], masks=ro.masks[rows, steps], actions=ro.actions[rows, steps],
            old_logps=ro.logps[rows, steps], advantages=ro.advantages[rows, steps],
            returns=ro.returns[rows, steps], valid=ro.valid[rows, steps] & in_chunk,
            h0=h_starts[idx, k],
        )

    def loss(self, obs, masks, actions, old_logps, advantages, returns, valid, h0):
        """The PPO objective on a padded minibatch of sequences (every term masked)."""
        cfg = self.cfg
        valid_f = valid.float()
        logits, values = self.network.forward_sequence(obs, h0, detach_every=cfg.bptt_length, valid=valid)
        logp_all = torch.log_softmax(masked_logits(logits, masks), dim=-1)
        new_logps = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        probs = logp_all.exp()
        entropy = -(probs * logp_all.masked_fill(~masks, 0.0)).sum(-1)

        if cfg.normalize_advantages and valid.sum() > 1:
            a = advantages[valid]
            advantages = (advantages - a.mean()) / (a.std() + 1e-8)

        if cfg.algo == "reinforce":
            pg_loss = masked_mean(-new_logps * advantages, valid_f)
            log_ratio = new_logps - old_logps
            clipfrac = torch.zeros(())
        else:
            log_ratio = new_logps - old_logps
            ratio = log_ratio.exp()
            pg1 = -advantages * ratio
            pg2 = -advantages * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)
            pg_loss = masked_mean(torch.maximum(pg1, pg2), valid_f)
            clipfrac = masked_mean(((ratio - 1).abs() > cfg.clip_coef).float(), valid_f)
        v_loss = 0.5 * masked_mean((values - returns) ** 2, valid_f)
        ent = masked_mean(entropy, valid_f)
        loss = pg_loss + cfg.value_coef * v_loss - self.entropy_coef * ent
        with torch.no_grad():
            approx_kl = masked_mean((log_ratio.exp() - 1) - log_ratio, valid_f)
        return loss, dict(pg_loss=pg_loss.item(), v_loss=v_loss.item(), entropy=ent.item(),
                          approx_kl=approx_kl.item(), clipfrac=clipfrac.item())

    # -- checkpoint state ------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"network": self.network.state_dict(), "optimizer": self.optimizer.state_dict(),
                "updates": self.updates, "entropy_boost": self.entropy_boost}

    def load_state_dict(self, state: dict) -> None:
        self.network.load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.entropy_boost = float(state.get("entropy_boost", 1.0))  # checkpoints before the floor

    def weights_cpu(self) -> dict:
        """A detached CPU copy of the weights, safe to hand to another thread or process."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.network.state_dict().items()}
