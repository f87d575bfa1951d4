"""The simulator transport: battles in Showdown's own sim processes, no server between."""

import asyncio
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from maple_async.collect.agent import Agent
from maple_async.collect.match import Match, play
from maple_async.config import BatcherConfig
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from maple_async.obs import encoding as enc
from maple_async.obs import actions as act
from maple_async.simulator import Simulators
from maple_async.simulator.battles import Inbox as _Inbox

pytestmark = pytest.mark.integration


def _run_cli(*args, timeout=420):
    return subprocess.run([sys.executable, "-m", "maple_async.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"  # a zombie has exited
    except FileNotFoundError:
        return True


# -- the same battle log through both delivery paths ------------------------------------------

def _recording_player(username: str):
    from poke_env.player import Player

    from maple_async.pokeenv.fastbattle import FastBattles
    from maple_async.pokeenv.players import player_kwargs

    class Recording(FastBattles, Player):
        def choose_move(self, battle):
            self.seen.append(enc.encode(battle).tobytes() + act.action_mask(battle).tobytes())
            return self.choose_random_move(battle)

    p = Recording(**{**player_kwargs("http://127.0.0.1:1", username, 1, "gen9randombattle"),
                     "start_listening": False})
    p.seen = []
    return p


async def _through_websocket_path(log: list[str], username: str) -> list[bytes]:
    p = _recording_player(username)  # the battle's lines name the player
    p.ps_client.send_message = lambda *a, **k: asyncio.sleep(0)  # no socket: drop the answers
    for msg in log:
        await p.ps_client._handle_message(msg)
    return p.seen


async def _through_simulator_path(log: list[str], username: str) -> list[bytes]:
    p = _recording_player(username)
    Simulators(1).attach(p)
    inbox = _Inbox(p, None)
    for msg in log:
        inbox.put(msg)
    while inbox.task is not None:
        await inbox.task
    return p.seen


async def _record_one_battle(venue) -> tuple[list[str], str]:
    """Play one RandomPlayer battle on ``venue``; return what the first player received."""
    match = Match(venue, "random", "random", concurrency=1, account="rec")
    log: list[str] = []
    me = match.me
    put = _Inbox.put
    if isinstance(venue, str):
        handle = me.ps_client._handle_message

        async def recording(message):
            if message.startswith(">battle"):
                log.append(message)
            await handle(message)
        me.ps_client._handle_message = recording
    else:
        def recording(inbox, item):
            if inbox.player is me and item is not None:
                log.append(item)
            put(inbox, item)
        _Inbox.put = recording
    try:
        await asyncio.wait_for(match.play(1), 120)
    finally:
        _Inbox.put = put
        await match.close()
    return log, me.username


async def test_a_recorded_battle_gives_the_same_observations_through_both_paths(venue):
    log, username = await _record_one_battle(venue)
    assert log[0].split("\n")[1] == "|init|battle"  # what both transports send first
    assert any('"rqid":' in m for m in log)  # requests are numbered by both
    ws = await _through_websocket_path(log, username)
    sim = await _through_simulator_path(log, username)
    assert len(ws) > 3 and ws == sim


# -- seeded battles ---------------------------------------------------------------------------

async def _seeded_logs(seed: int) -> dict:
    torch.manual_seed(0)
    policy = InferencePolicy(nets.build("mlp", hidden_size=32), greedy=True)
    agent = Agent(policy, BatcherConfig())
    sims = await Simulators(2, seed=seed).start()
    logs: dict = {}
    names: dict = {}
    put = _Inbox.put

    def recording(inbox, item):
        if item is not None and inbox.battle is not None and inbox.battle.roles[0][0] is inbox.player:
            tag, _, body = item.partition("\n")
            serial = tag.split("-")[-1][6:]  # battle-<format>-<run><serial>: the start order
            for player, role in inbox.battle.roles:
                names[player.username] = role
            logs.setdefault(serial, []).append(body)
        put(inbox, item)
    _Inbox.put = recording
    try:
        res = await asyncio.wait_for(play(agent, sims, 8, concurrency=4), 240)
    finally:
        _Inbox.put = put
        await agent.batcher.close()
        await sims.close()
    assert res.battles == 8

    def normal(body: str) -> str:
        lines = [ln for ln in body.split("\n") if not ln.startswith("|t:|")]  # wall-clock stamps
        text = "\n".join(lines)
        for name, role in names.items():  # player names carry a random run tag
            text = text.replace(name, role)
        return text
    return {k: [normal(b) for b in v] for k, v in logs.items()}


async def test_two_runs_with_the_same_seed_play_the_same_battles():
    a, b, c = await _seeded_logs(11), await _seeded_logs(11), await _seeded_logs(12)
    assert len(a) == 8 and a == b
    assert a != c  # and the seed matters


# -- faults -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["exit", "hang"])
async def test_a_simulator_process_lost_mid_run_abandons_its_battles_and_comes_back(fault):
    timeout = 4.0 if fault == "hang" else 300.0
    sims = await Simulators(2, seed=3, battle_timeout_s=timeout).start()
    trajectories = []
    agent = Agent(InferencePolicy(nets.build("mlp", hidden_size=16)), BatcherConfig(), record=True,
                  on_trajectory=trajectories.append)
    victim = sims.procs[0]
    task = asyncio.get_running_loop().create_task(
        play(agent, sims, 40, concurrency=16, battle_timeout_s=timeout))
    try:
        deadline = time.monotonic() + 120
        while agent.stats.decisions < 300 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert victim.battles, "the process to fault had no battle"
        os.killpg(victim.pgid, signal.SIGKILL if fault == "exit" else signal.SIGSTOP)
        res = await asyncio.wait_for(task, 300)
    finally:
        await agent.batcher.close()
        await sims.close()
    assert res.battles == 40  # the abandoned battles were replaced
    assert sims.restarts == 1 and agent.stats.abandoned > 0
    assert len(trajectories) == 2 * 40  # only finished battles, every one of them
    assert len(agent.live) == 0 and len(agent.hidden) == 0
    assert _gone(victim.pgid)


async def test_a_process_whose_battles_all_wait_on_us_is_not_taken_for_hung():
    """Training holds collection (behind the learner) longer than the battle timeout: the
    simulator, idle but answering pings, must not be killed."""
    from poke_env.player import Player

    from maple_async.pokeenv.players import player_kwargs

    class Holding(Player):
        def choose_move(self, battle):
            return asyncio.get_running_loop().create_future()  # answered after the hold

    sims = await Simulators(1, battle_timeout_s=1.0).start()
    try:
        p1, p2 = (Holding(**player_kwargs(sims, f"hold{i}", 1, "gen9randombattle")) for i in (1, 2))
        for p in (p1, p2):
            sims.attach(p)
        await sims.start_battle(p1, p2, "hold")
        await asyncio.sleep(4.0)  # four battle timeouts, the watchdog looking every 0.25 s
        assert sims.restarts == 0 and len(sims.procs[0].battles) == 1 and not sims.procs[0].exited
    finally:
        await sims.close()


def test_no_simulator_process_outlives_a_killed_parent(tmp_path):
    script = (
        "import asyncio, json, time\n"
        "from maple_async.simulator import Simulators\n"
        "async def main():\n"
        "    s = await Simulators(2).start()\n"
        "    print(json.dumps(s.pgids), flush=True)\n"
        "    await asyncio.sleep(600)\n"
        "asyncio.run(main())\n")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(p.stdout.readline())
        assert len(pids) == 2 and not any(_gone(x) for x in pids)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        deadline = time.monotonic() + 15
        while not all(_gone(x) for x in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(_gone(x) for x in pids)
    finally:
        p.kill()


def test_simulator_processes_listen_on_nothing():
    from test_loopback import listening_sockets

    async def main():
        s = await Simulators(2).start()
        try:
            return listening_sockets(s.pgids), len(s.pgids)
        finally:
            await s.close()
    sockets, n = asyncio.run(main())
    assert n == 2 and sockets == []


# -- the commands -----------------------------------------------------------------------------

def test_train_then_eval_on_the_simulator_transport(tmp_path):
    run_dir = tmp_path / "run"
    p = _run_cli("train", "--config", "test", "--server.transport", "simulator",
                 "--runner.seed", "5", "--train.run_dir", str(run_dir))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "simulator (" in p.stdout and "[train] upd" in p.stdout
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert int(rows[-1]["battles"]) >= 48
    e = _run_cli("eval", "--checkpoint", str(run_dir / "latest.pt"), "--opponents", "random",
                 "--battles", "12", "--concurrency", "12", "--server.transport", "simulator")
    assert e.returncode == 0, e.stdout[-3000:] + e.stderr[-3000:]
    assert "over 12 battles" in e.stdout


def test_a_server_url_and_the_simulator_transport_are_refused_together():
    p = _run_cli("play", "--server", "http://127.0.0.1:8000", "--server.transport", "simulator",
                 "--battles", "1", timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "server.transport is simulator" in p.stderr.strip().splitlines()[-1]
