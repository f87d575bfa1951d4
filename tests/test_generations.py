"""Every generation: each one's type chart against the pinned Showdown's own data, the
formats accepted and refused, gimmick actions (mega, Z-move, dynamax, tera) sent and done,
and every older format played to the end with each baseline on both transports."""

import json
import logging
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from maple_async import config as C
from maple_async import teams as T
from maple_async.collect.match import play
from maple_async.config import BatcherConfig
from maple_async.errors import UserError
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import networks as nets
from maple_async.obs import actions as act
from maple_async.obs import encoding as enc
from maple_async.obs import features
from maple_async.pokeenv import players

from test_integration_runner import CheckingAgent

RANDOM = [f"gen{g}randombattle" for g in range(1, 9)]
OU = [f"gen{g}ou" for g in range(1, 5)]
_TYPES_JS = """
const ps = require(process.argv[1]);
const out = {};
for (let g = 1; g <= 9; g++) {
  out[g] = {};
  for (const t of ps.Dex.mod('gen' + g).types.all()) {
    if (t.exists && !t.isNonstandard && t.name !== 'Stellar') out[g][t.name] = t.damageTaken;
  }
}
console.log(JSON.stringify(out));
"""


@pytest.mark.integration
def test_each_generations_type_chart_is_showdowns():
    from maple_async import server
    pkg = server.install(quiet=True)
    charts = json.loads(subprocess.run(["node", "-e", _TYPES_JS, str(pkg)], capture_output=True,
                                       text=True, check=True).stdout)
    mult = {0: 1.0, 1: 2.0, 2: 0.5, 3: 0.0}
    index = {t.name.title(): i for t, i in enc.TYPE_INDEX.items()}
    for g in range(1, 10):
        types = charts[str(g)]
        assert len(types) == (15 if g == 1 else 17 if g <= 5 else 18), (g, sorted(types))
        for dfn, taken in types.items():
            for att in types:
                want = mult[taken[att]]
                got = enc.CHARTS[g - 1, index[att], index[dfn]]
                assert got == want, f"gen {g}: {att} against {dfn} is {got}, Showdown says {want}"


def test_the_derived_columns_read_the_generation_of_the_row():
    """Ghost against Psychic: immune in gen 1, super effective from gen 2; Steel resists Dark until gen 6."""
    t = enc.TYPE_INDEX
    ghost, psychic, dark, steel = (t[enc.PokemonType[n]] for n in ("GHOST", "PSYCHIC", "DARK", "STEEL"))
    flags = enc.FIELD + enc.F_FLAGS + enc.FLAG_GEN

    def row(gen, move_type, defender):
        obs = np.zeros(enc.OBS_DIM, np.float32)
        for side, types in ((0, (move_type,)), (1, (defender,))):
            b = enc.OWN_TEAM + side * 6 * enc.POKE_DIM
            obs[b + enc.P_PRESENT] = obs[b + enc.P_ACTIVE] = obs[b + enc.P_HP] = 1.0
            obs[b + enc.P_LEVEL] = 1.0
            obs[b + enc.P_STATS:b + enc.P_STATS + 6] = 0.5
            for x in types:
                obs[b + enc.P_TYPES + x] = 1.0
        m = enc.MOVES
        obs[m + enc.M_PRESENT] = obs[m + enc.M_AVAILABLE] = obs[m + enc.M_ACCURACY] = 1.0
        obs[m + enc.M_POWER] = 0.8
        obs[m + enc.M_TYPE + move_type] = 1.0
        obs[m + enc.M_CATEGORY + 1] = 1.0
        if gen:
            obs[flags + gen - 1] = 1.0
        return features.derive(obs[None].copy())[0]

    m = enc.MOVES
    assert row(1, ghost, psychic)[m + enc.M_IMMUNE] == 1.0
    assert row(2, ghost, psychic)[m + enc.M_EFFECT] == pytest.approx(0.5)
    assert row(5, dark, steel)[m + enc.M_EFFECT] == pytest.approx(-0.5)
    assert row(6, dark, steel)[m + enc.M_EFFECT] == 0.0
    assert row(0, dark, steel)[m + enc.M_EFFECT] == 0.0  # no generation marked: gen 9
    gen1 = row(1, ghost, psychic)
    assert gen1[enc.OPP_TEAM + enc.P_MATCH_DEF] == -1.5  # the psychic's matchup: ghost can't touch it


