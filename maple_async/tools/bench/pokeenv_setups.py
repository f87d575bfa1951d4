"""poke-env's docs environment (:mod:`.docs_env`) stepped by a consumer that picks uniformly
among the legal actions of the observation's ``action_mask`` (which poke-env's ``PokeEnv``
fills from ``SinglesEnv.get_action_mask(battle)``), either in a plain loop or through
Stable-Baselines3's ``DummyVecEnv`` / ``SubprocVecEnv``, so that a bench can set these
figures beside maple-async's.

* decisions: orders the learning agent (our consumer's side) actually sent. A step where
  that side had nothing to choose (the opponent alone must switch after a faint) sends
  nothing; it is counted in ``env_steps`` only. The opponent's decisions are not counted.
* battles: episodes that ended (terminated or truncated) inside the window.
* rejected_choices: the learning agent's orders Showdown refused all the same. The mask can
  only know what the client knows: a switch out of a trap not yet revealed (Shadow Tag,
  Arena Trap...) passes it and the strict check, Showdown answers "[Unavailable choice]" with
  a new request, and the env asks for another action (an extra decision).
"""

from __future__ import annotations

import functools
import secrets
import socket
import threading
import time
from typing import Any, Optional
from urllib.parse import urlsplit

import numpy as np

from ...server import websocket_url
from .docs_env import CLOSE_TIMEOUT_S, ORDER_SENT, REJECTED, ProbedEnv, make_env, quietly

#: set-up name -> (how the envs are stepped, number of envs)
SETUPS = {
    "single": ("single", 1),
    "dummy2": ("dummy", 2),
    "dummy8": ("dummy", 8),
    "subproc2": ("subproc", 2),
    "subproc8": ("subproc", 8),
}

#: start method of SubprocVecEnv's workers: spawn leaves no forkserver process behind
SUBPROC_START_METHOD = "spawn"

DEFAULT_ACTION = -2  # SinglesEnv's "/choose default", only used if a mask were ever empty
WATCHDOG_GRACE_S = 120.0  # beyond warm-up + window: a set-up stuck this long is torn down


def pick_legal(mask: np.ndarray, rng: np.random.Generator) -> int:
    """Uniform among the mask's legal actions (DEFAULT_ACTION if it has none)."""
    legal = np.flatnonzero(mask)
    if legal.size == 0:
        return DEFAULT_ACTION
    return int(legal[rng.integers(legal.size)])


class _Counts:
    def __init__(self) -> None:
        self.decisions = 0
        self.env_steps = 0
        self.battles = 0
        self.defaults = 0
        self.rejected = 0

    def snapshot(self) -> tuple[int, int, int, int]:
        return self.decisions, self.env_steps, self.battles, self.defaults, self.rejected


class _SingleDriver:
    """One env in a plain reset/step loop."""

    def __init__(self, env: ProbedEnv, rng: np.random.Generator, seed: Optional[int]):
        self.env, self.rng, self.counts = env, rng, _Counts()
        self.obs, _ = env.reset(seed=seed)

    def step(self) -> None:
        action = pick_legal(self.obs["action_mask"], self.rng)
        self.obs, _, terminated, truncated, info = self.env.step(np.int64(action))
        c = self.counts
        c.env_steps += 1
        c.rejected += info.get(REJECTED, 0)
        if info.get(ORDER_SENT, True):
            c.decisions += 1
            c.defaults += action == DEFAULT_ACTION
        if terminated or truncated:
            c.battles += 1
            self.obs, _ = self.env.reset()


class _VecDriver:
    """An SB3 VecEnv (auto-reset on done) stepped with one random-legal action per env."""

    def __init__(self, venv, rng: np.random.Generator, seed: Optional[int]):
        self.venv, self.rng, self.counts = venv, rng, _Counts()
        if seed is not None:
            venv.seed(seed)
        self.obs = venv.reset()

    def step(self) -> None:
        masks = self.obs["action_mask"]
        actions = np.array([pick_legal(m, self.rng) for m in masks], dtype=np.int64)
        self.obs, _, dones, infos = self.venv.step(actions)
        c = self.counts
        c.env_steps += len(actions)
        for action, info in zip(actions, infos):
            c.rejected += info.get(REJECTED, 0)
            if info.get(ORDER_SENT, True):
                c.decisions += 1
                c.defaults += action == DEFAULT_ACTION
        c.battles += int(np.sum(dones))


