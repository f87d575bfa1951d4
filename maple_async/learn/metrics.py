"""What a run reports: the metrics log (``metrics.csv`` and TensorBoard scalars under
``tb/``), win-rate intervals and policy lag."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Optional

import numpy as np


class MetricsLog:
    """``metrics.csv`` always; TensorBoard scalars (``tb/``) unless turned off."""

    def __init__(self, run_dir: Path, tensorboard: bool, quiet: bool = False):
        self.path = run_dir / "metrics.csv"
        self._fields: Optional[list] = None
        if self.path.exists():
            with open(self.path) as f:
                self._fields = next(csv.reader(f), None)
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.tb = SummaryWriter(str(run_dir / "tb"))
            except ImportError:  # an install without the tensorboard package
                print("[train] tensorboard is not installed (pip install tensorboard): "
                      "logging to metrics.csv only", flush=True)
            else:
                if not quiet:
                    print(f"[train] TensorBoard: tensorboard --logdir {run_dir / 'tb'}", flush=True)

    def write(self, step: int, row: dict) -> None:
        if not self._fields:
            self._fields = list(row)
            with open(self.path, "w", newline="") as f:
                csv.writer(f).writerow(self._fields)
        elif any(k not in self._fields for k in row):
            self._widen([k for k in row if k not in self._fields])
        with open(self.path, "a", newline="") as f:
            csv.writer(f).writerow([row.get(k, "") for k in self._fields])
        self.scalars(step, row)

    def scalars(self, step: int, row: dict) -> None:
        """TensorBoard only (e.g. the end-of-training evaluation)."""
        if self.tb is not None:
            for k, v in row.items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()

    def _widen(self, new: list) -> None:
        """A column that first appears later (an opponent first met in update 7): the file is
        rewritten with the wider header, earlier rows left empty there."""
        with open(self.path, newline="") as f:
            rows = list(csv.reader(f))[1:]
        self._fields = self._fields + new
        tmp = self.path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self._fields)
            w.writerows(r + [""] * (len(self._fields) - len(r)) for r in rows)
        tmp.replace(self.path)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def wilson_interval(wins: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a win rate (ties count as half a win by the caller)."""
    if n == 0:
        return (0.0, 1.0)
    p = wins / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def policy_lag(versions: Optional[np.ndarray], current: int) -> float:
    return float(current - versions.mean()) if versions is not None and len(versions) else 0.0