def test_stat_estimates_follow_the_generation():
    base = {"hp": 100, "atk": 100, "def": 100, "spa": 100, "spd": 100, "spe": 100}
    assert enc._stats(None, base, 100, 9) == [362.0] + [257.0] * 5
    assert enc._stats(None, base, 100, 1) == [403.0] + [298.0] * 5  # DVs 15, full stat experience


def _battle_from_request(gen, species, moves, item, ability):
    """A battle of ``gen`` read from a Showdown request of that generation (its fields as
    Showdown writes them: item '' in gen 1, baseAbility 'noability' in gens 1-2)."""
    import logging

    from poke_env.battle import Battle, Pokemon
    b = Battle(f"battle-gen{gen}randombattle-1", "me", logging.getLogger("test"), gen=gen)
    b._player_role = "p1"
    mon = {"ident": f"p1: {species}", "details": f"{species}, L80", "condition": "250/250", "active": True,
           "stats": {"atk": 180, "def": 180, "spa": 180, "spd": 180, "spe": 180}, "moves": moves,
           "baseAbility": ability, "item": item, "pokeball": "pokeball"}
    b.parse_request({"active": [{"moves": [{"move": m, "id": m, "pp": 16, "maxpp": 16, "target": "normal",
                                            "disabled": False} for m in moves]}],
                     "side": {"name": "me", "id": "p1", "pokemon": [mon]}})
    foe = Pokemon(gen=gen, species="gengar")  # one possible ability: poke-env sets it from gen 3
    foe._active = True
    b._opponent_team = {"p2: Gengar": foe}
    return b


def test_physical_or_special_by_type_before_gen_4():
    """Fire Punch and Shadow Ball: by their type in gen 3 (Fire special, Ghost physical),
    by their own category from gen 4 (the split)."""
    def categories(gen):
        obs = enc.encode(_battle_from_request(gen, "Gengar", ["firepunch", "shadowball"], "leftovers", "levitate"))
        cat = enc.MOVES + enc.M_CATEGORY
        return [int(np.argmax(obs[cat + j * enc.MOVE_DIM:cat + j * enc.MOVE_DIM + 3])) for j in range(2)]
    physical, special = enc.CATEGORY_INDEX[enc.MoveCategory.PHYSICAL], enc.CATEGORY_INDEX[enc.MoveCategory.SPECIAL]
    assert categories(3) == [special, physical]
    assert categories(4) == [physical, special]


def test_no_items_in_gen_1_and_no_abilities_before_gen_3():
    """What the game lacks stays zero, for both sides: Showdown's gen 1 request says item ''
    (no item) and gens 1-2 say ability 'noability', which would otherwise read as "no item"
    and "another ability"."""
    def held(gen, item, ability):
        obs = enc.encode(_battle_from_request(gen, "Tauros", ["bodyslam"], item, ability))
        items, abilities = [], []
        for base in (enc.OWN_TEAM, enc.OPP_TEAM):
            items.append(obs[base + enc.P_ITEM:base + enc.P_ABILITY].any())
            abilities.append(obs[base + enc.P_ABILITY:base + enc.P_ABILITY_OTHER + 1].any())
        return items, abilities
    assert held(1, "", "noability") == ([False, False], [False, False])
    assert held(2, "leftovers", "noability") == ([True, False], [False, False])
    assert held(3, "leftovers", "intimidate") == ([True, False], [True, True])  # the slots are read from gen 3
    assert held(3, "", "intimidate")[0] == [True, False]  # "no item" where the game has items
    assert held(2, "", "noability")[0] == [True, False]  # gen 2 has items: '' is "no item"


