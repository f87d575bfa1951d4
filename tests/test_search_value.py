"""search/value.py and the agent's search.

* A leaf's value is the agent's own: in a real battle on the test server, each decision's root
  (a copy of the battle as the agent saw it, and the hidden state before its forward) given the
  protocol the player then received up to its next decision gives exactly the observation, the
  hidden state and the value the agent computed at that next decision. The same lines from the
  wrong hidden state give another value (the check can tell).
* ``eval --search`` of a fresh checkpoint against random finishes, searches decisions and
  prints the searched/refused line; a leaf process killed mid-search costs that decision's
  search (the policy plays it) and is started again.
* Policy actions map to the request's choice strings (the prior).
"""

import asyncio
import pickle
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from maple_async import config as C
from maple_async.collect.agent import Agent
from maple_async.collect.match import Match
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from maple_async.obs import actions as act
from maple_async.obs.encoding import snapshot
from leaf_kill import kill_during_leaves
from maple_async.search.leaves import Leaf
from maple_async.search.value import DecisionValue, action_choice

integration = [pytest.mark.integration,
               pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")]


def fresh_policy(hidden=32, seed=0):
    import torch
    torch.manual_seed(seed)
    cfg = C.load(None, {"network.hidden_size": hidden, "runner.battle_format": "gen4randombattle"})
    return InferencePolicy(nets.from_config(cfg.network), "cpu"), cfg


class RecordingAgent(Agent):
    """Records each decision: the battle as the agent saw it (pickled), the hidden state before
    and after its forward, its observation and value; ``events`` interleaves them with the
    battle messages the player received."""

    def __init__(self, *a, events, **kw):
        super().__init__(*a, **kw)
        self.events = events

    async def _decide(self, key, live, obs, mask):
        request = live.battle.last_request or {}
        record = {"battle": snapshot(live.battle), "obs": obs.copy(),
                  "h_before": np.array(live.hidden_before, copy=True),
                  "rqid": request.get("rqid"), "retry": live.retry}
        decision = await super()._decide(key, live, obs, mask)
        record.update(value=decision.value, h_after=np.array(self.hidden.get(key), copy=True))
        self.events.append(("decision", record))
        return decision


async def _recorded_battle(url, policy):
    from maple_async.config import BatcherConfig
    events = []
    agent = RecordingAgent(policy, BatcherConfig(), name="rec", events=events)
    match = Match(url, agent, "random", concurrency=1, battle_format="gen4randombattle")
    client = match.me.ps_client
    handle = client._on_battle_message  # (poke-env's client holds the player's handler)

    async def recorded(split_messages):
        events.append(("lines", ["|".join(m) for m in split_messages[1:]]))
        await handle(split_messages)

    client._on_battle_message = recorded
    try:
        await asyncio.wait_for(match.play(1), 240)
    finally:
        await match.close(close_batchers=True)
    return events


def _pairs(events):
    """(decision t, the lines received after it up to decision t+1, decision t+1). A decision
    asked again (its order refused: the same rqid, or a new one marked ``update`` when a hidden
    trap is revealed) starts again from t's hidden state: it pairs with the next, not the last."""
    out, last, lines = [], None, []
    for kind, x in events:
        if kind == "lines":
            lines += x
        else:
            if last is not None and x["rqid"] != last["rqid"] and not x["retry"]:
                out.append((last, "\n".join(lines), x))
            last, lines = x, []
    return out


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
async def test_a_leaf_is_valued_as_the_agent_values_the_same_state(showdown_url):
    policy, cfg = fresh_policy()
    pairs = _pairs(await _recorded_battle(showdown_url, policy))
    assert len(pairs) >= 5, "too short a battle to compare"
    told_apart = 0
    for root, lines, nxt in pairs:
        battle = pickle.loads(root["battle"])
        dv = DecisionValue(policy, battle, root["h_before"])
        # the root step is the agent's: same observation, same hidden state after it
        np.testing.assert_allclose(dv.root.obs, root["obs"], atol=1e-6)
        np.testing.assert_allclose(dv.root.h_after, root["h_after"], atol=1e-5)
        leaf = Leaf(lines=lines, request=None)  # the lines carry the next |request|
        np.testing.assert_allclose(dv.encode(leaf), nxt["obs"], atol=1e-6)
        got = dv([leaf])
        assert got.values[0] == pytest.approx(nxt["value"], abs=1e-5)
        assert got.scores[0] == pytest.approx(nxt["value"], abs=1e-5)  # no reward config: the raw value
        wrong = DecisionValue(policy, pickle.loads(root["battle"]), None)  # h_{t-1} ignored: zeros
        wrong.root.h_after = np.asarray(root["h_before"], np.float32)  # the leaf fed h_{t-1}
        told_apart += abs(wrong([leaf]).values[0] - nxt["value"]) > 1e-4
        assert pickle.loads(root["battle"]).turn == battle.turn, "the real (pickled) battle moved"
    assert told_apart >= len(pairs) // 2, "the wrong hidden state gives the same values: the check is blind"


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
async def test_shaped_scores_add_the_turns_reward(showdown_url):
    policy, cfg = fresh_policy(seed=1)
    pairs = _pairs(await _recorded_battle(showdown_url, policy))
    reward = C.RewardConfig(win=1.0, hp=0.1, faint=0.05)
    from maple_async.obs.rewards import RewardTracker
    moved = 0
    for root, lines, nxt in pairs:
        dv = DecisionValue(policy, pickle.loads(root["battle"]), root["h_before"], reward, gamma=0.9)
        got = dv([Leaf(lines=lines, request=None)])
        t = RewardTracker(reward, 0.9)
        t.step(pickle.loads(root["battle"]))
        r = t.step(dv.leaf_battle(Leaf(lines=lines)))
        assert got.scores[0] == pytest.approx(r + 0.9 * nxt["value"], abs=1e-5)
        moved += abs(r) > 1e-6
    assert moved, "no turn changed HP: the reward term was never tested"


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
async def test_a_two_turn_leaf_is_valued_as_the_agent_values_the_state_two_decisions_on(showdown_url):
    # search.depth 2: decision t's copy takes the lines up to t+1 (kept: the hidden state after
    # t+1's forward, the policy's likeliest choice there), then the lines up to t+2: the agent's
    # own value at t+2; with shaping, r1 + gamma (r2 + gamma V).
    from maple_async.obs.rewards import RewardTracker
    from maple_async.search.searcher import legal_choices
    policy, cfg = fresh_policy(seed=2)
    pairs = _pairs(await _recorded_battle(showdown_url, policy))
    triples = [(a, b) for a, b in zip(pairs, pairs[1:]) if a[2] is b[0]]
    assert len(triples) >= 4, "too short a battle to compare"
    reward = C.RewardConfig(win=1.0, hp=0.1, faint=0.05)
    plain, shaped, want, want_shaped, second = [], [], [], [], []
    for (root, lines1, mid), (_, lines2, end) in triples:
        dv = DecisionValue(policy, pickle.loads(root["battle"]), root["h_before"], gamma=0.8)
        (after,) = dv([Leaf(lines=lines1)], keep=True).after
        np.testing.assert_allclose(after.hidden, mid["h_after"], atol=1e-5)
        assert after.choice in legal_choices(pickle.loads(mid["battle"]).last_request), after.choice
        plain.append(after)
        sv = DecisionValue(policy, pickle.loads(root["battle"]), root["h_before"], reward, gamma=0.9)
        (a,) = sv([Leaf(lines=lines1)], keep=True).after
        shaped.append(a)
        t = RewardTracker(reward, 0.9)
        t.step(pickle.loads(root["battle"]))
        r1 = t.step(pickle.loads(mid["battle"]))
        r2 = t.step(pickle.loads(end["battle"]))
        want.append(0.8 * end["value"])  # without a reward config: discounted a turn (dv's gamma)
        want_shaped.append(r1 + 0.9 * (r2 + 0.9 * end["value"]))
        second.append(Leaf(lines=lines2))
    # every triple's second turn in one batch: each row its own hidden state and reward tracker
    np.testing.assert_allclose(dv.onward(plain, second).scores, want, atol=1e-5)
    np.testing.assert_allclose(sv.onward(shaped, second).scores, want_shaped, atol=1e-5)
    with pytest.raises(ValueError, match="already played"):
        sv.onward(shaped[:1], second[:1])
    assert dv([Leaf(lines=lines1)]).after is None  # not asked to keep


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
async def test_a_three_turn_leaf_is_valued_as_the_agent_values_the_state_three_decisions_on(showdown_url):
    # search.depth 3: as two turns, then a third from the After the second turn kept:
    # the agent's own value and hidden state at t+3; with shaping, r1 + g (r2 + g (r3 + g V)).
    from maple_async.obs.rewards import RewardTracker
    policy, cfg = fresh_policy(seed=3)
    pairs = _pairs(await _recorded_battle(showdown_url, policy))
    chains = [(a, b, c) for a, b, c in zip(pairs, pairs[1:], pairs[2:]) if a[2] is b[0] and b[2] is c[0]]
    assert len(chains) >= 3, "too short a battle to compare"
    reward = C.RewardConfig(win=1.0, hp=0.1, faint=0.05)
    for (root, lines1, mid), (_, lines2, mid2), (_, lines3, end) in chains:
        t = RewardTracker(reward, 0.9)
        t.step(pickle.loads(root["battle"]))
        r1, r2, r3 = (t.step(pickle.loads(x["battle"])) for x in (mid, mid2, end))
        for dv, two_want, three_want in (
                (DecisionValue(policy, pickle.loads(root["battle"]), root["h_before"], gamma=0.8),
                 0.8 * mid2["value"], 0.8 ** 2 * end["value"]),
                (DecisionValue(policy, pickle.loads(root["battle"]), root["h_before"], reward, gamma=0.9),
                 r1 + 0.9 * (r2 + 0.9 * mid2["value"]), r1 + 0.9 * (r2 + 0.9 * (r3 + 0.9 * end["value"])))):
            (a1,) = dv([Leaf(lines=lines1)], keep=True).after
            two = dv.onward([a1], [Leaf(lines=lines2)], keep=True)
            (a2,) = two.after
            np.testing.assert_allclose(a2.hidden, mid2["h_after"], atol=1e-5)
            assert two.scores[0] == pytest.approx(two_want, abs=1e-5)
            assert dv.onward([a2], [Leaf(lines=lines3)]).scores[0] == pytest.approx(three_want, abs=1e-5)


def test_a_leaf_that_ends_in_a_later_turn_scores_its_outcome_discounted_from_the_root():
    from maple_async.search.value import After
    policy, _ = fresh_policy()
    dv = DecisionValue.__new__(DecisionValue)  # an ended leaf without a reward config is not forwarded
    dv.policy, dv.tracker, dv.gamma = policy, None, 0.9
    after = [After(object(), None, np.zeros(32, np.float32), "move 1", 0.0, 0.81),
             After(object(), None, np.zeros(32, np.float32), "move 2", 0.0, 0.9)]
    got = dv.onward(after, [Leaf(ended=True, winner="us"), Leaf(ended=True, winner="them")], keep=True)
    np.testing.assert_allclose(got.scores, [0.81, -0.9])  # a third turn's win, a second turn's loss
    assert got.after == [None, None]  # nothing left to play
    with pytest.raises(ValueError, match="already played"):
        dv.onward(after[:1], [Leaf(ended=True, winner="us")])


def test_ended_leaves_score_the_outcome():
    policy, _ = fresh_policy()
    dv = DecisionValue.__new__(DecisionValue)  # no root needed: an ended leaf is not forwarded
    dv.policy, dv.tracker, dv.gamma = policy, None, 0.99
    got = dv([Leaf(ended=True, winner="us"), Leaf(ended=True, winner="them"), Leaf(ended=True, winner="tie"),
              Leaf(error="refused")])
    assert list(got.values[:3]) == [1.0, -1.0, 0.0] and np.isnan(got.values[3])


def run_cli(*args, timeout=600):
    return subprocess.run(["nice", "-n", "19", sys.executable, "-m", "maple_async.cli", *args],
                          capture_output=True, text=True, timeout=timeout)


def _checkpoint(tmp_path):
    from maple_async.run.loop import LearningLoop
    cfg = C.load(None, {"runner.battle_format": "gen4randombattle", "network.hidden_size": 32,
                        "train.run_dir": str(tmp_path / "run"), "train.tensorboard": False})
    return str(LearningLoop(cfg, "cpu", quiet=True, handle_signals=False).save_checkpoint())


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
@pytest.mark.parametrize("depth", [1, 3])
def test_eval_with_search_plays_the_checkpoint_searched(showdown_url, tmp_path, depth):
    path = _checkpoint(tmp_path)
    e = run_cli("eval", "--checkpoint", path, "--opponents", "random", "--battles", "2", "--search",
                "--server", showdown_url, "--concurrency", "2", "--search.depth", str(depth),
                "--search.engine", "showdown")
    assert e.returncode == 0, e.stdout[-3000:] + e.stderr[-3000:]
    # random is in the default training mix, so the line labels it so
    assert "[eval] agent+search vs random (in training): win rate" in e.stdout and "over 2 battles" in e.stdout
    line = next(x for x in e.stdout.splitlines() if x.startswith("[eval] random: searched"))
    share = float(line.split("searched ")[1].split("%")[0])
    assert share > 0, line
    assert "per searched decision" in line and "ms of compute" in line and "leaves" in line
    assert "failed 0.0%" in line and "later turns failed" not in line, line  # (counted there, not raised)


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_play_with_search_prints_its_line(showdown_url):
    p = run_cli("play", "--config", "test", "--battles", "2", "--search", "--server", showdown_url,
                "--runner.battle_format", "gen4randombattle", "--runner.opponent", "random",
                "--runner.concurrency", "2")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("[play] agent+search: searched"))
    assert float(line.split("searched ")[1].split("%")[0]) > 0, line


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_an_outside_policy_searches_with_the_network_free_value(showdown_url, tmp_path):
    (tmp_path / "pol.py").write_text("def policy():\n    return lambda obs, masks: masks.argmax(axis=1)\n")
    e = run_cli("eval", "--policy", f"{tmp_path}/pol.py:policy", "--opponents", "random", "--battles", "2",
                "--search", "--server", showdown_url, "--concurrency", "2",
                "--runner.battle_format", "gen4randombattle", "--search.states", "1")
    assert e.returncode == 0, e.stdout[-3000:] + e.stderr[-3000:]
    assert "[eval] agent+search vs random" in e.stdout and "over 2 battles" in e.stdout, e.stdout[-3000:]
    line = next(x for x in e.stdout.splitlines() if x.startswith("[eval] random: searched"))
    assert float(line.split("searched ")[1].split("%")[0]) > 0, line


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_eval_with_search_plays_the_same_checkpoint_without_search(showdown_url, tmp_path):
    path = _checkpoint(tmp_path)
    e = run_cli("eval", "--checkpoint", path, "--opponents", f"random,{path}", "--battles", "2", "--search",
                "--server", showdown_url, "--concurrency", "2", "--search.states", "1")
    assert e.returncode == 0, e.stdout[-3000:] + e.stderr[-3000:]
    name = os.path.basename(path)
    rows = [x for x in e.stdout.splitlines() if x.startswith("[eval] ") and " vs " in x]
    assert any(x.startswith(f"[eval] agent+search vs {name} (checkpoint)") for x in rows), rows
    assert any(x.startswith("[eval] agent+search vs random") for x in rows), rows
    assert any(x.startswith(f"[eval] {name} vs random") for x in rows), rows  # the plain agent's own row


