"""Throughput of poke-env's OWN gym environments, set up the way poke-env's docs show.

The docs' single-agent set-up: a :class:`~poke_env.environment.SinglesEnv` subclass with a
small hand-made observation (4 move base powers, 4 damage multipliers, 2 fainted counts),
wrapped in :class:`~poke_env.environment.SingleAgentWrapper` against
``RandomPlayer(start_listening=False)`` (the wrapper calls the opponent's ``choose_move``
itself, so the opponent needs no connection of its own: each env holds two websockets,
one per side, on an event loop of its own). Here it is stepped by a consumer that picks
uniformly among the legal actions of the observation's ``action_mask`` (which poke-env's
``PokeEnv`` fills from ``SinglesEnv.get_action_mask(battle)``), either in a plain loop or
through Stable-Baselines3's ``DummyVecEnv`` / ``SubprocVecEnv``, so that a bench can set
these figures beside maple-async's.

* decisions: orders the learning agent (our consumer's side) actually sent. A step where
  that side had nothing to choose (the opponent alone must switch after a faint) sends
  nothing; it is counted in ``env_steps`` only. The opponent's decisions are not counted.
* battles: episodes that ended (terminated or truncated) inside the window.
* rejected_choices: the learning agent's orders Showdown refused all the same. The mask can
  only know what the client knows: a switch out of a trap not yet revealed (Shadow Tag,
  Arena Trap...) passes it and the strict check, Showdown answers "[Unavailable choice]" with
  a new request, and the env asks for another action (an extra decision).

The envs run with ``strict=True``: an action whose order is not among the battle's valid
orders raises instead of reaching Showdown, so a random-legal run that completes never sent
an illegal action.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import secrets
import socket
import threading
import time
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

import gymnasium
import numpy as np
from gymnasium.spaces import Box

from poke_env.battle import AbstractBattle, Battle
from poke_env.data import GenData
from poke_env.environment import SingleAgentWrapper, SinglesEnv
from poke_env.player import RandomPlayer
from poke_env.ps_client import AccountConfiguration, ServerConfiguration

from ..server import websocket_url

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

#: info keys set by :class:`ProbedEnv`: did this step send the learning agent's order; how many
#: of that agent's choices Showdown refused since the previous step
ORDER_SENT = "envbench_order_sent"
REJECTED = "envbench_rejected"

DEFAULT_ACTION = -2  # SinglesEnv's "/choose default", only used if a mask were ever empty
POKEENV_LOG_LEVEL = 25  # as the docs' example: poke-env's INFO chatter off
CLOSE_TIMEOUT_S = 20.0
WATCHDOG_GRACE_S = 120.0  # beyond warm-up + window: a set-up stuck this long is torn down


class DocsExampleEnv(SinglesEnv):
    """The observation and reward of poke-env's reinforcement-learning example."""

    LOW = [-1, -1, -1, -1, 0, 0, 0, 0, 0, 0]
    HIGH = [3, 3, 3, 3, 4, 4, 4, 4, 1, 1]

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.observation_spaces = {
            agent: Box(low=np.array(self.LOW, dtype=np.float32),
                       high=np.array(self.HIGH, dtype=np.float32), dtype=np.float32)
            for agent in self.possible_agents
        }

    def calc_reward(self, battle: AbstractBattle) -> float:
        return self.reward_computing_helper(battle, fainted_value=2.0, hp_value=1.0, victory_value=30.0)

    def embed_battle(self, battle: AbstractBattle) -> np.ndarray:
        assert isinstance(battle, Battle)
        power = -np.ones(4)
        multiplier = np.ones(4)
        opponent = battle.opponent_active_pokemon
        for i, move in enumerate(battle.available_moves[:4]):
            power[i] = move.base_power / 100
            if opponent is not None:
                multiplier[i] = move.type.damage_multiplier(
                    opponent.type_1, opponent.type_2, type_chart=GenData.from_gen(battle.gen).type_chart)
        fainted_ours = sum(mon.fainted for mon in battle.team.values()) / 6
        fainted_theirs = sum(mon.fainted for mon in battle.opponent_team.values()) / 6
        return np.concatenate([power, multiplier, [fainted_ours, fainted_theirs]]).astype(np.float32)


