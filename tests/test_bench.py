import asyncio
import json
import math
import subprocess
import sys

import pytest
import torch

from maple_async import config as C
from maple_async.run.loop import LearningLoop
from maple_async.tools import bench
from maple_async.tools.bench import phases


def _checkpoint(run_dir) -> tuple[str, LearningLoop]:
    loop = LearningLoop(C.load(None, {"train.run_dir": str(run_dir), "network.hidden_size": 32}), "cpu", quiet=True)
    loop.save_checkpoint()
    return str(run_dir / "latest.pt"), loop


def test_percentile_and_ratio():
    assert bench.percentile([1, 2, 3, 4], 50) == 2.5
    assert bench.percentile(list(range(101)), 95) == 95
    assert math.isnan(bench.percentile([], 50))
    assert bench.ratio(9, 10) == 0.9 and math.isnan(bench.ratio(1, 0))


def test_learning_windows_count_the_updates_that_held_collection():
    ceiling = bench.Window(seconds=10, battles=100, decisions=5000, cpu_s=2.0, server_cpu_s=4.0)
    learn = (bench.Window(seconds=10, battles=80, decisions=4000, cpu_s=9.0, server_cpu_s=8.0, updates=3,
                          held_updates=1)
             + bench.Window(seconds=10, battles=80, decisions=4000, cpu_s=9.0, server_cpu_s=8.0, updates=4,
                            held_updates=2))
    s = bench.summarise(ceiling, ceiling, learn, cores=2)
    assert (s["learn_updates"], s["learn_held_updates"]) == (7, 3)
    assert "updates in the window:                7, 3 holding collection" in bench.report(s)


def test_summarise_ratios_and_per_decision_split():
    ceiling = bench.Window(seconds=10, battles=100, decisions=5000, cpu_s=2.0, server_cpu_s=4.0)
    runner = bench.Window(seconds=10, battles=90, decisions=4000, cpu_s=3.0,
                          batch_sizes=[10, 20, 30, 40], latencies=[0.001, 0.002, 0.003],
                          timed=500, encode_s=0.025, forward_s=0.4, bookkeeping_s=0.015,
                          in_flight=50, batches=4, wait_limit_s=0.08, server_cpu_s=2.0)
    s = bench.summarise(ceiling, runner)
    assert s["ceiling_battles_per_s"] == 10 and s["runner_battles_per_s"] == 9
    assert s["ratio"] == pytest.approx(0.9)
    assert s["decisions_ratio"] == pytest.approx(0.8)
    assert s["decisions_per_battle"] == pytest.approx(4000 / 90)
    assert s["ceiling_decisions_per_battle"] == pytest.approx(50)
    assert "decisions per battle:                   44.4 (ceiling: 50.0)" in bench.report(s)
    assert s["mean_batch_size"] == 25 and s["p50_batch_size"] == 25
    assert s["encode_us_per_decision"] == pytest.approx(50)
    assert s["bookkeeping_us_per_decision"] == pytest.approx(30)
    assert s["cpu_us_per_decision"] == pytest.approx(80)
    assert s["forward_us_per_decision"] == pytest.approx(100)  # forward: every decision
    assert s["p50_latency_ms"] == pytest.approx(2.0)
    assert s["batch_share_of_in_flight"] == pytest.approx(0.5)  # batch 25, 50 battles
    assert s["mean_wait_limit_ms"] == pytest.approx(20.0)
    assert "50%; max wait 20.0 ms" in bench.report(s)
    assert s["server_cpu_us_per_decision"] == pytest.approx(500)
    assert s["ceiling_server_cpu_us_per_decision"] == pytest.approx(800)
    assert "Showdown CPU per decision:              500 us (ceiling: 800 us)" in bench.report(s)
    # --server (not managed): the server's CPU is unknown, and not printed
    unknown = bench.summarise(bench.Window(seconds=10, battles=100, decisions=5000), runner)
    assert math.isnan(unknown["ceiling_server_cpu_us_per_decision"])
    assert "Showdown CPU" not in bench.report(unknown)
    assert bench.check_finite_positive(s) == []
    s["ratio"] = float("nan")
    assert bench.check_finite_positive(s) == ["ratio"]


