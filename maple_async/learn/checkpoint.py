"""Checkpoint files: atomic writes, safe loads, and what a loaded one is played with (its
network with its weights, its run's config).

A checkpoint holds only tensors and plain data (weights, optimizer state,
counters, the run's config, the league's weights), so it loads with
``torch.load(weights_only=True)``: no arbitrary code runs when a file is opened.
Writes go to a temporary file in the same folder, are fsynced, then renamed over the
target, so a crash mid-write never leaves a corrupt checkpoint behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch

from ..config import Config, from_saved
from ..errors import UserError
from ..obs import games
from . import networks as nets

FORMAT = "maple-async/1"


class CheckpointError(UserError, ValueError):
    """A checkpoint is missing, unreadable or does not fit the network."""


def _battle_format(payload: dict) -> str:
    """The format of the run a checkpoint comes from (its saved config)."""
    return ((payload.get("config") or {}).get("runner") or {}).get("battle_format", "")


def save(path: str | Path, payload: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "layout": games.of_format(_battle_format(payload)).layout, **payload}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load(path: str | Path, battle_format: Optional[str] = None) -> dict[str, Any]:
    """A checkpoint's contents. Its layout must be the one ``battle_format`` (default: its
    own config's) is played with: one of the other game type is refused with one line."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a maple-async checkpoint")
    if games.of_layout(data.get("layout")) is None:
        raise CheckpointError(f"checkpoint {path} was trained on another observation layout "
                              f"({data.get('layout') or 'maple-obs/1, 26 actions'}; this version: "
                              f"{games.SINGLES.layout} or {games.DOUBLES.layout}): train a new one")
    games.check_checkpoint(data["layout"], battle_format or _battle_format(data), str(path), _battle_format(data))
    return data


def load_weights(network: torch.nn.Module, state_dict: dict, path: str | Path = "checkpoint") -> None:
    """Load weights, turning a shape mismatch into one clear error."""
    try:
        network.load_state_dict(state_dict)
    except RuntimeError as e:
        first = next((ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln or "Missing" in ln
                      or "Unexpected" in ln), str(e).splitlines()[0])
        raise CheckpointError(f"checkpoint {path} does not fit the configured network: {first}") from None


def load_config(path: str | Path, battle_format: Optional[str] = None) -> Config:
    """The config of the run a checkpoint comes from (the file checked as :func:`load` checks it)."""
    return from_saved(load(path, battle_format)["config"])


def load_network(path: str | Path, battle_format: Optional[str] = None) -> tuple[nets.PolicyNetwork, Config]:
    """A checkpoint's network with its weights, and its run's config. ``battle_format``: the
    format it will play (default: its own); a checkpoint of the other game type is refused."""
    data = load(path, battle_format)
    game = games.of_layout(data["layout"])  # the game its weights were trained for
    cfg = from_saved(data["config"])
    network = nets.from_config(cfg.network, game)
    load_weights(network, data["learner"]["network"], path)
    return network, cfg
