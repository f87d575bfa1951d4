"""What a trained agent is used for, without a server: replays' names and bounds,
credentials, the metrics log, and the report picture."""

import csv
import os

import numpy as np
import pytest

from maple_async.errors import UserError
from maple_async.learn.metrics import MetricsLog
from maple_async.pokeenv import accounts
from maple_async.pokeenv.replays import ReplayWriter
from maple_async.server import http_url, websocket_url
from maple_async.tools import report


class FakeBattle:
    def __init__(self, tag, won):
        self.battle_tag, self.won, self.lost = tag, won, won is False
        self.opponent_username = "someone"

    def save_replay(self, path):
        path.write_text(f"<html>{self.battle_tag}</html>")
        return path

    def _build_replay_log(self):
        return f">{self.battle_tag}\n|win|x"


def test_replays_keep_one_in_n_named_by_opponent_and_result(tmp_path):
    w = ReplayWriter(tmp_path / "r", every=3, keep=100)
    for i in range(7):
        w.finished(FakeBattle(f"battle-gen9x-{i}", i % 2 == 0), "max_power")
    html = sorted(p.name for p in (tmp_path / "r").glob("*.html"))
    assert w.written == 3 and len(html) == 3  # battles 0, 3 and 6
    assert [n.split("-vs-")[1] for n in html] == ["max_power-won.html", "max_power-lost.html", "max_power-won.html"]
    assert len(list((tmp_path / "r").glob("*.log"))) == 3
    # No label: the opponent's user name.
    w2 = ReplayWriter(tmp_path / "s")
    w2.finished(FakeBattle("battle-gen9x-9", None))
    assert next((tmp_path / "s").glob("*.html")).name.endswith("-vs-someone-tie.html")


def test_replays_are_bounded_oldest_first(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "20000101-000000-old-vs-x-won.html").write_text("old")  # from an earlier run
    (folder / "20000101-000000-old-vs-x-won.log").write_text("old")
    w = ReplayWriter(folder, keep=3)
    for i in range(4):
        w.finished(FakeBattle(f"battle-gen9x-{i}", True), "random")
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == 6 and not any("old" in n for n in names)  # 3 battles x (html, log)
    assert w.pruned == 2 and not any("battle-gen9x-0-" in n for n in names)


def test_credentials_never_from_config_and_needed_off_loopback(tmp_path, monkeypatch):
    monkeypatch.delenv(accounts.USERNAME_ENV, raising=False)
    monkeypatch.delenv(accounts.PASSWORD_ENV, raising=False)
    c = accounts.credentials_for("http://127.0.0.1:8000", None, "maple1")
    assert (c.username, c.password) == ("maple1", None)
    with pytest.raises(UserError, match="not a loopback server"):
        accounts.credentials_for("https://sim3.psim.us", None, "maple1")
    monkeypatch.setenv(accounts.USERNAME_ENV, "mybot")
    with pytest.raises(UserError, match="not a loopback server"):  # a name without a password
        accounts.credentials_for("https://sim3.psim.us", None, "maple1")
    monkeypatch.setenv(accounts.PASSWORD_ENV, "s3cret")
    c = accounts.credentials_for("https://sim3.psim.us", None, "maple1")
    assert (c.username, c.password) == ("mybot", "s3cret") and "s3cret" not in repr(c)
    f = tmp_path / "creds"
    f.write_text("# my bot\nusername: filebot\npassword = p@ss:word\n")
    c = accounts.credentials_for("https://sim3.psim.us", str(f), "maple1")
    assert (c.username, c.password) == ("filebot", "p@ss:word")
    f.write_text("password: x\n")
    with pytest.raises(UserError, match="no 'username: NAME' line"):
        accounts.credentials_for("http://localhost:8000", str(f), "maple1")


