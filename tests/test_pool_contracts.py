"""The battle pool's contracts with what a learner written outside maple-async does next:
reset at any time (SB3 resets at every learn()), seeded resets, callbacks of theirs that
raise, faces that time out, a pool nobody closed, league opponents swapped in a loop, and
the synchronous faces' decision clock. On a real local Showdown."""

import asyncio
import gc
import hashlib
import os
import threading
import time

import numpy as np
import pytest

from maple_async.env import BattlePool, make_sb3_vec_env, make_vector_env
from proc_tree import descendants

pytestmark = pytest.mark.integration


def random_legal(masks, rng):
    return np.array([rng.choice(np.flatnonzero(m)) for m in masks], dtype=np.int64)


def first_move(masks):
    """Deterministic, and battles end: the first legal move, else the first legal action."""
    masks = np.asarray(masks, dtype=bool)
    moves = masks.copy()
    moves[:, :6] = False
    return np.where(moves.any(axis=1), moves.argmax(axis=1), masks.argmax(axis=1)).astype(np.int64)


def pool_threads() -> int:
    return sum(t.name == "maple-pool" for t in threading.enumerate())


def node_children() -> set:
    """Node processes started under this one (servers, simulators)."""
    return {pid for pid, name in descendants([os.getpid()]).items() if "node" in name}


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def check_face_masks(pool, masks, active):
    """An active slot's mask is exactly what the pool will accept for it."""
    for e in np.flatnonzero(active):
        legal = pool._outstanding.get(int(e))
        if legal is None:  # a terminal step (SB3 answered it already): its action is ignored
            assert masks[e].sum() == 1
        else:
            np.testing.assert_array_equal(masks[e].astype(bool), legal)


# -- reset at any time ----------------------------------------------------------------------

def test_sb3_face_reset_mid_battle_then_steps_are_legal(showdown_url):
    """The reported break: reset() after steps, then the first step raised 'not legal'."""
    rng = np.random.default_rng(0)
    venv = make_sb3_vec_env(num_battles=4, opponent="random", server=showdown_url)
    try:
        for _ in range(3):
            venv.reset()
            for _ in range(50):
                masks = venv.action_masks()
                check_face_masks(venv.pool, masks, venv.is_active)
                venv.step(random_legal(masks, rng))
        assert venv.pool.stats["invalid_choices"] == 0
    finally:
        venv.close()


@pytest.mark.parametrize("face", ["gym", "sb3", "async"])
def test_conformance_reset_steps_reset_steps_close(showdown_url, face):
    rng = np.random.default_rng(1)
    if face == "async":
        pool = BattlePool(num_battles=3, server=showdown_url)
        for _ in range(2):
            pool.async_reset()
            for _ in range(40):
                obs, rew, term, trunc, info = pool.recv(timeout=60)
                for i, e in enumerate(info["env_id"]):
                    legal = pool._outstanding[int(e)]
                    if legal is not None:
                        np.testing.assert_array_equal(obs["action_mask"][i], legal)
                pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
        pool.close()
        pool.close()
        with pytest.raises(RuntimeError, match="closed"):
            pool.recv()
        return
    env = make_vector_env(num_battles=3, server=showdown_url) if face == "gym" else \
        make_sb3_vec_env(num_battles=3, server=showdown_url)
    for _ in range(2):
        out = env.reset()
        for _ in range(40):
            if face == "gym":
                masks, active = out[0]["action_mask"], out[-1]["is_active"]
            else:
                masks, active = env.action_masks(), env.is_active
            check_face_masks(env.pool, masks, active)
            out = env.step(random_legal(masks, rng))
    env.close()
    env.close()  # harmless
    with pytest.raises(RuntimeError, match="closed"):
        env.step(np.zeros(env.num_envs, dtype=np.int64))


def test_reset_forfeits_battles_in_flight_and_never_returns_them(showdown_url):
    rng = np.random.default_rng(2)
    with BattlePool(num_battles=4, server=showdown_url) as pool:
        old = set()
        for _ in range(10):
            obs, rew, term, trunc, info = pool.recv(timeout=60)
            old.update(info["battle_tag"].tolist())
            pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
        obs, rew, term, trunc, info = pool.recv(timeout=60)  # slots held by us at the reset
        abandoned = pool.stats["abandoned"]
        pool.async_reset()
        assert pool.stats["abandoned"] > abandoned
        assert not pool._outstanding
        new_first = {}
        for _ in range(40):
            obs, rew, term, trunc, info = pool.recv(timeout=60)
            for tag, step in zip(info["battle_tag"].tolist(), info["elapsed_step"].tolist()):
                assert tag not in old, "a battle from before the reset came back"
                new_first.setdefault(tag, step)
            pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
        assert new_first and all(step == 0 for step in new_first.values())


