"""Doubles on a real local Showdown: concurrent random doubles and VGC battles whose masks
are checked against poke-env's valid orders and never draw an [Invalid choice], a learned
4-of-6 team preview, open team sheets accepted and declined, train -> eval, bad input."""

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
from poke_env.player.battle_order import DefaultBattleOrder, DoubleBattleOrder, PassBattleOrder

from maple_async import config as C
from maple_async import teams as T
from maple_async.collect.agent import Agent
from maple_async.collect.match import play
from maple_async.config import BatcherConfig
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import checkpoint as ckpt
from maple_async.learn import networks as nets
from maple_async.obs import doubles as dbl
from maple_async.obs import games
from test_integration_teams import run_cli

pytestmark = pytest.mark.integration


def _runner(fmt, teams):
    return SimpleNamespace(battle_format=fmt, teams=teams, team_sampling="uniform", seed=0)


def _empty_target(battle, s, order) -> bool:
    """An order aimed at a position with no Pokémon (fainted, not replaced): Showdown takes it
    (a foe's is retargeted, an ally's fails); the masks offer only present targets."""
    loc = getattr(order, "move_target", 0)
    if not loc:
        return False
    if loc > 0:
        return battle.opponent_active_pokemon[loc - 1] is None
    return battle.active_pokemon[-loc - 1] is None


def _action(battle, s, order):
    """poke-env's order for slot ``s`` as a per-slot action (None: not one we number)."""
    if isinstance(order, PassBattleOrder):
        return dbl.PASS
    target = order.order
    if hasattr(target, "species"):
        return next(i for i, m in enumerate(battle.team.values()) if m is target)
    entries = dbl._request_moves(battle, s)
    j = next((k for k, e in enumerate(entries) if e.get("id") == target.id), None)
    if j is None:
        return None
    loc = order.move_target
    if "target" not in entries[j]:
        loc = 0  # a locked move (charging, rampage): Showdown keeps its own target whatever is sent
    t = {0: 0, 1: 1, 2: 2}.get(loc, 4 if loc == -(s + 1) else 3)
    return (dbl.TERA0 if order.terastallize else dbl.MOVE0) + 5 * j + t


