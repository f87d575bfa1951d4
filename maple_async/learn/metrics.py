"""What a run reports: the metrics log (CSV, and TensorBoard when installed), win-rate
intervals and policy lag."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Optional

import numpy as np


class MetricsLog:
    """CSV always; TensorBoard scalars when the package is installed."""

    def __init__(self, run_dir: Path, tensorboard: bool):
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
            except Exception:  # tensorboard not installed
                print("[train] tensorboard not installed (pip install 'maple-async[tensorboard]'): "
                      "logging to metrics.csv only", flush=True)

    def write(self, step: int, row: dict) -> None:
        if self._fields is None:
            self._fields = list(row)
            with open(self.path, "w", newline="") as f:
                csv.writer(f).writerow(self._fields)
        with open(self.path, "a", newline="") as f:
            csv.writer(f).writerow([row.get(k, "") for k in self._fields])
        if self.tb is not None:
            for k, v in row.items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)

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