def _battles_of(pool, seed, n_sides=8):
    """Each finished battle side's observations under a deterministic policy after
    ``reset(seed)``, as a sorted list of byte strings (slot timing does not matter)."""
    pool.async_reset(seed)
    sides: dict = {}
    done = []
    t0 = time.monotonic()
    while len(done) < n_sides:
        assert time.monotonic() - t0 < 240
        obs, rew, term, trunc, info = pool.recv(timeout=60)
        for i in range(len(rew)):
            key = (info["battle_tag"][i], info["side"][i])
            sides.setdefault(key, []).append(obs["observation"][i].tobytes())
            if term[i]:
                done.append(b"".join(sides[key]) + info["outcome"][i].encode())
        pool.send(first_move(obs["action_mask"]), info["env_id"])
    return sorted(done)[:n_sides]


@pytest.mark.parametrize("fmt,teams", [("gen9randombattle", None), ("gen9bssregi", "teams/bss")])
def test_reset_with_a_seed_repeats_the_battles_on_the_simulator_transport(fmt, teams):
    # one battle in flight: the n-th battle of a seed is the same whatever the timing
    with BattlePool(fmt, num_battles=1, teams=teams,
                    **{"server.transport": "simulator", "server.simulators": 1}) as pool:
        a = _battles_of(pool, 11, 4)
        b = _battles_of(pool, 11, 4)
        c = _battles_of(pool, 12, 4)
    assert a == b
    assert a != c


def _face_battles(env, seed, n_sides=4):
    """:func:`_battles_of` through a synchronous face: ``reset(seed=seed)`` (Gymnasium) or
    ``seed(seed)`` then ``reset()`` (SB3; ``seed=None``: no ``seed()`` call), then each
    finished side's active observations per slot (one battle in flight: slot i is one side),
    as a digest, its number of steps and its outcome."""
    gym = not hasattr(env, "action_masks")
    if gym:
        obs, info = env.reset(seed=seed)
        x, masks, active = obs["observation"], obs["action_mask"], info["is_active"]
    else:
        if seed is not None:
            env.seed(seed)
        x = env.reset()
        masks, active = env.action_masks(), env.is_active
    seqs = [[x[i].tobytes()] if active[i] else [] for i in range(env.num_envs)]
    done = []
    t0 = time.monotonic()
    while len(done) < n_sides:
        assert time.monotonic() - t0 < 240
        if gym:
            obs, _rew, term, trunc, info = env.step(first_move(masks))
            x, masks, active = obs["observation"], obs["action_mask"], info["is_active"]
            ended, outcomes = term | trunc, info["outcome"]
        else:
            x, _rew, ended, infos = env.step(first_move(masks))
            masks, active = env.action_masks(), env.is_active
            outcomes = [d.get("outcome", "") for d in infos]
        for i in np.flatnonzero(active):
            seqs[i].append(x[i].tobytes())  # (a terminal step: its last observation)
        for i in np.flatnonzero(ended):
            done.append(f"{hashlib.sha256(b''.join(seqs[i])).hexdigest()[:16]} {len(seqs[i])} {outcomes[i]}")
            seqs[i] = []
    return sorted(done)[:n_sides]


@pytest.mark.parametrize("face", ["gym", "sb3"])
def test_a_faces_seeded_reset_repeats_the_battles_on_the_simulator_transport(face):
    """docs/env.md: reset(seed=S) (Gymnasium) and VecEnv.seed(S) then reset() (SB3) seed
    the new battles; SB3's seed() seeds the next reset() only."""
    where = {"server.transport": "simulator", "server.simulators": 1}
    if face == "gym":
        env = make_vector_env(num_battles=1, **where)
        try:
            with pytest.raises(ValueError, match="one int"):
                env.reset(seed=[11, 12])
            a = _face_battles(env, 11)
            b = _face_battles(env, 11)
            c = _face_battles(env, 12)
        finally:
            env.close()
    else:
        env = make_sb3_vec_env(num_battles=1, **where)
        try:
            a = _face_battles(env, 11)
            b = _face_battles(env, 11)
            c = _face_battles(env, None)  # the seed was used up by the previous reset()
        finally:
            env.close()
    assert len(a) == 4
    assert a == b
    assert a != c