def test_a_phase_that_made_no_decisions_is_an_error():
    """A runner that fails on every decision must not print a ratio of 0 and exit 0."""
    ceiling = bench.Window(seconds=10, battles=100, decisions=5000, cpu_s=2.0)
    broken = bench.Window(seconds=10, battles=0, decisions=0, cpu_s=3.0)
    errors, _ = bench.problems(bench.summarise(ceiling, broken))
    assert len(errors) == 1 and errors[0].startswith("maple-async")
    errors, _ = bench.problems(bench.summarise(broken, ceiling))
    assert len(errors) == 1 and errors[0].startswith("the ceiling")
    short = bench.Window(seconds=1, battles=0, decisions=300, cpu_s=0.3)
    errors, warnings = bench.problems(bench.summarise(ceiling, short))
    assert errors == [] and len(warnings) == 1 and "maple-async" in warnings[0]
    assert bench.problems(bench.summarise(ceiling, ceiling)) == ([], [])


def test_rounds_that_disagree_are_a_warning():
    w = bench.Window(seconds=10, battles=100, decisions=5000, cpu_s=2.0)
    s = bench.summarise(w, w)
    s["round_ratios"] = [1.0, 1.15]
    assert bench.problems(s) == ([], [])
    s["round_ratios"] = [1.065, 1.424]
    errors, warnings = bench.problems(s)
    assert errors == [] and len(warnings) == 1 and "1.065 to 1.424" in warnings[0]


def test_mean_ci95_of_round_ratios():
    m, h = bench.mean_ci95([0.9, 1.1])
    assert m == pytest.approx(1.0) and h == pytest.approx(12.706 * 0.1 * 2 ** 0.5 / 2 ** 0.5)
    m, h = bench.mean_ci95([0.8, 0.9, 1.0, float("nan")])  # NaN rounds are left out
    assert m == pytest.approx(0.9) and h == pytest.approx(4.303 * 0.1 / 3 ** 0.5)
    m, h = bench.mean_ci95([1.0] * 40)  # beyond the table: the normal quantile
    assert m == pytest.approx(1.0) and h == 0.0
    m, h = bench.mean_ci95([0.7])
    assert m == 0.7 and math.isnan(h)
    s = bench.summarise(bench.Window(seconds=10, battles=100, decisions=5000, cpu_s=2.0),
                        bench.Window(seconds=10, battles=90, decisions=5000, cpu_s=2.0))
    s["round_ratios"] = [0.8, 1.0]
    s["round_ratio_mean"], s["round_ratio_ci95"] = bench.mean_ci95(s["round_ratios"])
    assert "mean and 95% CI:       0.900 (-0.371 to 2.171)" in bench.report(s)


def test_repeats_alternate_which_side_is_measured_first(monkeypatch):
    """A machine that drifts during the run must not favour the side always measured first."""
    calls = []

    async def ceiling(*a, **k):
        calls.append("ceiling")
        return bench.Window(seconds=10, battles=100, decisions=1000, cpu_s=1.0)

    async def runner(*a, **k):
        calls.append("runner")
        return bench.Window(seconds=10, battles=90, decisions=900, cpu_s=1.0, batch_sizes=[9])

    monkeypatch.setattr(phases, "measure_ceiling", ceiling)
    monkeypatch.setattr(phases, "measure_runner", runner)
    monkeypatch.setattr(phases, "tune_gc", lambda *_: None)
    from maple_async.config import load
    cfg = load(None)
    out, _ = asyncio.run(bench.run_bench(cfg, "cpu", 1.0, 0.0, False, "ws://x", repeats=3))
    assert calls == ["ceiling", "runner", "runner", "ceiling", "ceiling", "runner"]
    assert out["round_ratios"] == pytest.approx([0.9, 0.9, 0.9])
    assert out["round_ratio_mean"] == pytest.approx(0.9) and out["round_ratio_ci95"] == pytest.approx(0.0)
    calls.clear()
    asyncio.run(bench.run_bench(cfg, "cpu", 1.0, 0.0, False, "ws://x", repeats=1))
    assert calls == ["ceiling", "runner"]


