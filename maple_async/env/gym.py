"""The synchronous Gymnasium face of a battle pool (:func:`~maple_async.env.pool.make_pool`).

Every step answers the slots the previous step returned and waits on the *decision clock*
(``clock="decision"``, the default): until nothing more can come before it answers, i.e.
every live battle side has its decision in the step or waits on the other side's choice
(Pokémon's turns are simultaneous, so the sides of a turn arrive together). A slot that is
not in the step (its battle waits on the other side's forced switch, or it is between
battles) comes back *inactive*: reward 0, its last observation, a mask that allows action 0
only, ``info["is_active"]`` False; whatever is sent for it is ignored.
``clock="flush"`` (the default with ``shards > 1``): a step is whatever batch the pool's flush rule gathered (more inactive
slots, shorter waits). Autoreset is next-step: the step after a terminal one frees the slot
for its next battle, which comes back when its first decision is due. ``reset(seed=...)``
may be called at any time: the battles in flight end (never handed back) and new ones start.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .api import PoolAPI
from .pool import make_pool
from .slots import padding_mask

CLOCKS = ("decision", "flush")


def resolve_clock(pool: PoolAPI, clock: Optional[str]) -> str:
    """The face's clock: ``decision`` by default, ``flush`` for a sharded pool (whose
    shards each settle on their own)."""
    sharded = getattr(pool, "shards", 1) > 1
    if clock is None:
        return "flush" if sharded else "decision"
    if clock not in CLOCKS:
        pool.close()
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    if clock == "decision" and sharded:
        pool.close()
        raise ValueError("clock='decision' needs one pool: with shards > 1 use clock='flush' (the default there)")
    return clock


class SyncSlots:
    """Every slot of a pool in lock step: what both synchronous faces share."""

    def __init__(self, pool: PoolAPI, obs_shape: tuple, obs_dtype=np.float32, clock: str = "decision"):
        self.pool = pool
        self.clock = clock
        n = pool.num_envs
        self.obs = np.zeros((n, *obs_shape), dtype=obs_dtype)  # each slot's latest observation
        self.padding = padding_mask(pool.n_actions)
        self.masks = np.tile(self.padding, (n, 1))
        self.pending = np.zeros(n, dtype=bool)  # returned by the pool and not answered
        self.decisions = 0
        self.steps = 0

    def reset(self, seed: Optional[int] = None):
        """New battles (the ones in flight end), every slot's state forgotten."""
        self.pool.async_reset(seed)
        self.pending[:] = False
        self.obs[:] = 0
        self.masks[:] = self.padding
        return self.gather()

    def send(self, actions) -> None:
        ids = np.flatnonzero(self.pending)
        if len(ids):
            actions = np.asarray(actions).reshape(-1)
            if len(actions) != self.pool.num_envs:
                raise ValueError(f"step needs {self.pool.num_envs} actions, got {len(actions)}")
            self.pool.send(actions[ids].astype(np.int64), ids)
        self.pending[:] = False

    def ack(self, ids) -> None:
        """Answer terminal slots now (their action is ignored): the next battle may start."""
        if len(ids):
            self.pool.send(np.zeros(len(ids), dtype=np.int64), ids)
            self.pending[ids] = False

    def gather(self):
        """The next step from the pool, spread over every slot: ``(obs, masks, reward,
        terminated, truncated, info)``, ``info`` with arrays of all slots and ``_key``
        masks (True where the slot is active); ``info["timed_out"]``: the pool's
        ``recv_timeout_s`` passed with nothing (every slot inactive); ``info["settled"]``:
        the step is whole (nothing more could come before it is answered)."""
        obs, reward, terminated, truncated, info = self.pool.recv(settled=self.clock == "decision")
        n = self.pool.num_envs
        ids = info["env_id"]
        active = np.zeros(n, dtype=bool)
        active[ids] = True
        self.pending[ids] = True
        if len(ids):
            self.obs[ids] = obs["observation"]
        self.masks[:] = self.padding
        self.masks[ids] = obs["action_mask"]
        full_reward = np.zeros(n, dtype=np.float32)
        full_reward[ids] = reward
        full_term = np.zeros(n, dtype=bool)
        full_term[ids] = terminated
        full_trunc = np.zeros(n, dtype=bool)
        full_trunc[ids] = truncated
        every = np.ones(n, dtype=bool)
        out_info = {"is_active": active, "_is_active": every, "timed_out": np.full(n, bool(info["timed_out"])),
                    "_timed_out": every, "settled": np.full(n, bool(info["settled"])), "_settled": every}
        for key, values in info.items():
            if key in ("env_id", "action_mask") or not isinstance(values, np.ndarray):
                continue
            full = np.zeros(n, dtype=values.dtype) if values.dtype != object else np.full(n, "", dtype=object)
            full[ids] = values
            out_info[key], out_info["_" + key] = full, active
        self.decisions += int(len(ids) - terminated.sum() - truncated.sum())
        self.steps += 1
        return self.obs.copy(), self.masks.copy(), full_reward, full_term, full_trunc, out_info


def observation_space(pool) -> spaces.Space:
    """A slot's observation space: the caller's, or the encoder's vector."""
    if pool.observation_space is not None:
        return pool.observation_space
    return spaces.Box(-np.inf, np.inf, (pool.obs_dim,), np.float32)


class BattleVectorEnv(VectorEnv):
    """``gymnasium.vector.VectorEnv`` over a :func:`~.pool.make_pool` pool (same arguments, and
    ``clock``): observations ``Dict(observation, action_mask)``, actions
    ``Discrete(pool.n_actions)`` per slot (singles 32, doubles 53)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, *args, clock: Optional[str] = None, **kwargs):
        self.pool = make_pool(*args, **kwargs)
        clock = resolve_clock(self.pool, clock)
        obs_space = observation_space(self.pool)
        self.num_envs = self.pool.num_envs
        self.single_observation_space = spaces.Dict({
            "observation": obs_space, "action_mask": spaces.MultiBinary(self.pool.n_actions)})
        self.single_action_space = spaces.Discrete(self.pool.n_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._slots = SyncSlots(self.pool, obs_space.shape, obs_space.dtype, clock)

    def _obs(self, obs, masks) -> dict:
        return {"observation": obs, "action_mask": masks.astype(np.int8)}

    def reset(self, *, seed=None, options=None):
        """New battles, seeded by ``seed`` (an int; the simulator transport repeats them);
        the battles in flight end. ``options`` is not used."""
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise ValueError(f"reset(seed=...) takes one int for the whole pool, got {seed!r}")
        obs, masks, _r, _t, _u, info = self._slots.reset(None if seed is None else int(seed))
        return self._obs(obs, masks), info

    def step(self, actions):
        self._slots.send(actions)
        obs, masks, reward, terminated, truncated, info = self._slots.gather()
        return self._obs(obs, masks), reward, terminated, truncated, info

    def close_extras(self, **kwargs) -> None:
        self.pool.close()
