"""The battle pool for outside learners on a real local Showdown: the async API's contract,
one decision path with the trainer, bad input, a killed server, close(); the Gymnasium and
SB3 faces; outside policies in eval."""

import os
import signal
import threading
import time

import numpy as np
import pytest

from maple_async.env import BattlePool, make_pool, make_sb3_vec_env, make_vector_env
from maple_async.env.api import PoolAPI
from maple_async.obs import encoding as enc
from maple_async.obs import actions as act
from maple_async.obs.features import derive

pytestmark = pytest.mark.integration


def random_legal(masks, rng):
    return np.array([rng.choice(np.flatnonzero(m)) for m in masks], dtype=np.int64)


def play_until(pool, n_ends, rng, on_batch=None, limit_s=180.0):
    """Random legal actions until ``n_ends`` terminal or truncated steps came back."""
    ends = 0
    t0 = time.monotonic()
    while ends < n_ends:
        assert time.monotonic() - t0 < limit_s, f"only {ends} of {n_ends} battle sides ended"
        obs, rew, term, trunc, info = pool.recv(timeout=30)
        if on_batch is not None:
            on_batch(obs, rew, term, trunc, info)
        ends += int(term.sum() + trunc.sum())
        pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
    return ends


def test_self_play_battles_finish_once_per_side_with_the_trainers_rewards_and_observations(showdown_url):
    rng = np.random.default_rng(0)
    trajectories = {}
    steps = {}  # (tag, side) -> [(elapsed, reward, obs)]
    terminal = {}
    slot_of = {}
    with BattlePool(num_battles=8, server=showdown_url) as pool:
        assert pool.num_envs == 16
        pool.agent.record = True  # the trainer's trajectories of the same battles, for comparison
        pool.agent.on_trajectory = lambda t: trajectories.__setitem__(t.key, t)

        def check(obs, rew, term, trunc, info):
            assert obs["observation"].shape == (len(rew), enc.OBS_DIM)
            for i, e in enumerate(info["env_id"]):
                key = (info["battle_tag"][i], info["side"][i])
                assert e // 2 == slot_of.setdefault(key[0], e // 2), "a battle's sides share a battle index"
                assert e % 2 == (key[1] == "p2")
                assert key not in terminal, "a side came back after its terminal step"
                seen = steps.setdefault(key, [])
                assert info["elapsed_step"][i] == len(seen)
                seen.append((rew[i], obs["observation"][i].copy(), info["retry"][i]))
                if term[i] or trunc[i]:
                    terminal[key] = info["outcome"][i]
                else:
                    assert obs["action_mask"][i].any()
                    assert info["kind"][i] in ("move", "forced_switch")

        play_until(pool, 32, rng, check)
        pool.async_reset()  # a second call does nothing
    finished = [k for k in terminal if k in trajectories]
    assert len(finished) >= 24
    battles = {k[0] for k in finished}
    for tag in battles:  # both sides of a self-play battle end once, with opposite outcomes
        outcomes = {terminal.get((tag, s)) for s in ("p1", "p2")}
        assert outcomes in ({"won", "lost"}, {"tie"}) or None in outcomes
    for key in finished:
        traj, seen = trajectories[key], steps[key]
        assert sum(r for r, _, _ in seen) == pytest.approx(sum(traj.rewards), abs=1e-4)
        kept = []  # the trainer replaces a step Showdown rejected; the pool flags the retry
        for r, o, retry in seen:
            if retry:
                kept.pop()
            kept.append(o)
        assert len(kept) == len(traj) + 1  # every decision, then the terminal step
        recorded = derive(np.stack(traj.obs).astype(np.float32))
        np.testing.assert_array_equal(np.stack(kept[:-1]), recorded)