def test_pooled_windows_are_one_long_window():
    """--repeats pools rounds: rates are totals over total time, not a mean of ratios."""
    a = bench.Window(seconds=10, battles=100, decisions=1000, cpu_s=1.0, batch_sizes=[4],
                     latencies=[0.01], timed=125, encode_s=0.0125, in_flight=60,
                     batches=1, wait_limit_s=0.01, server_cpu_s=1.5)
    b = bench.Window(seconds=30, battles=150, decisions=2000, cpu_s=2.0, batch_sizes=[8, 12],
                     latencies=[0.02], timed=250, encode_s=0.025, in_flight=20,
                     batches=2, wait_limit_s=0.05, server_cpu_s=3.0)
    p = a + b
    assert p.seconds == 40 and p.battles == 250 and p.decisions == 3000
    assert p.battles_per_s == pytest.approx(6.25)
    assert p.batch_sizes == [4, 8, 12] and p.latencies == [0.01, 0.02]
    assert p.in_flight == pytest.approx(30)  # time-weighted
    assert p.timed == 375 and p.us_per_timed(p.encode_s) == pytest.approx(100)
    assert p.us_per_decision(p.cpu_s) == pytest.approx(1000)
    assert p.batches == 3 and p.wait_limit_s == pytest.approx(0.06)
    assert p.server_cpu_s == pytest.approx(4.5)


