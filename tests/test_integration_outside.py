"""A checkpoint used outside training, on the fixture's local Showdown: ``serve`` takes
challenges from a poke-env player, two ``ladder`` runs play each other for a rating, and
``play --replays`` writes one replay per battle."""

import asyncio
import re
import subprocess
import sys

import pytest

from maple_async import config as C
from maple_async.run.loop import LearningLoop

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "maple_async.cli"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    run = tmp_path_factory.mktemp("ckpt")
    cfg = C.load(None, {"train.run_dir": str(run), "network.hidden_size": 32})
    LearningLoop(cfg, "cpu", quiet=True).save_checkpoint()
    return str(run / "latest.pt")


def one_error_line(p) -> str:
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("maple-async: error: "), p.stderr
    return lines[0]


async def serve_and_challenge(url, checkpoint, name, challenger, fmt, n, *flags, login_s=60, play_s=180,
                              watch=None):
    """``serve`` a checkpoint as ``name``; once it is logged in, a RandomPlayer ``challenger``
    sends it ``n`` challenges (``watch(player)``: a coroutine beside them). Returns the
    process's exit code, its output and the challenger."""
    from poke_env.player import RandomPlayer
    from poke_env.ps_client import AccountConfiguration, ServerConfiguration

    from maple_async.server import websocket_url

    proc = await asyncio.create_subprocess_exec(
        *CLI, "serve", "--checkpoint", checkpoint, "--server", url, "--username", name, "--battles", str(n),
        *flags, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out = []
    try:
        while True:  # the agent is logged in before anyone challenges it
            line = (await asyncio.wait_for(proc.stdout.readline(), login_s)).decode()
            out.append(line)
            assert line, "".join(out)
            if "[serve] logged in as" in line:
                break
        player = RandomPlayer(account_configuration=AccountConfiguration(challenger, None),
                              server_configuration=ServerConfiguration(websocket_url(url), None),
                              battle_format=fmt, max_concurrent_battles=n, loop=asyncio.get_running_loop())
        watcher = asyncio.create_task(watch(player)) if watch is not None else None
        await asyncio.wait_for(player.send_challenges(name, n), play_s)
        if watcher is not None:
            watcher.cancel()
        rest, _ = await asyncio.wait_for(proc.communicate(), 120)
        out.append(rest.decode())
    finally:
        if proc.returncode is None:
            proc.kill()
    return proc.returncode, "".join(out), player


async def test_serve_accepts_four_challenges_at_once(showdown_url, checkpoint, tmp_path):
    in_flight = []

    async def watch(challenger):
        while True:
            in_flight.append(sum(not b.finished for b in challenger.battles.values()))
            await asyncio.sleep(0.02)

    code, text, challenger = await serve_and_challenge(
        showdown_url, checkpoint, f"served{tmp_path.name[-6:]}"[:18], f"chal{tmp_path.name[-6:]}"[:18],
        "gen9randombattle", 4, "--replays", str(tmp_path / "replays"), watch=watch)
    assert code == 0, text
    assert challenger.n_finished_battles == 4
    assert len(re.findall(r"\[serve\] battle-gen9randombattle-\d+ vs chal", text)) == 4, text
    won, lost, tied = map(int, re.search(r"\[serve\] done: (\d+)W/(\d+)L/(\d+)T", text).groups())
    assert (won, lost) == (challenger.n_lost_battles, challenger.n_won_battles) and won + lost + tied == 4
    assert max(in_flight) >= 2  # accepted while others were still being played
    assert len(list((tmp_path / "replays").glob("*-vs-chal*.html"))) == 4


@pytest.fixture(scope="module")
def gen4_checkpoint(tmp_path_factory):
    run = tmp_path_factory.mktemp("ckpt4")
    cfg = C.load(None, {"train.run_dir": str(run), "network.hidden_size": 32,
                        "runner.battle_format": "gen4randombattle", "train.tensorboard": False})
    LearningLoop(cfg, "cpu", quiet=True, handle_signals=False).save_checkpoint()
    return str(run / "latest.pt")


async def test_serve_with_search_searches_its_decisions(showdown_url, gen4_checkpoint, tmp_path):
    code, text, challenger = await serve_and_challenge(
        showdown_url, gen4_checkpoint, f"srch{tmp_path.name[-6:]}"[:18], f"chs{tmp_path.name[-6:]}"[:18],
        "gen4randombattle", 2, "--search", login_s=120, play_s=900)
    assert code == 0, text
    assert challenger.n_finished_battles == 2
    assert len(re.findall(r"\[serve\] battle-gen4randombattle-\d+ vs chs", text)) == 2, text
    line = next(x for x in text.splitlines() if x.startswith("[serve] agent+search: searched"))
    assert float(line.split("searched ")[1].split("%")[0]) > 0, line


def test_serve_errors_are_one_line(showdown_url, checkpoint, tmp_path, monkeypatch):
    monkeypatch.delenv("MAPLE_SHOWDOWN_USERNAME", raising=False)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    run = lambda *a: subprocess.run([*CLI, *a], capture_output=True, text=True, timeout=120)  # noqa: E731
    assert "cannot read checkpoint" in one_error_line(run("serve", "--checkpoint", str(bad), "--server", showdown_url))
    assert "is not a loopback server" in one_error_line(
        run("serve", "--checkpoint", checkpoint, "--server", "https://showdown.example.org"))
    from maple_async.server import free_port
    assert "unreachable" in one_error_line(
        run("serve", "--checkpoint", checkpoint, "--server", f"http://127.0.0.1:{free_port()}"))


def test_two_agents_ladder_against_each_other_and_get_ratings(showdown_url, checkpoint, tmp_path):
    # one a checkpoint, the other a policy trained outside (--policy file.py:attr)
    (tmp_path / "pol.py").write_text("def policy():\n    return lambda obs, masks: masks.argmax(axis=1)\n")
    agents = [["--checkpoint", checkpoint], ["--policy", f"{tmp_path}/pol.py:policy"]]
    names = [f"lad{i}{tmp_path.name[-6:]}"[:18] for i in range(2)]
    procs = [subprocess.Popen([*CLI, "ladder", *agent, "--server", showdown_url,
                               "--username", n, "--battles", "2"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for agent, n in zip(agents, names)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    for p, out, me, other in zip(procs, outs, names, names[::-1]):
        assert p.returncode == 0, out
        assert len(re.findall(rf"\[ladder\] battle-gen9randombattle-\d+ vs {other}", out)) == 2, out
        m = re.search(rf"\[ladder\] {me}: (\d+)W/(\d+)L/(\d+)T in 2 battles; rating (\d+) on the server's "
                      rf"gen9randombattle ladder \((\d+) before the first battle\)", out)
        assert m, out
    # One ladder's wins are the other's losses.
    w0 = re.search(r"(\d+)W/(\d+)L", outs[0].splitlines()[-1]).groups()
    w1 = re.search(r"(\d+)W/(\d+)L", outs[1].splitlines()[-1]).groups()
    assert w0 == w1[::-1]


def test_play_writes_one_replay_and_log_per_battle(showdown_url, tmp_path):
    p = subprocess.run([*CLI, "play", "--battles", "3", "--server", showdown_url, "--runner.opponent", "random",
                        "--concurrency", "3", "--network", "mlp", "--replays", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    html = sorted((tmp_path / "r").glob("*.html"))
    logs = sorted((tmp_path / "r").glob("*.log"))
    assert len(html) == 3 and len(logs) == 3
    for h, lg in zip(html, logs):
        assert h.stem == lg.stem and re.search(r"-vs-random-(won|lost|tie)$", h.stem)
        for text in (h.read_text(), lg.read_text()):
            assert re.search(r"^\|(win\|.+|tie)$", text, re.M), text[-500:]
        assert "replay-embed.js" in h.read_text()  # the client that plays it back
        assert lg.read_text().startswith(">battle-gen9randombattle-")


async def test_evaluate_takes_a_checkpoint_path_and_a_device_as_before(showdown_url, checkpoint):
    """tools.evaluate.evaluate: a string that is not a baseline is a checkpoint file to load."""
    from maple_async.tools.evaluate import evaluate, policy_from_checkpoint
    cfg = C.load(None, {})
    policy, _ = policy_from_checkpoint(checkpoint, "cpu", greedy=True)
    result = await evaluate(policy, showdown_url, checkpoint, 4, batcher_cfg=cfg.batcher, device="cpu",
                            concurrency=4)
    assert result.battles == 4 and result.opponent == checkpoint
