"""Stateless policy/value networks: ``forward(x, hidden) -> ((logits, value), new_hidden)``.

Hidden state is never stored on the module; the caller (the runner's per-battle hidden
dict, or the learner's unroll) owns it. Every network exposes its hidden state as one
flat tensor ``[batch, hidden_dim]`` (``hidden_dim`` is 0 for the MLP), so callers can
keep one row per battle without knowing the architecture.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from ..obs import doubles as dbl
from ..obs import encoding as enc
from ..obs import actions as act
from ..obs import games


def _small(*layers: nn.Linear) -> None:
    """Near-zero initial scores: the plain head's logits dominate until these learn."""
    for layer in layers:
        nn.init.orthogonal_(layer.weight, gain=0.01)
        nn.init.zeros_(layer.bias)


class EntityHead(nn.Module):
    """Action logits scored per entity: switch *i* from own Pokémon block *i*, move *j*
    (and move *j* with mega, as a Z-move, with dynamax or tera) from move block *j*, each
    against the core's context.

    ``logit = <embed(entity), W y> + w . embed(entity)``: one scorer shared by the six
    switch slots, one by the four move slots and one by the six team preview picks (the
    same Pokémon embedding as switches, its own context), so what is learned about a move
    (its damage estimate, effectiveness, a KO) holds in every slot. Added to the plain
    linear head's logits; needs the :mod:`maple_async.obs.encoding` layout and
    :mod:`maple_async.obs.actions` numbering.
    """

    def __init__(self, hidden_size: int, d: int = 64):
        super().__init__()
        self.poke = nn.Sequential(nn.Linear(enc.POKE_DIM, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.move = nn.Sequential(nn.Linear(enc.MOVE_DIM, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.poke_ctx = nn.Linear(hidden_size, d)
        self.move_ctx = nn.Linear(hidden_size, d)
        self.poke_out = nn.Linear(d, 1)
        self.move_out = nn.Linear(d, 1)
        self.pick_ctx = nn.Linear(hidden_size, d)
        self.pick_out = nn.Linear(d, 1)
        _small(self.poke_ctx, self.move_ctx, self.poke_out, self.move_out, self.pick_ctx, self.pick_out)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        own = x[..., enc.OWN_TEAM:enc.OPP_TEAM].reshape(*lead, 6, enc.POKE_DIM)
        moves = x[..., enc.MOVES:enc.FIELD].reshape(*lead, 4, enc.MOVE_DIM)
        pe, me = self.poke(own), self.move(moves)
        switch = (pe * self.poke_ctx(y).unsqueeze(-2)).sum(-1) + self.poke_out(pe).squeeze(-1)
        move = (me * self.move_ctx(y).unsqueeze(-2)).sum(-1) + self.move_out(me).squeeze(-1)
        pick = (pe * self.pick_ctx(y).unsqueeze(-2)).sum(-1) + self.pick_out(pe).squeeze(-1)
        # move j scores the same with mega, as a Z-move, with dynamax and with tera (10-25)
        return torch.cat([switch, move, move, move, move, move, pick], dim=-1)


# copy a / b x (none, foe, ally, self) -> targets none, foe 1, foe 2, ally, self
_TARGET_PICK = torch.zeros(8, 5)
_TARGET_PICK[0, 0] = _TARGET_PICK[4, 0] = 0.5
_TARGET_PICK[1, 1] = _TARGET_PICK[5, 2] = _TARGET_PICK[2, 3] = _TARGET_PICK[3, 4] = 1.0


class DoublesEntityHead(EntityHead):
    """:class:`EntityHead` for the doubles layout (:mod:`maple_async.obs.doubles`): move *j*
    with target *t* is scored from move block *j* derived against the foe it hits (foe 1:
    the core's moves, foe 2: the second copy; no target: their mean; ally and self: their
    own contexts), tera variants alike; pass scores 0. Each move's embedding also takes its
    target type."""

    def __init__(self, hidden_size: int, d: int = 64):
        super().__init__(hidden_size, d)
        self.target_ctx = nn.Linear(hidden_size, 4 * d)  # none, foe, ally, self
        self.target_out = nn.Linear(d, 4)
        # each move's target type (spread, single, ally, self...) into its embedding
        self.move_target = nn.Linear(len(dbl.TARGETS), d, bias=False)
        _small(self.target_ctx, self.target_out)
        nn.init.zeros_(self.move_target.weight)
        self.register_buffer("_pick_targets", _TARGET_PICK.clone(), persistent=False)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "move_target.weight"
        if key not in state_dict:  # a checkpoint from before it: zeros change nothing
            state_dict[key] = torch.zeros_like(self.move_target.weight)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # few, larger tensor ops: on a small acting batch each op's overhead is the cost
        lead = x.shape[:-1]
        own = x[..., enc.OWN_TEAM:enc.OPP_TEAM].reshape(*lead, 6, enc.POKE_DIM)
        m = torch.stack((x[..., enc.MOVES:enc.FIELD], x[..., dbl.MOVES_B:dbl.ALLY_MOVES]), -2)
        kind = self.move_target(x[..., dbl.X_TARGET:dbl.X_FIRST].reshape(*lead, 1, 4, len(dbl.TARGETS)))
        pe = self.poke(own)  # [.., 6, d]
        e = self.move[0](m.reshape(*lead, 2, 4, enc.MOVE_DIM)) + kind
        e = self.move[3](self.move[2](self.move[1](e)))  # [.., copy a / b, 4 moves, d]
        # switch and pick: both contexts, both affine outs, in one product each: [.., 6, 2]
        ctx = torch.stack((self.poke_ctx(y), self.pick_ctx(y)), -1)
        out_w = torch.cat((self.poke_out.weight, self.pick_out.weight))
        out_b = torch.cat((self.poke_out.bias, self.pick_out.bias))
        sp = pe @ ctx + F.linear(pe, out_w, out_b)
        # every move copy against every target context (none, foe, ally, self): [.., 2, 4, 4]
        tctx = self.target_ctx(y).reshape(*lead, 1, 4, -1)
        s = e @ tctx.transpose(-1, -2) + self.target_out(e)
        # targets none (both copies' mean), foe 1 (copy a), foe 2 (copy b), ally, self
        move = (s.transpose(-3, -2).reshape(*lead, 4, 8) @ self._pick_targets).reshape(*lead, 20)
        return torch.cat([sp[..., 0], move, move, sp.new_zeros(*lead, 1), sp[..., 1]], dim=-1)


class PolicyNetwork(nn.Module):
    """Base class. Subclasses implement ``_core(features[B,T,F], hidden) -> (y[B,T,H], hidden)``."""

    hidden_dim: int = 0

    def __init__(self, obs_dim: int, n_actions: int, hidden_size: int, entity_head: bool = True):
        super().__init__()
        self.obs_dim = obs_dim
        self.n_actions = n_actions
        self.hidden_size = hidden_size
        self.policy_head = nn.Linear(hidden_size, n_actions)
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.orthogonal_(self.policy_head.weight, gain=0.01)
        nn.init.zeros_(self.policy_head.bias)
        nn.init.orthogonal_(self.value_head.weight, gain=1.0)
        nn.init.zeros_(self.value_head.bias)
        self.entity_head = None
        if entity_head and (obs_dim, n_actions) == (enc.OBS_DIM, act.N_ACTIONS):
            self.entity_head = EntityHead(hidden_size)
        elif entity_head and (obs_dim, n_actions) == (dbl.OBS_DIM, dbl.N_ACTIONS):
            self.entity_head = DoublesEntityHead(hidden_size)

    def _logits(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.policy_head(y)
        if self.entity_head is not None:
            logits = logits + self.entity_head(x, y)
        return logits

    def initial_hidden(self, batch: int, device: Optional[torch.device] = None) -> torch.Tensor:
        return torch.zeros(batch, self.hidden_dim, device=device)

    def forward(self, x: torch.Tensor, hidden: torch.Tensor):
        """One decision for a batch of battles: ``x [B, obs_dim]``, ``hidden [B, hidden_dim]``."""
        y, new_hidden = self._core(x.unsqueeze(1), hidden, detach_every=0)
        y = y.squeeze(1)
        return (self._logits(x, y), self.value_head(y).squeeze(-1)), new_hidden

    def forward_sequence(self, x: torch.Tensor, hidden: torch.Tensor, detach_every: int = 0,
                         return_hidden: bool = False, valid: Optional[torch.Tensor] = None):
        """Unroll over time: ``x [B, T, obs_dim]`` from ``hidden [B, hidden_dim]``.

        ``detach_every > 0`` cuts gradients every that many steps (truncated BPTT) while
        the forward values stay those of the full recomputed sequence.
        ``valid [B, T]`` (each row's real steps first, then padding): ``x`` holds only the
        real steps, ``[n, obs_dim]`` in row-major order of ``valid``; the per-step layers
        run on those alone (padding was half the learner's work) and the outputs are
        zero at padding.
        Returns ``logits [B, T, A]``, ``values [B, T]`` (and the final hidden state).
        """
        if valid is None:
            y, h = self._core(x, hidden, detach_every=detach_every)
            out = (self._logits(x, y), self.value_head(y).squeeze(-1))
            return (*out, h) if return_hidden else out
        y, h = self._core_packed(x, valid, hidden, detach_every)
        logits = x.new_zeros(*valid.shape, self.n_actions)
        values = x.new_zeros(valid.shape)
        logits[valid] = self._logits(x, y)
        values[valid] = self.value_head(y).squeeze(-1)
        return (logits, values, h) if return_hidden else (logits, values)

    def _core(self, x, hidden, detach_every):  # pragma: no cover - abstract
        raise NotImplementedError

    def _core_packed(self, x, valid, hidden, detach_every):
        """``_core`` on the real steps ``x [n, F]`` of ``valid [B, T]``: ``y [n, H]``. Without
        memory, step by step."""
        return self._core(x, hidden, detach_every)


def _mlp(inp: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())


class MLPPolicy(PolicyNetwork):
    """No memory: each decision sees only the current observation."""

    hidden_dim = 0

    def __init__(self, obs_dim: int, n_actions: int, hidden_size: int = 128, entity_head: bool = True, **_):
        super().__init__(obs_dim, n_actions, hidden_size, entity_head)
        self.body = _mlp(obs_dim, hidden_size)

    def _core(self, x, hidden, detach_every):
        return self.body(x), hidden


class _Recurrent(PolicyNetwork):
    """Shared LSTM core over per-step features; hidden = [h; c] of every layer, flattened."""

    def __init__(self, feat_dim: int, obs_dim: int, n_actions: int, hidden_size: int, num_layers: int,
                 entity_head: bool = True):
        super().__init__(obs_dim, n_actions, hidden_size, entity_head)
        self.num_layers = num_layers
        self.hidden_dim = 2 * num_layers * hidden_size
        self.lstm = nn.LSTM(feat_dim, hidden_size, num_layers=num_layers, batch_first=True)

    def _split(self, hidden: torch.Tensor):
        b = hidden.shape[0]
        lh = self.num_layers * self.hidden_size
        h = hidden[:, :lh].reshape(b, self.num_layers, self.hidden_size).transpose(0, 1).contiguous()
        c = hidden[:, lh:].reshape(b, self.num_layers, self.hidden_size).transpose(0, 1).contiguous()
        return h, c

    @staticmethod
    def _join(h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        b = h.shape[1]
        return torch.cat([h.transpose(0, 1).reshape(b, -1), c.transpose(0, 1).reshape(b, -1)], dim=1)

    def _features(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, x: torch.Tensor, hidden: torch.Tensor):
        """One step. A one-layer LSTM runs as one fused ``lstm_cell`` call: the same math
        as ``nn.LSTM`` over a length-1 sequence without its per-call overhead (~0.5 ms on
        a small CPU batch, most of the acting forward)."""
        if self.num_layers != 1:
            return super().forward(x, hidden)
        feats = self._features(x.unsqueeze(1)).squeeze(1)
        hs = self.hidden_size
        lstm = self.lstm
        h, c = torch.lstm_cell(feats, (hidden[:, :hs], hidden[:, hs:]), lstm.weight_ih_l0,
                               lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0)
        return (self._logits(x, h), self.value_head(h).squeeze(-1)), torch.cat([h, c], dim=1)

    def _core_packed(self, x, valid, hidden, detach_every):
        flat = self._features(x)
        feats = flat.new_zeros(*valid.shape, flat.shape[-1])
        feats[valid] = flat
        y, h = self._unroll(feats, hidden, detach_every)
        return y[valid], h

    def _core(self, x, hidden, detach_every):
        return self._unroll(self._features(x), hidden, detach_every)

    def _unroll(self, feats, hidden, detach_every):
        h, c = self._split(hidden)
        t_total = feats.shape[1]
        if detach_every <= 0 or detach_every >= t_total:
            y, (h, c) = self.lstm(feats, (h, c))
            return y, self._join(h, c)
        outs = []
        for t0 in range(0, t_total, detach_every):
            if t0 > 0:
                h, c = h.detach(), c.detach()
            y, (h, c) = self.lstm(feats[:, t0:t0 + detach_every], (h, c))
            outs.append(y)
        return torch.cat(outs, dim=1), self._join(h, c)


class LSTMPolicy(_Recurrent):
    """MLP encoder -> LSTM -> policy and value heads."""

    def __init__(self, obs_dim: int, n_actions: int, hidden_size: int = 128, num_layers: int = 1,
                 entity_head: bool = True, **_):
        super().__init__(hidden_size, obs_dim, n_actions, hidden_size, num_layers, entity_head)
        self.encoder = _mlp(obs_dim, hidden_size)

    def _features(self, x):
        return self.encoder(x)


class AttentionPolicy(_Recurrent):
    """Self-attention over entity tokens (12 Pokémon, 4 moves, field) -> LSTM -> heads.

    The token layout follows :mod:`maple_async.obs.encoding`; a learned embedding tells
    apart own/opponent/move/field tokens. In doubles the rest of the observation (moves
    against foe 2, the ally's moves, the doubles block) is one more token.
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden_size: int = 128, num_layers: int = 1,
                 attention_heads: int = 4, entity_head: bool = True, **_):
        if obs_dim not in (enc.OBS_DIM, dbl.OBS_DIM):
            raise ValueError("AttentionPolicy needs the maple_async.obs.encoding or .doubles layout")
        super().__init__(hidden_size, obs_dim, n_actions, hidden_size, num_layers, entity_head)
        d = hidden_size
        self.poke_embed = nn.Linear(enc.POKE_DIM, d)
        self.move_embed = nn.Linear(enc.MOVE_DIM, d)
        self.field_embed = nn.Linear(enc.FIELD_DIM, d)
        self.kind_embed = nn.Parameter(torch.zeros(4, d))  # own, opponent, move, field
        layer = nn.TransformerEncoderLayer(d, attention_heads, dim_feedforward=2 * d,
                                           batch_first=True, dropout=0.0)
        self.attn = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        extra = obs_dim - enc.OBS_DIM
        self.extra_embed = nn.Linear(extra, d) if extra else None
        self.pool = nn.Linear((18 if extra else 17) * d, d)

    def _features(self, x):
        lead = x.shape[:-1]
        flat = x.reshape(-1, x.shape[-1])
        own = flat[:, enc.OWN_TEAM:enc.OPP_TEAM].reshape(-1, 6, enc.POKE_DIM)
        opp = flat[:, enc.OPP_TEAM:enc.MOVES].reshape(-1, 6, enc.POKE_DIM)
        moves = flat[:, enc.MOVES:enc.FIELD].reshape(-1, 4, enc.MOVE_DIM)
        field = flat[:, enc.FIELD:enc.OBS_DIM].unsqueeze(1)
        parts = [
            self.poke_embed(own) + self.kind_embed[0],
            self.poke_embed(opp) + self.kind_embed[1],
            self.move_embed(moves) + self.kind_embed[2],
            self.field_embed(field) + self.kind_embed[3],
        ]
        if self.extra_embed is not None:
            parts.append(self.extra_embed(flat[:, enc.OBS_DIM:]).unsqueeze(1))
        tokens = torch.cat(parts, dim=1)
        y = self.attn(tokens)
        return torch.relu(self.pool(y.reshape(flat.shape[0], -1))).reshape(*lead, -1)


NETWORKS = {"mlp": MLPPolicy, "lstm": LSTMPolicy, "attention": AttentionPolicy}


def build(kind: str, hidden_size: int = 128, num_layers: int = 1, attention_heads: int = 4,
          obs_dim: int = enc.OBS_DIM, n_actions: int = act.N_ACTIONS,
          entity_head: bool = True) -> PolicyNetwork:
    if kind not in NETWORKS:
        raise ValueError(f"unknown network '{kind}' (known: {', '.join(NETWORKS)})")
    return NETWORKS[kind](obs_dim, n_actions, hidden_size=hidden_size, num_layers=num_layers,
                          attention_heads=attention_heads, entity_head=entity_head)


def from_config(net_cfg, game: games.Game = games.SINGLES) -> PolicyNetwork:
    return build(net_cfg.kind, net_cfg.hidden_size, net_cfg.num_layers, net_cfg.attention_heads,
                 obs_dim=game.obs_dim, n_actions=game.n_actions, entity_head=net_cfg.entity_head)


def for_config(cfg) -> PolicyNetwork:
    """The network of a whole config: its ``network`` section, sized for the game its
    battle format plays (singles or doubles)."""
    return from_config(cfg.network, games.of_format(cfg.runner.battle_format))


def masked_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Illegal actions get -inf-like logits. Used identically at collection and update."""
    return logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
