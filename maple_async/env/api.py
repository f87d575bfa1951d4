"""What every battle pool shares on the caller's side: ``send``'s checks, ``step`` and the
context manager. :class:`~.local.BattlePool` (one process) and
:class:`~.shards.ShardedPool` (worker processes) each add how answers travel
(``_forward``), ``recv``, resets, opponents, statistics and ``close``."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np


def _flat(values) -> np.ndarray:
    """``send``'s arguments as 1-D arrays (a scalar: one slot)."""
    return np.asarray(values).reshape(-1)


class PoolAPI:
    """The caller's checks over a pool's slots; a subclass sets ``num_envs``,
    ``n_actions``, ``self_play`` and ``_outstanding`` (the slots with the caller: their
    mask, None for a terminal step) and defines ``_check`` and ``_forward``."""

    num_envs: int
    n_actions: int
    self_play: bool
    _outstanding: dict[int, Optional[np.ndarray]]

    def _check(self) -> None:
        raise NotImplementedError

    def _forward(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        """Checked answers on their way to the battles."""
        raise NotImplementedError

    def recv(self, timeout: Optional[float] = None, *, settled: bool = False):
        raise NotImplementedError

    def close(self, timeout: float = 60.0) -> None:
        raise NotImplementedError

    def send(self, actions, env_ids) -> None:
        """Answer the slots ``env_ids`` (each returned by ``recv`` and not answered yet)."""
        self._check()
        actions, env_ids = _flat(actions), _flat(env_ids)
        for e in self._validate(actions, env_ids):
            del self._outstanding[e]
        self._forward(actions, env_ids)

    def answer(self, actions, env_ids) -> None:
        """:meth:`send` without its checks, for a caller that checked already (a shard's
        parent, which only answers what this pool returned)."""
        actions, env_ids = _flat(actions), _flat(env_ids)
        for e in env_ids.tolist():
            self._outstanding.pop(e, None)
        self._forward(actions, env_ids)

    def _validate(self, actions: np.ndarray, env_ids: np.ndarray) -> set:
        """The answered slots; a ``ValueError`` naming every problem (nothing is sent)."""
        if len(actions) != len(env_ids):
            raise ValueError(f"send got {len(actions)} actions for {len(env_ids)} env_ids")
        if not np.issubdtype(actions.dtype, np.integer) or not np.issubdtype(env_ids.dtype, np.integer):
            raise ValueError(f"send needs integer actions and env_ids, got {actions.dtype} and {env_ids.dtype}")
        problems = []
        seen = set()
        for a, e in zip(actions.tolist(), env_ids.tolist()):
            if not 0 <= e < self.num_envs:
                problems.append(f"env_id {e} does not exist (0-{self.num_envs - 1})")
            elif e in seen:
                problems.append(f"env_id {e} twice")
            elif e not in self._outstanding:
                problems.append(f"env_id {e} is not pending (recv has not returned it, or it was answered)")
            else:
                mask = self._outstanding[e]
                if mask is not None and not (0 <= a < self.n_actions and mask[a]):
                    problems.append(f"env_id {e}: action {a} is not legal (legal: {np.flatnonzero(mask).tolist()})")
            seen.add(e)
        if problems:
            raise ValueError("send refused, nothing was sent: " + "; ".join(problems))
        return seen

    def step(self, actions, env_ids):
        """:meth:`send`, then :meth:`recv`."""
        self.send(actions, env_ids)
        return self.recv()

    def _same_slots(self, opponent: Any) -> None:
        if (opponent == "self") != self.self_play:
            raise ValueError("set_opponent cannot switch between self-play and another opponent "
                             "(the number of slots differs); make another pool")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