def test_search_flags_are_refused_in_one_line(tmp_path):
    e = run_cli("eval", "--checkpoint", "nowhere.pt", "--search", "--search.prior_weight", "1.5",
                "--runner.battle_format", "gen4randombattle", "--config", "test")
    assert e.returncode == 2 and "'search.prior_weight' must be <= 1" in e.stderr, e.stderr[-2000:]


def test_search_on_serve_ladder_and_curve_is_refused_in_one_line(tmp_path):
    def refused(p) -> str:
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("maple-async: error: "), p.stderr
        return lines[0]

    path = _checkpoint(tmp_path)
    for command in ("serve", "ladder"):
        assert "gen9randomdoublesbattle is a doubles format" in refused(
            run_cli(command, "--checkpoint", path, "--runner.battle_format", "gen9randomdoublesbattle", "--search"))
    assert "gen9randomdoublesbattle is a doubles format" in refused(
        run_cli("curve", str(tmp_path), "--search", "--runner.battle_format", "gen9randomdoublesbattle"))


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
async def test_a_killed_leaf_process_costs_one_search_and_the_policy_plays(showdown_url):
    from maple_async.config import BatcherConfig
    from maple_async.collect.search_agent import SearchAgent
    from maple_async.search.searcher import SearchConfig
    policy, cfg = fresh_policy()
    agent = SearchAgent(policy, BatcherConfig(), name="sa", search_config=SearchConfig(engine="showdown", states=1, replies=4),
                        value_reward=cfg.reward, value_gamma=cfg.ppo.gamma)
    hub = agent.searcher.hub
    killed: list = []
    kill_during_leaves(hub, lambda: agent.search_stats.searched, 2, killed)
    match = Match(showdown_url, agent, "random", concurrency=1, battle_format="gen4randombattle")
    played = 0
    try:
        # a battle whose random teams the belief refuses (Ditto, Zoroark) may end before a
        # third searched decision: play on until the kill has happened, at most four
        while not killed and played < 4:
            await asyncio.wait_for(match.play(1), 600)
            played += 1
        alive, pid = hub.alive, hub.pid
    finally:
        await match.close(close_batchers=True)
        await agent.close_search()
    stats = agent.search_stats
    assert killed, "the kill never happened"
    assert match.results["won"] + match.results["lost"] + match.results["tied"] == played
    assert stats.failed["hub_died"] == 1, (stats.failed, stats.examples)
    assert alive and pid != killed[0], "the leaf process was not started again"
    assert stats.searched > 2, stats.line()
    assert agent.stats.invalid_choices == 0, "a searched choice Showdown refused"
    assert not hub.alive


