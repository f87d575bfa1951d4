"""poke-env's OWN gym environment, set up the way poke-env's docs show, for ``bench --env``.

The docs' single-agent set-up: a :class:`~poke_env.environment.SinglesEnv` subclass with a
small hand-made observation (4 move base powers, 4 damage multipliers, 2 fainted counts),
wrapped in :class:`~poke_env.environment.SingleAgentWrapper` against
``RandomPlayer(start_listening=False)`` (the wrapper calls the opponent's ``choose_move``
itself, so the opponent needs no connection of its own: each env holds two websockets,
one per side, on an event loop of its own). :class:`ProbedEnv` around it says whether a
step sent the learning agent's order and counts the orders Showdown refused, and closes
all the env started.

The envs run with ``strict=True``: an action whose order is not among the battle's valid
orders raises instead of reaching Showdown, so a random-legal run that completes never sent
an illegal action.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import Any, Callable

import gymnasium
import numpy as np
from gymnasium.spaces import Box

from poke_env.battle import AbstractBattle, Battle
from poke_env.data import GenData
from poke_env.environment import SingleAgentWrapper, SinglesEnv
from poke_env.player import RandomPlayer
from poke_env.ps_client import AccountConfiguration, ServerConfiguration


#: info keys set by :class:`ProbedEnv`: did this step send the learning agent's order; how many
#: of that agent's choices Showdown refused since the previous step
ORDER_SENT = "envbench_order_sent"
REJECTED = "envbench_rejected"

POKEENV_LOG_LEVEL = 25  # as the docs' example: poke-env's INFO chatter off
CLOSE_TIMEOUT_S = 20.0


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
    closer = threading.Thread(target=quietly(env.close), name="envbench-close", daemon=True)
    closer.start()
    closer.join(timeout)
    if closer.is_alive():  # a battle that never ends (server gone): unblock close()
        _cancel_loop_tasks(loop)
        closer.join(5.0)
    for agent in (env.agent1, env.agent2):
        agent.logger.disabled = True  # "Listen interrupted", sends to a closed socket: noise now
        client = agent.ps_client
        if getattr(client, "websocket", None) is not None and not loop.is_closed():
            quietly(lambda: asyncio.run_coroutine_threadsafe(client._stop_listening(), loop).result(5.0))()
        listening = getattr(client, "_listening_coroutine", None)
        if listening is not None:
            quietly(lambda: concurrent.futures.wait([listening], timeout=5.0))()

    async def cancel_rest():
        me = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not me]
        for t in rest:
            t.cancel()
        await asyncio.wait(rest, timeout=5.0) if rest else None

    if not loop.is_closed():
        quietly(lambda: asyncio.run_coroutine_threadsafe(cancel_rest(), loop).result(10.0))()
        quietly(lambda: loop.call_soon_threadsafe(loop.stop))()
        deadline = time.monotonic() + 5.0
        while loop.is_running() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not loop.is_running():  # its thread has left run_forever and ends now
            thread = getattr(env, "_envbench_loop_thread", None)
            if thread is not None:
                thread.join(5.0)
            quietly(loop.close)()


def quietly(fn: Callable[[], Any]) -> Callable[[], None]:
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

