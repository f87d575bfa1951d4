"""The code's defaults are the measured recipe (the ``default`` preset), and every preset
resolves to the settings it was measured with.

``data/presets.json`` pins the recipe's keys (the network, reward, ppo and train sections,
and every key a preset sets): ``defaults`` their values in ``Config()``, ``presets`` what each
preset resolves to where it differs from them (team paths relative to the presets' folder).
A change to a default or a preset fails here until that file says so too."""

import json
from pathlib import Path

import pytest
import yaml

from maple_async import config as C

PINNED = json.loads((Path(__file__).parent / "data" / "presets.json").read_text())


def _recipe(cfg: C.Config) -> dict:
    return {key: C.get_key(cfg, key) for key in PINNED["defaults"]}


def test_the_default_preset_is_the_codes_defaults():
    assert C.load("default") == C.load(None) == C.Config()
    assert not yaml.safe_load((C.PRESETS / "default.yaml").read_text())  # it states nothing of its own


def test_the_defaults_are_the_pinned_recipe():
    assert _recipe(C.Config()) == PINNED["defaults"]


def test_every_shipped_preset_is_pinned():
    assert sorted(PINNED["presets"]) == C.preset_names()


@pytest.mark.parametrize("name", sorted(PINNED["presets"]))
def test_each_preset_resolves_to_its_pinned_values(name):
    want = {**PINNED["defaults"], **PINNED["presets"][name]}
    for key in C.TEAM_KEYS:
        if want[key]:
            want[key] = str(C.PRESETS / want[key])
    assert _recipe(C.load(name)) == want


@pytest.mark.parametrize("name", C.preset_names())
def test_a_preset_says_what_it_is_for_and_states_only_what_differs_from_the_defaults(name):
    text = (C.PRESETS / f"{name}.yaml").read_text()
    assert text.startswith("# "), f"{name}.yaml opens without its one-line purpose"
    defaults = C.Config()
    for section, values in (yaml.safe_load(text) or {}).items():
        for key, value in values.items():
            assert value != C.get_key(defaults, f"{section}.{key}"), f"{name}.yaml restates the default {section}.{key}"


def test_a_battle_pool_without_a_config_plays_with_the_defaults():
    cfg = C.for_pool("gen9randombattle", 8, None, None, None, None, {})
    assert (cfg.reward, cfg.network) == (C.Config().reward, C.Config().network)
