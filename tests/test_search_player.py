"""search/searcher.py and search/player.py: the network-free ``search`` opponent.

A constructed position the searcher must get right, full battles against poke-env's random
player (they finish, most decisions are searched), the fallback when the leaf process is killed
in the middle of a search (the battle finishes, the process is back), and the opponent's
wiring (held out, doubles refused).
"""

import asyncio
import shutil

import numpy as np
import pytest
from poke_env.player import RandomPlayer

from maple_async import opponents
from maple_async.errors import ConfigError, UserError
from maple_async.pokeenv.players import close_players, make_baseline, player_kwargs, run_id
from leaf_kill import kill_during_leaves
from maple_async.search.leaves import LeafHub
from maple_async.search.player import baseline_class
from maple_async.search.searcher import SearchConfig, Searcher, replies

EVS = {s: 84 for s in ("hp", "atk", "def", "spa", "spd", "spe")}


def mon(species, ability, item, moves, level=80):
    return {"species": species, "name": species, "level": level, "ability": ability, "item": item,
            "moves": moves, "evs": EVS, "gender": ""}


JOLTEON = mon("Jolteon", "Volt Absorb", "Leftovers", ["Shadow Ball", "Substitute", "Thunderbolt", "Baton Pass"])
BLISSEY = mon("Blissey", "Natural Cure", "Leftovers", ["Soft-Boiled", "Seismic Toss", "Toxic", "Thunder Wave"])
GYARADOS = mon("Gyarados", "Intimidate", "Leftovers", ["Waterfall", "Earthquake", "Dragon Dance", "Stone Edge"])
SKARMORY = mon("Skarmory", "Keen Eye", "Leftovers", ["Spikes", "Roost", "Brave Bird", "Whirlwind"])

# Jolteon outspeeds a Gyarados at 60%: Thunderbolt (move 3, 4x) KOs it, nothing else does.
KO_POSITION = {"seed": [1, 2, 3, 4], "turn": 5,
               "p1": {"name": "us", "team": [JOLTEON, BLISSEY], "teraUsed": True},
               "p2": {"name": "them", "team": [GYARADOS, SKARMORY], "pokemon": [{"hpFraction": 0.6}],
                      "teraUsed": True}}

