"""The battle pool a caller opens: :func:`make_pool` places the battles in this process (a
:class:`~.local.BattlePool`) or, with ``shards=N > 1``, in N worker processes (a
:class:`~.shards.ShardedPool`, a BattlePool in each). Both have the same API
(:class:`~.api.PoolAPI` and the methods documented on BattlePool)."""

from __future__ import annotations

from ..obs import actions as act
from ..obs import encoding as enc
from .api import PoolAPI
from .local import BattlePool
from .shards import ShardedPool

OBS_DIM = enc.OBS_DIM  # singles; a pool's own: pool.obs_dim, pool.n_actions (doubles: obs/doubles.py)
N_ACTIONS = act.N_ACTIONS


def make_pool(*args, shards: int = 1, **kwargs) -> PoolAPI:
    """A :class:`~.local.BattlePool` (its arguments) or, with ``shards=N > 1``, a
    :class:`~.shards.ShardedPool` of N of them, each in a worker process with its own server
    (or all on ``server``), behind the same API."""
    if shards > 1:
        return ShardedPool(*args, shards=shards, **kwargs)
    return BattlePool(*args, **kwargs)