def test_tls_servers_keep_their_scheme():
    assert websocket_url("https://sim3.psim.us") == "wss://sim3.psim.us/showdown/websocket"
    assert http_url("wss://sim3.psim.us/showdown/websocket") == "https://sim3.psim.us"
    assert websocket_url("127.0.0.1:8000") == "ws://127.0.0.1:8000/showdown/websocket"
    assert accounts.is_loopback("http://localhost:8000") and not accounts.is_loopback("sim3.psim.us:443")


async def test_throttled_sends_are_spaced_and_in_order():
    import time

    class Client:
        def __init__(self):
            self.sent = []

        async def send_message(self, message, room="", message_2=None):
            self.sent.append((message, time.monotonic()))

    import asyncio
    c = Client()
    accounts.throttle_sends(c, interval_s=0.05)
    await asyncio.gather(*(c.send_message(f"m{i}") for i in range(4)))
    assert [m for m, _ in c.sent] == ["m0", "m1", "m2", "m3"]
    gaps = np.diff([t for _, t in c.sent])
    assert (gaps >= 0.045).all()


def test_metrics_log_widens_for_a_late_column(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=False)
    log.write(1, {"update": 1, "win_rate/random": 0.5})
    log.write(2, {"update": 2, "win_rate/random": 0.6, "win_rate/league": 0.4})
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert rows[0]["win_rate/league"] == "" and rows[1]["win_rate/league"] == "0.4"
    assert MetricsLog(tmp_path, tensorboard=False)._fields == ["update", "win_rate/random", "win_rate/league"]


def test_pooled_win_rates_wait_for_enough_battles():
    x, p, lo, hi = report.pooled_win_rates(np.arange(1, 7) * 64.0, np.array([0.5, 1.0, 0.0, 0.5, 0.5, 0.5]),
                                           np.array([40, 40, 40, 100, 0, 10]), min_games=100)
    assert list(x) == [192.0, 256.0] and p[0] == pytest.approx(0.5) and p[1] == pytest.approx(0.5)
    assert (lo < p).all() and (p < hi).all()


def _fake_run(run_dir, n=60, with_eval=True):
    run_dir.mkdir()
    rng = np.random.default_rng(0)
    with open(run_dir / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        keys = ["update", "battles", "decisions", "time_s", "battles_per_s", "decisions_per_s", "mean_batch_size",
                "policy_lag", "pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "explained_variance",
                "lr", "win_rate/random", "games/random", "reward/win", "reward/hp"]
        w.writerow(keys)
        for u in range(1, n + 1):
            w.writerow([u, 64 * u, 1920 * u, 10 * u, 6, 600, 12, 1.1, -0.01, 0.1, 1.5 - u / n, 0.01, 0.1, u / n,
                        5e-4, min(1, 0.5 + u / n / 2 + rng.normal(0, 0.05)), 32, 0.2, 0.05])
    (run_dir / "config.yaml").write_text("runner:\n  battle_format: gen9randombattle\n  seed: 1\n")
    if with_eval:
        (run_dir / "eval.json").write_text(
            '{"results": [{"player": "agent", "opponent": "heuristics", "label": "held out", "battles": 300,'
            ' "wins": 120, "losses": 180, "ties": 0, "win_rate": 0.4, "ci95": [0.35, 0.46], "seconds": 60}],'
            ' "ratings": {"agent": 1100, "heuristics": 1170}}')


def test_report_draws_axes_not_a_blank_picture(tmp_path):
    from PIL import Image
    _fake_run(tmp_path / "run")
    out = report.write(tmp_path / "run")
    assert out == tmp_path / "run" / "report.png" and out.stat().st_size > 50_000
    img = np.asarray(Image.open(out).convert("L"))
    assert img.shape[0] > 800 and img.shape[1] > 1200
    dark = img < 80  # axes frames, ticks, text
    assert dark.mean() > 0.005
    # The first panel's frame: a long dark vertical line in the left tenth of the picture.
    left = dark[:, : img.shape[1] // 10]
    assert left.sum(axis=0).max() > img.shape[0] * 0.15
    html = report.write(tmp_path / "run", str(tmp_path / "r.html"))
    text = html.read_text()
    assert "data:image/png;base64," in text and "held out" in text and "battle_format" in text


def test_report_refuses_a_folder_without_metrics(tmp_path):
    with pytest.raises(UserError, match="no metrics.csv"):
        report.write(tmp_path)
    with pytest.raises(UserError, match="not a folder"):
        report.write(tmp_path / "missing")
    _fake_run(tmp_path / "run")
    with pytest.raises(UserError, match=r"\.png or \.html"):
        report.write(tmp_path / "run", str(tmp_path / "r.pdf"))


def test_report_cli_error_is_one_line(tmp_path):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "maple_async.cli", "report", str(tmp_path)],
                       capture_output=True, text=True, env={**os.environ})
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no metrics.csv" in p.stderr


