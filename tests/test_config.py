import pytest

from maple_async import config as C
from maple_async.opponents import mix_names


def test_defaults_validate():
    cfg = C.load(None)
    assert cfg.runner.concurrency == 64 and cfg.server.host == "127.0.0.1"


@pytest.mark.parametrize("overrides,needle", [
    ({"runner.concurency": 3}, "unknown config key 'runner.concurency'"),
    ({"nosection.x": 3}, "unknown config key 'nosection.x'"),
    ({"runner.concurrency": 0}, "'runner.concurrency' must be > 0"),
    ({"runner.concurrency": -4}, "'runner.concurrency' must be > 0"),
    ({"batcher.max_batch_size": 0}, "'batcher.max_batch_size' must be > 0"),
    ({"runner.concurrency": "many"}, "'runner.concurrency' must be int"),
    ({"runner.concurrency": 2.5}, "'runner.concurrency' must be int"),
    ({"ppo.normalize_advantages": 1}, "'ppo.normalize_advantages' must be bool"),
    ({"network.kind": "gru"}, "'network.kind' must be one of"),
    ({"train.opponents": "self:1,wizard:2"}, "unknown opponent 'wizard'"),
    ({"train.opponents": "random:1; self:1"}, "starts with @ and the decisions it begins at"),
    ({"server.host": "0.0.0.0"}, "loopback"),
    ({"runner.battle_format": "gen9triples"}, "is neither singles nor doubles"),
    ({"runner.battle_format": "gen9freeforallrandombattle"}, "is neither singles nor doubles"),
    ({"runner.battle_format": "randombattle"}, "'runner.battle_format' must name its generation"),
    ({"runner.battle_format": "gen8vgc2020"}, "'gen8vgc2020' is a generation 8 doubles format; doubles are played in generation 9 only"),
    ({"runner.battle_format": "gen4doublesou"}, "generation 4 doubles format"),
    ({"runner.battle_format": "gen5doublesou"}, "'gen5doublesou' is a generation 5 doubles format"),
    ({"runner.battle_format": "gen8randomdoublesbattle"}, "'gen8randomdoublesbattle' is a generation 8 doubles"),
    ({"runner.battle_format": "gen9randombattle,gen9randomdoublesbattle"}, "mixes singles and doubles formats"),
    ({"runner.battle_format": "gen1ou,gen1ou"}, "lists a format twice"),
    ({"runner.team_sampling": "best"}, "'runner.team_sampling' must be one of"),
    ({"train.checkpoint_every_updates": 0}, "'train.checkpoint_every_updates' must be > 0"),
    ({"train.league_every_updates": 0}, "'train.league_every_updates' must be > 0"),
    ({"ppo.gamma": 5}, "'ppo.gamma' must be <= 1"),
    ({"ppo.gae_lambda": -1}, "'ppo.gae_lambda' must be >= 0"),
    ({"network.attention_heads": 3}, "'network.attention_heads' must divide network.hidden_size"),
    ({"batcher.max_wait_ms": float("inf")}, "'batcher.max_wait_ms' must be a finite number"),
    ({"server.port": 70000}, "'server.port' must be <= 65535"),
    ({"train.eval_opponents": "random,self"}, "'train.eval_opponents' lists random, max_power, heuristics, got 'self'"),
    ({"train.league_sampling": "best"}, "'train.league_sampling' must be one of"),
])
def test_bad_values_name_the_key(overrides, needle):
    with pytest.raises(C.ConfigError, match=None) as e:
        C.load(None, overrides)
    assert needle in str(e.value)


def test_gen9_singles_formats_validate():
    for fmt in ("gen9randombattle", "gen9unratedrandombattle", "gen9bssregi", "gen9ou", "gen91v1"):
        assert C.load(None, {"runner.battle_format": fmt}).runner.battle_format == fmt


