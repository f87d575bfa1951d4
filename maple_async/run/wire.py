"""What crosses the boundary between the learner and its shards: the weights as one pickle
of numpy arrays per broadcast, finished trajectories, and small typed messages.

Learner to shard: a weights message (packed bytes to a process, the dict itself to a Ray
actor), :class:`Pause`, or None (stop). Shard to learner: :class:`PackedTrajectory`,
:class:`ShardStats`, :class:`ShardDone`, or :class:`~maple_async.procs.Failed` (its error).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable


def _each_state_dict(msg: dict, convert: Callable[[Any], Any]) -> dict:
    """``msg`` with ``convert`` applied to every tensor of its weights and league snapshots."""
    def sd(weights: dict) -> dict:
        return {k: convert(v) for k, v in weights.items()}

    out = {**msg, "weights": sd(msg["weights"])}
    league = msg.get("league")
    if league:
        out["league"] = {**league, "snapshots": {k: sd(v) for k, v in league["snapshots"].items()}}
    return out


def pack_weights_msg(msg: dict) -> bytes:
    """A weights message as one pickle of numpy arrays, made once per broadcast: a torch
    tensor in a multiprocessing queue travels as a shared-memory file descriptor served by
    the learner's one resource-sharer thread, which a busy learner starves."""
    return pickle.dumps(_each_state_dict(msg, lambda v: v.detach().cpu().numpy()),
                        protocol=pickle.HIGHEST_PROTOCOL)


def unpack_weights_msg(blob: bytes) -> dict:
    """:func:`pack_weights_msg`'s message again, with CPU tensors."""
    import torch
    return _each_state_dict(pickle.loads(blob), torch.from_numpy)


def weights_checksum(state_dict: dict) -> float:
    return float(sum(float(v.double().sum()) for v in state_dict.values()))


@dataclass(frozen=True)
class Pause:
    """The learner holds (``paused``) or releases a shard's decisions."""

    paused: bool


@dataclass
class PackedTrajectory:
    """A finished trajectory as it crosses the process boundary."""

    data: dict
    outcome: float
    opponent: str
    reward_totals: dict
    shard: int
    key: tuple = ()  # (battle tag, side): a multi-format run reads the format off the tag

    def arrays(self) -> dict:
        return self.data

    @property
    def versions(self):
        return self.data["versions"]

    def __len__(self) -> int:
        return len(self.data["actions"])


@dataclass
class ShardStats:
    """A shard's cumulative counters, sent every second and last."""

    shard: int
    stats: dict


@dataclass(frozen=True)
class ShardDone:
    """The shard's collector has stopped; nothing follows."""

    shard: int