def test_batch_size_is_honoured_and_bad_input_sends_nothing(showdown_url):
    rng = np.random.default_rng(1)
    with BattlePool(num_battles=4, batch_size=3, server=showdown_url) as pool:
        obs, rew, term, trunc, info = pool.recv(timeout=60)
        assert len(rew) == 3 and not info["timed_out"]
        ids, masks = info["env_id"], obs["action_mask"]
        good = random_legal(masks, rng)
        illegal = int(np.flatnonzero(~masks[0])[0])
        for actions, env_ids, words in [
            (np.r_[illegal, good[1:]], ids, "not legal"),
            (good, np.r_[99, ids[1:]], "does not exist"),
            (good[:2], ids, "2 actions for 3"),
            (good, np.r_[ids[0], ids[0], ids[2]], "twice"),
        ]:
            with pytest.raises(ValueError, match=words):
                pool.send(actions, env_ids)
        other = next(e for e in range(pool.num_envs) if e not in set(ids.tolist()))
        with pytest.raises(ValueError, match="not pending"):
            pool.send([0], [other])
        pool.send(good, ids)  # nothing was sent before: the slots are still ours to answer
        with pytest.raises(ValueError, match="not pending"):
            pool.send(good, ids)
        for _ in range(20):
            obs, rew, term, trunc, info = pool.recv(timeout=60)
            assert len(rew) == 3 or info["timed_out"]
            pool.send(random_legal(obs["action_mask"], rng), info["env_id"])


def test_team_preview_in_bss_through_the_pool(showdown_url):
    rng = np.random.default_rng(2)
    kinds = []
    with BattlePool("gen9bssregi", num_battles=4, opponent="random", teams="teams/bss",
                    server=showdown_url) as pool:
        assert pool.num_envs == 4
        play_until(pool, 4, rng, lambda o, r, t, u, info: kinds.extend(zip(info["elapsed_step"], info["kind"])))
    assert {k for e, k in kinds if e == 0} == {"preview"}
    assert sum(k == "preview" for _, k in kinds) >= 8  # 3 picks a battle, the last may be forced


def test_outside_policy_opponent_and_set_opponent(showdown_url):
    rng = np.random.default_rng(3)
    calls = []

    def first_legal(obs, masks):
        calls.append(len(obs))
        return masks.argmax(axis=1)

    seen = set()
    with BattlePool(num_battles=4, opponent=first_legal, server=showdown_url) as pool:
        play_until(pool, 4, rng, lambda o, r, t, u, info: seen.update(info["opponent"]))
        assert calls, "the opponent policy was never asked"
        pool.set_opponent("max_power")
        with pytest.raises(ValueError, match="self-play"):
            pool.set_opponent("self")
        play_until(pool, 12, rng, lambda o, r, t, u, info: seen.update(info["opponent"]))
    assert {"first_legal", "max_power"} <= seen


def _process_with_a_seen_battle(pool, rng):
    """A simulator process with a battle that holds a slot, stepping the pool until one does."""
    seen = pool._engine.slots.battle_of
    for _ in range(200):
        procs = [p for p in pool.server.procs if p is not None and any(t in seen for t in list(p.battles))]
        if procs:
            return procs[0]
        obs, rew, term, trunc, info = pool.recv(timeout=30)
        pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
    raise AssertionError("no simulator process held a battle the caller had seen")


