"""Per-battle recurrent state, owned by the runner, never by the network.

Keys are ``(battle_tag, side)``. Each ``start`` hands out a fresh *generation* number
(unique for the whole run); a result carries the generation it was computed for and is
written back only if the key still holds that generation. So a late result for a battle
that ended (or a key that was reused) is dropped instead of corrupting another battle.

Rows are float32 numpy arrays (a row of a batch's result is a view, not a copy: indexing a
numpy array costs a tenth of indexing a tensor, and this runs once per decision);
:meth:`HiddenStates.gather` hands the batch to the network as one tensor.
"""

from __future__ import annotations

import itertools
from typing import Hashable, Iterable, Optional

import numpy as np
import torch


class HiddenStates:
    def __init__(self, hidden_dim: int):
        self.hidden_dim = hidden_dim
        self._rows: dict[Hashable, tuple[int, np.ndarray]] = {}
        self._generations = itertools.count(1)
        self._zero = np.zeros(hidden_dim, dtype=np.float32)
        self.stale_writes = 0  # results dropped because their battle had ended

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._rows

    def keys(self):
        return self._rows.keys()

    def start(self, key: Hashable) -> int:
        """Zero the state of ``key`` and return its new generation."""
        gen = next(self._generations)
        self._rows[key] = (gen, self._zero)
        return gen

    def generation(self, key: Hashable) -> Optional[int]:
        entry = self._rows.get(key)
        return entry[0] if entry is not None else None

    def get(self, key: Hashable) -> np.ndarray:
        return self._rows[key][1]

    def gather(self, keys: Iterable[Hashable], generations: Iterable[int]) -> torch.Tensor:
        """Stack the rows for a batch; a key that ended (or moved on) reads as zeros."""
        rows = []
        for key, gen in zip(keys, generations):
            entry = self._rows.get(key)
            rows.append(entry[1] if entry is not None and entry[0] == gen else self._zero)
        if not rows:
            return torch.zeros(0, self.hidden_dim)
        return torch.from_numpy(np.stack(rows))

    def put(self, key: Hashable, generation: int, row) -> bool:
        """Write ``row`` (numpy array or CPU tensor) if ``key`` is still at ``generation``;
        return whether it was written."""
        entry = self._rows.get(key)
        if entry is None or entry[0] != generation:
            self.stale_writes += 1
            return False
        self._rows[key] = (generation, row if isinstance(row, np.ndarray) else np.asarray(row, dtype=np.float32))
        return True

    def end(self, key: Hashable) -> None:
        self._rows.pop(key, None)

    def clear(self) -> None:
        self._rows.clear()
