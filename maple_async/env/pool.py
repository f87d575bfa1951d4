"""The battle pool for an outside learner: :class:`BattlePool`, the one name a caller uses.

``BattlePool(...)`` builds the pool its arguments ask for: a :class:`~.local.LocalPool`
(this process; the battles on one event loop in a background thread) or, with
``shards=N > 1``, a :class:`~.shards.ShardedPool` (N worker processes, a LocalPool each).
Both have the same API (:class:`~.api.PoolAPI` and the methods documented on LocalPool)
and both are instances of :class:`BattlePool`, which is a LocalPool: a subclass of it is a
one-process pool with the caller's overrides.
"""

from __future__ import annotations

from ..obs import actions as act
from ..obs import encoding as enc
from .local import LocalPool
from .shards import ShardedPool

OBS_DIM = enc.OBS_DIM  # singles; a pool's own: pool.obs_dim, pool.n_actions (doubles: obs/doubles.py)
N_ACTIONS = act.N_ACTIONS


class BattlePool(LocalPool):
    """``num_battles`` battles in flight, their sides handed to the caller in batches.

    ``opponent``: ``"self"`` (both sides are slots: ``2 * num_battles`` slots), a baseline
    (``random``, ``max_power``, ``heuristics``), a checkpoint file, or a policy (an object
    or ``"module:attr"``; see :mod:`maple_async.inference.outside`): ``num_battles`` slots.
    ``batch_size``: ``recv`` returns exactly this many slots (fewer only on its timeout);
    None: whatever the batcher's flush rule gathered (at least one slot).
    ``teams``: a team file or folder (team formats). ``server``: a running server's URL
    (default: a managed loopback server, started here and stopped by ``close()``).
    ``embed_battle(battle) -> np.ndarray`` and ``observation_space``: your observation
    instead of the encoder's; ``reward_fn(battle) -> float``: your reward of the step that
    led to this state (default: the config's composite reward; without ``config``, the
    presets' win 1, hp 0.1, faint 0.05). Both run on your thread, inside ``recv``.
    ``config``: a preset (YAML path or Config); ``**options``: its keys (``max_wait_ms=5``,
    ``"runner.seed"=1``, ...). ``shards``: N > 1 runs the battles in N worker processes,
    each with its own server (:mod:`maple_async.env.shards`), behind the same API.

    ``shards > 1`` returns a :class:`~.shards.ShardedPool`, which the registration below
    makes a BattlePool too.
    """

    def __new__(cls, *args, shards: int = 1, **kwargs):
        if shards > 1:
            if cls is not BattlePool:
                raise TypeError(f"{cls.__name__}: a subclass of BattlePool runs in one process (shards=1)")
            return ShardedPool(*args, shards=shards, **kwargs)
        return super().__new__(cls)

    def __init__(self, *args, shards: int = 1, **kwargs):
        super().__init__(*args, **kwargs)


BattlePool.register(ShardedPool)