# -- maple-async curve: which checkpoints, what is kept -----------------------------------

def _saved(run_dir, names):
    """Tiny stand-in checkpoint files (only their names and metrics.csv times are read)."""
    (run_dir / "checkpoints").mkdir(parents=True)
    for n in names:
        (run_dir / "checkpoints" / n).write_bytes(b"x")


def test_curve_points_take_times_from_metrics_and_prefer_weights_files(tmp_path):
    from maple_async.tools import curve
    _fake_run(tmp_path / "run", n=60)  # update u: 64u sides, 10u seconds
    _saved(tmp_path / "run", ["ckpt_000058.pt", "ckpt_000060.pt", "weights_000006.pt", "weights_000036.pt",
                              "weights_000060.pt", "notes.txt"])
    pts = curve.saved_points(tmp_path / "run")
    assert [(p.update, p.path.name, p.sides, p.seconds, p.decisions) for p in pts] == [
        (6, "weights_000006.pt", 384, 60.0, 11520), (36, "weights_000036.pt", 2304, 360.0, 69120),
        (58, "ckpt_000058.pt", 3712, 580.0, 111360), (60, "weights_000060.pt", 3840, 600.0, 115200)]
    # evenly over 600 s: 300 -> 36 (360), 600 -> 60; the last always in
    assert [p.update for p in curve.select(pts, n_points=2)] == [36, 60]
    assert [p.update for p in curve.select(pts, minutes=[1.0, 9.0])] == [6, 58]
    # at equal battle counts: 400 -> 6 (384), 2000 -> 36 (2304), 3800 -> 60 (3840), no last added
    assert [p.update for p in curve.select(pts, sides=[2000, 400])] == [6, 36]
    assert [p.update for p in curve.select(pts, sides=[3800])] == [60]
    # at equal decisions (steps): 1e4 -> 6, 7e4 -> 36, 1e5 -> 58 (111,360), no last added
    assert [p.update for p in curve.select(pts, decisions=[100_000, 10_000, 70_000])] == [6, 36, 58]
    with pytest.raises(UserError, match="no checkpoints/"):
        curve.saved_points(tmp_path)


def test_curve_takes_one_axis_and_numbers(tmp_path, capsys):
    from maple_async import cli
    _fake_run(tmp_path / "run", n=6)
    _saved(tmp_path / "run", ["weights_000006.pt"])
    assert cli.main(["curve", str(tmp_path / "run"), "--minutes", "1", "--sides", "300"]) == 2
    assert "give one of --minutes, --sides and --decisions" in capsys.readouterr().err
    assert cli.main(["curve", str(tmp_path / "run"), "--decisions", "1e6", "--sides", "300"]) == 2
    assert "give one of --minutes, --sides and --decisions" in capsys.readouterr().err
    assert cli.main(["curve", str(tmp_path / "run"), "--decisions", "1M"]) == 2
    assert "--decisions takes a comma list of numbers" in capsys.readouterr().err
    assert cli.main(["curve", str(tmp_path / "run"), "--sides", "1e4"]) == 2
    assert "--sides takes a comma list of whole numbers" in capsys.readouterr().err


