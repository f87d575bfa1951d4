"""Real battles on a local Showdown started by the ``showdown_url`` fixture."""

import os
from urllib.parse import urlparse

import numpy as np
import pytest

from maple_async.obs import encoding as enc

from maple_async.obs import actions as act
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from maple_async.config import BatcherConfig
from maple_async.collect.agent import Agent
from maple_async.collect.match import play

pytestmark = pytest.mark.integration


class CheckingAgent(Agent):
    """Cross-checks every mask against poke-env's own list of valid orders."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.mask_errors = []
        self.checked = 0

    def _as_poke_env_order(self, battle, order) -> str:
        """Switches are sent by request slot; check the slot, then compare by name."""
        if isinstance(order, act.SlotSwitchOrder):
            entry = battle.last_request["side"]["pokemon"][order.slot - 1]
            if battle.team.get(entry["ident"]) is not order.order or entry.get("active"):
                self.mask_errors.append((battle.battle_tag, {f"slot {order.slot} is {entry['ident']}"}))
            return str(act.SingleBattleOrder(order.order))
        return str(order)

    async def choose(self, battle, opponent):
        mask = act.action_mask(battle)
        valid = {str(o) for o in battle.valid_orders}
        allowed = {self._as_poke_env_order(battle, act.action_to_order(battle, a)) for a in np.flatnonzero(mask)}
        if not allowed <= valid:
            self.mask_errors.append((battle.battle_tag, allowed - valid))
        self.checked += 1
        return await super().choose(battle, opponent)


def _listening_addresses(port: int) -> set:
    """Local addresses with a LISTEN socket on ``port`` (from /proc/net/tcp{,6})."""
    out = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(path):
            continue
        for line in open(path).read().splitlines()[1:]:
            parts = line.split()
            addr, p = parts[1].split(":")
            if int(p, 16) == port and parts[3] == "0A":
                out.add(addr)
    return out


async def test_concurrent_lstm_self_play(venue):
    policy = InferencePolicy(nets.build("lstm", hidden_size=64))
    trajectories = []
    agent = CheckingAgent(policy, BatcherConfig(max_wait_ms=2.0), record=True,
                          on_trajectory=trajectories.append)
    n = 40
    res = await play(agent, venue, n, opponent="self", concurrency=32)
    await agent.batcher.close()

    assert res.battles == n
    assert res.wins + res.losses == n, "every battle must finish with a winner"
    assert agent.stats.battles == 2 * n  # both sides are the agent
    assert agent.batcher.stats.batches > 0 and res.mean_batch_size > 1.0
    assert agent.checked > n * 5 and agent.mask_errors == []
    # [Unavailable choice] can legitimately happen (a hidden trapping ability is revealed
    # only when we try to switch); each one is re-decided, never recorded twice.
    assert agent.stats.invalid_choices == 0 and agent.stats.other_server_errors == 0
    assert agent.stats.retries == agent.stats.unavailable_choices
    assert agent.stats.fallbacks == 0
    assert len(agent.hidden) == 0 and len(agent.live) == 0
    assert agent.batcher.pending == 0
    # Both sides' trajectories, each ending with the win/loss reward.
    assert len(trajectories) == 2 * n
    for t in trajectories:
        arr = t.arrays()
        assert arr["obs"].shape == (len(t), enc.OBS_DIM)
        assert arr["masks"][np.arange(len(t)), arr["actions"]].all()
        assert arr["rewards"][-1] == pytest.approx(t.outcome)


async def test_against_baseline_counts_wins(venue):
    policy = InferencePolicy(nets.build("mlp", hidden_size=32))
    agent = Agent(policy, BatcherConfig())
    res = await play(agent, venue, 8, opponent="random", concurrency=8)
    await agent.batcher.close()
    assert res.battles == 8 and res.wins + res.losses + res.ties == 8
    assert agent.stats.battles == 8 and agent.stats.invalid_choices == 0


@pytest.mark.parametrize("options", [{}, {"track_changes": False}, {"fast_battles": False}],
                         ids=["from changes", "incremental off", "stock battles"])
async def test_live_encodings_equal_a_full_read(venue, monkeypatch, options):
    """At every live decision the runner's encoding (from the battle's changes, when it
    tracks them) must be byte-equal to reading everything; the options reach the battles."""
    from maple_async.pokeenv.fastbattle import FastBattle
    real = enc.encode
    seen = {"decisions": 0, "mismatches": [], "kinds": set()}

    def checking(battle, **kw):
        obs = real(battle, **kw)
        full = real(battle, incremental=False)
        if obs.tobytes() != full.tobytes():
            seen["mismatches"].append((battle.battle_tag, np.flatnonzero(obs != full).tolist()))
        seen["decisions"] += 1
        seen["kinds"].add((type(battle) is FastBattle, "_maple_teams" in battle.__dict__))
        return obs
    monkeypatch.setattr(enc, "encode", checking)
    policy = InferencePolicy(nets.build("mlp", hidden_size=32))
    agent = Agent(policy, BatcherConfig())
    res = await play(agent, venue, 8, opponent="self", concurrency=8,
                     battle_options=options)
    await agent.batcher.close()
    assert res.battles == 8 and seen["decisions"] > 100
    assert seen["mismatches"] == []
    fast = options.get("fast_battles", True)
    cached = fast and options.get("track_changes", True)
    assert seen["kinds"] == {(fast, cached)}


def test_managed_server_binds_loopback_only(showdown_url):
    if os.environ.get("MAPLE_TEST_SERVER"):
        pytest.skip("using an external server")
    port = urlparse(showdown_url).port
    addrs = _listening_addresses(port)
    assert addrs, f"nothing listening on {port}"
    # 0100007F is 127.0.0.1 in /proc's little-endian hex; 00000000 would be 0.0.0.0.
    assert addrs == {"0100007F"}, addrs
