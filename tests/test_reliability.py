"""Faults, bad input and shutdown (issue: reliability). Real local servers throughout."""

import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from maple_async import config as C
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from maple_async.config import BatcherConfig
from maple_async.collect.agent import Agent
from maple_async.collect.match import play
from maple_async.server import ServerHandle, ShowdownServer

pytestmark = pytest.mark.integration


def run_cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "maple_async.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


# -- server killed mid-run --------------------------------------------------------------

async def test_training_survives_server_kill(tmp_path):
    from maple_async.run.loop import LearningLoop
    from maple_async.run.transports import LocalTransport

    # total_sides far beyond what the test plays: the run must not reach its end (and stop
    # without noticing the fault) in the seconds between the kill and the fault being seen.
    cfg = C.load("test", {"train.run_dir": str(tmp_path / "run"), "train.total_sides": 10_000,
                                      "train.sides_per_update": 16})
    trainer = LearningLoop(cfg, "cpu", quiet=True)
    srv = ShowdownServer()
    await srv.start()
    handle = ServerHandle(srv.url, srv)
    transport = LocalTransport(cfg, handle, quiet=True)
    collector = transport.collector
    seen = {}

    async def killer():
        while trainer.learner.updates < 1:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # battles in flight
        seen["in_flight"] = len(collector.agent.live)
        os.killpg(srv.pid, signal.SIGKILL)
        while handle.restarts < 1:
            await asyncio.sleep(0.2)
        seen["battles_at_restart"] = trainer.counters["battles"]
        # Training goes on after the restart: one more full update, then stop.
        while trainer.counters["battles"] < seen["battles_at_restart"] + 16:
            await asyncio.sleep(0.2)
        trainer.request_stop("test: trained after the restart")

    k = asyncio.get_running_loop().create_task(killer())
    try:
        await asyncio.wait_for(trainer.run(transport), 360)
    finally:
        k.cancel()
        srv.stop()
    assert seen["in_flight"] > 0
    assert collector.faults == 1 and handle.restarts == 1
    assert trainer.counters["battles"] >= seen["battles_at_restart"] + 16
    # Nothing finished was lost; nothing half-played was trained on.
    assert trainer.trained_trajectories == trainer.collected_trajectories
    assert collector.agent.stats.abandoned >= seen["in_flight"]
    assert len(collector.agent.hidden) == 0 and len(collector.agent.live) == 0
    assert (tmp_path / "run" / "latest.pt").exists()


# -- battle-level faults ---------------------------------------------------------------