@pytest.mark.parametrize("transport", ["websocket", "simulator"])
def test_twenty_resets_leave_no_extra_thread_task_or_process(showdown_url, transport):
    rng = np.random.default_rng(3)
    others = node_children()  # (the session's server and its workers)
    where = {"server": showdown_url} if transport == "websocket" else \
        {"server.transport": "simulator", "server.simulators": 2}
    venv = make_sb3_vec_env(num_battles=4, **where)
    try:
        venv.reset()
        threads, rss = threading.active_count(), []
        nodes = len(node_children())  # (with the server's workers, started by the first battles)
        if transport == "simulator":
            assert len(node_children() - others) >= 2  # the pool's two simulators
        tasks = None
        for i in range(20):
            for _ in range(5):
                venv.step(random_legal(venv.action_masks(), rng))
            venv.reset()
            gc.collect()
            rss.append(rss_bytes())
            fut = asyncio.run_coroutine_threadsafe(_count_tasks(), venv.pool._engine.loop)
            count = fut.result(10)
            tasks = count if tasks is None else tasks
            assert count <= tasks, f"tasks grow with resets: {tasks} -> {count}"
        assert threading.active_count() <= threads
        assert len(node_children()) <= nodes, "Node processes grow with resets"
        print(f"rss first {rss[0] / 2**20:.1f} MiB, last {rss[-1] / 2**20:.1f} MiB")
        assert rss[-1] <= rss[0] * 1.10
    finally:
        venv.close()


async def _count_tasks() -> int:
    """The loop's standing tasks (a frame being handled, one per battle in flight, comes and goes)."""
    return sum(t.get_coro().__qualname__ != "PSClient._handle_message" for t in asyncio.all_tasks())


# -- errors surface where the caller is -------------------------------------------------------

def test_a_raising_embed_battle_reaches_the_caller_and_reset_recovers(showdown_url):
    from gymnasium.spaces import Box
    calls = {"n": 0}

    def embed(battle):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyError("my feature")
        return np.array([battle.turn], dtype=np.float32)

    rng = np.random.default_rng(4)
    with BattlePool(num_battles=2, server=showdown_url, embed_battle=embed,
                    observation_space=Box(0, np.inf, (1,), np.float32)) as pool:
        with pytest.raises(KeyError, match="my feature") as err:
            for _ in range(20):
                obs, rew, term, trunc, info = pool.recv(timeout=60)
                pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
        assert any("embed_battle" in n and "battle-" in n for n in err.value.__notes__)
        pool.async_reset()
        for _ in range(20):
            obs, rew, term, trunc, info = pool.recv(timeout=60)
            assert obs["observation"].shape[1:] == (1,)
            pool.send(random_legal(obs["action_mask"], rng), info["env_id"])


def test_a_raising_reward_fn_reaches_the_sb3_caller(showdown_url):
    def reward(battle):
        if battle.turn >= 2:
            raise ValueError("reward broke")
        return 0.0

    rng = np.random.default_rng(5)
    venv = make_sb3_vec_env(num_battles=2, server=showdown_url, reward_fn=reward)
    try:
        venv.reset()
        with pytest.raises(ValueError, match="reward broke") as err:
            for _ in range(50):
                venv.step(random_legal(venv.action_masks(), rng))
        assert any("reward_fn" in n for n in err.value.__notes__)
    finally:
        venv.close()


def test_a_face_whose_recv_times_out_returns_padding_and_says_so(showdown_url):
    from gymnasium.spaces import Box
    env = make_vector_env(num_battles=2, server=showdown_url, recv_timeout_s=1.0,
                          embed_battle=lambda b: np.array([b.turn], dtype=np.float32),
                          observation_space=Box(0, np.inf, (1,), np.float32))
    try:
        obs, info = env.reset()
        eng = env.pool._engine
        eng.call(env.pool.agent.batcher.pause, True)  # nothing is flushed: recv times out
        rng = np.random.default_rng(6)
        timed_out = False
        for _ in range(10):
            obs, reward, term, trunc, info = env.step(random_legal(obs["action_mask"], rng))
            if info["timed_out"].all():
                timed_out = True
                assert not info["is_active"].any()
                assert (obs["action_mask"].sum(axis=1) == 1).all()
                break
        assert timed_out
        eng.call(env.pool.agent.batcher.pause, False)
        obs, info = env.reset()
        assert info["is_active"].any()
    finally:
        env.close()


