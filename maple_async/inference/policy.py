"""The acting side of a network: one batched forward per flush, no gradients.

Before the forward pass an observation batch goes through the policy's ``features`` step
(by default :func:`maple_async.obs.features.derive`, which fills the encoder's derived
columns for the whole batch); the learner runs the same step on its rollouts, so a
network sees the same inputs when acting and when learning.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..learn.networks import PolicyNetwork, masked_logits
from ..obs.features import Features, derive


def resolve_device(name: str) -> torch.device:
    """``auto`` = cuda > mps > cpu. Asking for an absent device is a clear error."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was requested but torch.cuda.is_available() is False")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError("--device mps was requested but MPS is not available")
    return torch.device(name)


class InferencePolicy:
    """A network on a device, used for batched acting.

    ``features``: the step applied to each observation batch before the forward pass
    (:func:`~maple_async.obs.features.derive` for the encoder's layout; None for a network
    fed raw vectors). One host->device copy of the inputs and one device->host copy of the
    outputs per batch. Weights can be swapped between batches with :meth:`load_state_dict`.
    """

    def __init__(self, network: PolicyNetwork, device: torch.device | str = "cpu", greedy: bool = False,
                 features: Features = derive):
        self.device = torch.device(device)
        self.network = network.to(self.device).eval()
        self.hidden_dim = network.hidden_dim
        self.greedy = greedy
        self.features = features
        self.version = 0

    def load_state_dict(self, state_dict, version: Optional[int] = None) -> None:
        self.network.load_state_dict(state_dict)
        self.version = self.version + 1 if version is None else version

    @torch.inference_mode()
    def act(self, obs, mask, hidden: torch.Tensor):
        """``obs [B, D]`` and ``mask [B, A]`` numpy arrays; ``hidden [B, H]`` CPU tensor.

        Returns numpy ``actions, logps, values`` and the new hidden state on the CPU.
        """
        dev = self.device
        if self.features is not None:
            obs = self.features(np.ascontiguousarray(obs, dtype=np.float32))
        x, m, h = torch.from_numpy(obs), torch.from_numpy(mask), hidden
        if dev.type != "cpu":
            x, m, h = (t.to(dev, non_blocking=True) for t in (x, m, h))
        (logits, values), new_h = self.network(x, h)
        logp_all = torch.log_softmax(masked_logits(logits, m), dim=-1)
        if self.greedy:
            actions = logp_all.argmax(dim=-1)
        else:
            actions = sample_categorical(logp_all)
        logps = logp_all.gather(1, actions.unsqueeze(1)).squeeze(1)
        out = torch.stack([actions.to(logps.dtype), logps, values], dim=0).cpu()
        return (out[0].long().numpy(), out[1].numpy(), out[2].numpy(),
                new_h.cpu() if self.hidden_dim else hidden)


def sample_categorical(logp: torch.Tensor) -> torch.Tensor:
    """One action per row from log-probabilities ``[B, A]`` (Gumbel-max: argmax of
    ``logp + Gumbel noise``; the same distribution as ``torch.multinomial`` at a tenth of
    its cost on a small CPU batch). Masked actions (``-inf`` or a huge negative) are never
    drawn."""
    u = torch.rand_like(logp)
    return (logp - torch.log(-torch.log(u))).argmax(dim=-1)


def policy_from_checkpoint(path: str, device, greedy: bool = False, battle_format: Optional[str] = None):
    """A checkpoint's network with its weights, as an :class:`InferencePolicy`, and the
    checkpoint's config. ``battle_format``: the format it will play (default: its own); a
    checkpoint of the other game type (singles, doubles) is refused."""
    from ..learn import checkpoint as ckpt
    net, cfg = ckpt.load_network(path, battle_format)
    return InferencePolicy(net, device, greedy=greedy), cfg