def test_yaml_unknown_key_and_malformed(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("runner:\n  concurrency: 8\n  bogus: 1\n")
    with pytest.raises(C.ConfigError, match="unknown config key 'runner.bogus'"):
        C.load(p)
    p.write_text("runner: [unclosed\n")
    with pytest.raises(C.ConfigError, match="malformed YAML"):
        C.load(p)
    with pytest.raises(C.ConfigError, match="config file not found"):
        C.load(tmp_path / "missing.yaml")


def test_yaml_and_override_precedence(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("runner:\n  concurrency: 8\nppo:\n  lr: 1\n")
    cfg = C.load(p, {"runner.concurrency": 16})
    assert cfg.runner.concurrency == 16
    assert cfg.ppo.lr == 1.0 and isinstance(cfg.ppo.lr, float)
    assert C.from_saved(cfg.to_dict()) == cfg


def test_renamed_keys_point_to_their_new_names_and_saved_configs_still_load(tmp_path):
    """train.total_battles and train.battles_per_update counted battle sides: a file or a flag
    with the old name is answered with the new one; a checkpoint's or a run folder's config
    written before the rename loads under the new names."""
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  total_battles: 96\n")
    with pytest.raises(C.ConfigError, match=r"^config key 'train.total_battles' is now train.total_sides$"):
        C.load(p)
    with pytest.raises(C.ConfigError, match="'train.battles_per_update' is now train.sides_per_update"):
        C.load(None, {"train.battles_per_update": 8})
    old = C.Config().to_dict()
    old["train"] = {("total_battles" if k == "total_sides" else "battles_per_update" if k == "sides_per_update"
                     else k): v for k, v in old["train"].items()}
    old["train"].update(total_battles=96, battles_per_update=8)
    cfg = C.from_saved(old)
    assert (cfg.train.total_sides, cfg.train.sides_per_update) == (96, 8)
    assert C.load(p, saved=True).train.total_sides == 96  # a run folder's config.yaml


def test_opponent_mix_normalised():
    assert C.parse_opponent_mix("self:0.5,league:0.3,heuristics:0.2") == pytest.approx(
        {"self": 0.5, "league": 0.3, "heuristics": 0.2})
    assert C.parse_opponent_mix("self:2,random:2") == {"self": 0.5, "random": 0.5}


def test_shipped_presets_load():
    names = C.preset_names()
    assert {"test", "quick", "default", "bss", "gpu"} <= set(names), names
    for name in names:
        cfg = C.load(name)
        for key in C.TEAM_KEYS:
            path = C.get_key(cfg, key)
            assert path is None or C.teams_here(path, cfg.runner.battle_format) == path, (name, key, path)


def test_a_preset_is_found_by_name_from_any_folder_and_a_path_still_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert C.load("quick") == C.load("quick.yaml") == C.load(C.PRESETS / "quick.yaml")
    assert C.load("quick").train.run_dir == "runs/quick"
    mine = tmp_path / "my.yaml"
    mine.write_text("runner:\n  concurrency: 8\n")
    assert C.load("my.yaml").runner.concurrency == 8
    with pytest.raises(C.ConfigError, match=r"config file not found: nope \(presets by name: .*quick"):
        C.load("nope")
    with pytest.raises(C.ConfigError, match="config file not found: sub/quick"):
        C.load("sub/quick")  # a path is a path: only a bare name is a preset


def test_team_paths_in_a_preset_are_its_own_and_in_the_users_yaml_keep_their_meaning(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "teams" / "bss").mkdir(parents=True)  # a folder of the user's that shadows nothing
    bss = C.load("bss")
    assert bss.runner.teams == str(C.PRESETS / "teams" / "bss")
    assert bss.train.eval_teams == str(C.PRESETS / "teams" / "bss-heldout")
    assert C.load("oldgens").runner.teams == str(C.PRESETS / "teams" / "{format}")
    mine = tmp_path / "my.yaml"
    mine.write_text("runner:\n  battle_format: gen9bssregi\n  teams: teams/bss\n"
                    "train:\n  eval_teams: teams/bss-heldout\n")
    cfg = C.load(mine)
    assert cfg.runner.teams == "teams/bss"  # here, as before: this folder's
    assert cfg.train.eval_teams == str(C.PRESETS / "teams" / "bss-heldout")  # not here: the shipped pool
    over = C.load("quick", {"runner.battle_format": "gen9ou", "runner.teams": "teams/ou"})
    assert over.runner.teams == str(C.PRESETS / "teams" / "ou")
    assert C.load(None, {"runner.battle_format": "gen9ou", "runner.teams": "nowhere/ou"}).runner.teams == "nowhere/ou"


def test_saved_team_paths_of_the_repositorys_config_folder_find_the_shipped_pools():
    assert C.teams_here("config/teams/{format}", "gen1ou,gen2ou") == str(C.PRESETS / "teams" / "{format}")
    assert C.teams_here("teams/ou-heldout", "gen9ou") == str(C.PRESETS / "teams" / "ou-heldout")
    assert C.teams_here("config/teams/nope", "gen1ou") is None


def test_every_team_preset_evaluates_on_a_held_out_pool_of_its_own():
    """A preset that trains on shipped teams evaluates on another existing folder, for
    each format it lists (``{format}`` stands for each)."""
    from pathlib import Path
    with_teams = 0
    for name in C.preset_names():
        cfg = C.load(name)
        if not cfg.runner.teams:
            continue
        with_teams += 1
        for fmt in C.formats(cfg.runner.battle_format):
            one = C.for_format(cfg, fmt)
            assert one.train.eval_teams, f"{name} trains on {one.runner.teams} and sets no train.eval_teams"
            held, train = Path(one.train.eval_teams).resolve(), Path(one.runner.teams).resolve()
            assert held.is_dir() and held != train, (name, one.train.eval_teams)
    assert with_teams >= 6  # bss, doublesou, gen1ou, oldgens, ou, vgc


def test_every_key_declares_its_meaning():
    for name, f, _ann in C.declared_keys():
        assert f.metadata.get("help"), f"{name} has no help text"


def test_no_module_but_the_entry_point_imports_the_cli():
    import ast
    from pathlib import Path
    pkg = Path(C.__file__).parent
    for path in pkg.rglob("*.py"):
        if path.name == "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
                assert not any(n == "cli" or n.endswith(".cli") for n in names), path


def test_shipped_presets_hold_the_heuristic_bot_out_of_training():
    """The headline evaluation opponent (SimpleHeuristicsPlayer) is never in a preset's mix."""
    presets = C.preset_names()
    assert len(presets) >= 6
    for name in presets:
        assert "heuristics" not in mix_names(C.load(name).train.opponents), name


def test_baseline_names_are_poke_envs_players():
    from maple_async.pokeenv.players import BASELINES
    assert tuple(BASELINES) == C.BASELINE_NAMES


def test_transport_is_the_simulator_unless_a_server_is_named():
    cfg = C.load(None)
    assert C.transport_of(cfg.server) == "simulator"
    assert C.transport_of(C.load(None, {"server.url": "http://127.0.0.1:8000"}).server) == "websocket"
    assert C.transport_of(C.load(None, {"server.transport": "websocket"}).server) == "websocket"
    with pytest.raises(C.ConfigError, match="server.transport is simulator"):
        C.load(None, {"server.url": "http://127.0.0.1:8000", "server.transport": "simulator"})


def _train_refused(capsys, run_dir, *args) -> str:
    """``maple-async train`` with ``args``: exit 2, one error line last on stderr, no run folder."""
    from maple_async import cli
    assert cli.main(["train", "--train.run_dir", str(run_dir), *args]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err and err[-1].startswith("maple-async: error: "), err
    assert sum(line.startswith("maple-async: error:") for line in err) == 1 and "Traceback" not in "\n".join(err)
    assert not run_dir.exists()  # nothing written
    return err[-1]


@pytest.mark.parametrize("fmt,needle", [
    ("gen9randombattle,gen9randomdoublesbattle", "mixes singles and doubles formats"),
    ("gen1ou,gen9vgc2025regi", "mixes singles and doubles formats"),
    ("gen8randomdoublesbattle", "'gen8randomdoublesbattle' is a generation 8 doubles format"),
    ("gen5doublesou", "'gen5doublesou' is a generation 5 doubles format"),
])
def test_train_refuses_a_format_in_one_line_and_writes_nothing(tmp_path, capsys, restore_gc, fmt, needle):
    assert needle in _train_refused(capsys, tmp_path / "run", "--runner.battle_format", fmt)


@pytest.mark.parametrize("start", ["--train.init", "--resume"])
def test_train_refuses_a_checkpoint_of_another_generation_before_writing(tmp_path, capsys, restore_gc, start):
    from maple_async.run.loop import LearningLoop
    small = {"network.hidden_size": 8, "train.tensorboard": False}
    cfg = C.load(None, {**small, "runner.battle_format": "gen9randombattle", "train.run_dir": str(tmp_path / "gen9")})
    path = str(LearningLoop(cfg, "cpu", quiet=True, handle_signals=False).save_checkpoint())
    line = _train_refused(capsys, tmp_path / "run", start, path, "--runner.battle_format", "gen4randombattle",
                          *(f"--{k}={v}" for k, v in small.items()))
    assert line == (f"maple-async: error: checkpoint {path} was trained on generation 9 (gen9randombattle) and "
                    f"gen4randombattle is generation 4: train one on that generation")
