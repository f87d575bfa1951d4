"""maple-async's battles as an environment for an outside learner: an EnvPool-style pool of
battle sides (:func:`make_pool`: a :class:`BattlePool`, or shards of them) and its Gymnasium
and Stable-Baselines3 faces."""

from .pool import N_ACTIONS, OBS_DIM, BattlePool, make_pool

__all__ = ["BattlePool", "N_ACTIONS", "OBS_DIM", "make_pool", "make_vector_env", "make_sb3_vec_env"]


def make_vector_env(*args, **kwargs):
    """A ``gymnasium.vector.VectorEnv`` over a :func:`make_pool` pool (same arguments)."""
    from .gym import BattleVectorEnv
    return BattleVectorEnv(*args, **kwargs)


def make_sb3_vec_env(*args, **kwargs):
    """A Stable-Baselines3 ``VecEnv`` over a :func:`make_pool` pool (same arguments)."""
    from .sb3 import BattleSB3VecEnv
    return BattleSB3VecEnv(*args, **kwargs)