class ProbedEnv(gymnasium.Wrapper):
    """Around a :class:`SingleAgentWrapper`: says in ``info`` whether a step sent the learning
    agent's order, and closes everything the env started (its battle, both websockets, its
    event loop and that loop's thread), each part within a bounded time."""

    def __init__(self, env: SingleAgentWrapper):
        super().__init__(env)
        self._closed = False
        self._rejections = _RejectionCounter()
        self.poke_env.agent1.logger.addFilter(self._rejections)

    @property
    def poke_env(self) -> DocsExampleEnv:
        return self.env.env  # type: ignore[attr-defined]

    def step(self, action):
        sent = bool(self.poke_env.agent1_to_move)
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        info[ORDER_SENT] = sent
        info[REJECTED] = self._rejections.take()
        return obs, reward, terminated, truncated, info

    def cancel_all(self) -> None:
        """Cancel every task on the env's loop (thread-safe): unblocks a caller stuck in a step."""
        _cancel_loop_tasks(self.poke_env._loop)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        close_pokeenv(self.poke_env)


class _RejectionCounter(logging.Filter):
    """Counts the choices Showdown refused ("[Unavailable choice]", e.g. a switch out of a
    trap the client could not know of, or "[Invalid choice]"), as poke-env logs them."""

    def __init__(self) -> None:
        super().__init__()
        self._n = 0
        self._lock = threading.Lock()  # counted on the env's loop thread, taken on the stepping one

    def filter(self, record: logging.LogRecord) -> bool:
        if "Error message received" in str(record.msg):
            text = " ".join(str(a) for a in record.args or ())
            if "[Unavailable choice]" in text or "[Invalid choice]" in text:
                with self._lock:
                    self._n += 1
        return True

    def take(self) -> int:
        with self._lock:
            n, self._n = self._n, 0
        return n


def _cancel_loop_tasks(loop: asyncio.AbstractEventLoop) -> None:
    def cancel():
        for task in asyncio.all_tasks(loop):
            task.cancel()

    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(cancel)
        except RuntimeError:  # closed meanwhile
            pass


def close_pokeenv(env: DocsExampleEnv, timeout: float = CLOSE_TIMEOUT_S) -> None:
    """``PokeEnv.close()`` (forfeits a battle in progress and waits for it to end), then what
    it leaves running: both players' websockets, the tasks on the env's loop, the loop and
    its thread. Each wait is bounded; never raises."""
    loop = env._loop
    closer = threading.Thread(target=_quietly(env.close), name="envbench-close", daemon=True)
    closer.start()
    closer.join(timeout)
    if closer.is_alive():  # a battle that never ends (server gone): unblock close()
        _cancel_loop_tasks(loop)
        closer.join(5.0)
    for agent in (env.agent1, env.agent2):
        agent.logger.disabled = True  # "Listen interrupted", sends to a closed socket: noise now
        client = agent.ps_client
        if getattr(client, "websocket", None) is not None and not loop.is_closed():
            _quietly(lambda: asyncio.run_coroutine_threadsafe(client._stop_listening(), loop).result(5.0))()
        listening = getattr(client, "_listening_coroutine", None)
        if listening is not None:
            _quietly(lambda: concurrent.futures.wait([listening], timeout=5.0))()

    async def cancel_rest():
        me = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not me]
        for t in rest:
            t.cancel()
        await asyncio.wait(rest, timeout=5.0) if rest else None

    if not loop.is_closed():
        _quietly(lambda: asyncio.run_coroutine_threadsafe(cancel_rest(), loop).result(10.0))()
        _quietly(lambda: loop.call_soon_threadsafe(loop.stop))()
        deadline = time.monotonic() + 5.0
        while loop.is_running() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not loop.is_running():  # its thread has left run_forever and ends now
            thread = getattr(env, "_envbench_loop_thread", None)
            if thread is not None:
                thread.join(5.0)
            _quietly(loop.close)()


def _quietly(fn: Callable[[], Any]) -> Callable[[], None]:
    def run():
        try:
            fn()
        except BaseException:  # noqa: BLE001 - teardown is best effort
            pass
    return run