def test_server_cpu_is_the_process_groups():
    """The bench's Showdown CPU: every live process of the server's process group (the
    managed server starts one); None for a group with no process."""
    from maple_async.nodeproc import group_cpu_s
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint(1, flush=True)\ntime.sleep(30)"
    p = subprocess.Popen([sys.executable, "-c", burn], start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline().strip() == b"1"  # it has used 0.3 s of CPU, and idles
        used = group_cpu_s(p.pid)
        assert used is not None and 0.25 <= used < 5.0, used
    finally:
        p.kill()
        p.wait()
    assert group_cpu_s(p.pid) is None and group_cpu_s(None) is None


def test_parse_sweep():
    assert bench.parse_sweep("wait_per_side_ms=0,0.15")[1] == {"batcher.wait_per_side_ms": "0.15"}
    combos = bench.parse_sweep("concurrency=8,32 max_wait_ms=0,2,10")
    assert len(combos) == 6
    assert combos[0] == {"runner.concurrency": "8", "batcher.max_wait_ms": "0"}
    assert combos[-1] == {"runner.concurrency": "32", "batcher.max_wait_ms": "10"}
    from maple_async.config import ConfigError
    with pytest.raises(ConfigError):
        bench.parse_sweep("concurrency")


def test_bench_policy_has_the_checkpoints_weights(tmp_path):
    path, loop = _checkpoint(tmp_path)
    trained = loop.learner.network.state_dict()
    cfg = C.load(None, {"network.hidden_size": 32})
    fresh = bench.bench_policy(cfg, "cpu").network.state_dict()
    assert not all(torch.equal(fresh[k], trained[k]) for k in trained)
    cfg.train.init = path
    loaded = bench.bench_policy(cfg, "cpu").network.state_dict()
    assert all(torch.equal(loaded[k], trained[k]) for k in trained)


@pytest.mark.integration
def test_bench_json_has_every_key(showdown_url, tmp_path):
    """With --checkpoint: a hidden-32 agent's network and weights, whatever the config's size."""
    path, _ = _checkpoint(tmp_path)
    p = subprocess.run([sys.executable, "-m", "maple_async.cli", "bench", "--seconds", "5", "--warmup", "3",
                        "--json", "--server", showdown_url, "--concurrency", "16", "--checkpoint", path],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads(p.stdout)
    assert data["checkpoint"] == path
    for key in ("ceiling_battles_per_s", "runner_battles_per_s", "ratio", "decisions_per_s",
                "mean_batch_size", "cpu_us_per_decision", "decisions_per_battle", "ceiling_decisions_per_battle"):
        assert key in data, key
        assert math.isfinite(data[key]) and data[key] > 0, (key, data[key])


def test_sweep_table_has_a_column_per_swept_key():
    fig = {"ceiling_battles_per_s": 5.0, "runner_battles_per_s": 4.5, "ratio": 0.9, "decisions_per_s": 500.0,
           "mean_batch_size": 30.0, "p99_latency_ms": 80.0, "cpu_us_per_decision": 200.0}
    rows = [({"batcher.max_wait_ms": "2", "batcher.offload_min_batch": "16"}, fig),
            ({"batcher.max_wait_ms": "2", "batcher.offload_min_batch": "999"}, fig)]
    lines = bench.sweep_table(rows).splitlines()
    assert lines[0].split()[:2] == ["max_wait_ms", "batcher.offload_min_batch"]
    assert lines[1].split()[:2] == ["2", "16"] and lines[2].split()[:2] == ["2", "999"]
    assert lines[1].split()[4] == "0.90"
    assert lines[0].split()[9:11] == ["wait", "ms"] and lines[1].split()[7] == "nan"
    assert "95% CI" not in lines[0]
    rows[0] = (rows[0][0], dict(fig, round_ratios=[0.85, 0.95], round_ratio_mean=0.9, round_ratio_ci95=0.05))
    lines = bench.sweep_table(rows).splitlines()
    assert lines[0].endswith("rounds: mean, 95% CI")
    assert lines[1].endswith("0.90 (0.85 to 0.95)") and lines[2].endswith("-")
    rows[1] = (rows[1][0], dict(fig, learn_decisions_per_s=420.0, learn_updates=9, learn_held_updates=4,
                                learn_cpu_busy_share=0.91))
    lines = bench.sweep_table(rows).splitlines()
    assert lines[0].endswith("learn dec/s held/upd  busy")
    assert lines[2].split()[-3:] == ["420", "4/9", "0.91"] and lines[1].split()[-3:] == ["nan", "-/-", "nan"]


@pytest.mark.integration
def test_bench_at_machine_scale_json_has_every_key():
    """`bench --shards 2`: two processes, two servers; totals and each shard's figures."""
    p = subprocess.run([sys.executable, "-m", "maple_async.cli", "bench", "--shards", "2", "--seconds", "5",
                        "--warmup", "3", "--json", "--concurrency", "8"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads(p.stdout)
    keys = ("ceiling_battles_per_s", "runner_battles_per_s", "ratio", "decisions_per_s", "mean_batch_size",
            "cpu_us_per_decision", "server_cpu_us_per_decision", "cpu_limit_decisions_per_s",
            "decisions_share_of_cpu_limit")
    assert data["shards"] == 2 and len(data["per_shard"]) == 2
    for fig in (data, *data["per_shard"]):
        for key in keys:
            assert math.isfinite(fig[key]) and fig[key] > 0, (key, fig[key])
    assert all(math.isfinite(v) and v > 0 for v in data["cpu_split_us_per_decision"].values())


def test_cpu_limit_is_the_cores_over_the_cpu_per_decision():
    ceiling = bench.Window(seconds=10, battles=100, decisions=5000, cpu_s=2.0, server_cpu_s=4.0)
    runner = bench.Window(seconds=10, battles=90, decisions=4000, cpu_s=2.0, server_cpu_s=4.0,
                          batch_sizes=[10])
    s = bench.summarise(ceiling, runner, cores=2)
    # 500 us here + 1000 us in Showdown per decision: 2 cores decide at most 1333/s
    assert s["cpu_limit_decisions_per_s"] == pytest.approx(2e6 / 1500)
    assert s["decisions_share_of_cpu_limit"] == pytest.approx(400 / (2e6 / 1500))
    assert "machine CPU limit:                      1333 decisions/s" in bench.report(s)
    assert math.isnan(bench.summarise(ceiling, bench.Window(seconds=10, battles=9, decisions=400,
                                                          cpu_s=1.0), cores=2)["cpu_limit_decisions_per_s"])


def test_learning_window_reports_its_cpu_split_and_busy_cores():
    ceiling = bench.Window(seconds=10, battles=100, decisions=5000, cpu_s=2.0, server_cpu_s=4.0)
    runner = bench.Window(seconds=10, battles=90, decisions=4000, cpu_s=2.0, server_cpu_s=4.0,
                          batch_sizes=[10])
    learn = bench.Window(seconds=10, battles=60, decisions=3000, cpu_s=3.0, server_cpu_s=3.0)
    s = bench.summarise(ceiling, runner, learn, cores=2)
    # learner included: 1000 us here, 1000 us in Showdown; 6 CPU-s of 20 available
    assert s["learn_process_cpu_us_per_decision"] == pytest.approx(1000)
    assert s["learn_server_cpu_us_per_decision"] == pytest.approx(1000)
    assert s["learn_cpu_busy_share"] == pytest.approx(0.3)
    assert "this process 1000 us (learner included), Showdown 1000 us; cores busy 0.300" in bench.report(s)


def test_windows_side_by_side_are_one_machine():
    a = bench.Window(seconds=10, battles=100, decisions=1000, cpu_s=1.0, batch_sizes=[4], in_flight=30,
                     server_cpu_s=2.0)
    b = bench.Window(seconds=12, battles=50, decisions=3000, cpu_s=3.0, batch_sizes=[8], in_flight=20,
                     server_cpu_s=1.0)
    m = bench.Window.side_by_side([a, b])
    assert m.seconds == 11 and m.battles == 150 and m.decisions == 4000 and m.cpu_s == 4.0
    assert m.in_flight == 50 and m.batch_sizes == [4, 8] and m.server_cpu_s == 3.0


def test_throttle_stops_and_resumes_a_process_group():
    """The slow-simulator option: the group is stopped part of the time, never left stopped."""
    burn = "import time\nwhile True: time.process_time()"
    p = subprocess.Popen([sys.executable, "-c", burn], start_new_session=True)
    try:
        import time
        from maple_async.nodeproc import group_cpu_s
        time.sleep(0.3)
        c0 = group_cpu_s(p.pid)
        with bench.throttled(p.pid, 0.8, period_s=0.02):
            time.sleep(1.0)
        c1 = group_cpu_s(p.pid)
        assert c1 - c0 < 0.6, c1 - c0  # stopped 80% of the second (it would use ~1 s)
        with open(f"/proc/{p.pid}/stat") as f:
            assert f.read().rsplit(")", 1)[1].split()[0] != "T", "left stopped"
        deadline = time.monotonic() + 10  # running again afterwards (a loaded machine gives it less)
        while group_cpu_s(p.pid) - c1 <= 0.2:
            assert time.monotonic() < deadline, group_cpu_s(p.pid) - c1
            time.sleep(0.1)
    finally:
        p.kill()
        p.wait()


def test_bench_json_is_strict_where_a_ratio_is_not_a_number():
    """A round whose ceiling made nothing has no ratio: null in the JSON, which strict readers accept."""
    out = bench.to_json({"round_ratios": [0.7, float("nan")], "x": {"y": float("inf")}, "n": 1})
    assert json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}")) == \
        {"round_ratios": [0.7, None], "x": {"y": None}, "n": 1}
