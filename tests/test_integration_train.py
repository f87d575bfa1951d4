"""`maple-async train` end to end on the fixture's server, then `eval` on its checkpoint."""

import csv
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def run_cli(*args, timeout=420):
    return subprocess.run([sys.executable, "-m", "maple_async.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_train_writes_checkpoint_that_eval_loads(showdown_url, tmp_path):
    run_dir = tmp_path / "run"
    p = run_cli("train", "--config", "test", "--server", showdown_url,
                "--train.run_dir", str(run_dir))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "[train] upd" in p.stdout and "final checkpoint" in p.stdout
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert len(rows) >= 3  # 48 battles / 16 per update
    assert int(rows[-1]["battles"]) >= 48
    assert (run_dir / "latest.pt").exists()
    # TensorBoard by default: the logdir line, and event files with the scalars.
    assert f"tensorboard --logdir {run_dir / 'tb'}" in p.stdout
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    tags = set(EventAccumulator(str(run_dir / "tb")).Reload().Tags()["scalars"])
    assert {"pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "lr", "battles_per_s", "decisions_per_s",
            "mean_batch_size", "policy_lag", "win_rate/self", "reward/win", "reward/hp"} <= tags
    # One learner battle in 4 kept as a replay (test.yaml: train.replay_every).
    replays = list((run_dir / "replays").glob("*.html"))
    assert 48 // 2 // 4 <= len(replays) and len(replays) == len(list((run_dir / "replays").glob("*.log")))
    r = run_cli("report", str(run_dir))
    assert r.returncode == 0 and (run_dir / "report.png").stat().st_size > 20_000, r.stdout + r.stderr

    # Resume continues the update counter.
    p2 = run_cli("train", "--config", "test", "--server", showdown_url,
                 "--train.run_dir", str(run_dir), "--train.total_sides", "80", "--resume")
    assert p2.returncode == 0, p2.stdout[-3000:] + p2.stderr[-3000:]
    assert f"resumed from {run_dir / 'latest.pt'}: update {len(rows)}" in p2.stdout
    rows2 = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert int(rows2[-1]["update"]) > int(rows[-1]["update"])

    # The run's history: weights snapshots at its start and ends, played again by curve.
    assert len(list((run_dir / "checkpoints").glob("weights_*.pt"))) >= 2
    for done in (0, 2):
        c = run_cli("curve", str(run_dir), "--minutes", "0,100", "--opponents", "random", "--battles", "6",
                    "--server", showdown_url)
        assert c.returncode == 0, c.stdout[-3000:] + c.stderr[-3000:]
        assert f"{2 - done} to play ({done} already in" in c.stdout
    curve_rows = list(csv.DictReader(open(run_dir / "curve.csv")))
    assert len(curve_rows) == 2 and {r["label"] for r in curve_rows} == {"held out"}
    assert int(curve_rows[0]["update"]) < int(curve_rows[1]["update"]) == int(rows2[-1]["update"])

    e = run_cli("eval", "--checkpoint", str(run_dir / "latest.pt"), "--opponents", "random",
                "--battles", "12", "--server", showdown_url, "--concurrency", "12")
    assert e.returncode == 0, e.stdout[-3000:] + e.stderr[-3000:]
    # test.yaml trains on self-play only: random is held out
    assert "[eval] latest.pt vs random (held out): win rate" in e.stdout and "over 12 battles" in e.stdout
    assert "ratings (Bradley-Terry, Elo scale, random = 1000): " in e.stdout


def test_pretrain_then_train_from_its_weights(showdown_url, tmp_path):
    p = run_cli("pretrain", "--config", "test", "--server", showdown_url, "--teacher", "max_power",
                "--battles", "12", "--round-sides", "8", "--train.run_dir", str(tmp_path / "bc"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "[pretrain] round 1 |" in p.stdout and (tmp_path / "bc" / "pretrained.pt").exists()
    assert "24 battle sides" in p.stdout  # both sides of 12 battles recorded
    t = run_cli("train", "--config", "test", "--server", showdown_url,
                "--train.run_dir", str(tmp_path / "ppo"), "--train.init", str(tmp_path / "bc" / "pretrained.pt"),
                "--train.total_sides", "100000", "--train.total_decisions", "150")
    assert t.returncode == 0, t.stdout[-3000:] + t.stderr[-3000:]
    assert "initial weights from" in t.stdout and "(cloned from max_power)" in t.stdout
    assert "reached 150 decisions" in t.stdout  # a decision budget ends the run
    e = run_cli("eval", "--checkpoint", str(tmp_path / "bc" / "pretrained.pt"), "--opponents", "max_power,random",
                "--battles", "4", "--server", showdown_url, "--concurrency", "4")
    assert e.returncode == 0, e.stdout[-3000:] + e.stderr[-3000:]
    assert "vs max_power (teacher (cloned))" in e.stdout and "vs random (held out)" in e.stdout


def test_one_agent_trains_on_several_formats_and_eval_reports_each(showdown_url, tmp_path):
    """Battles of both listed formats run in one process through one network, each format
    with its own lanes of the mix (the league's included); the final evaluation and eval
    report each format's rows; a checkpoint is refused in a generation
    it never saw, and a command that plays one format refuses the list."""
    import json
    run_dir = tmp_path / "run"
    both = "gen1randombattle,gen4randombattle"
    p = run_cli("train", "--config", "test", "--server", showdown_url, "--train.run_dir", str(run_dir),
                "--runner.battle_format", both, "--train.opponents", "self:0.4,league:0.2,random:0.4",
                "--train.eval_battles", "4", "--train.eval_opponents", "random", "--train.replay_every", "0")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lanes = next(line for line in p.stdout.splitlines() if "[train] lanes:" in line)
    for fmt in ("gen1randombattle", "gen4randombattle"):  # each opponent kind per format, the league's too
        for kind in ("self", "league", "random"):
            assert f"{fmt}:{kind} (concurrency " in lanes, lanes
    rows = json.loads((run_dir / "eval.json").read_text())["results"]
    assert [(r["player"], r["battles"]) for r in rows] == [("agent [gen1randombattle]", 4), ("agent [gen4randombattle]", 4)]
    # each format's share of the decisions trained on: in the metrics, the checkpoint and the last line
    import csv
    last = list(csv.DictReader((run_dir / "metrics.csv").open()))[-1]
    split = {fmt: int(last[f"decisions/{fmt}"]) for fmt in ("gen1randombattle", "gen4randombattle")}
    assert all(n > 0 for n in split.values()) and sum(split.values()) == int(last["decisions"]), last
    from maple_async.learn import checkpoint as ckpt_mod
    assert ckpt_mod.load(run_dir / "latest.pt")["counters"]["format_decisions"] == split
    assert (f"[train] decisions by format: gen1randombattle {split['gen1randombattle']}, "
            f"gen4randombattle {split['gen4randombattle']}") in p.stdout

    ckpt = str(run_dir / "latest.pt")
    e = run_cli("eval", "--checkpoint", ckpt, "--opponents", "random", "--battles", "4", "--server", showdown_url,
                "--concurrency", "4", "--runner.battle_format", "gen4randombattle")
    assert e.returncode == 0 and "[eval] latest.pt vs random (in training): win rate" in e.stdout, e.stdout + e.stderr
    e = run_cli("eval", "--checkpoint", ckpt, "--opponents", "random", "--battles", "4", "--server", showdown_url,
                "--runner.battle_format", "gen9randombattle")
    assert e.returncode == 2 and e.stderr.strip().splitlines()[-1].startswith(
        f"maple-async: error: checkpoint {ckpt} was trained on generation 1, 4 ({both}) and gen9randombattle "
        f"is generation 9"), e.stderr
    pl = run_cli("play", "--battles", "2", "--server", showdown_url, "--runner.battle_format", both)
    assert pl.returncode == 2 and "this command plays one format; runner.battle_format lists 2" in pl.stderr, pl.stderr


def test_an_opponent_schedule_replaces_the_lanes_at_its_decisions(showdown_url, tmp_path):
    """Scripted bots first, self-play from 300 decisions on: the lanes change once, the
    metrics name max_power early and self-play late, and the bots' lane plays out its battles."""
    run_dir = tmp_path / "run"
    p = run_cli("train", "--config", "test", "--server", showdown_url, "--train.run_dir", str(run_dir),
                "--train.opponents", "max_power:1; @300 self:1", "--train.total_sides", "96",
                "--train.replay_every", "0")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lanes = [line for line in p.stdout.splitlines() if "[train] lanes:" in line]
    assert lanes == ["[train] lanes: max_power (concurrency 16)", "[train] lanes: self (concurrency 16)"], lanes
    assert "[train] opponents from 300 decisions: self:1" in p.stdout
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert rows[0].get("games/max_power") and not rows[0].get("games/self")
    assert rows[-1].get("games/self") and int(rows[-1]["decisions"]) > 300


def test_curve_with_search_keeps_its_rows_apart_from_the_plain_ones(showdown_url, tmp_path):
    """``curve --search``: the searched checkpoints' rows carry their own opponent key, so the
    cache skips them on a second call and a plain curve still plays its own rows."""
    run_dir = tmp_path / "run"
    p = run_cli("train", "--config", "test", "--server", showdown_url, "--train.run_dir", str(run_dir),
                "--runner.battle_format", "gen4randombattle", "--train.total_sides", "32",
                "--train.replay_every", "0")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert len(list((run_dir / "checkpoints").glob("weights_*.pt"))) >= 2  # 2 updates: two points
    curve = ("curve", str(run_dir), "--minutes", "0,100", "--opponents", "random", "--battles", "2",
             "--server", showdown_url, "--runner.concurrency", "2")
    c = run_cli(*curve, "--search", timeout=1200)
    assert c.returncode == 0, c.stdout[-3000:] + c.stderr[-3000:]
    assert "2 to play (0 already in" in c.stdout
    rows = list(csv.DictReader(open(run_dir / "curve.csv")))
    assert [r["opponent"] for r in rows] == ["random [agent+search]"] * 2
    assert {r["label"] for r in rows} == {"held out"}
    stats = [x for x in c.stdout.splitlines()
             if x.startswith("[curve] update ") and " vs random [agent+search]: searched " in x]
    assert len(stats) == 2, c.stdout[-3000:]
    assert max(float(x.split(": searched ")[1].split("%")[0]) for x in stats) > 0, stats

    again = run_cli(*curve, "--search")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "0 to play (2 already in" in again.stdout
    plain = run_cli(*curve, timeout=600)
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    assert "2 to play (0 already in" in plain.stdout
    assert "searched" not in plain.stdout
    rows = list(csv.DictReader(open(run_dir / "curve.csv")))
    assert sorted(r["opponent"] for r in rows) == ["random"] * 2 + ["random [agent+search]"] * 2
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    tags = set(EventAccumulator(str(run_dir / "tb")).Reload().Tags()["scalars"])
    assert {"curve/random", "curve_search/random"} <= tags, tags