def make_env(ws_url: str, battle_format: str, names: tuple[str, str, str]) -> ProbedEnv:
    """One docs-style env (picklable through functools.partial: SubprocVecEnv's factory)."""
    server = ServerConfiguration(ws_url, None)  # type: ignore[arg-type]  # no login server
    env = DocsExampleEnv(
        battle_format=battle_format,
        log_level=POKEENV_LOG_LEVEL,
        server_configuration=server,
        account_configuration1=AccountConfiguration(names[0], None),
        account_configuration2=AccountConfiguration(names[1], None),
        strict=True,  # an order not among the battle's valid orders raises, never reaches Showdown
    )
    # The thread PokeEnv started for its loop (it keeps no reference): joined on close.
    env._envbench_loop_thread = next(  # type: ignore[attr-defined]
        (t for t in threading.enumerate() if getattr(t, "_target", None) == env._loop.run_forever), None)
    try:
        opponent = RandomPlayer(
            account_configuration=AccountConfiguration(names[2], None),
            battle_format=battle_format,
            server_configuration=server,
            log_level=POKEENV_LOG_LEVEL,
            start_listening=False,
        )
        return ProbedEnv(SingleAgentWrapper(env, opponent))
    except BaseException:
        close_pokeenv(env, timeout=5.0)
        raise


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
            _quietly(lambda: remote.send(("close", None)))()
    for p in venv.processes:
        p.join(CLOSE_TIMEOUT_S + 10.0)
        if p.is_alive():
            p.terminate()
            p.join(5.0)
        if p.is_alive():
            p.kill()
            p.join(5.0)
    for remote in venv.remotes:
        _quietly(remote.close)()
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
            _quietly(venv.close)()  # DummyVecEnv.close(): each env's close()
        for env in envs:
            env.close()  # idempotent
        if tracker is not None:
            _quietly(tracker._stop)()
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


__all__ = ["SETUPS", "measure_pokeenv", "make_env", "DocsExampleEnv", "ProbedEnv", "pick_legal"]


if __name__ == "__main__":  # pragma: no cover - quick manual run: python -m maple_async.tools.envbench URL
    import json
    import sys

    logging.basicConfig(level=logging.WARNING)
    target = sys.argv[1]
    for name in sys.argv[2:] or list(SETUPS):
        print(json.dumps(measure_pokeenv(target, name, seconds=15.0)), flush=True)


# -- maple-async's pool, driven the same way ------------------------------------------------

def _random_legal(masks: np.ndarray, rng) -> np.ndarray:
    """A uniform legal action per row (the argmax of uniform noise over the legal ones)."""
    return np.argmax(rng.random(masks.shape) * masks, axis=1)


def measure_pool(url: str, cfg, num_battles: int, seconds: float, warmup_s: float = 3.0,
                 face: str = "async", server_pgid: Optional[int] = None, shards: int = 1,
                 opponent: str = "self") -> dict:
    """maple-async's :class:`~maple_async.env.BattlePool` in self-play, stepped by a
    random-legal consumer in this thread through the async API (``face="async"``: ``recv``
    what is pending, ``send`` it back) or the synchronous Gymnasium face (``"sync"``: every
    slot, every step, on the decision clock; ``"sync-flush"``: on the flush clock). Decisions are Showdown requests answered (both sides); the window
    starts after ``warmup_s`` and once as many battle sides as there are slots have ended.
    ``shards`` > 1: the pool's shards (worker processes), all on the server at ``url``.
    ``opponent``: a baseline instead of self-play, whose decisions are not counted (as
    poke-env's single-agent set-ups count only the learning side's)."""
    from ..env import BattlePool
    from ..env.gym import BattleVectorEnv
    from ..server import group_cpu_s
    rng = np.random.default_rng(0)
    kwargs = dict(battle_format=cfg.runner.battle_format, num_battles=num_battles, config=cfg,
                  server=url, shards=shards, opponent=opponent)
    env = BattleVectorEnv(clock="flush" if face == "sync-flush" else None, **kwargs) if face != "async" else None
    pool = env.pool if env is not None else BattlePool(**kwargs)
    try:
        if env is not None:
            obs, _info = env.reset()
            step = lambda: env.step(_random_legal(obs["action_mask"], rng))  # noqa: E731
        else:
            pool.async_reset()

        def snap() -> tuple:
            s = pool.stats
            cpu = group_cpu_s(server_pgid) if server_pgid else None
            return s["decisions"], s["battles"], time.perf_counter(), time.process_time(), cpu

        t0 = t_check = time.perf_counter()
        start = None
        while True:
            if env is not None:
                obs, _r, _t, _u, _i = step()
            else:
                o, _r, _t, _u, info = pool.recv()
                pool.send(_random_legal(o["action_mask"], rng), info["env_id"])
            now = time.perf_counter()
            if start is None:
                if now - t0 >= warmup_s and now - t_check >= 0.5:  # (a sharded pool's stats cost a round trip)
                    t_check = now
                    if pool.stats["battles"] >= pool.num_envs:
                        start = snap()
            elif now - start[2] >= seconds:
                end = snap()
                break
    finally:
        (env or pool).close()
    sides = 2 if opponent == "self" else 1
    d, b, dt = end[0] - start[0], (end[1] - start[1]) / sides, end[2] - start[2]
    out = {"setup": f"maple-async pool, {face}" + (f", {shards} shards" if shards > 1 else "")
           + ("" if opponent == "self" else f", vs {opponent}"),
           "envs": pool.num_envs, "battles_in_flight": num_battles,
           "decisions": d, "battles": b, "seconds": dt, "decisions_per_s": d / dt, "battles_per_s": b / dt,
           "cpu_us_per_decision": 1e6 * (end[3] - start[3]) / d if d else float("nan")}
    if start[4] is not None and end[4] is not None:
        out["server_cpu_us_per_decision"] = 1e6 * (end[4] - start[4]) / d if d else float("nan")
    return out