def test_policy_actions_name_the_requests_choices():
    from poke_env.battle import Battle
    import logging
    b = Battle("battle-gen4randombattle-1", "us", logging.getLogger("t"), gen=4)
    b._player_role = "p1"
    request = {"active": [{"moves": [{"move": "Thunderbolt", "id": "thunderbolt", "pp": 24, "maxpp": 24},
                                     {"move": "Hidden Power Ice 70", "id": "hiddenpower", "pp": 24, "maxpp": 24},
                                     {"move": "Shadow Ball", "id": "shadowball", "pp": 24, "maxpp": 24}]}],
               "side": {"name": "us", "id": "p1", "pokemon": [
                   {"ident": "p1: Jolteon", "details": "Jolteon, L80, M", "condition": "250/250", "active": True,
                    "stats": {"atk": 150, "def": 150, "spa": 200, "spd": 200, "spe": 250},
                    "moves": ["thunderbolt", "hiddenpowerice70", "shadowball"], "baseAbility": "voltabsorb",
                    "item": "leftovers", "pokeball": "pokeball"},
                   {"ident": "p1: Blissey", "details": "Blissey, L80, F", "condition": "500/500", "active": False,
                    "stats": {"atk": 50, "def": 50, "spa": 150, "spd": 250, "spe": 100},
                    "moves": ["softboiled"], "baseAbility": "naturalcure", "item": "leftovers",
                    "pokeball": "pokeball"}]},
               "rqid": 3}
    b.parse_request(request)
    mask = act.action_mask(b)
    named = {a: action_choice(b, int(a)) for a in np.flatnonzero(mask)}
    assert named == {1: "switch 2", 6: "move 1", 7: "move 2", 8: "move 3"}, named