class CheckingDoublesAgent(Agent):
    """Every joint order poke-env lists as valid must be reachable through the two masks
    (slot 2's given slot 1's choice)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.unreachable, self.checked, self.sheets = [], 0, []

    async def choose(self, battle, opponent):
        if not battle._wait and not battle.teampreview:
            turn = dbl.Turn(battle)
            first = turn.mask(0)
            valid = battle.valid_orders
            for order in DoubleBattleOrder.join_orders(valid[0], valid[1]):
                if isinstance(order.first_order, DefaultBattleOrder):
                    continue
                a0 = _action(battle, 0, order.first_order)
                a1 = _action(battle, 1, order.second_order)
                if a0 == dbl.PASS and first[:6].any():
                    continue  # pass first, switch second: we ask slot 1 to switch (the same turn)
                if _empty_target(battle, 0, order.first_order) or _empty_target(battle, 1, order.second_order):
                    continue
                if a0 is None or a1 is None or not first[a0] or not turn.mask(1, a0)[a1]:
                    self.unreachable.append((battle.battle_tag, order.message))
            self.checked += 1
            self.sheets.append(turn.base[dbl.X_SHEET])
        return await super().choose(battle, opponent)


def _agent(**kw):
    return CheckingDoublesAgent(InferencePolicy(nets.build("lstm", hidden_size=32, obs_dim=dbl.OBS_DIM,
                                                           n_actions=dbl.N_ACTIONS)), BatcherConfig(), **kw)


async def test_64_concurrent_random_doubles_battles_without_an_invalid_choice(venue):
    agent = _agent(record=True)
    trajectories = []
    agent.on_trajectory = trajectories.append
    try:
        res = await play(agent, venue, 64, concurrency=64, battle_format="gen9randomdoublesbattle")
    finally:
        await agent.batcher.close()
    assert res.battles == 64 and res.wins + res.losses + res.ties == 64
    assert agent.stats.invalid_choices == 0 and agent.stats.other_server_errors == 0
    assert agent.stats.fallbacks == 0 and agent.checked > 1000
    assert agent.unreachable == [], agent.unreachable[:10]
    assert len(trajectories) == 128 and agent.stats.previews == 0
    steps = sum(len(t) for t in trajectories)
    assert steps > agent.stats.decisions  # most turns are two recorded steps (one per slot)
    # slot 2 steps carry slot 1's action; one tera per battle side across both slots
    for tr in trajectories:
        obs = np.stack(tr.obs)
        second = obs[:, dbl.X_SLOT + 1] > 0
        assert (obs[second, dbl.X_FIRST:dbl.X_FIRST + dbl.N_SLOT].sum(1) == 1).all()
        teras = sum(dbl.TERA0 <= a < dbl.PASS for a in tr.actions)
        assert teras <= 1, tr.actions
    assert len(agent.hidden) == 0 and not agent.live


@pytest.mark.parametrize("sheets", [True, False])
async def test_vgc_battles_with_a_learned_preview_and_open_team_sheets(venue, sheets):
    teams = T.prepare(_runner("gen9vgc2025regi", str(C.PRESETS / "teams" / "vgc")))
    orders = []

    class Checking(CheckingDoublesAgent):
        async def preview(self, battle, opponent):
            orders.append(await super().preview(battle, opponent))
            return orders[-1]

    agent = Checking(InferencePolicy(nets.build("lstm", hidden_size=32, obs_dim=dbl.OBS_DIM,
                                                n_actions=dbl.N_ACTIONS)), BatcherConfig(), record=True)
    trajectories = []
    agent.on_trajectory = trajectories.append
    n = 32 if sheets else 8
    try:
        res = await play(agent, venue, n, concurrency=16, opponent="heuristics" if not sheets else "self",
                         battle_format="gen9vgc2025regi", teams=teams,
                         battle_options={"open_team_sheets": sheets})
    finally:
        await agent.batcher.close()
    sides = n * (1 if not sheets else 2)
    assert res.battles == n and agent.stats.invalid_choices == 0 and agent.stats.fallbacks == 0
    assert agent.unreachable == [], agent.unreachable[:10]
    assert len(orders) == sides and agent.stats.previews == sides
    for order in orders:  # four of six, the first two lead
        assert re.fullmatch(r"/team [1-6]{4}", order) and len(set(order[6:])) == 4, order
    for tr in trajectories:  # the four picks open every trajectory (the fourth may be forced)
        k = sum(a >= dbl.PREVIEW for a in tr.actions)
        assert 3 <= k <= 4 and all(a >= dbl.PREVIEW for a in tr.actions[:k])
        assert all(a < dbl.PREVIEW for a in tr.actions[k:])
    # the opponent's sheet is in the observation exactly when both sides accepted
    assert agent.sheets and set(agent.sheets) == {1.0 if sheets else 0.0}


def test_presets_and_pools_validate():
    for preset, fmt, pool in [("doubles", "gen9randomdoublesbattle", None),
                              ("vgc", "gen9vgc2025regi", str(C.PRESETS / "teams" / "vgc")),
                              ("doublesou", "gen9doublesou", str(C.PRESETS / "teams" / "doublesou"))]:
        cfg = C.load(preset)
        assert (cfg.runner.battle_format, cfg.runner.teams) == (fmt, pool)
        assert "heuristics" not in cfg.train.opponents and cfg.train.max_minutes == 30
        teams = T.for_config(cfg)
        assert teams.format.game_type == "doubles"
        if pool:
            assert teams.format.team_preview and len(teams.mine.teams) >= 3
    vgc = C.load("vgc")
    held = T.prepare(_runner("gen9vgc2025regi", vgc.train.eval_teams))
    train = T.for_config(vgc)
    assert T.for_config(vgc).format.picked == 4
    assert not {t.packed for t in held.mine.teams} & {t.packed for t in train.mine.teams}


def test_train_in_random_doubles_then_eval_its_checkpoint(showdown_url, tmp_path):
    run_dir = tmp_path / "doubles"
    fmt = ["--runner.battle_format", "gen9randomdoublesbattle"]
    p = run_cli("train", "--config", "test", *fmt, "--server", showdown_url,
                "--train.run_dir", str(run_dir))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "final checkpoint" in p.stdout and (run_dir / "latest.pt").exists()
    assert ckpt.load(run_dir / "latest.pt")["layout"] == games.DOUBLES.layout
    out = tmp_path / "eval.json"
    e = run_cli("eval", "--checkpoint", str(run_dir / "latest.pt"), "--opponents", "heuristics,random",
                "--battles", "12", "--concurrency", "12", "--server", showdown_url, "--json", str(out), *fmt)
    assert e.returncode == 0, e.stdout[-3000:] + e.stderr[-3000:]
    assert "[eval] latest.pt vs heuristics (held out): win rate" in e.stdout
    data = json.loads(out.read_text())
    assert [r["opponent"] for r in data["results"]] == ["heuristics", "random"]
    assert all(r["battles"] == 12 for r in data["results"])
    # the same checkpoint in a singles format (asked for: with none, eval plays the checkpoint's):
    # one line, before any battle
    s = run_cli("eval", "--checkpoint", str(run_dir / "latest.pt"), "--opponents", "random", "--battles", "4",
                "--runner.battle_format", "gen9randombattle", "--server", showdown_url, timeout=120)
    assert s.returncode == 2 and s.stderr.strip().splitlines() == [
        f"maple-async: error: checkpoint {run_dir / 'latest.pt'} plays doubles and gen9randombattle is a "
        f"singles format: use a singles checkpoint"], s.stderr[-2000:]


ILLEGAL_VGC = """=== [gen9vgc2025regi] Three Restricted ===

