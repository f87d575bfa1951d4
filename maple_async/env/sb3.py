"""The Stable-Baselines3 face of a battle pool (:func:`~maple_async.env.pool.make_pool`).

The synchronous face's lock-step (:class:`~maple_async.env.gym.SyncSlots`) with SB3's
conventions: observations are the plain vector (``Box``), masks come from
``action_masks()`` (sb3-contrib's ``MaskablePPO`` asks through ``env_method``), and reset is
same-step: a terminal slot is answered at once (so its next battle starts), reported
``done`` with ``infos[i]["terminal_observation"]``, and is inactive until its next
battle's first decision (a padding step: reward 0, only action 0 allowed, the action
ignored), as poke-env's own environments pad a side that is not to move.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from .gym import SyncSlots, observation_space, resolve_clock
from .pool import make_pool


class BattleSB3VecEnv(VecEnv):
    """SB3 ``VecEnv`` over a :func:`~.pool.make_pool` pool (same arguments, and ``clock``: see
    :mod:`maple_async.env.gym`). ``reset()`` may come at any time (SB3 calls it at every
    ``learn()``): the battles in flight end, new ones start, seeded by ``seed()``'s value."""

    def __init__(self, *args, clock: Optional[str] = None, **kwargs):
        self.pool = make_pool(*args, **kwargs)
        clock = resolve_clock(self.pool, clock)
        space = observation_space(self.pool)
        super().__init__(self.pool.num_envs, space, spaces.Discrete(self.pool.n_actions))
        self._slots = SyncSlots(self.pool, space.shape, space.dtype, clock)
        self._actions = None
        self.is_active = np.zeros(self.num_envs, dtype=bool)

    def reset(self):
        seed = self._seeds[0]  # VecEnv.seed(s) gives slot i the seed s + i: one pool, one seed
        obs, masks, _r, _t, _u, info = self._slots.reset(seed)
        self._reset_seeds()
        self._reset_options()
        self.is_active = info["is_active"]
        self.reset_infos = self._infos(info)
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self):
        self._slots.send(self._actions)
        obs, masks, reward, terminated, truncated, info = self._slots.gather()
        dones = terminated | truncated
        ended = np.flatnonzero(dones)
        self._slots.ack(ended)
        self.is_active = info["is_active"]
        infos = self._infos(info)
        for i in ended:
            infos[i]["terminal_observation"] = obs[i].copy()
            infos[i]["TimeLimit.truncated"] = bool(truncated[i])  # SB3 bootstraps these
            infos[i]["outcome"] = info["outcome"][i]
            infos[i]["battle_tag"], infos[i]["side"] = info["battle_tag"][i], info["side"][i]
            if info["abandoned"][i]:
                infos[i]["abandoned"] = True
            self._slots.masks[i] = self._slots.padding  # inactive until its next battle
        return obs, reward, dones, infos

    def _infos(self, info: dict) -> list[dict]:
        infos: list[dict] = [{"is_active": bool(a)} for a in info["is_active"]]
        if info["timed_out"][0]:  # the pool's recv_timeout_s passed with nothing: all padding
            for d in infos:
                d["timed_out"] = True
        return infos

    def action_masks(self) -> np.ndarray:
        return self._slots.masks.copy()

    def close(self) -> None:
        self.pool.close()

    def _indices(self, indices) -> list[int]:
        return list(self._get_indices(indices))

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        if attr_name == "action_masks":
            return [self.action_masks for _ in self._indices(indices)]
        if attr_name == "render_mode":
            return [None for _ in self._indices(indices)]
        raise AttributeError(f"battle slots have no attribute {attr_name!r}")

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        raise AttributeError(f"battle slots have no settable attribute {attr_name!r}")

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        if method_name == "action_masks":
            masks = self._slots.masks
            return [masks[i].copy() for i in self._indices(indices)]
        raise AttributeError(f"battle slots have no method {method_name!r}")

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False for _ in self._indices(indices)]
