"""One decision's bookkeeping, without a server: what a rejected order undoes."""

import asyncio
import random
from types import SimpleNamespace

import numpy as np

from maple_async.collect import agent as agent_mod
from maple_async.collect.agent import Agent
from maple_async.config import BatcherConfig
from maple_async.inference.batcher import Decision


class ScriptedBatcher:
    """Answers decisions from a script (-1: the forward pass failed)."""

    def __init__(self, actions):
        self.actions = list(actions)

    def decide(self, key, generation, obs, mask):
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(Decision(self.actions.pop(0), -0.5, 0.1, 3))
        return fut

    def notify(self):
        pass


def _agent(monkeypatch, actions):
    def encode(battle, side_state, mask, moves):
        mask[6:10] = True  # four moves legal
        return np.zeros(4, np.float32)

    monkeypatch.setattr(agent_mod.enc, "encode", encode)
    monkeypatch.setattr(agent_mod.act, "action_to_order", lambda battle, action, moves: f"/choose {action}")
    policy = SimpleNamespace(hidden_dim=0, version=0)
    a = Agent(policy, BatcherConfig(), record=True)
    a.batcher = ScriptedBatcher(actions)
    return a


def _battle(rqid):
    return SimpleNamespace(battle_tag="b1", player_role="p1", last_request={"rqid": rqid})


async def test_a_rejected_fallback_order_undoes_no_recorded_step(monkeypatch):
    a = _agent(monkeypatch, [6, -1, 8])
    random.seed(0)
    await a.choose(_battle(1), "self")  # a real decision: recorded
    await a.choose(_battle(2), "self")  # the forward failed: a random legal order, not recorded
    await a.choose(_battle(2), "self")  # Showdown rejected it and asks again
    traj = a.live[("b1", "p1")].traj
    assert a.stats.fallbacks == 1 and a.stats.retries == 1
    assert traj.actions == [6, 8]  # the first decision is still there


async def test_a_rejected_recorded_order_is_replaced(monkeypatch):
    a = _agent(monkeypatch, [6, 7, 9])
    await a.choose(_battle(1), "self")
    await a.choose(_battle(2), "self")
    await a.choose(_battle(2), "self")  # the order for 7 was rejected
    traj = a.live[("b1", "p1")].traj
    assert traj.actions == [6, 9] and len(traj.obs) == len(traj.rewards) == 2


def test_our_players_never_send_poke_envs_default_order_by_themselves():
    from poke_env.player import Player

    from maple_async.pokeenv.players import PolicyPlayer
    assert Player.DEFAULT_CHOICE_CHANCE > 0  # poke-env's own does
    assert PolicyPlayer.DEFAULT_CHOICE_CHANCE == 0
