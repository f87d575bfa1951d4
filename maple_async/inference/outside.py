"""A policy written outside maple-async, playing through the batcher like a checkpoint.

The protocol is one batch callable: ``policy(obs, masks) -> actions``, with ``obs`` the
encoder's observations (derived features filled, float32 ``[B, OBS_DIM]``), ``masks``
bool ``[B, N_ACTIONS]`` and ``actions`` ints ``[B]``. A recurrent policy declares
``hidden_dim > 0`` and is called ``policy(obs, masks, hidden) -> (actions, new_hidden)``
with ``hidden`` float32 ``[B, hidden_dim]``: the runner keeps that state per battle side
(zero at its first decision), as it does for its own networks. ``policy.reset()``, if
present, is never needed. A policy can be given as the object, as ``"module:attr"`` (importable in every process,
so spawned shards can load it) or as ``"path/to/file.py:attr"``; an attribute that is a
class or a factory function taking no argument is called once.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import sys
import threading
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..errors import UserError
from ..obs.features import derive
from ..opponents import is_checkpoint, policy_ref


class PolicyError(UserError):
    """An outside policy raised, or answered with an illegal or malformed action."""


def load(spec: Any) -> Any:
    """The policy object from ``spec``: an object (returned as is) or ``"module:attr"``."""
    if not isinstance(spec, str):
        return spec
    module, attr = policy_ref(spec)
    try:
        if module.endswith(".py"):
            path = Path(module)
            if not path.is_file():
                raise ImportError(f"no file {module}")
            loader_spec = importlib.util.spec_from_file_location(f"maple_policy_{path.stem}", path)
            obj = importlib.util.module_from_spec(loader_spec)
            sys.modules[loader_spec.name] = obj
            loader_spec.loader.exec_module(obj)
        else:
            obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise UserError(f"--policy {spec!r}: cannot import it ({e})") from None
    if inspect.isclass(obj) or (inspect.isfunction(obj) and not _takes_arguments(obj)):
        obj = obj()
    return obj


def _takes_arguments(fn) -> bool:
    try:
        return any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                   for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True


def name_of(spec: Any) -> str:
    if isinstance(spec, str):
        return spec
    return getattr(spec, "name", None) or getattr(spec, "__name__", None) or type(spec).__name__


class OutsidePolicy:
    """The batcher's policy for an outside callable: ``act`` as
    :class:`~maple_async.inference.policy.InferencePolicy` answers (``logp`` and ``value``
    are 0). A call that raises or answers an illegal action is recorded in ``error``
    (``failed`` is set) and raised; the batcher then plays random legal orders, so no
    battle hangs, and whoever runs the battles stops on ``failed``."""

    def __init__(self, spec: Any, features=derive):
        self.fn = load(spec)
        self.name = name_of(spec)
        self.hidden_dim = int(getattr(self.fn, "hidden_dim", 0) or 0)
        self.features = features
        self.version = 0
        self.greedy = bool(getattr(self.fn, "greedy", False))
        self.error: str = ""
        self.failed = threading.Event()

    def load_state_dict(self, state_dict, version=None) -> None:
        raise TypeError(f"policy {self.name} takes no weights from maple-async")

    def act(self, obs, mask, hidden: torch.Tensor):
        if self.features is not None:
            obs = self.features(np.ascontiguousarray(obs, dtype=np.float32))
        new_hidden = hidden
        try:
            if self.hidden_dim:
                actions, new_hidden = self.fn(obs, mask, hidden.numpy())
                new_hidden = torch.as_tensor(np.asarray(new_hidden, dtype=np.float32))
                if tuple(new_hidden.shape) != (len(obs), self.hidden_dim):
                    raise ValueError(f"returned a hidden state of shape {tuple(new_hidden.shape)}, "
                                     f"expected {(len(obs), self.hidden_dim)}")
            else:
                actions = self.fn(obs, mask)
            actions = np.asarray(actions).reshape(-1)
            if actions.shape != (len(obs),) or not np.issubdtype(actions.dtype, np.integer):
                raise ValueError(f"returned actions of shape {actions.shape} and dtype {actions.dtype}, "
                                 f"expected {len(obs)} integers")
            bad = np.flatnonzero((actions < 0) | (actions >= mask.shape[1]))
            if not len(bad):
                bad = np.flatnonzero(~mask[np.arange(len(actions)), actions])
            if len(bad):
                i = int(bad[0])
                raise ValueError(f"chose illegal action {int(actions[i])} for row {i} "
                                 f"(legal: {np.flatnonzero(mask[i]).tolist()}); {len(bad)} illegal in a "
                                 f"batch of {len(actions)}")
        except Exception as e:
            if not self.failed.is_set():
                self.error = f"policy {self.name} failed: {type(e).__name__}: {e}"
                self.failed.set()
            raise PolicyError(self.error) from e
        zeros = np.zeros(len(actions), dtype=np.float32)
        return actions.astype(np.int64), zeros, zeros, new_hidden


def policy_for(spec: Any, device, greedy: bool = False, battle_format: Optional[str] = None):
    """A checkpoint's policy and its config, or an outside policy (``module:attr``,
    ``file.py:attr`` or an object) and None. ``battle_format``: what a checkpoint will play
    (one of the other game type is refused)."""
    from .policy import policy_from_checkpoint
    if is_checkpoint(spec):
        return policy_from_checkpoint(str(spec), device, greedy=greedy, battle_format=battle_format)
    return OutsidePolicy(spec), None


async def until_failed(aw, policies) -> Any:
    """Await ``aw``; as soon as one of ``policies`` (outside ones; others are skipped) has
    failed, cancel it and raise that policy's error."""
    watched = [p for p in policies if isinstance(getattr(p, "failed", None), threading.Event)]
    task = asyncio.ensure_future(aw)
    while watched and not task.done():
        await asyncio.wait([task], timeout=0.2)
        for p in watched:
            if p.failed.is_set():
                task.cancel()
                raise PolicyError(p.error)
    return await task