class InvalidFirstAgent(Agent):
    """Sends an order Showdown rejects ([Invalid choice]) at each battle's first request."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.sabotaged = set()

    async def choose(self, battle, opponent):
        order = await super().choose(battle, opponent)
        key = self.key(battle)
        if key not in self.sabotaged and battle.active_pokemon is not None and battle.available_moves:
            self.sabotaged.add(key)

            class Bad:
                message = "/choose move 9"  # there is no 9th move
            return Bad()
        return order


async def test_invalid_choice_is_redecided_never_loops(venue):
    agent = InvalidFirstAgent(InferencePolicy(nets.build("mlp", hidden_size=16)), BatcherConfig(),
                              record=True, on_trajectory=lambda t: None)
    res = await asyncio.wait_for(play(agent, venue, 6, opponent="random", concurrency=6), 240)
    await agent.batcher.close()
    assert res.battles == 6
    assert agent.stats.invalid_choices >= len(agent.sabotaged) > 0
    assert agent.stats.retries >= len(agent.sabotaged)
    assert len(agent.hidden) == 0


async def test_silent_battle_is_abandoned_and_freed(showdown_url):
    from poke_env.player import RandomPlayer

    from maple_async.collect.match import watchdog
    from maple_async.pokeenv.players import PolicyPlayer, close_players, player_kwargs, run_id

    class StallingOpponent(RandomPlayer):
        """Never answers in its first battle: that battle goes silent for us."""
        stalled = None

        def choose_move(self, battle):
            if StallingOpponent.stalled in (None, battle.battle_tag):
                StallingOpponent.stalled = battle.battle_tag
                return asyncio.get_running_loop().create_future()  # never resolved
            return super().choose_move(battle)

    agent = Agent(InferencePolicy(nets.build("mlp", hidden_size=16)), BatcherConfig())
    tag = run_id()
    me = PolicyPlayer(agent, "stall", **player_kwargs(showdown_url, f"stl{tag}a", 4, "gen9randombattle"))
    opp = StallingOpponent(**player_kwargs(showdown_url, f"stl{tag}b", 4, "gen9randombattle"))
    agent.batcher.start()
    dog = asyncio.get_running_loop().create_task(watchdog([agent], [me], timeout_s=3.0, period_s=0.5))
    # The stalling opponent's hung choose_move holds its own per-battle lock, so *its*
    # battle_against never returns: wait for our four results instead.
    task = asyncio.get_running_loop().create_task(me.battle_against(opp, n_battles=4))
    try:
        deadline = time.monotonic() + 150
        while sum(me.results.values()) < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
    finally:
        task.cancel()
        dog.cancel()
        await close_players(me, opp)
        await agent.batcher.close()
    assert agent.stats.abandoned == 1  # the stalled battle, forfeited by us
    assert me.results["lost"] >= 1 and sum(me.results.values()) == 4
    assert len(agent.hidden) == 0 and len(agent.live) == 0


# -- bad input -----------------------------------------------------------------------------

def _assert_user_error(p, needle):
    assert p.returncode == 2, (p.returncode, p.stdout[-1000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    err_lines = [ln for ln in p.stderr.splitlines() if ln.startswith("maple-async: error:")]
    assert len(err_lines) == 1 and needle in err_lines[0], p.stderr[-2000:]


def test_bad_inputs_give_one_clear_line(tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("runner: [unclosed\n")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("runner:\n  concurency: 4\n")
    wrong_type = tmp_path / "wrong.yaml"
    wrong_type.write_text("runner:\n  concurrency: lots\n")
    cases = [
        (["play", "--config", str(bad_yaml)], "malformed YAML"),
        (["play", "--config", str(unknown)], "unknown config key 'runner.concurency'"),
        (["play", "--config", str(wrong_type)], "'runner.concurrency' must be int"),
        (["play", "--concurrency", "-3"], "'runner.concurrency' must be > 0"),
        (["play", "--concurrency", "0"], "'runner.concurrency' must be > 0"),
        (["play", "--max-batch-size", "0"], "'batcher.max_batch_size' must be > 0"),
        (["train", "--config", str(tmp_path / "missing.yaml")], "config file not found"),
        (["eval", "--checkpoint", str(tmp_path / "none.pt")], "checkpoint not found"),
        (["play", "--server", "http://127.0.0.1:9", "--battles", "1"], "unreachable"),
        (["play", "--server.host", "0.0.0.0"], "loopback"),
    ]
    for args, needle in cases:
        _assert_user_error(run_cli(*args), needle)


def test_checkpoint_of_another_shape_is_refused(tmp_path):
    from maple_async.run.loop import LearningLoop as Trainer
    cfg = C.load(None, {"train.run_dir": str(tmp_path / "r"), "network.hidden_size": 16,
                        "train.tensorboard": False})
    path = Trainer(cfg, "cpu", quiet=True).save_checkpoint()
    # Refused before any server is started.
    p = run_cli("train", "--config", "test", "--train.run_dir", str(tmp_path / "r"),
                "--network.hidden_size", "32", "--resume", str(path))
    _assert_user_error(p, "does not fit the configured network")
    assert "managed Showdown" not in p.stdout


def test_a_resume_of_a_finished_run_is_refused(tmp_path):
    from maple_async.run.loop import LearningLoop as Trainer
    cfg = C.load("test", {"train.run_dir": str(tmp_path / "r"), "train.tensorboard": False})
    done = Trainer(cfg, "cpu", quiet=True)
    done.counters["battles"] = cfg.train.total_sides
    path = done.save_checkpoint()
    p = run_cli("train", "--config", "test", "--train.run_dir", str(tmp_path / "r"), "--resume")
    _assert_user_error(p, f"already trained {cfg.train.total_sides} battle sides of train.total_sides")
    assert f"--train.total_sides {2 * cfg.train.total_sides}" in p.stderr and path.exists()
    assert "managed Showdown" not in p.stdout


def test_node_missing_is_reported(tmp_path):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable), MAPLE_ASYNC_HOME=str(tmp_path / "home"))
    _assert_user_error(run_cli("server", "install", env=env), "'node' was not found")


# -- shutdown -----------------------------------------------------------------------------

@pytest.mark.parametrize("transport", ["websocket", "simulator"])
def test_sigterm_leaves_checkpoint_and_no_server(tmp_path, transport):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "maple_async.cli", "train", "--config", "test",
         "--train.run_dir", str(run_dir), "--train.total_sides", "100000",
         "--server.transport", transport, "--train.eval_battles", "500"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    node_pids, out = [], []
    deadline = time.time() + 300
    for line in proc.stdout:
        out.append(line)
        m = re.search(r"managed Showdown .* \(pid (\d+)|simulator \(\d+ processes: pids ([\d, ]+);", line)
        if m:
            node_pids = [int(p) for p in (m.group(1) or m.group(2)).split(", ")]
        if line.startswith("[train] upd    2"):
            break
        assert time.time() < deadline, "".join(out[-20:])
    assert node_pids and all(pid_alive(p) for p in node_pids)
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    out.append(rest)
    assert proc.returncode == 0, "".join(out)[-3000:]
    assert time.time() - t0 < 60  # bounded shutdown
    assert "stopping: signal SIGTERM" in rest
    assert "no final evaluation (signal SIGTERM); to run it: maple-async eval" in rest  # not 500 battles
    data = torch.load(run_dir / "latest.pt", weights_only=True)
    assert data["learner"]["updates"] >= 2
    time.sleep(0.5)
    assert not any(pid_alive(p) for p in node_pids), "Showdown's processes survived SIGTERM"