class _Watchdog:
    """After ``after_s``, unblock a set-up stuck in poke-env (a step waits forever for a
    server that stopped answering): cancel in-process envs' loop tasks, end subprocess
    workers (the parent's pipe read then fails)."""

    def __init__(self, after_s: float):
        self.envs: list[ProbedEnv] = []
        self.processes: list = []
        self.fired = False
        self._timer = threading.Timer(after_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        for env in self.envs:
            env.cancel_all()
        for p in self.processes:
            try:
                if p.is_alive():
                    p.terminate()
            except Exception:  # noqa: BLE001
                pass

    def cancel(self) -> None:
        self._timer.cancel()
        if self._timer.is_alive():
            self._timer.join()


def _close_subproc(venv) -> None:
    """``SubprocVecEnv.close()``; if a worker is already dead (close() then fails midway) or
    hangs, end the rest so that no worker outlives the measurement."""
    try:
        venv.close()
    except Exception:  # noqa: BLE001 - a dead worker's pipe
        for remote in venv.remotes:
            quietly(lambda: remote.send(("close", None)))()
    for p in venv.processes:
        p.join(CLOSE_TIMEOUT_S + 10.0)
        if p.is_alive():
            p.terminate()
            p.join(5.0)
        if p.is_alive():
            p.kill()
            p.join(5.0)
    for remote in venv.remotes:
        quietly(remote.close)()
    venv.closed = True


def _check_reachable(ws_url: str, timeout: float = 5.0) -> None:
    """Fail fast on a server that is not there (poke-env would wait ~80 s: connect, then its
    60 s challenge timeout)."""
    parts = urlsplit(ws_url)
    port = parts.port or (443 if parts.scheme == "wss" else 80)
    with socket.create_connection((parts.hostname, port), timeout=timeout):
        pass


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def measure_pokeenv(url: str, setup: str, seconds: float, warmup_s: float = 3.0,
                    battle_format: str = "gen9randombattle", seed: int | None = None) -> dict:
    """Run poke-env's SinglesEnv wrapped in SingleAgentWrapper against a RandomPlayer opponent,
    stepped by a random-legal consumer, for `seconds` after `warmup_s`; returns
    {"setup": setup, "envs": n, "decisions": int, "battles": int, "seconds": float,
     "decisions_per_s": float, "battles_per_s": float} (plus "env_steps", "default_orders",
    "rejected_choices" and, for subproc set-ups, "start_method"), or {"setup", "envs", "error":
    one line} if the set-up failed. ``url``: the server's http(s)://host:port or ws URL."""
    if setup not in SETUPS:
        return {"setup": setup, "envs": 0, "error": f"unknown set-up {setup!r} (one of {', '.join(SETUPS)})"}
    kind, n = SETUPS[setup]
    result: dict = {"setup": setup, "envs": n}
    try:
        result.update(_measure(url, kind, n, seconds, warmup_s, battle_format, seed))
    except Exception as exc:  # noqa: BLE001 - one broken set-up must not lose the others
        result["error"] = _one_line(exc)
    return result


def _measure(url: str, kind: str, n: int, seconds: float, warmup_s: float,
             battle_format: str, seed: Optional[int]) -> dict:
    ws_url = url if url.startswith(("ws://", "wss://")) else websocket_url(url)
    _check_reachable(ws_url)
    tag = secrets.token_hex(3)
    factories = [functools.partial(make_env, ws_url, battle_format, (f"pe{tag}{i}a", f"pe{tag}{i}b", f"pe{tag}{i}o"))
                 for i in range(n)]
    rng = np.random.default_rng(seed)
    watchdog = _Watchdog(warmup_s + seconds + WATCHDOG_GRACE_S + 15.0 * n)
    envs: list[ProbedEnv] = []
    venv = None
    extra: dict = {}
    try:
        if kind == "subproc":
            import multiprocessing.resource_tracker as resource_tracker

            from stable_baselines3.common.vec_env import SubprocVecEnv

            tracker_was_running = resource_tracker._resource_tracker._fd is not None
            try:
                venv = SubprocVecEnv(factories, start_method=SUBPROC_START_METHOD)
                watchdog.processes = list(venv.processes)
            finally:
                # spawn starts Python's resource tracker; stop it if this call started it
                if not tracker_was_running:
                    extra["_stop_tracker"] = resource_tracker._resource_tracker
            extra["start_method"] = SUBPROC_START_METHOD
            driver: Any = _VecDriver(venv, rng, seed)
        else:
            for fn in factories:
                envs.append(fn())
            watchdog.envs = list(envs)
            if kind == "single":
                driver = _SingleDriver(envs[0], rng, seed)
            else:
                from stable_baselines3.common.vec_env import DummyVecEnv

                venv = DummyVecEnv([functools.partial(_given, env) for env in envs])
                driver = _VecDriver(venv, rng, seed)

        start = time.monotonic()
        while time.monotonic() - start < warmup_s:
            driver.step()
        before = driver.counts.snapshot()
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            driver.step()
        elapsed = time.monotonic() - t0
        after = driver.counts.snapshot()
        decisions, env_steps, battles, defaults, rejected = (a - b for a, b in zip(after, before))
    except Exception as exc:
        if watchdog.fired:
            raise TimeoutError(f"set-up stuck past its deadline, torn down ({_one_line(exc)})") from exc
        if kind == "subproc" and isinstance(exc, (EOFError, BrokenPipeError, ConnectionResetError)):
            raise RuntimeError(f"a SubprocVecEnv worker died ({_one_line(exc)}; its traceback is on "
                               f"stderr)") from exc
        raise
    finally:
        watchdog.cancel()
        tracker = extra.pop("_stop_tracker", None)
        if venv is not None and kind == "subproc":
            _close_subproc(venv)
        elif venv is not None:
            quietly(venv.close)()  # DummyVecEnv.close(): each env's close()
        for env in envs:
            env.close()  # idempotent
        if tracker is not None:
            quietly(tracker._stop)()
    return {
        "decisions": int(decisions),
        "battles": int(battles),
        "seconds": elapsed,
        "decisions_per_s": decisions / elapsed if elapsed > 0 else float("nan"),
        "battles_per_s": battles / elapsed if elapsed > 0 else float("nan"),
        "env_steps": int(env_steps),
        "default_orders": int(defaults),
        "rejected_choices": int(rejected),
        **extra,
    }


def _given(env: ProbedEnv) -> ProbedEnv:
    return env