# -- bench --env: every phase on one server, in one run -------------------------------------

def _pooled(windows: list[dict]) -> dict:
    """Rounds of one phase as one window (counts and seconds summed)."""
    ok = [w for w in windows if "error" not in w]
    if not ok:
        return dict(windows[0])
    out = dict(ok[0])
    for k in ("decisions", "battles", "seconds"):
        out[k] = sum(w[k] for w in ok)
    out["decisions_per_s"] = out["decisions"] / out["seconds"]
    out["battles_per_s"] = out["battles"] / out["seconds"]
    for k in ("cpu_us_per_decision", "server_cpu_us_per_decision"):
        if k in out:
            out[k] = sum(w[k] * w["decisions"] for w in ok) / out["decisions"]
    out["rounds"] = [w["decisions_per_s"] for w in ok]
    return out


async def run_env_bench(cfg, url: str, seconds: float, warmup_s: float, repeats: int = 1,
                        concurrencies=(64, 128), setups=tuple(SETUPS), sync_concurrency: Optional[int] = None,
                        server_pgid: Optional[int] = None, progress=print, shards: int = 1,
                        opponent: Optional[str] = None) -> dict:
    """One run on one server: per round, the RandomPlayer ceiling and the pool's async API
    at each concurrency, the synchronous face at ``sync_concurrency`` (default the first),
    and poke-env's own environment set-ups; rounds alternate their order (a machine that
    drifts biases no phase). ``shards`` > 1 adds the async API at the first concurrency
    with that many shards (worker processes on the same server);
    ``opponent`` (a baseline) adds it against that baseline, the learner's side alone counted.
    Returns the pooled windows and the ratios."""
    from . import bench
    sync_c = sync_concurrency or concurrencies[0]
    phases: list[tuple[str, Callable]] = []
    for c in concurrencies:
        async def ceiling(c=c):
            w = await bench.measure_ceiling(url, c, seconds, warmup_s, cfg.runner.battle_format, server_pgid,
                                            bench.for_config(cfg))
            out = {"setup": "ceiling (RandomPlayer vs RandomPlayer)", "battles_in_flight": c,
                   "decisions": w.decisions, "battles": w.battles, "seconds": w.seconds,
                   "decisions_per_s": w.decisions_per_s, "battles_per_s": w.battles_per_s,
                   "cpu_us_per_decision": w.us_per_decision(w.cpu_s)}
            if server_pgid:
                out["server_cpu_us_per_decision"] = w.us_per_decision(w.server_cpu_s)
            return out
        phases.append((f"ceiling@{c}", ceiling))
        phases.append((f"async@{c}", functools.partial(asyncio.to_thread, measure_pool, url, cfg, c, seconds,
                                                       warmup_s, "async", server_pgid)))
    for face in ("sync", "sync-flush"):
        phases.append((f"{face}@{sync_c}", functools.partial(asyncio.to_thread, measure_pool, url, cfg, sync_c,
                                                             seconds, warmup_s, face, server_pgid)))
    if shards > 1:
        c = concurrencies[0]
        phases.append((f"async@{c} shards={shards}", functools.partial(
            asyncio.to_thread, measure_pool, url, cfg, c, seconds, warmup_s, "async", server_pgid, shards)))
    if opponent:
        c = concurrencies[0]
        phases.append((f"async@{c} vs {opponent}", functools.partial(
            asyncio.to_thread, measure_pool, url, cfg, c, seconds, warmup_s, "async", server_pgid, 1, opponent)))
    for s in setups:
        phases.append((f"poke-env {s}", functools.partial(asyncio.to_thread, measure_pokeenv, url, s, seconds,
                                                          warmup_s, cfg.runner.battle_format)))
    windows: dict[str, list] = {name: [] for name, _ in phases}
    for r in range(repeats):
        order = phases if r % 2 == 0 else phases[::-1]
        for name, run in order:
            progress(f"round {r + 1}/{repeats}: {name}")
            windows[name].append(await run())
    out = {"phases": {name: _pooled(ws) for name, ws in windows.items()}, "repeats": repeats,
           "seconds": seconds, "warmup_s": warmup_s, "battle_format": cfg.runner.battle_format}
    ph = out["phases"]
    best = max((w for n, w in ph.items() if n.startswith("poke-env") and "error" not in w),
               key=lambda w: w["decisions_per_s"], default=None)
    out["best_pokeenv"] = best["setup"] if best else None
    if opponent and best and "error" not in ph[f"async@{concurrencies[0]} vs {opponent}"]:
        a = ph[f"async@{concurrencies[0]} vs {opponent}"]
        a["x_best_pokeenv"] = a["decisions_per_s"] / best["decisions_per_s"]
    for c in concurrencies:
        a, ceil = ph[f"async@{c}"], ph[f"ceiling@{c}"]
        if "error" in a or "error" in ceil:
            continue
        a["ratio_to_ceiling"] = a["decisions_per_s"] / ceil["decisions_per_s"]
        rounds = [x / y for x, y in zip(a["rounds"], ceil["rounds"])]
        a["ratio_rounds"] = rounds
        a["ratio_mean"], a["ratio_ci95"] = bench.mean_ci95(rounds)
        if best:
            a["x_best_pokeenv"] = a["decisions_per_s"] / best["decisions_per_s"]
    for name in (f"sync@{sync_c}", f"sync-flush@{sync_c}", f"async@{concurrencies[0]} shards={shards}"):
        s, a = ph.get(name), ph.get(f"async@{name.split('@')[1].split()[0]}")
        if s and a and "error" not in s and "error" not in a:
            s["ratio_to_async"] = s["decisions_per_s"] / a["decisions_per_s"]
    return out