def test_curve_rows_are_kept_and_not_played_again(tmp_path):
    from maple_async.tools import curve
    from maple_async.tools.evaluate import EvalResult
    out = tmp_path / "curve.csv"
    p = curve.Point(36, tmp_path / "weights_000036.pt", 2304, 360.0, 1_234_567)
    curve.append_row(out, curve.row_of(p, EvalResult("heuristics", 300, 180, 120, 0, 30.0), "held out"))
    curve.append_row(out, curve.row_of(p, EvalResult("random", 100, 99, 1, 0, 9.0), "in training"))
    rows = curve.read_rows(out)
    assert [r["opponent"] for r in rows] == ["heuristics", "random"] and rows[0]["minutes"] == "6.0"
    assert curve.done(rows, 36, "heuristics", 300) and not curve.done(rows, 36, "heuristics", 500)
    assert not curve.done(rows, 37, "heuristics", 300) and not curve.done(rows, 36, "max_power", 10)
    lines = curve.table(rows)
    assert "heuristics (held out)" in lines[0] and lines[1].split()[:4] == ["36", "6.0", "2304", "1.23M"]
    assert "0.600 (0.544-0.654) n=300" in lines[1]


def test_an_older_curve_csv_gains_the_decisions_column(tmp_path):
    """A curve.csv written before the decisions axis keeps its rows: the next point rewrites it
    with today's columns, the old rows' decisions left blank."""
    from maple_async.tools import curve
    from maple_async.tools.evaluate import EvalResult
    out = tmp_path / "curve.csv"
    old = [f for f in curve.FIELDS if f != "decisions"]
    out.write_text(",".join(old) + "\n" + "20,1280,3.33,heuristics,held out,300,150,150,0,0.5,0.44,0.56,w.pt\n")
    p = curve.Point(40, tmp_path / "weights_000040.pt", 2560, 400.0, 76800)
    curve.append_row(out, curve.row_of(p, EvalResult("heuristics", 300, 180, 120, 0, 30.0), "held out"))
    rows = curve.read_rows(out)
    assert list(rows[0]) == curve.FIELDS and [r["decisions"] for r in rows] == ["", "76800"]
    assert [r["battle_sides"] for r in rows] == ["1280", "2560"] and rows[0]["win_rate"] == "0.5"
    assert curve.table(rows)[1].split()[:4] == ["20", "3.3", "1280", "-"]
    # curve fills the old rows' decisions from the run's checkpoints (metrics.csv), so a
    # report by decisions shows them without playing them again
    curve.fill_decisions(out, [curve.Point(20, tmp_path / "w.pt", 1280, 200.0, 38400)])
    assert [r["decisions"] for r in curve.read_rows(out)] == ["38400", "76800"]
    assert not list(tmp_path.glob("*.tmp"))
    # a file with only an older header: the row goes under today's columns
    out.write_text(",".join(old) + "\n")
    curve.append_row(out, curve.row_of(p, EvalResult("heuristics", 300, 180, 120, 0, 30.0), "held out"))
    assert [(r["decisions"], r["battle_sides"]) for r in curve.read_rows(out)] == [("76800", "2560")]


def test_curve_by_decisions_fills_an_older_curve_csv_then_plays_nothing_again(tmp_path, capsys):
    """A point an older curve played is not played again for --decisions: its row gains the
    decisions, and the report by decisions draws it."""
    from maple_async import cli
    from maple_async.tools import curve
    _fake_run(tmp_path / "run", n=60)  # update u: 1920u decisions
    (tmp_path / "run" / "config.yaml").write_text("runner:\n  battle_format: gen4randombattle\n")
    _saved(tmp_path / "run", ["weights_000020.pt"])
    old = [f for f in curve.FIELDS if f != "decisions"]
    (tmp_path / "run" / "curve.csv").write_text(
        ",".join(old) + "\n" + "20,1280,3.33,heuristics,held out,300,150,150,0,0.5,0.44,0.56,weights_000020.pt\n")
    assert cli.main(["curve", str(tmp_path / "run"), "--decisions", "38400", "--battles", "300"]) == 0
    assert "0 to play (1 already in" in capsys.readouterr().out
    assert curve.read_rows(tmp_path / "run" / "curve.csv")[0]["decisions"] == "38400"
    assert report.write(tmp_path / "run", str(tmp_path / "d.png"), decisions_only=True).exists()
    assert cli.main(["curve", str(tmp_path / "run"), "--decisions", "inf"]) == 2
    assert "--decisions takes a comma list of numbers" in capsys.readouterr().err