@pytest.mark.parametrize("fmt", RANDOM + OU + ["gen9randombattle", "gen5uu", "gen7ubers"])
def test_every_generations_singles_formats_are_accepted(fmt):
    assert C.load(None, {"runner.battle_format": fmt}).runner.battle_format == fmt


def test_a_baselines_invalid_choices_are_counted_and_not_printed(capsys):
    errors = players.ServerErrors()
    counter = players._QuietErrorCounter(errors)
    rec = logging.LogRecord("p", players.SERVER_ERROR_LEVEL, "", 0, "Error message received: %s",
                            ("|error|[Invalid choice] Can't move",), None)
    assert counter.filter(rec) is False and errors.invalid_choices == 1
    other = logging.LogRecord("p", logging.ERROR, "", 0, "boom", None, None)
    assert counter.filter(other) is True and errors.invalid_choices == 1
    # the agent's players: an invalid choice is counted and shown, poke-env's warnings (one
    # at every gen 1 Wrap: "Unmanaged move message format") are not
    mine = players._ServerErrorCounter(errors, show_from=logging.ERROR)
    assert mine.filter(rec) is True and errors.invalid_choices == 2
    warn = logging.LogRecord("p", logging.WARNING, "", 0, "Unmanaged move message format received", None, None)
    assert mine.filter(warn) is False and players._ServerErrorCounter(errors).filter(warn) is True


def _teams(fmt):
    if fmt.endswith("randombattle"):
        return None
    return T.prepare(SimpleNamespace(battle_format=fmt, teams=str(C.PRESETS / "teams" / fmt), team_sampling="uniform",
                                     seed=0))


@pytest.mark.integration
@pytest.mark.parametrize("fmt", RANDOM + OU)
async def test_every_older_format_plays_to_the_end_with_each_baseline(venue, fmt):
    """The agent's every mask is within poke-env's valid orders, Showdown refuses none of
    its orders nor any baseline's, and every battle ends."""
    agent = CheckingAgent(InferencePolicy(nets.build("mlp", hidden_size=32)), BatcherConfig())
    teams = _teams(fmt)
    for opponent in ("random", "max_power", "heuristics"):
        res = await play(agent, venue, 3, opponent=opponent, concurrency=3, battle_format=fmt, teams=teams)
        assert res.battles == 3 and res.wins + res.losses + res.ties == 3
        assert res.opponent_invalid_choices == 0, (fmt, opponent)
    await agent.batcher.close()
    assert agent.checked > 9 and agent.mask_errors == []
    assert agent.stats.invalid_choices == 0 and agent.stats.other_server_errors == 0
    assert agent.stats.fallbacks == 0 and len(agent.live) == 0


GIMMICKS = {"mega": (act.MEGA, " mega", "_used_mega_evolve"), "z": (act.ZMOVE, " zmove", "_used_z_move"),
            "dynamax": (act.DYNAMAX, " dynamax", "_used_dynamax"), "tera": (act.TERA, " terastallize", "_used_tera")}


