"""Stable-Baselines3 and Gymnasium workflows as their documentation shows them, on the
pool's synchronous faces: learn() in chunks, save / load, sb3-contrib's evaluate_policy,
VecMonitor and VecNormalize stacked on the face, Gymnasium's RecordEpisodeStatistics,
doubles and VGC. On a real local Showdown."""

import numpy as np
import pytest

from maple_async.env import make_sb3_vec_env, make_vector_env

pytestmark = pytest.mark.integration

sb3_contrib = pytest.importorskip("sb3_contrib")


def small_ppo(venv, **kw):
    from sb3_contrib import MaskablePPO
    return MaskablePPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, verbose=0,
                       policy_kwargs=dict(net_arch=[32]), device="cpu", **kw)


def ended_sides(pool) -> int:
    """The battle sides the pool ended so far: finished or abandoned."""
    stats = pool.stats
    return stats["battles"] + stats["abandoned"]


def settled_steps(face) -> list:
    """Each later step of the face: whether it was whole (settled). After a whole step
    every side the pool ended was handed to the caller, so counts can be compared."""
    slots, seen = face._slots, []
    gather = slots.gather

    def recorded():
        out = gather()
        seen.append(bool(out[-1]["settled"].all()))
        return out
    slots.gather = recorded
    return seen


def test_learn_in_chunks_with_and_without_resetting_the_count(showdown_url):
    venv = make_sb3_vec_env(num_battles=2, opponent="random", server=showdown_url)
    try:
        model = small_ppo(venv)
        per_rollout = 32 * venv.num_envs
        model.learn(per_rollout)
        assert model.num_timesteps == per_rollout
        model.learn(per_rollout)  # reset_num_timesteps=True: SB3 resets the env again
        assert model.num_timesteps == per_rollout
        model.learn(per_rollout, reset_num_timesteps=False)
        assert model.num_timesteps == 2 * per_rollout
        stats = venv.pool.stats
        assert stats["invalid_choices"] == 0 and stats["decisions"] > 0
    finally:
        venv.close()


def test_save_load_then_learn_and_predict(showdown_url, tmp_path):
    from sb3_contrib import MaskablePPO
    venv = make_sb3_vec_env(num_battles=2, opponent="random", server=showdown_url)
    try:
        model = small_ppo(venv)
        model.learn(64)
        model.save(tmp_path / "model.zip")
        loaded = MaskablePPO.load(tmp_path / "model.zip", env=venv, device="cpu")
        loaded.learn(64, reset_num_timesteps=False)
        assert loaded.num_timesteps >= 128
        obs = venv.reset()
        actions, _ = loaded.predict(obs, action_masks=venv.action_masks(), deterministic=True)
        assert venv.action_masks()[np.arange(venv.num_envs), actions].all()
        venv.step(actions)
    finally:
        venv.close()


def test_maskable_evaluate_policy_between_learn_chunks(showdown_url):
    from sb3_contrib.common.maskable.evaluation import evaluate_policy
    venv = make_sb3_vec_env(num_battles=2, opponent="random", server=showdown_url)
    try:
        model = small_ppo(venv)
        model.learn(64)
        rewards, lengths = evaluate_policy(model, venv, n_eval_episodes=4, use_masking=True,
                                           return_episode_rewards=True, warn=False)
        assert len(rewards) == 4 and all(n > 0 for n in lengths)
        model.learn(64, reset_num_timesteps=False)  # and learning goes on after it
        assert venv.pool.stats["invalid_choices"] == 0
    finally:
        venv.close()


def test_vecmonitor_and_vecnormalize_stacked_keep_masks_and_count_each_side_once(showdown_url):
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize
    base = make_sb3_vec_env(num_battles=2, server=showdown_url)
    venv = VecNormalize(VecMonitor(base), norm_reward=False)
    ended = []
    try:
        assert is_masking_supported(venv)
        model = small_ppo(venv)
        model.learn(64)
        settled = settled_steps(base)
        venv.reset()
        rng = np.random.default_rng(0)
        monitor = venv.venv
        before = pool_before = None
        for _ in range(600):
            if before is None and settled[-1]:  # the reset's battles forfeited: count from a whole step
                before, pool_before = monitor.episode_count, ended_sides(base.pool)
            masks = get_action_masks(venv)
            np.testing.assert_array_equal(masks, base.action_masks())
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            _obs, _rew, dones, infos = venv.step(actions)
            for i in np.flatnonzero(dones):
                assert "episode" in infos[i]
                if before is not None:
                    ended.append((infos[i]["battle_tag"], infos[i]["side"]))
            if len(ended) >= 6 and settled[-1]:
                break
        assert len(ended) >= 6 and len(set(ended)) == len(ended) and settled[-1]
        assert monitor.episode_count - before == len(ended)
        assert monitor.episode_count - before == ended_sides(base.pool) - pool_before
    finally:
        venv.close()


def test_record_episode_statistics_counts_each_battle_side_once(showdown_url):
    from gymnasium.wrappers.vector import RecordEpisodeStatistics
    env = RecordEpisodeStatistics(make_vector_env(num_battles=2, server=showdown_url))
    pool = env.unwrapped.pool
    ended = []
    try:
        obs, info = env.reset(seed=3)
        rng = np.random.default_rng(1)
        before = pool_before = None
        for _ in range(800):
            if before is None and info["settled"].all():  # count from a whole step
                before, pool_before = env.episode_count, ended_sides(pool)
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in obs["action_mask"]])
            obs, reward, term, trunc, info = env.step(actions)
            for i in np.flatnonzero(term | trunc):
                assert info["_episode"][i]
                if before is not None:
                    ended.append((info["battle_tag"][i], info["side"][i]))
            if len(ended) >= 6 and info["settled"].all():
                break
        assert len(ended) >= 6 and len(set(ended)) == len(ended) and info["settled"].all()
        assert env.episode_count - before == len(ended)
        assert env.episode_count - before == ended_sides(pool) - pool_before
    finally:
        env.close()


@pytest.mark.parametrize("fmt,teams", [("gen9randomdoublesbattle", None), ("gen9vgc2025regi", "teams/vgc")])
def test_doubles_train_with_maskable_ppo_unchanged(showdown_url, fmt, teams):
    venv = make_sb3_vec_env(fmt, num_battles=2, server=showdown_url, teams=teams)
    try:
        assert venv.action_space.n == 53
        model = small_ppo(venv)
        model.learn(128)
        model.learn(64, reset_num_timesteps=False)
        stats = venv.pool.stats
        assert stats["decisions"] > 0 and stats["invalid_choices"] == 0
    finally:
        venv.close()
