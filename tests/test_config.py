import pytest

from maple_async import config as C


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
    ({"server.host": "0.0.0.0"}, "loopback"),
    ({"runner.battle_format": "gen9randomdoublesbattle"}, "'runner.battle_format' must be a gen9 singles"),
    ({"runner.battle_format": "gen8randombattle"}, "'runner.battle_format' must be a gen9 singles"),
    ({"runner.battle_format": "gen9ou"}, "'runner.battle_format' must be a gen9 singles"),
])
def test_bad_values_name_the_key(overrides, needle):
    with pytest.raises(C.ConfigError, match=None) as e:
        C.load(None, overrides)
    assert needle in str(e.value)


def test_gen9_singles_random_formats_validate():
    for fmt in ("gen9randombattle", "gen9unratedrandombattle"):
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


def test_opponent_mix_normalised():
    assert C.parse_opponent_mix("self:0.5,league:0.3,heuristics:0.2") == pytest.approx(
        {"self": 0.5, "league": 0.3, "heuristics": 0.2})
    assert C.parse_opponent_mix("self:2,random:2") == {"self": 0.5, "random": 0.5}


def test_shipped_presets_load():
    from pathlib import Path
    presets = sorted(Path(__file__).parent.parent.joinpath("config").glob("*.yaml"))
    assert presets, "config/*.yaml presets are missing"
    for p in presets:
        C.load(p)