@pytest.mark.parametrize("transport", ["websocket", "simulator"])
def test_a_killed_server_truncates_battles_and_the_pool_goes_on(transport):
    rng = np.random.default_rng(4)
    with BattlePool(num_battles=4, **{"server.transport": transport}) as pool:
        play_until(pool, 1, rng)
        if transport == "websocket":
            os.killpg(pool.server.managed.pid, signal.SIGKILL)
        else:  # a simulator process holding a battle the caller has seen (one that has not
            # reached the caller yet is dropped with no step: there is nothing to truncate)
            os.killpg(_process_with_a_seen_battle(pool, rng).pgid, signal.SIGKILL)
        truncated, fresh = 0, 0
        t0 = time.monotonic()
        while not (truncated and fresh):
            assert time.monotonic() - t0 < 120, "the pool did not recover"
            obs, rew, term, trunc, info = pool.recv(timeout=30)
            truncated += int((trunc & info["abandoned"]).sum())
            if truncated:
                fresh += int((info["elapsed_step"] == 0).sum())
            pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
        if transport == "websocket":
            assert pool.stats["faults"] == 1
            pids = [pool.server.managed.pid]
        else:  # the simulator transport restarts its process itself: no fault for the collector
            deadline = time.monotonic() + 60  # (the restart may come after the fresh battles)
            while pool.server.restarts < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert pool.stats["faults"] == 0 and pool.server.restarts == 1
            pids = list(pool.server.pgids)
    assert not pool._thread.is_alive()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not [t for t in threading.enumerate() if t.name == "maple-pool"]


def test_recv_times_out_instead_of_hanging(showdown_url):
    with BattlePool(num_battles=2, server=showdown_url) as pool:
        held = set()
        while len(held) < pool.num_envs:  # every slot with us: nothing else can come
            held |= set(pool.recv(timeout=60)[4]["env_id"].tolist())
        obs2, rew2, _t, _u, info2 = pool.recv(timeout=0.5)
        assert len(rew2) == 0 and info2["timed_out"]
    with pytest.raises(RuntimeError, match="closed"):
        pool.recv()


def test_gymnasium_face_contract(showdown_url):
    from gymnasium.vector import AutoresetMode
    env = make_vector_env(num_battles=4, server=showdown_url)
    try:
        assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        assert env.num_envs == 8 and env.single_action_space.n == act.N_ACTIONS
        assert env.single_observation_space["observation"].shape == (enc.OBS_DIM,)
        obs, info = env.reset()
        assert env.observation_space.contains(obs)
        rng = np.random.default_rng(5)
        ends = inactive = 0
        for _ in range(400):
            actions = random_legal(obs["action_mask"], rng)
            obs, reward, terminated, truncated, info = env.step(actions)
            assert set(info["_kind"].tolist()) <= {True, False}
            idle = ~info["is_active"]
            assert (info["_kind"] == info["is_active"]).all() and info["_is_active"].all()
            assert (reward[idle] == 0).all() and not terminated[idle].any()
            assert (obs["action_mask"][idle].sum(axis=1) == 1).all()
            inactive += int(idle.sum())
            ends += int(terminated.sum())
            if ends >= 4:
                break
        assert ends >= 4 and inactive > 0
    finally:
        env.close()
    assert not env.pool._thread.is_alive()


def test_maskable_ppo_learns_on_the_sb3_face(showdown_url):
    from sb3_contrib import MaskablePPO
    venv = make_sb3_vec_env(num_battles=4, server=showdown_url)
    try:
        model = MaskablePPO("MlpPolicy", venv, n_steps=256, batch_size=256, n_epochs=1, seed=0, verbose=0)
        model.learn(2048)
        assert model.num_timesteps >= 2048
        assert venv.pool.stats["battles"] > 0 and venv.pool.stats["invalid_choices"] == 0
    finally:
        venv.close()


def test_eval_plays_an_outside_policy_and_stops_on_a_failing_one(showdown_url, tmp_path, capsys, restore_gc):
    from maple_async.cli import main
    (tmp_path / "pol.py").write_text(
        "import numpy as np\n"
        "def first_legal():\n    return lambda obs, masks: masks.argmax(axis=1)\n"
        "def illegal():\n    return lambda obs, masks: np.full(len(obs), 13)\n")
    assert main(["eval", "--policy", f"{tmp_path}/pol.py:first_legal", "--opponents", "random",
                 "--battles", "6", "--server", showdown_url]) == 0
    out = capsys.readouterr().out
    assert "pol.py:first_legal vs random (outside policy)" in out and "over 6 battles" in out
    assert main(["eval", "--policy", f"{tmp_path}/pol.py:illegal", "--opponents", "random",
                 "--battles", "6", "--server", showdown_url]) == 2
    assert "illegal action 13" in capsys.readouterr().err