def env_report(result: dict) -> str:
    """The bench's table: every phase's decisions/s and battles/s, the ratios."""
    rows = ["| phase | battles in flight / envs | decisions/s | battles/s | ratio | CPU us/decision (ours / Showdown) |",
            "|---|---|---|---|---|---|"]
    for name, w in result["phases"].items():
        if "error" in w:
            rows.append(f"| {name} | | error: {w['error']} | | | |")
            continue
        size = w.get("battles_in_flight", w.get("envs", ""))
        ratio = ""
        if "ratio_to_ceiling" in w:
            m, h = w["ratio_mean"], w["ratio_ci95"]
            ci = f", rounds {m:.2f} ± {h:.2f}" if h == h else ""
            ratio = f"{w['ratio_to_ceiling']:.2f} of the ceiling{ci}"
            if "x_best_pokeenv" in w:
                ratio += f"; {w['x_best_pokeenv']:.1f}x best poke-env"
        elif "x_best_pokeenv" in w:
            ratio = f"{w['x_best_pokeenv']:.1f}x best poke-env (the learner's side only)"
        elif "ratio_to_async" in w:
            ratio = f"{w['ratio_to_async']:.2f} of the async API (one process)"
        cpu = ""
        if "cpu_us_per_decision" in w:
            cpu = f"{w['cpu_us_per_decision']:.0f} / {w.get('server_cpu_us_per_decision', float('nan')):.0f}"
        rows.append(f"| {name} | {size} | {w['decisions_per_s']:.0f} | {w['battles_per_s']:.2f} | {ratio} | {cpu} |")
    head = (f"bench --env: {result['battle_format']}, {result['repeats']} round(s) of {result['seconds']:.0f} s "
            f"windows after {result['warmup_s']:.0f} s warm-up, one server; best poke-env set-up: "
            f"{result['best_pokeenv']}")
    return head + "\n" + "\n".join(rows)