class GimmickAgent(CheckingAgent):
    """Counts the gimmick actions (mega, Z-move, dynamax, tera) its masks offered, keeps the
    orders it sent and the battles (poke-env marks a side's gimmick used from Showdown's events)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.offered = {k: 0 for k in GIMMICKS}
        self.sent: list = []
        self.battles: dict = {}

    async def choose(self, battle, opponent):
        mask = act.action_mask(battle)
        for k, (first, _, _) in GIMMICKS.items():
            self.offered[k] += bool(mask[first:first + 4].any())
        order = await super().choose(battle, opponent)
        self.sent.append(order.message)
        self.battles[self.key(battle)] = battle
        return order


@pytest.mark.integration
@pytest.mark.parametrize("fmt,kinds", [("gen6randombattle", ("mega",)), ("gen7randombattle", ("mega", "z")),
                                       ("gen8randombattle", ("dynamax",)), ("gen9randombattle", ("tera",))])
async def test_mega_z_dynamax_and_tera_orders_are_offered_sent_and_done(venue, fmt, kinds):
    """Self-play with an untrained policy leaning to gimmicks: the gimmick actions are
    offered, chosen, sent as their orders, accepted, and Showdown does them (the battle
    records the side's gimmick as used); no other gimmick is offered."""
    import torch
    net = nets.build("mlp", hidden_size=32)
    with torch.no_grad():  # a uniform policy may pass up a rare offer (a Z-move) in all 12 battles
        net.policy_head.bias[act.MEGA:act.PREVIEW] += 3.0
    agent = GimmickAgent(InferencePolicy(net), BatcherConfig(), record=True,
                         on_trajectory=lambda t: chosen.extend(t.arrays()["actions"].tolist()))
    chosen: list = []
    res = await play(agent, venue, 12, opponent="self", concurrency=12, battle_format=fmt)
    await agent.batcher.close()
    assert res.battles == 12
    for k, (first, word, used) in GIMMICKS.items():
        if k not in kinds:
            assert agent.offered[k] == 0, (k, agent.offered)
            continue
        assert agent.offered[k] > 0, (k, agent.offered)
        assert any(first <= a < first + 4 for a in chosen), k
        assert any(m.endswith(word) for m in agent.sent), (k, [m for m in agent.sent if "move" in m][:5])
        assert any(getattr(b, used) for b in agent.battles.values()), k
    assert agent.mask_errors == [] and agent.stats.invalid_choices == 0 and agent.stats.fallbacks == 0


def test_a_checkpoint_is_refused_in_a_generation_it_was_not_trained_on(tmp_path):
    from maple_async.learn import checkpoint as ckpt
    path = ckpt.save(tmp_path / "c.pt", {"learner": {}, "config": {"runner": {"battle_format": "gen9randombattle"}}})
    assert ckpt.load(path, "gen9ou")["layout"] == enc.LAYOUT  # another format of its generation
    with pytest.raises(UserError,
                       match=r"trained on generation 9 \(gen9randombattle\) and gen4randombattle is generation 4"):
        ckpt.load(path, "gen4randombattle")
    many = ckpt.save(tmp_path / "m.pt", {"learner": {}, "config": {"runner": {"battle_format": "gen1ou,gen2ou"}}})
    ckpt.load(many, "gen2ou")
    with pytest.raises(UserError, match=r"trained on generation 1, 2 \(gen1ou,gen2ou\) and gen3ou is generation 3"):
        ckpt.load(many, "gen3ou")


def test_eval_of_a_checkpoint_plays_its_own_format_unless_told(tmp_path):
    from maple_async import cli
    from maple_async.run.loop import LearningLoop

    def saved(fmt, teams=None):
        cfg = C.load(None, {"runner.battle_format": fmt, "runner.teams": teams, "network.hidden_size": 8,
                            "train.run_dir": str(tmp_path / fmt), "train.tensorboard": False})
        return str(LearningLoop(cfg, "cpu", quiet=True, handle_signals=False).save_checkpoint())

    parse = cli.build_parser().parse_args
    gen4 = saved("gen4randombattle")
    assert cli.eval_config(parse(["eval", "--checkpoint", gen4])).runner.battle_format == "gen4randombattle"
    told = parse(["eval", "--checkpoint", gen4, "--runner.battle_format", "gen9randombattle"])
    assert cli.eval_config(told).runner.battle_format == "gen9randombattle"  # refused later, naming both
    preset = parse(["eval", "--checkpoint", gen4, "--config", "default"])
    assert cli.eval_config(preset).runner.battle_format == "gen9randombattle"
    ou = cli.eval_config(parse(["eval", "--checkpoint", saved("gen1ou", "teams/gen1ou")]))
    assert (ou.runner.battle_format, ou.runner.teams) == ("gen1ou", str(C.PRESETS / "teams" / "gen1ou"))
    other = parse(["eval", "--checkpoint", saved("gen1ou", "teams/gen1ou"), "--runner.teams",
                   "teams/gen1ou-heldout"])
    assert cli.eval_config(other).runner.teams == str(C.PRESETS / "teams" / "gen1ou-heldout")


def test_a_saved_team_path_is_kept_where_it_means_something_here(tmp_path):
    from maple_async import cli
    from maple_async.run.loop import LearningLoop

    def saved(fmt, teams):
        cfg = C.load(None, {"runner.battle_format": fmt, "runner.teams": teams, "network.hidden_size": 8,
                            "train.run_dir": str(tmp_path / fmt.replace(",", "-")), "train.tensorboard": False})
        return str(LearningLoop(cfg, "cpu", quiet=True, handle_signals=False).save_checkpoint())

    parse = cli.build_parser().parse_args
    shipped = C.PRESETS / "teams"
    both = saved("gen1ou,gen2ou", "teams/{format}")  # one shipped pool per format: each exists here
    assert cli.eval_config(parse(["eval", "--checkpoint", both])).runner.teams == str(shipped / "{format}")
    assert cli._outside_config(parse(["serve", "--checkpoint", both])).runner.teams == str(shipped / "{format}")
    one = cli._outside_config(parse(["serve", "--checkpoint", both, "--runner.battle_format", "gen2ou"]))
    assert (one.runner.battle_format, one.runner.teams) == ("gen2ou", str(shipped / "gen2ou"))
    # the search settings are the command's defaults, never those the checkpoint's code saved
    old = C.load(None, {"runner.battle_format": "gen4randombattle", "network.hidden_size": 8,
                        "search.prior_weight": 0.5, "search.states": 7,
                        "train.run_dir": str(tmp_path / "old"), "train.tensorboard": False})
    old_ck = str(LearningLoop(old, "cpu", quiet=True, handle_signals=False).save_checkpoint())
    searched = cli._outside_config(parse(["serve", "--checkpoint", old_ck, "--search"]))
    assert searched.search == C.SearchConfig() and searched.network.hidden_size == 8
    assert C.teams_here("teams/{format}", "gen1ou,gen5ou") is None  # no gen5ou pool here
    assert C.teams_here(str(tmp_path / "gone"), "gen1ou") is None  # trained elsewhere
    assert C.teams_here(None, "gen1ou") is None


def test_a_trajectory_key_names_its_format():
    """The per-format decision counts of a multi-format run read the format off the battle tag."""
    from maple_async.run.loop import battle_format_of
    assert battle_format_of(("battle-gen1ou-17", "p1")) == "gen1ou"
    assert battle_format_of(("battle-gen9randomdoublesbattle-a3", "p2")) == "gen9randomdoublesbattle"


def test_a_single_format_run_resumed_over_several_formats_credits_what_it_trained(tmp_path):
    """Resumed over a list, a single-format checkpoint's decisions count as its one format's,
    so the split still sums to the run's decisions."""
    from maple_async import config as C
    from maple_async.run.loop import LearningLoop
    one = C.load("test", {"train.run_dir": str(tmp_path / "one"), "train.tensorboard": False,
                                      "runner.battle_format": "gen9randombattle"})
    first = LearningLoop(one, "cpu", quiet=True, handle_signals=False)
    assert "format_decisions" not in first.counters
    first.counters["decisions"] = 1234
    path = first.save_checkpoint(final=True)
    first.metrics.close()
    both = C.load("test", {"train.run_dir": str(tmp_path / "both"), "train.tensorboard": False,
                                       "runner.battle_format": "gen9randombattle,gen9ou"})
    resumed = LearningLoop(both, "cpu", resume=str(path), quiet=True, handle_signals=False)
    resumed.metrics.close()
    assert resumed.counters["format_decisions"] == {"gen9randombattle": 1234}
