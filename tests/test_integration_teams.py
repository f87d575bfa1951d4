"""Team formats on a real local Showdown: the shipped pools validate, bad teams stop a run
with one line, concurrent BSS battles with a learned team preview, train -> eval in BSS."""

import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from maple_async import config as C
from maple_async import teams as T

SHIPPED = C.PRESETS / "teams"  # the shipped pools
from maple_async.collect.match import play
from maple_async.config import BatcherConfig
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from test_integration_runner import CheckingAgent

pytestmark = pytest.mark.integration


def run_cli(*args, timeout=420):
    return subprocess.run([sys.executable, "-m", "maple_async.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def _runner(fmt, teams, sampling="uniform"):
    return SimpleNamespace(battle_format=fmt, teams=teams, team_sampling=sampling, seed=0)


POOLS = [("bss", "gen9bssregi", str(SHIPPED / "bss"), 24),
         ("ou", "gen9ou", str(SHIPPED / "ou"), 24),
         ("doublesou", "gen9doublesou", str(SHIPPED / "doublesou"), 3),
         ("gen1ou", "gen1ou", str(SHIPPED / "gen1ou"), 12),
         ("oldgens", "gen2ou", str(SHIPPED / "gen2ou"), 12),
         ("oldgens", "gen3ou", str(SHIPPED / "gen3ou"), 12),
         ("oldgens", "gen4ou", str(SHIPPED / "gen4ou"), 12)]


def _species(team) -> frozenset:
    return frozenset(mon.split("|")[1] or mon.split("|")[0] for mon in team.packed.split("]"))


@pytest.mark.parametrize("preset,fmt,pool,at_least", POOLS, ids=[p[1] for p in POOLS])
def test_shipped_pools_validate_and_presets_use_them(preset, fmt, pool, at_least):
    """Every shipped pool and its held-out pool pass Showdown's validator; no held-out team
    is a training team's six; the presets train on the pool and evaluate on the held-out one."""
    cfg = C.for_format(C.load(preset), fmt)
    assert (cfg.runner.battle_format if "," not in C.load(preset).runner.battle_format else fmt) == fmt
    assert (cfg.runner.teams, cfg.train.eval_teams) == (pool, pool + "-heldout")
    assert "heuristics" not in cfg.train.opponents  # held out for evaluation
    teams = T.for_config(cfg)
    assert len(teams.mine.teams) >= at_least and len({t.packed for t in teams.mine.teams}) == len(teams.mine.teams)
    assert teams.format.picked == (3 if fmt == "gen9bssregi" else None)
    held = T.for_config(C.for_format(C.load(preset, {"runner.teams": pool + "-heldout"}), fmt))
    assert len(held.mine.teams) >= 3
    assert not {_species(t) for t in held.mine.teams} & {_species(t) for t in teams.mine.teams}


def test_format_rules_from_showdown():
    assert T.format_info("gen9randombattle").random
    assert T.format_info("gen9doublesou").game_type == "doubles"
    with pytest.raises(T.TeamError, match="is a triples format; the encoder plays singles and doubles"):
        T.format_info("gen9triples")
    with pytest.raises(T.TeamError, match="poke-env would not play as doubles"):
        T.format_info("gen912switch")
    with pytest.raises(T.TeamError, match="not a format of the pinned Showdown"):
        T.format_info("gen9nosuchformat")


BAD_TEAM = """=== [gen9ou] Good ===

Garchomp @ Leftovers
Ability: Rough Skin
EVs: 252 Atk / 4 Def / 252 Spe
Jolly Nature
- Earthquake
- Dragon Claw

=== [gen9ou] Too Strong ===

Koraidon @ Choice Scarf
Ability: Orichalcum Pulse
EVs: 252 Atk / 4 Def / 252 Spe
Jolly Nature
- Flare Blitz
"""


@pytest.mark.parametrize("case", ["invalid", "malformed", "missing", "no-teams", "random-with-teams",
                                  "unknown-format", "wrong-generation"])
def test_team_problems_stop_the_run_with_one_line(tmp_path, case):
    path = tmp_path / "teams.txt"
    fmt, needle = "gen9ou", None
    if case == "invalid":
        path.write_text(BAD_TEAM)
        needle = rf"{re.escape(str(path))}: team 'Too Strong' is not legal in gen9ou: .*Koraidon"
    elif case == "malformed":
        path.write_text("=== [gen9ou] junk ===\n@@@ !!\n:::\n")
        needle = rf"{re.escape(str(path))}: team 'junk' is not legal in gen9ou: .*does not exist"
    elif case == "missing":
        needle = rf"teams path {re.escape(str(path))} does not exist"
    elif case == "no-teams":
        needle = "'gen9ou' is a team format: give teams with --runner.teams"
    elif case == "unknown-format":
        fmt = "gen4nosuchformat"
        needle = "runner.battle_format 'gen4nosuchformat' is not a format of the pinned Showdown"
    elif case == "wrong-generation":  # a shipped gen9 OU team: Showdown's gen 1 reason, its file and its name
        fmt, path = "gen1ou", str(SHIPPED / "ou" / "aurora-veil-offense.txt")
        needle = (rf"{re.escape(path)}: team 'Aurora Veil Offense' is not legal in gen1ou: "
                  r".*does not exist in Gen 1")
    else:
        fmt, path = "gen9randombattle", "teams/ou"
        needle = "'gen9randombattle' builds random teams: remove the teams"
    teams = [] if case in ("no-teams", "unknown-format") else ["--runner.teams", str(path)]
    args = ["--runner.battle_format", fmt] + teams
    run_dir = tmp_path / "run"
    p = run_cli("train", "--config", "test", "--train.run_dir", str(run_dir), *args, timeout=120)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(err) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert err[0].startswith("maple-async: error: ") and re.search(needle, err[0]), err[0]
    assert "[train]" not in p.stdout  # stopped before any battle
    assert not run_dir.exists()  # nothing written


async def test_concurrent_bss_battles_with_a_learned_team_preview(venue):
    teams = T.prepare(_runner("gen9bssregi", str(SHIPPED / "bss")))
    orders = []

    class Agent(CheckingAgent):
        async def preview(self, battle, opponent):
            order = await super().preview(battle, opponent)
            orders.append(order)
            return order

    agent = Agent(InferencePolicy(nets.build("lstm", hidden_size=32)), BatcherConfig(), record=True)
    trajectories = []
    agent.on_trajectory = trajectories.append
    try:
        res = await play(agent, venue, 32, concurrency=16, battle_format="gen9bssregi", teams=teams)
    finally:
        await agent.batcher.close()
    assert res.battles == 32 and res.wins + res.losses + res.ties == 32
    assert agent.stats.invalid_choices == 0 and agent.stats.fallbacks == 0
    assert agent.checked > 100 and agent.mask_errors == []  # only brought Pokémon switch in
    assert len(orders) == 64 and agent.stats.previews == 64  # both sides, every battle
    for order in orders:
        assert re.fullmatch(r"/team [1-6]{3}", order) and len(set(order[6:])) == 3, order
    assert len(trajectories) == 64
    for tr in trajectories:  # the preview's picks open every trajectory, then battle decisions
        assert all(a >= 26 for a in tr.actions[:3]) and all(a < 26 for a in tr.actions[3:])
    assert len(agent.hidden) == 0 and not agent.live


async def test_ou_orders_the_whole_team(venue):
    teams = T.prepare(_runner("gen9ou", str(SHIPPED / "ou")))
    orders = []

    class Agent(CheckingAgent):
        async def preview(self, battle, opponent):
            orders.append(await super().preview(battle, opponent))
            return orders[-1]

    agent = Agent(InferencePolicy(nets.build("lstm", hidden_size=32)), BatcherConfig())
    try:
        res = await play(agent, venue, 6, concurrency=6, opponent="heuristics",
                         battle_format="gen9ou", teams=teams)
    finally:
        await agent.batcher.close()
    assert res.battles == 6 and agent.stats.invalid_choices == 0 and agent.mask_errors == []
    assert len(orders) == 6 and all(sorted(o[6:]) == list("123456") for o in orders), orders


def test_train_in_bss_then_eval_loads_its_checkpoint(showdown_url, tmp_path):
    run_dir = tmp_path / "bss"
    fmt = ["--runner.battle_format", "gen9bssregi", "--runner.teams", "teams/bss"]
    p = run_cli("train", "--config", "test", *fmt, "--server", showdown_url,
                "--train.run_dir", str(run_dir))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"[teams] gen9bssregi: 27 teams from {SHIPPED / 'bss'}" in p.stdout
    assert "final checkpoint" in p.stdout and (run_dir / "latest.pt").exists()
    out = tmp_path / "eval.json"
    e = run_cli("eval", "--checkpoint", str(run_dir / "latest.pt"), "--opponents", "max_power,random",
                "--battles", "12", "--concurrency", "12", "--server", showdown_url, "--json", str(out), *fmt)
    assert e.returncode == 0, e.stdout[-3000:] + e.stderr[-3000:]
    assert "[eval] latest.pt vs max_power (held out): win rate" in e.stdout and "over 12 battles" in e.stdout
    data = json.loads(out.read_text())
    assert [r["opponent"] for r in data["results"]] == ["max_power", "random"]
    assert all(r["battles"] == 12 for r in data["results"])
    assert data["ratings"]["random"] == 1000.0 and set(data["ratings"]) == {"latest.pt", "max_power", "random"}