integration = [pytest.mark.integration,
               pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")]


@pytest.mark.parametrize("rule", ["maxmin", "equilibrium", "expected"])
@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
async def test_the_searcher_picks_the_ko(rule):
    state = KO_POSITION
    async with LeafHub() as hub:
        searcher = Searcher(hub, SearchConfig(states=1, replies=6, seeds=2, rule=rule), seed=3)
        assert await searcher.search("gen4randombattle", "p1", [state, state]) == "move 3"
        assert searcher.stats.searched == 1 and searcher.stats.leaves == 2 * 5 * 5 * 2  # states x ours x theirs x seeds


@pytest.mark.integration
async def test_the_opponents_strongest_attack_is_played_in_every_table_it_weighs():
    async with LeafHub() as hub:
        for weight, leaves in ((0.0, 5), (0.5, 10)):
            # one reply in slot order (Waterfall); the modelled reply (Earthquake) joins it
            searcher = Searcher(hub, SearchConfig(states=1, replies=1, attack_weight=weight, budget_ms=0), seed=3)
            assert await searcher.search("gen4randombattle", "p1", [KO_POSITION]) == "move 3"
            assert searcher.stats.leaves == leaves, weight


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
@pytest.mark.parametrize("depth", [2, 3])
async def test_two_and_three_turn_leaves_score_the_turns_after_and_still_pick_the_ko(monkeypatch, depth):
    state = KO_POSITION
    async with LeafHub() as hub:
        turns = []
        nxt = hub.next

        async def recorded(decision, specs, keep=False):
            turns.append((specs, keep))
            return await nxt(decision, specs, keep=keep)

        monkeypatch.setattr(hub, "next", recorded)
        searcher = Searcher(hub, SearchConfig(states=1, replies=6, depth=depth, budget_ms=0), seed=3)
        assert await searcher.search("gen4randombattle", "p1", [state]) == "move 3"
        assert len(turns) == depth - 1 and [keep for _, keep in turns] == [True] * (depth - 2) + [False]
        specs = turns[0][0]
        assert searcher.stats.later_failed == 0, searcher.stats.line()
        # every leaf of the 5 x 5 table plays one more turn (none ends: Skarmory is left); without
        # a network our side plays its strongest attack there
        assert len(specs) == 25 and all(ours is None for _, ours, _ in specs), specs
        assert searcher.stats.leaves == 25 + sum(len(t) for t, _ in turns)
        for t, _ in turns:
            assert len({n for n, _, _ in t}) == len(t)  # each kept leaf once
        if depth == 3:  # the third turn: the second's live leaves, by their own kept numbers
            assert 0 < len(turns[1][0]) <= 25 and {n for n, _, _ in turns[1][0]} <= set(range(25, 50))
    s = Searcher(None, SearchConfig(states=2, replies=6, depth=2, budget_ms=300))
    s.state_ms, s.leaf_ms = 10.0, 1.0
    assert s.plan(9) == (2, 6)  # 2 x (10 + 9 x 6 x 2) = 236
    s.leaf_ms = 1.5
    assert s.plan(9) == (2, 5)  # 2 x (10 + 162) = 344 for six; five: 290
    s = Searcher(None, SearchConfig(states=2, replies=6, depth=3, budget_ms=300))
    s.state_ms, s.leaf_ms = 10.0, 1.0
    assert s.plan(9) == (2, 5)  # a table leaf priced three times: 2 x (10 + 162) for six; five: 290


class ScriptedHub:
    """A leaf process's ``next`` that answers each call with the next of ``answers`` and
    records (specs, keep)."""

    def __init__(self, answers):
        self.answers, self.specs = answers, []

    async def next(self, decision, specs, keep=False):
        self.specs.append((specs, keep))
        return self.answers.pop(0)


async def test_later_turns_replace_the_scores_of_live_leaves_only():
    from maple_async.search.leaves import Leaf

    leaves = [Leaf(value=0.1, kept=0), Leaf(value=1.0, ended=True, winner="us"), Leaf(error="refused"),
              Leaf(value=0.2, kept=1)]
    hub = ScriptedHub([[Leaf(value=0.9), Leaf(error="their choice refused")]])
    s = Searcher(hub, SearchConfig(depth=2))
    scores, n, _ = await s._onward("d", leaves, None)
    assert [(k, ours) for k, ours, _ in hub.specs[0][0]] == [(0, None), (1, None)]  # the kept leaves, ours: our strongest
    # a second turn's value, a turn later (LATER: sooner wins first); an end keeps its own
    assert n == 2 and scores[0] == pytest.approx(0.99 * 0.9) and scores[1] == 1.0
    assert scores[3] == 0.2 and s.stats.later_failed == 1  # a failed second turn keeps the first's score
    assert "1 later turns failed" in s.stats.line()
    # three turns: the third turn's scores land on their own table rows; a leaf that ended or
    # failed in the second turn plays no third, and a failed third keeps the second's score
    leaves = [Leaf(value=0.1, kept=0), Leaf(value=0.3, kept=1), Leaf(value=1.0, ended=True, winner="us"),
              Leaf(value=0.2, kept=2), Leaf(value=0.4, kept=3)]
    hub = ScriptedHub([[Leaf(value=0.5, kept=4), Leaf(value=-1.0, ended=True, winner="them"), Leaf(value=0.6, kept=5),
                Leaf(value=0.7, kept=6)],
               [Leaf(value=0.55), Leaf(error="refused"), Leaf(value=0.75)]])
    s = Searcher(hub, SearchConfig(depth=3))
    scores, n, _ = await s._onward("d", leaves, None)
    assert [k for k, _, _ in hub.specs[0][0]] == [0, 1, 2, 3] and [k for k, _, _ in hub.specs[1][0]] == [4, 5, 6]
    np.testing.assert_allclose(scores, [0.99 ** 2 * 0.55, -0.99, 1.0, 0.99 * 0.6, 0.99 ** 2 * 0.75])
    assert n == 7 and s.stats.later_failed == 1


async def test_later_turns_with_a_network_follow_each_leaf_to_its_row():
    from maple_async.search.leaves import Leaf
    from maple_async.search.value import After, LeafValues

    def after(choice):
        return After(object(), None, np.zeros(2), choice, 0.0)

    class Value:  # a leaf's score: its value; a leaf's After: its choice, None where it names none
        def __call__(self, leaves, keep=False):
            return LeafValues(np.array([x.value for x in leaves]), np.array([x.value for x in leaves]),
                              [after(x.request) if x.kept is not None else None for x in leaves])

        def onward(self, afters, leaves, keep=False):
            v = np.array([np.nan if x.error else x.value for x in leaves])
            return LeafValues(v, v, [after(x.request) if x.kept is not None else None for x in leaves]
                              if keep else None)

    # rows: 0 live; 1 live, its choice named by no action (not played on); 2 live; 3 ended
    leaves = [Leaf(value=0.1, kept=0, request="move 1"), Leaf(value=0.2, kept=1, request=None),
              Leaf(value=0.3, kept=2, request="switch 2"), Leaf(value=1.0, ended=True, winner="us")]
    hub = ScriptedHub([[Leaf(value=0.4, kept=3, request="move 2"), Leaf(value=-1.0, ended=True, winner="them")],
               [Leaf(value=0.5, fallback="our choice 'move 2' refused: trapped")]])
    s = Searcher(hub, SearchConfig(depth=3))
    scores, n, _ = await s._onward("d", leaves, Value())
    (second, keep2), (third, keep3) = hub.specs
    assert [(k, c) for k, c, _ in second] == [(0, "move 1"), (2, "switch 2")] and keep2 and not keep3
    assert [(k, c) for k, c, _ in third] == [(3, "move 2")]
    np.testing.assert_allclose(scores, [0.5, 0.2, -1.0, 1.0])
    assert n == 3 and s.stats.later_failed == 0 and s.stats.later_fallback == 1
    assert "1 later choices of ours refused" in s.stats.line()


def test_replies_put_moves_first():
    theirs = ["move 1", "move 1 terastallize", "move 2", "switch 2", "move 2 terastallize", "switch 3"]
    assert replies(theirs, 4) == ["move 1", "move 2", "switch 2", "switch 3"]
    assert replies(theirs, 10)[4:] == ["move 1 terastallize", "move 2 terastallize"]


def test_search_is_held_out_and_singles_only():
    assert opponents.eval_list("search")[0].is_baseline
    assert opponents.training_label("search", None) == "held out"
    with pytest.raises(ConfigError):
        opponents.parse_opponent_mix("self:0.5,search:0.5")
    with pytest.raises(UserError, match="singles only"):
        opponents.search_format("gen9randomdoublesbattle")
    with pytest.raises(UserError, match="singles only"):
        baseline_class("gen9randomdoublesbattle")
    with pytest.raises(ValueError, match="unknown baseline"):  # poke-env's players know no search
        make_baseline("search", "ws://x", "sp", 1, "gen4randombattle")
    with pytest.raises(UserError):
        opponents.teacher_and_opponent("search", "self")


async def _play(url, fmt, n, kill_at=None):
    """``n`` battles of the search opponent against poke-env's random player; with ``kill_at``,
    the leaf process is killed in the middle of that searched decision's leaves."""
    tag = run_id()
    me = make_baseline("search", url, f"sp{tag}a", 1, fmt, base=baseline_class(fmt))
    them = RandomPlayer(**player_kwargs(url, f"sp{tag}b", 1, fmt))
    me.search_config = SearchConfig(engine="showdown", states=1, replies=4)
    killed = []
    if kill_at is not None:
        kill_during_leaves(me._searcher().hub, lambda: me.search_stats.searched, kill_at, killed)
    try:
        await asyncio.wait_for(me.battle_against(them, n_battles=n), 900)
        pid = me._searcher().hub.pid
        alive = me._searcher().hub.alive
    finally:
        await close_players(me, them)
    return me, killed, pid, alive


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
@pytest.mark.parametrize("fmt", ["gen4randombattle", "gen9randombattle"])
async def test_full_battles_against_random_finish_searched(showdown_url, fmt):
    me, _, _, _ = await _play(showdown_url, fmt, 2)
    stats = me.search_stats
    assert me.n_finished == 2
    # every decision searched or refused by a named reason (the share refused depends on the
    # random teams drawn: Zoroark or Ditto refuse a whole battle; it is a benchmark figure)
    assert stats.searched > 0 and stats.searched + sum(stats.refused.values()) == stats.decisions, stats.line()
    assert not stats.failed, (stats.failed, stats.examples)
    assert "our_side" not in stats.refused, stats.examples
    assert not me.errors.invalid_choices, "a searched choice Showdown refused"
    assert not me._searcher().hub.alive, "the leaf process outlived close_players"


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
async def test_a_leaf_process_killed_mid_search_costs_one_search(showdown_url):
    # two battles: one against random can end, or be refused whole (Ditto), before a 4th search
    me, killed, pid, alive = await _play(showdown_url, "gen4randombattle", 2, kill_at=3)
    stats = me.search_stats
    assert killed, "the kill never happened"
    assert me.n_finished == 2
    assert stats.failed["hub_died"] == 1, (stats.failed, stats.examples)
    assert alive and pid != killed[0], "the leaf process was not started again"
    assert stats.searched > 3, stats.line()


def test_the_budget_shrinks_replies_then_states_then_replies_to_one():
    s = Searcher(None, SearchConfig(states=2, replies=6, budget_ms=300))
    s.state_ms, s.leaf_ms = 10.0, 1.0
    assert s.plan(9) == (2, 6)  # 2 x (10 + 54) = 128
    s.leaf_ms = 3.0
    assert s.plan(9) == (2, 5)  # 2 x (10 + 135) = 290; six replies would be 344
    s.leaf_ms = 6.0
    assert s.plan(9) == (1, 3)  # two states of three replies: 344; one state of three: 172
    s.leaf_ms = 20.0
    assert s.plan(9) == (1, 1)  # 190: one reply
    s.leaf_ms = 100.0
    assert s.plan(9) == (1, 1)  # nothing fits: the least there is
    assert Searcher(None, SearchConfig(states=3, replies=8, budget_ms=0)).plan(9) == (3, 8)  # no bound


def test_measured_costs_follow_the_decisions_and_count_the_ones_over_three_budgets():
    s = Searcher(None, SearchConfig(budget_ms=100))
    for _ in range(60):
        assert s._measured(2, 40.0, 50, 100.0) == 140.0
    assert s.state_ms == pytest.approx(20.0, rel=1e-4) and s.leaf_ms == pytest.approx(2.0, rel=1e-4)
    s._measured(1, 100.0, 100, 250.0)
    assert s.stats.over_3x == 1 and s.stats.compute_ms == pytest.approx(60 * 140 + 350)


def test_search_keys_are_config_keys_refused_in_one_line():
    from maple_async import config as C
    assert C.load(None, {"search.states": 3, "search.budget_ms": 0}).search.states == 3
    for key, value, why in [("search.states", 0, "'search.states' must be > 0"),
                            ("search.prior_weight", 1.5, "'search.prior_weight' must be <= 1"),
                            ("search.budget_ms", -1, "'search.budget_ms' must be >= 0"),
                            ("search.q_scale", -0.5, "'search.q_scale' must be >= 0"),
                            ("search.depth", 4, "'search.depth' must be <= 3"),
                            ("search.rule", "mcts", "'search.rule' must be one of maxmin")]:
        with pytest.raises(ConfigError, match=why):
            C.load(None, {key: value})
    with pytest.raises(ConfigError, match="'search.replies' must be > 0"):
        SearchConfig(replies=0)
    with pytest.raises(ConfigError, match="'search.q_scale' needs search.rule maxmin or expected"):
        C.load(None, {"search.rule": "equilibrium", "search.q_scale": 1})
    with pytest.raises(ConfigError, match="'search.attack_weight' must be <= 1"):
        C.load(None, {"search.attack_weight": 2})
    with pytest.raises(ConfigError, match="'search.attack_weight' weighs max-min's replies"):
        C.load(None, {"search.rule": "expected", "search.attack_weight": 0.5})


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
async def test_a_tiny_budget_plays_one_state_and_one_reply(showdown_url):
    tag = run_id()
    fmt = "gen4randombattle"
    me = make_baseline("search", showdown_url, f"sb{tag}a", 1, fmt, base=baseline_class(fmt))
    them = RandomPlayer(**player_kwargs(showdown_url, f"sb{tag}b", 1, fmt))
    me.search_config = SearchConfig(engine="showdown", states=2, replies=6, budget_ms=1)
    try:
        # a random team with our Ditto or Zoroark is refused whole: play on, at most three battles
        for _ in range(3):
            await asyncio.wait_for(me.battle_against(them, n_battles=1), 900)
            if me.search_stats.searched:
                break
    finally:
        await close_players(me, them)
    stats = me.search_stats
    assert stats.searched > 0 and stats.compute_ms > 0, stats.line()
    # one state, one reply: a leaf per choice of ours (4 moves and 5 switches at most in gen 4)
    assert stats.leaves <= 9 * stats.searched, stats.line()
    assert "ms of compute" in stats.line()


def test_a_decision_whose_opponent_waits_plans_one_reply():
    s = Searcher(None, SearchConfig(states=2, replies=6, budget_ms=300))
    s.state_ms, s.leaf_ms = 10.0, 10.0
    assert s.plan(5) == (1, 3)  # replies priced in: two states of three cost 320
    assert s.plan(5, 1) == (2, 1)  # the opponent waits: both states, its one choice


class _FakeValue:
    """A decision's value without a network: the leaves' own values, and a given prior."""

    def __init__(self, prior):
        self._prior = prior

    def prior(self, choices):
        import numpy as np
        return np.array([self._prior.get(c, 0.0) for c in choices])

    def __call__(self, leaves):
        import numpy as np
        from maple_async.search.value import LeafValues
        v = np.array([np.nan if leaf.error else leaf.value for leaf in leaves])
        return LeafValues(values=v, scores=v)


def test_the_policys_likeliest_choices_are_searched_likeliest_first():
    import numpy as np
    s = Searcher(None, SearchConfig(actions=2))
    ours = ["move 1", "move 2", "move 3", "switch 2"]
    assert s._rows(ours, np.array([0.1, 0.2, 0.6, 0.1])) == [2, 1]
    assert s._rows(ours, None) == [0, 1, 2, 3]  # no network: every choice
    assert Searcher(None, SearchConfig(actions=0))._rows(ours, np.array([0.1, 0.2, 0.6, 0.1])) == [2, 1, 0, 3]
    assert Searcher(None, SearchConfig(actions=9))._rows(ours, np.array([0.1, 0.2, 0.6, 0.1])) == [2, 1, 0, 3]


def test_threats_keep_the_replies_worst_for_us_and_put_failed_ones_last():
    from maple_async.search.leaves import BuiltState, Leaf
    built = [BuiltState({}, [], ["move 1", "move 2", "switch 2", "move 3"])]
    specs = [(0, "move 1", b, [0]) for b in ["move 1", "move 2", "switch 2", "move 3", "move 3"]]
    leaves = [Leaf(value=v) for v in (0.5, -0.2, 0.1, 0.0, 0.0)]
    leaves[1] = Leaf(error="not allowed")
    scores = [0.5, float("nan"), 0.1, -0.4, 0.0]
    assert Searcher._threats([0], built, specs, leaves, scores, 2) == {0: ["move 3", "switch 2"]}
    assert Searcher._threats([0], built, specs, leaves, scores, 9) == {0: ["move 3", "switch 2", "move 1", "move 2"]}


def test_a_ranked_plan_prices_the_first_pass():
    s = Searcher(None, SearchConfig(states=2, replies=6, budget_ms=300))
    s.state_ms, s.leaf_ms = 10.0, 2.0
    assert s.plan(4) == (2, 6)  # 2 x (10 + 4 x 6 x 2) = 116
    assert s.plan(4, ranked=True) == (2, 6)  # 2 x (10 + (9 + 4 x 6) x 2) = 152
    s.leaf_ms = 6.0
    assert s.plan(4) == (2, 5)  # 2 x (10 + 20 x 6) = 260; six replies: 308
    assert s.plan(4, ranked=True) == (2, 3)  # 2 x (10 + (9 + 4 x 3) x 6) = 272; four: 320
    assert s.plan(4, 13, ranked=True) == (1, 3)  # gen 9's tera moves priced: two states of three: 320
    s.leaf_ms = 12.0
    assert s.plan(4, ranked=True) == (1, 3)  # one state: 10 + (9 + 12) x 12 = 262


def test_their_choices_count_moves_tera_and_the_bench_left():
    from types import SimpleNamespace as NS
    from maple_async.search.searcher import their_choices
    team = {f"p2: {i}": NS(fainted=i < 2) for i in range(5)}
    assert their_choices(NS(gen=4, opponent_used_tera=False, opponent_team=team)) == 4 + 3
    assert their_choices(NS(gen=9, opponent_used_tera=False, opponent_team=team)) == 8 + 3
    assert their_choices(NS(gen=9, opponent_used_tera=True, opponent_team={})) == 4 + 5


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
async def test_a_network_searches_its_likeliest_choices_against_the_replies_that_hurt_most(monkeypatch):
    # The prior likes Thunderbolt (move 3), then Shadow Ball (move 1): not our first choice,
    # so the first pass shows whose row it plays.
    state = KO_POSITION
    prior = {"move 3": 0.5, "move 1": 0.3, "move 2": 0.1, "move 4": 0.05, "switch 2": 0.05}
    chosen, played = [], []
    threats = Searcher._threats
    monkeypatch.setattr(Searcher, "_threats", staticmethod(lambda *a: chosen.append(threats(*a)) or chosen[-1]))
    async with LeafHub() as hub:
        leaves = hub.leaves

        async def recorded(decision, specs, **kw):
            played.append(sorted({a for _, a, _, _ in specs}))
            return await leaves(decision, specs, **kw)

        monkeypatch.setattr(hub, "leaves", recorded)
        searcher = Searcher(hub, SearchConfig(states=1, replies=1, actions=2, reply_order="threat",
                                              budget_ms=0), seed=3)
        assert await searcher.search("gen4randombattle", "p1", [state], value=_FakeValue(prior)) == "move 3"
        assert played[0] == ["move 3"] and played[1] == ["move 1", "move 3"], played  # likeliest first
        assert len(chosen) == 1 and len(chosen[0][0]) == 1, chosen  # one reply kept, by the first pass
        # the first pass: Thunderbolt against Gyarados's 5 choices; then both rows afresh against 1
        assert searcher.stats.leaves == 5 + 2
        # one choice searched: the policy's likeliest plays, no leaf played
        one = Searcher(hub, SearchConfig(states=1, replies=2, actions=1, budget_ms=0), seed=3)
        assert await one.search("gen4randombattle", "p1", [state], value=_FakeValue(prior)) == "move 3"
        assert one.stats.leaves == 0 and one.stats.searched == 1
        # slot order: no first pass, the opponent's first moves
        slot = Searcher(hub, SearchConfig(states=1, replies=2, actions=2, reply_order="slot", budget_ms=0), seed=3)
        assert await slot.search("gen4randombattle", "p1", [state], value=_FakeValue(prior)) == "move 3"
        assert slot.stats.leaves == 2 * 2
        # q_scale: the KO (move 3) is searched as the policy's second choice; a small scale
        # leaves the policy's 9:1 for Shadow Ball standing, a large one lets the KO's gap win
        doubt = {"move 1": 0.9, "move 3": 0.1}
        for scale, want in ((0.01, "move 1"), (100.0, "move 3")):
            q = Searcher(hub, SearchConfig(states=1, replies=1, actions=2, q_scale=scale, budget_ms=0), seed=3)
            assert await q.search("gen4randombattle", "p1", [state], value=_FakeValue(doubt)) == want, scale


async def test_a_decision_with_one_choice_plays_it_without_a_search():
    from types import SimpleNamespace as NS
    request = {"forceSwitch": [True], "side": {"pokemon": [
        {"active": True, "condition": "0 fnt"}, {"condition": "100/250"}, {"condition": "0 fnt"}]}}
    s = Searcher(None, SearchConfig())  # no leaf process: a search would fail
    assert await s.choose(NS(last_request=request)) == "switch 2"
    assert s.stats.searched == 1 and s.stats.leaves == 0


def test_eval_baseline_takes_baselines_and_refuses_the_rest_in_one_line():
    against = opponents.eval_list("heuristics,random")
    opponents.baseline_player("search", against, "gen4randombattle,gen9randombattle", False)
    opponents.baseline_player("heuristics", opponents.eval_list("random"), "gen9randomdoublesbattle", False)
    with pytest.raises(UserError, match="--baseline must be one of"):
        opponents.baseline_player("self", against, "gen4randombattle", False)
    with pytest.raises(UserError, match="is the search player"):
        opponents.baseline_player("search", against, "gen4randombattle", True)
    with pytest.raises(UserError, match="singles only"):
        opponents.baseline_player("search", against, "gen4randombattle,gen9randomdoublesbattle", False)
    with pytest.raises(UserError, match="against itself"):
        opponents.baseline_player("heuristics", against, "gen4randombattle", False)
    with pytest.raises(UserError, match="plays baselines only"):
        opponents.baseline_player("search", [opponents.played("runs/x.pt")], "gen4randombattle", False)


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_eval_baseline_search_plays_heuristics_and_counts_its_wins(showdown_url, tmp_path, capsys):
    from maple_async.cli import main
    out = tmp_path / "eval.json"
    assert main(["eval", "--baseline", "search", "--opponents", "random", "--battles", "3", "--concurrency", "3",
                 "--runner.battle_format", "gen4randombattle", "--search.states", "1", "--server", showdown_url,
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "[eval] search vs random (no network): win rate" in text and "over 3 battles" in text, text
    assert "[eval] search: searched" in text, text
    import json
    row = json.loads(out.read_text())["results"][0]
    # wins and losses counted from the baseline's own side (not every battle a tie)
    assert row["wins"] + row["losses"] == 3 and row["ties"] == 0, row


def test_the_closing_line_shows_each_failures_latest_message():
    from maple_async.search.searcher import SearchStats
    stats = SearchStats()
    stats.decisions = stats.searched = 10
    stats.failed["hub_refused"] += 2
    stats.examples["hub_refused"] = "build: unknown forme\n 'Xyz'"
    line = stats.line()
    assert "failed 20.0% (hub_refused 2 (latest: build: unknown forme 'Xyz'))" in line, line
