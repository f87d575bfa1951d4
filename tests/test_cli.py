"""The command line's vocabulary: every command's ``--help`` (each option with its default,
only the config keys the command reads, no stale wording), the spellings that changed and
the keys a command does not read, each answered with one line."""

import re

import pytest

from maple_async import cli
from maple_async import config as C
from maple_async.cli.parser import COMMAND_PARSERS, command_keys

COMMANDS = [f.__name__.removesuffix("_parser") for f in COMMAND_PARSERS]
STALE = ["random numbers are not seeded", "own Showdown server", "stop / list", "list managed"]


def _help(command, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def _options(text: str) -> dict[str, str]:
    """Each option of a help text (its first flag) and its help, joined across lines."""
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"^  (-{1,2}[\w.-]+)", line)
        if m:
            name = m.group(1)
            out[name] = line
        elif name and line.startswith("      "):
            out[name] += " " + line.strip()
        else:
            name = None
    return {k: " ".join(v.split()) for k, v in out.items()}


def test_every_command_is_walked():
    assert set(COMMANDS) == set(cli.COMMANDS) and len(COMMANDS) == 11


@pytest.mark.parametrize("command", COMMANDS)
def test_every_commands_help_shows_each_default_and_only_the_keys_it_reads(command, capsys, monkeypatch):
    text = _help(command, capsys, monkeypatch)
    options = _options(text)
    assert options, text
    for flag, line in options.items():
        if flag not in ("-h", "--help"):
            assert "(default: " in line, f"{command} {flag} shows no default: {line}"
    flat = " ".join(text.split())
    reads = command_keys(command)
    for name, _f, _ann in C.declared_keys():
        listed = f"--{name} V" in flat
        assert listed == (name in reads), f"{command} {'lists' if listed else 'lacks'} --{name}"
    for section in C.SECTIONS:
        header = f"{section} (config section '{section}')" in text
        assert header == any(k.startswith(section + ".") for k in reads), (command, section)
    for stale in STALE:
        assert stale not in flat, (command, stale)
    assert "[--SECTION.KEY V ...]" in flat.split("options:")[0] or not reads  # the usage line stays short


def test_the_help_of_eval_fits_on_a_few_screens(capsys, monkeypatch):
    text = _help("eval", capsys, monkeypatch)
    assert len(text.splitlines()) < 200 and "--ppo." not in text and "--train.total_sides" not in text
    assert "--runner.battle_format V" in text and "--search.engine V" in text


def test_the_top_level_help_names_every_command_and_what_a_battle_side_is(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(c in text for c in COMMANDS) and "battle side" in text
    assert "install, start, stop or show (status)" in text


@pytest.mark.parametrize("argv,line", [
    (["serve", "--checkpoint", "x.pt", "--format", "gen9ou"], "--format is now --runner.battle_format"),
    (["ladder", "--teams", "teams/bss"], "--teams is now --runner.teams"),
    (["eval", "--opponent", "random"], "--opponent is now --opponents"),
    (["curve", "runs/x", "--opponent=random"], "--opponent is now --opponents"),
    (["play", "--opponent", "random"], "--opponent is now --runner.opponent"),
    (["pretrain", "--opponent", "random"], "--opponent is now --runner.opponent"),
    (["server", "start", "--port", "8000"], "--port is now --server.port"),
    (["server", "install", "--home", "/tmp/x"], "--home is now --server.home"),
    (["engine", "install", "--home", "/tmp/x"], "--home is now --server.home"),
    (["train", "--train.total_battles", "100"], "--train.total_battles is now --train.total_sides"),
    (["bench", "--train.battles_per_update", "8"], "--train.battles_per_update is now --train.sides_per_update"),
    (["eval", "--ppo.lr", "1e-4"], "eval does not read ppo.lr: eval reads the server, runner, batcher and search "
                                   "sections and train.opponent_teams"),
    (["eval", "--network", "mlp"], "eval does not read network.kind (--network): eval reads"),
    (["train", "--search.depth", "2"], "train does not read search.depth: train reads the server, runner, batcher, "
                                       "network, reward, ppo and train sections"),
    (["train", "--runner.opponent", "random"], "runner.opponent is read by play and pretrain alone"),
    (["serve", "--runner.seed", "1"], "serve does not read runner.seed: serve reads server.url, "
                                      "runner.battle_format, runner.teams, runner.concurrency and runner.device"),
    (["report", "runs/x", "--config", "c.yaml"], "report does not read"),
])
def test_a_changed_spelling_or_an_unread_key_is_answered_in_one_line(argv, line, capsys):
    if argv[-2:] == ["--config", "c.yaml"]:  # report takes no config at all
        argv = argv[:-2] + ["--runner.seed", "1"]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith(f"maple-async: error: {line}"), err


def test_serve_takes_the_vocabulary_of_every_other_command(tmp_path):
    args = cli.build_parser().parse_args(["serve", "--policy", "m:p", "--runner.battle_format", "gen4randombattle",
                                          "--concurrency", "3", "--server", "http://127.0.0.1:8000"])
    cfg = cli.outside_config(args)
    assert (cfg.runner.battle_format, cfg.runner.concurrency, cfg.server.url, cfg.runner.device) == (
        "gen4randombattle", 3, "http://127.0.0.1:8000", "cpu")
    ladder = cli.outside_config(cli.build_parser().parse_args(["ladder", "--policy", "m:p"]))
    assert ladder.runner.concurrency == 1
    assert cli.outside_config(cli.build_parser().parse_args(["serve", "--policy", "m:p"])).runner.concurrency == 8
    with pytest.raises(C.ConfigError, match="'runner.concurrency' must be > 0"):
        cli.outside_config(cli.build_parser().parse_args(["serve", "--policy", "m:p", "--concurrency", "0"]))


def test_the_config_reference_is_current():
    """docs/config.md is written from the same declarations as the flags: regenerated here and
    compared (after a change to config.py, run the command this failure names)."""
    from pathlib import Path

    from maple_async.cli.reference import COMMAND, reference
    text = reference()
    assert (Path(__file__).resolve().parent.parent / "docs" / "config.md").read_text() == text, \
        f"docs/config.md is not current: run {COMMAND}"
    for name, f, _ann in C.declared_keys():
        assert f"| `{name}`" in text and f.metadata["help"].split(";")[0].replace("|", "\\|") in text, name


def test_a_run_folders_config_written_before_a_rename_still_loads(tmp_path):
    """``eval --config RUN/config.yaml`` (what train prints when stopped early) and ``curve RUN``
    read a run folder's config as saved; a config file of one's own is answered with the new name."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "config.yaml").write_text("train:\n  total_battles: 96\n  battles_per_update: 8\n")
    args = cli.build_parser().parse_args(["eval", "--config", str(tmp_path / "config.yaml")])
    cfg = cli.load_config(args)
    assert (cfg.train.total_sides, cfg.train.sides_per_update) == (96, 8)
    (tmp_path / "mine.yaml").write_text("train:\n  total_battles: 96\n")
    with pytest.raises(C.ConfigError, match="'train.total_battles' is now train.total_sides"):
        cli.load_config(cli.build_parser().parse_args(["eval", "--config", str(tmp_path / "mine.yaml")]))