Koraidon @ Choice Scarf
Ability: Orichalcum Pulse
- Flare Blitz

Miraidon @ Choice Specs
Ability: Hadron Engine
- Electro Drift

Kyogre @ Mystic Water
Ability: Drizzle
- Water Spout
"""


@pytest.mark.parametrize("case", ["illegal", "singles-teams", "singles-checkpoint", "gen9triples",
                                  "gen9multirandombattle", "gen9freeforallrandombattle"])
def test_bad_doubles_input_stops_with_one_line(tmp_path, case):
    args = ["train", "--config", "vgc", "--train.run_dir", str(tmp_path / "run")]
    if case == "illegal":
        (tmp_path / "t.txt").write_text(ILLEGAL_VGC)
        args += ["--runner.teams", str(tmp_path / "t.txt")]
        needle = r"team 'Three Restricted' is not legal in gen9vgc2025regi"
    elif case == "singles-teams":
        args += ["--runner.teams", "teams/bss"]
        needle = r"is written for gen9bssregi \(singles\) and gen9vgc2025regi is doubles: give doubles teams"
    elif case == "singles-checkpoint":
        saved = C.Config().to_dict()
        ckpt.save(tmp_path / "singles.pt", {"config": saved, "learner": {"network": {}}})
        args += ["--train.init", str(tmp_path / "singles.pt")]
        needle = r"plays singles and gen9vgc2025regi is a doubles format: use a doubles checkpoint"
    else:
        args = ["train", "--config", "test", "--runner.battle_format", case]
        needle = rf"'{case}' is neither singles nor doubles"
    p = run_cli(*args, timeout=180)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(err) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert err[0].startswith("maple-async: error: ") and re.search(needle, err[0]), err[0]
    assert "[train] upd" not in p.stdout
