"""The evaluation table: ratings fitted from a results matrix, labels, JSON."""

import math

import pytest

from maple_async.config import TrainConfig
from maple_async.tools.evaluate import EvalResult, EvalTable, bradley_terry, training_label


def test_bradley_terry_recovers_elo_differences():
    # 300 battles at the win rate a 200-point Elo gap predicts (0.76), both ways round.
    p = 1 / (1 + 10 ** (-200 / 400))
    r = bradley_terry({("a", "random"): (300 * p, 300), ("b", "a"): (300 * p, 300)}, "random")
    assert r["random"] == 1000.0
    assert r["a"] == pytest.approx(1200, abs=3) and r["b"] == pytest.approx(1400, abs=5)


def test_bradley_terry_stays_finite_on_a_clean_sweep():
    r = bradley_terry({("a", "random"): (300, 300)}, "random")
    assert math.isfinite(r["a"]) and r["a"] > 1800


def test_table_lines_labels_and_json():
    t = EvalTable()
    t.results = [("A.pt", EvalResult("random", 300, 290, 10, 0, 60.0), "in training"),
                 ("A.pt", EvalResult("heuristics", 300, 150, 150, 0, 60.0), "held out"),
                 ("A.pt", EvalResult("B.pt", 300, 200, 100, 0, 60.0), "checkpoint"),
                 ("B.pt", EvalResult("random", 300, 240, 60, 0, 60.0), "in training")]
    lines = t.lines()
    assert lines[1].startswith("[eval] A.pt vs heuristics (held out): win rate 0.500 (95% CI 0.444-0.556)")
    assert lines[4].startswith("[eval] ratings (Bradley-Terry, Elo scale, random = 1000): A.pt ")
    assert lines[5] == "[eval] win rate of row against column:"  # two checkpoints: a matrix
    assert lines[6].split() == ["random", "heuristics", "B.pt"] and lines[8].split()[1:] == ["0.800", "-", "-"]
    data = t.to_json()
    assert data["ratings"]["A.pt"] > data["ratings"]["B.pt"] > data["ratings"]["random"] == 1000.0
    assert data["results"][1]["label"] == "held out" and data["results"][1]["ci95"][0] == pytest.approx(0.444, abs=1e-3)


def test_without_random_the_first_opponent_is_the_anchor():
    t = EvalTable()
    t.results = [("A.pt", EvalResult("heuristics", 300, 68, 232, 0, 18.0), "held out")]
    assert t.ratings()["heuristics"] == 1000.0 and t.ratings()["A.pt"] < 1000.0
    assert "(Bradley-Terry, Elo scale, heuristics = 1000): heuristics 1000, A.pt " in t.lines()[-1]


def test_training_label_reads_the_checkpoints_mix():
    cfg = TrainConfig(opponents="self:0.5,max_power:0.5")
    assert training_label("max_power", cfg) == "in training"
    assert training_label("heuristics", cfg) == "held out"
    assert training_label("runs/x/latest.pt", cfg) == "checkpoint"