def test_the_sb3_face_says_when_its_recv_timed_out(showdown_url):
    """docs/env.md: a step (or a reset) after ``recv_timeout_s`` with nothing is all
    padding, and SB3 users see it as ``infos[i]["timed_out"]`` (``reset_infos`` for a reset)."""
    venv = make_sb3_vec_env(num_battles=2, server=showdown_url, recv_timeout_s=1.0)
    try:
        venv.reset()
        eng = venv.pool._engine
        eng.call(venv.pool.agent.batcher.pause, True)  # nothing is flushed: recv times out
        rng = np.random.default_rng(6)
        timed_out = False
        for _ in range(10):
            _obs, reward, dones, infos = venv.step(random_legal(venv.action_masks(), rng))
            if infos[0].get("timed_out"):
                timed_out = True
                assert all(d.get("timed_out") is True for d in infos)
                assert not venv.is_active.any() and not dones.any() and not reward.any()
                assert (venv.action_masks().sum(axis=1) == 1).all()
                break
            assert not any("timed_out" in d for d in infos)
        assert timed_out
        batcher, t0 = venv.pool.agent.batcher, time.monotonic()

        def waiting_battles() -> int:  # a forced switch asks one side only: count battles, not sides
            return len({r.key[0] for r in list(batcher._pending)})
        while waiting_battles() < 2 and time.monotonic() - t0 < 30:
            time.sleep(0.2)  # each battle's next request waits in the paused batcher: stale after the reset
        assert waiting_battles() >= 2, "the reset must meet a request of every battle in the batcher"
        venv.pool.recv_timeout_s = 30.0  # (it bounds the reset too: paused, it waits out the 10 s forfeit grace)
        venv.reset()  # still paused: the reset's first step times out too, and says so
        venv.pool.recv_timeout_s = 1.0
        assert all(d.get("timed_out") is True for d in venv.reset_infos)
        assert not venv.is_active.any()
        eng.call(venv.pool.agent.batcher.pause, False)
        for _ in range(30):  # the new battles come (the stale requests took no battle index)
            _obs, reward, dones, infos = venv.step(np.zeros(venv.num_envs, dtype=np.int64))
            if venv.is_active.any():
                break
        assert venv.is_active.any() and not any("timed_out" in d for d in infos)
    finally:
        venv.close()


def test_caller_think_time_past_the_battle_timeout_forfeits_nothing():
    """The watchdog measures Showdown's silence only: a caller that holds its slots for
    three battle timeouts, three times, loses no battle, and the battles finish."""
    # 4 s, not less: the simulator's own process watchdog pings within battle_timeout_s
    rng = np.random.default_rng(11)
    with BattlePool(num_battles=2, **{"server.transport": "simulator", "server.simulators": 1,
                                      "runner.battle_timeout_s": 4.0}) as pool:
        ended = []
        t0 = time.monotonic()
        steps = sleeps = 0
        while len(ended) < 8 or sleeps < 3:
            assert time.monotonic() - t0 < 300
            obs, rew, term, trunc, info = pool.recv(timeout=60)
            assert not trunc.any() and not info["abandoned"].any()
            ended += [o for o, t in zip(info["outcome"].tolist(), term.tolist()) if t]
            if steps in (0, 10, 40):  # a battle's start and middles: well past the 4 s timeout
                time.sleep(12.0)
                sleeps += 1
            steps += 1
            pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
        stats = pool.stats
    assert set(ended) <= {"won", "lost", "tie"}
    assert stats["abandoned"] == 0
    assert stats["battles"] >= 8