def test_report_draws_the_curve_points(tmp_path):
    from maple_async.tools import curve
    from maple_async.tools.evaluate import EvalResult
    _fake_run(tmp_path / "run")
    for u, wins in [(20, 120), (40, 150), (60, 190)]:
        curve.append_row(tmp_path / "run" / "curve.csv", curve.row_of(
            curve.Point(u, tmp_path / f"weights_{u:06d}.pt", 64 * u, 10.0 * u),
            EvalResult("heuristics", 300, wins, 300 - wins, 0, 30.0), "held out"))
    fig = report.draw(tmp_path / "run")[0]
    ax = fig.axes[0]
    assert "curve vs heuristics (held out)" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(list(line.get_xdata()) == [1280.0, 2560.0, 3840.0] for line in ax.lines)
    text = report.write(tmp_path / "run", str(tmp_path / "r.html")).read_text()
    assert "maple-async curve" in text and "0.633 (" in text


def test_report_draws_the_curve_by_decisions_beside_the_published_points(tmp_path):
    """curve --decisions points get a row by decisions (log axis); in gen4randombattle against
    heuristics Wang 2024's quoted points stand beside them, labelled as quoted."""
    from maple_async.tools import curve
    from maple_async.tools.evaluate import EvalResult
    _fake_run(tmp_path / "run")
    (tmp_path / "run" / "config.yaml").write_text("runner:\n  battle_format: gen4randombattle\n  seed: 1\n")
    with pytest.raises(UserError, match="no points with decisions"):
        report.write(tmp_path / "run", str(tmp_path / "d.png"), decisions_only=True)
    for u, wins in [(20, 150), (60, 190)]:
        curve.append_row(tmp_path / "run" / "curve.csv", curve.row_of(
            curve.Point(u, tmp_path / f"weights_{u:06d}.pt", 64 * u, 10.0 * u, 50_000 * u),
            EvalResult("heuristics", 300, wins, 300 - wins, 0, 30.0), "held out"))
    fig = report.draw(tmp_path / "run")[0]
    ax = next(a for a in fig.axes if a.get_xlabel() == "decisions (steps) trained on")
    assert ax.get_xscale() == "log"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(legend) == ["Wang 2024 (quoted) vs heuristics", "this run vs heuristics (held out, 95% CI)"]
    xs = [list(line.get_xdata()) for line in ax.lines]
    assert [1e6, 3e6] in xs and [6e6, 40e6, 150e6] in xs
    out = report.write(tmp_path / "run", str(tmp_path / "d.png"), decisions_only=True)
    assert out.stat().st_size > 20_000
    # another format has no published curve: only the run's own points
    (tmp_path / "run" / "config.yaml").write_text("runner:\n  battle_format: gen9randombattle\n")
    ax = next(a for a in report.draw(tmp_path / "run")[0].axes if a.get_xlabel().startswith("decisions"))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["this run vs heuristics (held out, 95% CI)"]


def test_curve_keeps_greedy_and_searched_rows_apart_from_sampled_ones():
    from maple_async.tools import curve
    rows = [{"update": "5", "opponent": "heuristics", "battles": "1000"}]
    keys = [curve.key_of("heuristics", s, g) for s in (False, True) for g in (False, True)]
    assert keys == ["heuristics", "heuristics [greedy]", "heuristics [agent+search]",
                    "heuristics [agent+search] [greedy]"]
    assert [curve.done(rows, 5, k, 1000) for k in keys] == [True, False, False, False]