def test_a_subclass_of_battlepool_keeps_its_type_and_overrides(showdown_url):
    """BattlePool is a class a user may extend (one process), not only a factory."""
    class Counting(BattlePool):
        embeds = 0

        def recv(self, *args, **kwargs):
            Counting.embeds += 1
            return super().recv(*args, **kwargs)

    assert all(hasattr(BattlePool, m) for m in ("recv", "send", "step", "async_reset", "close"))
    with Counting(num_battles=2, batch_size=1, opponent="random", server=showdown_url) as pool:
        assert type(pool) is Counting and isinstance(pool, BattlePool)
        play_until(pool, 1, np.random.default_rng(3))
    assert Counting.embeds > 0
    with pytest.raises(TypeError, match="one process"):
        Counting(num_battles=2, shards=2)


def test_shards_behind_the_same_api():
    import multiprocessing as mp
    rng = np.random.default_rng(6)
    ids = set()
    with make_pool(num_battles=4, shards=2, batch_size=2) as pool:
        assert type(pool).__name__ == "ShardedPool" and isinstance(pool, PoolAPI)
        assert pool.num_envs == 8
        play_until(pool, 4, rng, lambda o, r, t, u, info: ids.update(info["env_id"].tolist()))
        with pytest.raises(ValueError, match="does not exist"):
            pool.send([0], [8])
        assert pool.stats["battles"] >= 4
        procs = list(pool._procs)
    assert ids <= set(range(8)) and any(e >= 4 for e in ids) and any(e < 4 for e in ids)
    assert not any(p.is_alive() for p in procs)
    assert not mp.active_children()


def test_own_observation_and_reward_against_a_checkpoint(showdown_url, tmp_path):
    from gymnasium.spaces import Box

    from maple_async import config as C
    from maple_async.learn import checkpoint as ckpt
    from maple_async.learn import networks as nets
    cfg = C.load(None)
    ckpt.save(tmp_path / "opp.pt", {"config": cfg.to_dict(),
                                   "learner": {"network": nets.from_config(cfg.network).state_dict()}})
    rng = np.random.default_rng(7)
    seen = {"shapes": set(), "rewards": [], "opponents": set()}

    def on_batch(obs, rew, term, trunc, info):
        seen["shapes"].add(obs["observation"].shape[1:])
        seen["rewards"] += [(e, r, t) for e, r, t in zip(info["elapsed_step"], rew, term)]
        seen["opponents"].update(info["opponent"])

    with BattlePool(num_battles=2, opponent=str(tmp_path / "opp.pt"), server=showdown_url,
                    embed_battle=lambda b: np.array([b.turn, len(b.team)], dtype=np.float32),
                    observation_space=Box(0, np.inf, (2,), np.float32),
                    reward_fn=lambda b: 1.0 if b.won else 0.5) as pool:
        play_until(pool, 3, rng, on_batch)
    assert seen["shapes"] == {(2,)} and seen["opponents"] == {"opp.pt"}
    assert all(r == 0.0 for e, r, _ in seen["rewards"] if e == 0)  # a battle's first step
    assert all(r in (0.5, 1.0) for e, r, t in seen["rewards"] if e > 0)


def test_the_gymnasium_face_over_shards_steps_on_the_flush_clock():
    rng = np.random.default_rng(8)
    env = make_vector_env(num_battles=2, shards=2)
    try:
        assert env._slots.clock == "flush"
        obs, info = env.reset()
        for _ in range(30):
            obs, reward, term, trunc, info = env.step(random_legal(obs["action_mask"], rng))
            assert not info["settled"].any()
        assert env.pool.stats["invalid_choices"] == 0
    finally:
        env.close()
    with pytest.raises(ValueError, match="clock='decision' needs one pool"):
        make_vector_env(num_battles=2, shards=2, clock="decision")