def test_a_forgotten_pool_is_collected_and_stops_its_thread_and_processes():
    before, others = pool_threads(), node_children()  # (the session's server too)
    pool = BattlePool(num_battles=2, **{"server.transport": "simulator", "server.simulators": 1})
    pool.recv(timeout=60)
    nodes = node_children() - others
    assert nodes and pool_threads() == before + 1
    del pool
    gc.collect()
    deadline = time.monotonic() + 30
    while (pool_threads() > before or node_children() & nodes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pool_threads() == before
    assert not node_children() & nodes


def test_set_opponent_in_a_loop_does_not_grow(showdown_url, tmp_path):
    from maple_async import config as C
    from maple_async.learn import checkpoint as ckpt
    from maple_async.learn import networks as nets
    cfg = C.load(None)
    path = tmp_path / "opp.pt"
    ckpt.save(path, {"config": cfg.to_dict(), "learner": {"network": nets.from_config(cfg.network).state_dict()}})
    rng = np.random.default_rng(7)
    with BattlePool(num_battles=2, opponent="random", server=showdown_url, **{"runner.battle_timeout_s": 30}) as pool:
        for i in range(6):
            pool.set_opponent(str(path) if i % 2 == 0 else "max_power")
            ends = 0
            t0 = time.monotonic()
            while ends < 2 and time.monotonic() - t0 < 120:
                obs, rew, term, trunc, info = pool.recv(timeout=60)
                ends += int(term.sum() + trunc.sum())
                pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
        # the retired lanes play out their battles (at most battle_timeout_s), then their agents go
        deadline = time.monotonic() + 90
        while len(pool.collector.agents) > 1 and time.monotonic() < deadline:
            obs, rew, term, trunc, info = pool.recv(timeout=60)
            pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
        agents = pool.collector.agents
        assert agents == [pool.agent], f"{len(agents)} agents kept after 6 swaps"
        assert pool.opponent_name == "max_power"


# -- the decision clock -------------------------------------------------------------------------

@pytest.mark.parametrize("clock", ["decision", "flush"])
def test_decision_clock_hands_both_sides_of_a_turn_in_one_step(showdown_url, clock):
    """In self-play both sides of a turn ask at once: on the decision clock a step holds
    both (only forced switches and gaps between battles leave a slot inactive)."""
    rng = np.random.default_rng(8)
    env = make_vector_env(num_battles=8, server=showdown_url, clock=clock)
    split = steps = 0
    try:
        obs, info = env.reset()
        for _ in range(150):
            obs, reward, term, trunc, info = env.step(random_legal(obs["action_mask"], rng))
            kind, active, retry = info["kind"], info["is_active"], info["retry"]
            for b in range(env.num_envs // 2):
                p1, p2 = 2 * b, 2 * b + 1
                if retry[p1] or retry[p2]:
                    continue
                moves = [kind[p] == "move" and active[p] for p in (p1, p2)]
                split += moves[0] != moves[1]
            steps += 1
    finally:
        env.close()
    if clock == "decision":
        assert split == 0, f"{split} turns split over two steps"
    else:
        assert steps == 150


def test_a_reset_that_times_out_leaves_a_working_pool(showdown_url):
    rng = np.random.default_rng(9)
    with BattlePool(num_battles=2, server=showdown_url) as pool:
        obs, rew, term, trunc, info = pool.recv(timeout=60)
        with pytest.raises(TimeoutError, match="goes on"):
            pool.async_reset(timeout=1e-4)
        assert not pool._outstanding
        for _ in range(20):  # the reset finished on the loop: new battles come
            obs, rew, term, trunc, info = pool.recv(timeout=60)
            pool.send(random_legal(obs["action_mask"], rng), info["env_id"])
        pool.async_reset()
        obs, rew, term, trunc, info = pool.recv(timeout=60)
        assert (info["elapsed_step"] == 0).all()


@pytest.mark.parametrize("transport", ["websocket", "simulator"])
def test_decision_clock_is_whole_at_every_step_between_battles_too(showdown_url, transport):
    """One battle in flight, so steps cross a battle's end and the next one's start: no
    step may come back before it is whole (info settled), and a turn is never split."""
    rng = np.random.default_rng(10)
    where = {"server": showdown_url} if transport == "websocket" else \
        {"server.transport": "simulator", "server.simulators": 1}
    env = make_vector_env(num_battles=1, **where)
    ends = 0
    try:
        obs, info = env.reset(seed=4)
        while ends < 6:
            obs, reward, term, trunc, info = env.step(random_legal(obs["action_mask"], rng))
            assert info["settled"].all(), "a step came back before it was whole"
            moves = [info["kind"][p] == "move" and info["is_active"][p] for p in (0, 1)]
            assert moves[0] == moves[1] or info["retry"].any(), f"a turn split: {info['kind']}"
            ends += int(term.sum())
    finally:
        env.close()
