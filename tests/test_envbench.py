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
