"""poke-env's own gym envs (docs set-up) measured by tools/envbench: a short smoke run."""

from __future__ import annotations

import threading

import pytest

from maple_async.tools.envbench import measure_pokeenv


def test_unknown_setup_is_an_error_not_an_exception():
    r = measure_pokeenv("http://127.0.0.1:1", "nope", seconds=1)
    assert r["setup"] == "nope" and "error" in r


@pytest.mark.integration
@pytest.mark.parametrize("setup", ["single", "dummy2"])
def test_pokeenv_setup_measures_and_closes(showdown_url, setup):
    before = {t.ident for t in threading.enumerate()}
    r = measure_pokeenv(showdown_url, setup, seconds=3, warmup_s=1, seed=0)
    assert "error" not in r, r["error"]
    assert r["setup"] == setup and r["envs"] == (1 if setup == "single" else 2)
    assert r["decisions"] > 0 and r["battles"] >= 0 and r["decisions_per_s"] > 0
    assert r["default_orders"] == 0
    leaked = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert not leaked, leaked


@pytest.mark.integration
def test_bench_env_reports_every_phase_with_ratios(showdown_url, capsys, restore_gc):
    import json

    from maple_async.cli import main
    assert main(["bench", "--env", "--server", showdown_url, "--seconds", "2", "--warmup", "0",
                 "--env-concurrency", "2", "--env-setups", "single", "--json", "-"]) == 0
    result = json.loads(capsys.readouterr().out)
    phases = result["phases"]
    assert set(phases) == {"ceiling@2", "async@2", "sync@2", "sync-flush@2", "poke-env single"}
    assert all("error" not in w and w["decisions"] > 0 for w in phases.values())
    assert phases["async@2"]["ratio_to_ceiling"] > 0 and phases["async@2"]["x_best_pokeenv"] > 0
    assert phases["sync@2"]["ratio_to_async"] > 0 and phases["sync-flush@2"]["ratio_to_async"] > 0
    assert result["best_pokeenv"] == "single"
