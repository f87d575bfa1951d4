"""search/leafhub.js through search/leaves.py: constructed positions on Showdown's own simulator.

Teams are written by hand the way the random formats build them (84 EVs, 31 IVs); each
position has one right answer that the network-free value and ``maxmin`` must find.
"""

import asyncio
import os
import re
import shutil
import signal

import numpy as np
import pytest

from maple_async.search import choice
from maple_async.search.leaves import LeafHub, LeafHubDied, LeafHubError, LeafRequestError
from closed_start import ended, given_up

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js"),
]

GENS = ["gen4randombattle", "gen9randombattle"]
SEEDS = [[11, 22, 33, 44], [5, 6, 7, 8], [1000, 2000, 3000, 4000]]
EVS = {s: 84 for s in ("hp", "atk", "def", "spa", "spd", "spe")}


def mon(species, ability, item, moves, level=80, tera=None):
    s = {"species": species, "name": species, "level": level, "ability": ability, "item": item,
         "moves": moves, "evs": EVS, "gender": ""}
    if tera:
        s["teraType"] = tera
    return s


JOLTEON = mon("Jolteon", "Volt Absorb", "Leftovers",
              ["Thunderbolt", "Shadow Ball", "Substitute", "Baton Pass"], tera="Electric")
GYARADOS = mon("Gyarados", "Intimidate", "Leftovers",
               ["Waterfall", "Earthquake", "Dragon Dance", "Stone Edge"], tera="Ground")
SKARMORY = mon("Skarmory", "Keen Eye", "Leftovers",
               ["Spikes", "Roost", "Brave Bird", "Whirlwind"], tera="Dragon")
BLISSEY = mon("Blissey", "Natural Cure", "Leftovers",
              ["Soft-Boiled", "Seismic Toss", "Toxic", "Thunder Wave"], tera="Fairy")
HEATRAN = mon("Heatran", "Flash Fire", "Leftovers",
              ["Fire Blast", "Earth Power", "Stealth Rock", "Roar"], tera="Grass")
GARCHOMP = mon("Garchomp", "Rough Skin", "Life Orb",
               ["Earthquake", "Outrage", "Stone Edge", "Swords Dance"], tera="Steel")


def side(name, team, patches=(), **extra):
    # Tera spent elsewhere: the tests' choices are the moves and switches of the older gens.
    return {"name": name, "team": team, "pokemon": list(patches), "teraUsed": True, **extra}


def state(p1, p2, seed=(1, 2, 3, 4), **extra):
    return {"seed": list(seed), "turn": 7, "p1": p1, "p2": p2, **extra}


async def table(hub, decision, k, built):
    """Our legal actions x theirs, each cell the mean value over SEEDS."""
    specs = [(k, a, b, s) for a in built.ours for b in built.theirs for s in SEEDS]
    leaves = await hub.leaves(decision, specs)
    assert not [leaf.error for leaf in leaves if leaf.error]
    v = np.array([leaf.value for leaf in leaves]).reshape(len(built.ours), len(built.theirs), len(SEEDS))
    return v.mean(axis=2)


def hp(condition: str) -> int:
    return int(condition.split("/")[0])


@pytest.mark.parametrize("fmt", GENS)
async def test_the_ko_move_scores_higher_and_maxmin_picks_it(fmt):
    # Jolteon outspeeds a Gyarados at 60%: Thunderbolt (4x) KOs it, nothing else does.
    st = state(side("us", [JOLTEON, BLISSEY]),
               side("them", [GYARADOS, SKARMORY], [{"hpFraction": 0.6}]))
    async with LeafHub() as hub:
        (built,) = await hub.build("ko", fmt, [st])
        assert built.ours == ["move 1", "move 2", "move 3", "move 4", "switch 2"]
        t = await table(hub, "ko", 0, built)
        stays = [j for j, b in enumerate(built.theirs) if b.startswith("move")]
        by_row = t[:, stays].mean(axis=1)
        assert by_row[0] > max(by_row[1:]) + 0.1, by_row
        assert choice.maxmin([t]).action == 0
        # The KO itself is in the lines: the leaf with Gyarados staying in.
        (leaf,) = await hub.leaves("ko", [(0, "move 1", "move 1", SEEDS[0])])
        assert "|faint|p2a: Gyarados" in leaf.lines and "|switch|p2a: Skarmory" in leaf.lines


@pytest.mark.parametrize("fmt", GENS)
async def test_a_switch_that_saves_a_pokemon_from_a_super_effective_ko_is_picked(fmt):
    # A faster Garchomp's Earthquake KOs Heatran at 40% whatever Heatran does; Skarmory is immune.
    st = state(side("us", [HEATRAN, SKARMORY], [{"hpFraction": 0.4}]),
               side("them", [GARCHOMP, BLISSEY]))
    async with LeafHub() as hub:
        (built,) = await hub.build("save", fmt, [st])
        t = await table(hub, "save", 0, built)
        assert built.ours[choice.maxmin([t]).action] == "switch 2"
        assert built.ours[choice.equilibrium([t]).action] == "switch 2"
        eq = built.theirs.index("move 1")
        stay = [built.ours.index(f"move {i}") for i in range(1, 5)]
        assert t[built.ours.index("switch 2"), eq] > max(t[stay, eq])


@pytest.mark.parametrize("fmt", GENS)
async def test_a_leaf_never_changes_the_built_state(fmt):
    # Blissey (p1, ours) takes Heatran's Earth Power; the original Blissey is at 50%.
    st = state(side("us", [BLISSEY, SKARMORY], [{"hpFraction": 0.5}]),
               side("them", [HEATRAN, GARCHOMP]))
    async with LeafHub() as hub:
        (built,) = await hub.build("clone", fmt, [st])
        start = hp(built.request["side"]["pokemon"][0]["condition"])
        leaf = ("clone", [(0, "move 4", "move 2", SEEDS[0])])
        (first,) = await hub.leaves(*leaf)
        # Other leaves from the same state in between, then the first again: the same turn.
        others = [(0, a, b, s) for a in built.ours for b in built.theirs for s in SEEDS[1:]]
        assert not [x.error for x in await hub.leaves("clone", others) if x.error]
        (again,) = await hub.leaves(*leaf)
        assert again.lines == first.lines and again.value == first.value
        assert again.request == first.request
        # The lines carry the copy's HP: what the copy's request says, below the original's.
        # (A copy that logged through the original's getHealth would report the original's.)
        after = hp(first.request["side"]["pokemon"][0]["condition"])
        damage = [int(m) for m in re.findall(r"\|-damage\|p1a: Blissey\|(\d+)/", first.lines)]
        reported = re.findall(r"\|p1a: Blissey\|(\d+)/", first.lines)
        assert damage and all(d < start for d in damage), (start, first.lines)
        assert int(reported[-1]) == after < start


@pytest.mark.parametrize("fmt", GENS)
async def test_the_state_patch_is_honoured(fmt):
    garchomp = mon("Garchomp", "Rough Skin", "Leftovers",
                   ["Swords Dance", "Earthquake", "Outrage", "Stone Edge"], tera="Steel")
    us = side("us", [SKARMORY, garchomp], [
        {"hp": 1},  # Skarmory on the bench at 1 HP
        {"hp": 150, "status": "tox", "statusState": {"stage": 3}, "pp": [5, None, 1, None],
         "boosts": {"atk": 6}},
    ], active=1)  # Garchomp is active: the team is reordered as switchIn would (swap with the first)
    them = side("them", [HEATRAN, BLISSEY], [
        {"status": "slp", "statusState": {"time": 1, "startTime": 2}},
        {"hpFraction": 0.25}])
    st = state(us, them, field={"weather": "sandstorm", "weatherDuration": 1})
    async with LeafHub() as hub:
        (built,) = await hub.build("patch", fmt, [st])
        mons = built.request["side"]["pokemon"]
        assert [m["ident"] for m in mons] == ["p1: Garchomp", "p1: Skarmory"]
        assert mons[0]["condition"].startswith("150/") and mons[0]["condition"].endswith(" tox")
        assert mons[1]["condition"].startswith("1/")
        moves = built.request["active"][0]["moves"]
        assert [m["pp"] for m in moves[:3]] == [5, moves[1]["maxpp"], 1]
        # Swords Dance at +6 cannot raise Attack; after Leftovers (1/16) toxic's 4th stage
        # takes 4/16; Heatran, asleep
        # for one more turn, wakes; the sandstorm's last turn ends.
        (leaf,) = await hub.leaves("patch", [(0, "move 1", "move 3", SEEDS[0])])
        assert leaf.error is None, leaf.error
        maxhp = int(mons[0]["condition"].split("/")[1].split()[0])
        assert "|-boost|p1a: Garchomp|atk|0" in leaf.lines or "|-fail|p1a: Garchomp" in leaf.lines
        assert f"|-damage|p1a: Garchomp|{150 + maxhp // 16 - maxhp * 4 // 16}/{maxhp} tox|[from] psn" in leaf.lines
        assert "|-curestatus|p2a: Heatran|slp" in leaf.lines
        assert "|-weather|none" in leaf.lines


@pytest.mark.parametrize("fmt", GENS)
async def test_a_kept_leaf_plays_the_turn_after_it_and_each_side_defaults_to_its_strongest_attack(fmt):
    # Turn 1: Jolteon's Substitute against Garchomp's Swords Dance. Turn 2: Garchomp's strongest
    # attack on Jolteon is Earthquake (2x, STAB; its last move); Jolteon's own is Shadow Ball
    # (Thunderbolt, its first: immune).
    garchomp = mon("Garchomp", "Rough Skin", "Life Orb", ["Outrage", "Swords Dance", "Stone Edge", "Earthquake"])
    st = state(side("us", [JOLTEON, BLISSEY]), side("them", [garchomp, SKARMORY]))
    async with LeafHub() as hub:
        await hub.build("two", fmt, [st])
        (plain,) = await hub.leaves("two", [(0, "move 3", "move 2", SEEDS[0])])
        assert plain.kept is None  # not asked to keep
        first, ended = await hub.leaves("two", [(0, "move 3", "move 2", SEEDS[0]),
                                                (0, "move 9", "move 1", SEEDS[0])], keep=True)
        assert first.kept == 0 and ended.error and ended.kept is None
        assert "|move|p2a: Garchomp|Swords Dance" in first.lines
        strongest, again, passed, gone = await hub.next("two", [(0, None, SEEDS[1]), (0, None, SEEDS[1]),
                                                               (0, "move 4", SEEDS[1]), (7, None, SEEDS[1])])
        assert "|move|p1a: Jolteon|Shadow Ball" in strongest.lines
        assert "|move|p2a: Garchomp|Earthquake" in strongest.lines
        assert "|move|p1a: Jolteon|Substitute" not in strongest.lines  # turn 2's lines alone
        assert again.lines == strongest.lines and again.request == strongest.request  # the kept leaf unchanged
        assert "|move|p1a: Jolteon|Baton Pass" in passed.lines and "|move|p2a: Garchomp|Earthquake" in passed.lines
        assert "no kept leaf 7" in gone.error
        # a choice of ours the simulator refuses there (a trap the agent's view did not show)
        # gives way to our strongest attack, not an error
        (refused,) = await hub.next("two", [(0, "move 9", SEEDS[1])])
        assert refused.error is None and refused.lines == strongest.lines
        assert "move 9" in refused.fallback and strongest.fallback is None
        # search.depth 3: a turn after a kept leaf is kept in turn, and the turn after that plays
        (kept2,) = await hub.next("two", [(first.kept, None, SEEDS[1])], keep=True)
        assert kept2.kept is not None and kept2.kept != first.kept
        turn = int(kept2.lines.split("|turn|")[-1].split()[0])
        assert f"|turn|{turn - 1}" in first.lines
        (third,) = await hub.next("two", [(kept2.kept, "move 1", SEEDS[2])])
        assert f"|turn|{turn + 1}" in third.lines and f"|turn|{turn}\n" not in third.lines, third.lines
        assert third.kept is None  # not asked to keep
        # Gengar (Levitate): Earthquake cannot touch it and Explosion faints the user, so
        # Garchomp's strongest attack is Outrage
        gengar = mon("Gengar", "Levitate", "Life Orb", ["Shadow Ball", "Focus Blast", "Substitute", "Pain Split"])
        bomber = mon("Garchomp", "Rough Skin", "Life Orb", ["Explosion", "Earthquake", "Outrage", "Swords Dance"])
        await hub.build("lev", fmt, [state(side("us", [gengar, BLISSEY]), side("them", [bomber, SKARMORY]))])
        (sub,) = await hub.leaves("lev", [(0, "move 3", "move 4", SEEDS[0])], keep=True)
        (split,) = await hub.next("lev", [(sub.kept, "move 4", SEEDS[1])])
        assert "|move|p2a: Garchomp|Outrage" in split.lines, split.lines
        await hub.drop("two")
        with pytest.raises(LeafRequestError, match="no decision 'two'"):
            await hub.next("two", [(0, None, SEEDS[0])])


@pytest.mark.parametrize("fmt", GENS)
async def test_a_switch_out_of_a_trap_in_a_later_turn_plays_our_strongest_attack(fmt):
    # Wobbuffet's Shadow Tag traps Jolteon: the policy's switch there (the agent's view did
    # not know the ability) is refused by the simulator; our strongest attack plays instead
    wobbuffet = mon("Wobbuffet", "Shadow Tag", "Leftovers", ["Counter", "Charm", "Encore", "Safeguard"])
    st = state(side("us", [JOLTEON, BLISSEY]), side("them", [wobbuffet, SKARMORY]))
    async with LeafHub() as hub:
        await hub.build("trap", fmt, [st])
        first, again = await hub.leaves("trap", [(0, "move 2", "move 4", SEEDS[0])] * 2, keep=True)
        (table,) = await hub.leaves("trap", [(0, "switch 2", "move 4", SEEDS[0])])
        assert "trapped" in table.error  # a table leaf's refused choice stays an error
        switched, strongest = await hub.next("trap", [(first.kept, "switch 2", SEEDS[1]),
                                                      (again.kept, None, SEEDS[1])])
        assert switched.error is None and "trapped" in switched.fallback, switched
        assert "|switch|p1a:" not in switched.lines and switched.lines == strongest.lines
        assert "|move|p1a: Jolteon|Shadow Ball" in switched.lines


async def test_a_bad_request_is_answered_and_the_process_goes_on():
    st = state(side("us", [JOLTEON, BLISSEY]), side("them", [GYARADOS, SKARMORY]))
    async with LeafHub() as hub:
        (built,) = await hub.build("d", "gen4randombattle", [st])
        with pytest.raises(LeafRequestError, match="no decision 'nope'"):
            await hub.leaves("nope", [(0, "move 1", "move 1", SEEDS[0])])
        with pytest.raises(LeafRequestError, match="state 0"):
            await hub.build("bad", "gen4randombattle", [state(side("us", []), side("them", [GYARADOS]))])
        with pytest.raises(LeafRequestError, match="hp 9999"):
            await hub.build("bad", "gen4randombattle",
                            [state(side("us", [JOLTEON], [{"hp": 9999}]), side("them", [GYARADOS]))])
        # A choice the simulator refuses fails its own leaf only.
        bad, good = await hub.leaves("d", [(0, "move 9", "move 1", SEEDS[0]),
                                           (0, "move 1", "move 1", SEEDS[0])])
        assert "move 9" in bad.error and good.error is None and good.lines
        (gone,) = await hub.leaves("d", [(3, "move 1", "move 1", SEEDS[0])])
        assert "no state 3" in gone.error
        await hub.ping()
        await hub.drop("d")
        with pytest.raises(LeafRequestError):
            await hub.leaves("d", [(0, "move 1", "move 1", SEEDS[0])])


async def test_a_killed_process_raises_and_a_restart_answers():
    st = state(side("us", [JOLTEON, BLISSEY]), side("them", [GYARADOS, SKARMORY]))
    hub = await LeafHub().start()
    try:
        (built,) = await hub.build("d", "gen4randombattle", [st])
        many = [(0, a, b, [i % 60000, 1, 2, 3]) for i in range(40)
                for a in built.ours for b in built.theirs]
        task = asyncio.ensure_future(hub.leaves("d", many))
        await asyncio.sleep(0.2)
        assert not task.done()
        os.kill(hub.pid, signal.SIGKILL)
        with pytest.raises(LeafHubDied, match=r"exited with code -9, during a leaves request"):
            await task
        assert not hub.alive
        with pytest.raises(LeafHubDied, match="call start"):
            await hub.ping()
        await hub.start()
        (again,) = await hub.build("d", "gen4randombattle", [st])
        assert again.ours == built.ours
        (leaf,) = await hub.leaves("d", [(0, "move 1", "move 1", SEEDS[0])])
        assert leaf.error is None and leaf.lines
    finally:
        await hub.close()


@pytest.mark.parametrize("fmt,seen,want", [("gen4randombattle", "gastrodon", "Gastrodon"),
                                           ("gen4randombattle", "gastrodoneast", "Gastrodon-East"),
                                           ("gen9randombattle", "polteageist", "Polteageist"),
                                           ("gen9randombattle", "polteageistantique", "Polteageist-Antique"),
                                           ("gen9randombattle", "terapagosterastal", "Terapagos-Terastal"),
                                           ("gen9randombattle", "mimikyubusted", "Mimikyu-Busted")])
async def test_a_drawn_set_keeps_the_forme_showdown_showed(fmt, seen, want):
    # The generator draws some formes at random, and a battle-only forme's sets are its
    # base's: the state keeps the forme seen.
    known = [{"name": "X", "species": seen, "level": 86, "moves": []}]
    async with LeafHub() as hub:
        teams, _ = await hub.sample(fmt, known, 40, 6, [1, 2, 3, 4])
    assert {team[0]["species"] for team in teams} == {want}


async def test_a_ruled_out_item_is_never_drawn():
    # Raging Bolt's gen 9 sets hold Booster Energy in about a third of draws; an active one that did not use it holds
    # something else in every draw (or nothing, where every draw held it).
    known = [{"name": "X", "species": "ragingbolt", "level": 80, "moves": [], "item": None}]
    async with LeafHub() as hub:
        free, _ = await hub.sample("gen9randombattle", known, 40, 6, [1, 2, 3, 4])
        ruled, _ = await hub.sample("gen9randombattle", [{**known[0], "notItems": ["boosterenergy"]}],
                                    40, 6, [1, 2, 3, 4])
    assert any(team[0]["item"] == "Booster Energy" for team in free)
    # every draw agrees with the ruled-out item (no draw fell back on holding nothing)
    assert all(team[0]["item"] not in ("Booster Energy", "") for team in ruled)


@pytest.mark.parametrize("fmt", GENS)
async def test_a_fainted_active_asks_for_a_switch_and_a_leaf_plays_it_into_the_next_turn(fmt):
    # Jolteon fainted in the turn that ended, Spikes on our side: Skarmory (Flying) takes none,
    # Blissey an eighth. Their side waits.
    us = side("us", [JOLTEON, SKARMORY, BLISSEY], [{"hp": 0}], conditions={"spikes": {"layers": 1}})
    them = side("them", [GARCHOMP, HEATRAN])
    async with LeafHub() as hub:
        (built,) = await hub.build("faint", fmt, [state(us, them)])
        assert built.request["forceSwitch"] == [True] and "active" not in built.request
        assert built.request["side"]["pokemon"][0]["condition"] == "0 fnt"
        assert built.ours == ["switch 2", "switch 3"] and built.theirs == ["wait"]
        skarmory, blissey = await hub.leaves("faint", [(0, "switch 2", "wait", SEEDS[0]),
                                                      (0, "switch 3", "wait", SEEDS[0])])
        for leaf in (skarmory, blissey):
            assert leaf.error is None, leaf.error
            assert "|turn|8" in leaf.lines and leaf.request["active"]  # the next turn asks for moves
        assert "|switch|p1a: Skarmory|" in skarmory.lines and "|-damage|p1a: Skarmory" not in skarmory.lines
        assert "|-damage|p1a: Blissey|" in blissey.lines and "[from] Spikes" in blissey.lines
        (bad,) = await hub.leaves("faint", [(0, "move 1", "wait", SEEDS[0])])
        assert bad.error and "move 1" in bad.error


@pytest.mark.parametrize("fmt", GENS)
async def test_field_and_side_timers_without_a_source_run_out_by_their_rules(fmt):
    # Trick Room (5 turns) and Reflect (5 turns, no Light Clay) seen 4 turns: both end this turn.
    us = side("us", [JOLTEON, BLISSEY], conditions={"reflect": {"elapsed": 4}})
    them = side("them", [GYARADOS, SKARMORY])
    st = state(us, them, field={"pseudoWeather": {"trickroom": {"elapsed": 4}}})
    async with LeafHub() as hub:
        await hub.build("timers", fmt, [st])
        (leaf,) = await hub.leaves("timers", [(0, "move 3", "move 1", SEEDS[0])])
        assert leaf.error is None, leaf.error
        assert "|-fieldend|move: Trick Room" in leaf.lines
        assert re.search(r"\|-sideend\|p1: us\|(move: )?Reflect", leaf.lines), leaf.lines


@pytest.mark.parametrize("residual", [True, False])
async def test_gen3_runs_the_turns_residual_after_a_faints_switch(residual):
    # Gens 1-3 ask for the switch before the residual; a sandstorm then hits the switch-in.
    us = side("us", [JOLTEON, BLISSEY], [{"hp": 0}])
    them = side("them", [GARCHOMP, HEATRAN])
    st = state(us, them, field={"weather": "sandstorm", "weatherDuration": 3}, **({"residual": True} if residual else {}))
    async with LeafHub() as hub:
        await hub.build("gen3", "gen3randombattle", [st])
        (leaf,) = await hub.leaves("gen3", [(0, "switch 2", "wait", SEEDS[0])])
        assert leaf.error is None, leaf.error
        assert ("[from] Sandstorm" in leaf.lines) == residual, leaf.lines


async def test_a_switch_in_counts_the_fainted_for_supreme_overlord():
    kingambit = mon("Kingambit", "Supreme Overlord", "Leftovers",
                    ["Kowtow Cleave", "Sucker Punch", "Iron Head", "Swords Dance"], tera="Dark")
    us = side("us", [JOLTEON, kingambit, BLISSEY], [{"hp": 0}, None, {"hp": 0}])
    them = side("them", [GARCHOMP, HEATRAN])
    async with LeafHub() as hub:
        await hub.build("overlord", "gen9randombattle", [state(us, them)])
        (leaf,) = await hub.leaves("overlord", [(0, "switch 2", "wait", SEEDS[0])])
        assert leaf.error is None, leaf.error
        assert "|-activate|p1a: Kingambit|ability: Supreme Overlord" in leaf.lines, leaf.lines


def _hp_after_hit(lines: str, ident: str) -> int:
    hit = re.search(rf"\|-damage\|{re.escape(ident)}\|(\d+)/\d+", lines)
    assert hit, lines
    return int(hit.group(1))


async def test_supreme_overlord_s_count_paradox_boosts_and_salt_cure_are_carried():
    """The gen 9 effects team formats show most: the count Kingambit took at its switch-in
    (abilityState), Booster Energy's Quark Drive with its stat, Salt Cure's residual."""
    kingambit = mon("Kingambit", "Supreme Overlord", "Leftovers",
                    ["Kowtow Cleave", "Sucker Punch", "Iron Head", "Swords Dance"], tera="Dark")
    hands = mon("Iron Hands", "Quark Drive", "", ["Drain Punch", "Wild Charge", "Ice Punch", "Swords Dance"],
                tera="Fighting")
    blissey = mon("Blissey", "Natural Cure", "", ["Soft-Boiled", "Seismic Toss", "Toxic", "Thunder Wave"],
                  tera="Fairy")
    left = {}
    async with LeafHub() as hub:
        for who, patch in [("kingambit", None), ("kingambit", {"abilityState": {"fallen": 2}}),
                           ("hands", None), ("hands", {"volatiles": {"quarkdrive": {"bestStat": "atk", "fromBooster": True}}})]:
            us = side("us", [kingambit if who == "kingambit" else hands], [patch])
            them = side("them", [blissey], [{"volatiles": {"saltcure": {}}}])
            await hub.build(f"fx{len(left)}", "gen9randombattle", [state(us, them)])
            ours = "move 1" if who == "kingambit" else "move 3"  # Kowtow Cleave; Ice Punch
            (leaf,) = await hub.leaves(f"fx{len(left)}", [(0, ours, "move 3", SEEDS[0])])
            assert leaf.error is None, leaf.error
            assert re.search(r"\|-damage\|p2a: Blissey\|\d+/\d+\|\[from\] (move: )?Salt Cure", leaf.lines), leaf.lines
            left[(who, patch is not None)] = _hp_after_hit(leaf.lines, "p2a: Blissey")
    assert left[("kingambit", True)] < left[("kingambit", False)], left  # 1.2x with two fallen
    assert left[("hands", True)] < left[("hands", False)], left  # 1.3x Attack


async def test_what_the_leads_switch_ins_did_is_undone_where_the_patch_does_not_say():
    """Booster Energy used up at the built start is back in the set; a Drought lead's sun (the
    patch has no weather) leaves no Protosynthesis on our lead: sun set in the leaf starts it."""
    tusk = mon("Great Tusk", "Protosynthesis", "Booster Energy",
               ["Headlong Rush", "Ice Spinner", "Knock Off", "Rapid Spin"], tera="Ground")
    torkoal = mon("Torkoal", "Drought", "Heat Rock", ["Sunny Day", "Lava Plume", "Rapid Spin", "Yawn"],
                  tera="Fire")
    async with LeafHub() as hub:
        (built,) = await hub.build("leads", "gen9randombattle", [state(side("us", [tusk]), side("them", [torkoal]))])
        assert built.request["side"]["pokemon"][0]["item"] == "boosterenergy"
        (leaf,) = await hub.leaves("leads", [(0, "move 4", "move 1", SEEDS[0])])
        assert leaf.error is None, leaf.error
        assert "|-weather|SunnyDay" in leaf.lines, leaf.lines
        # Drought's sun came first at the start, so Booster Energy waited; in the leaf it is used at
        # the first update and Protosynthesis starts: the start's sun boost had not been carried over
        assert "|-activate|p1a: Great Tusk|ability: Protosynthesis|[fromitem]" in leaf.lines, leaf.lines


@pytest.mark.parametrize("booster", [True, False])
async def test_a_booster_energy_boost_outlasts_the_terrain_and_a_terrains_does_not(booster):
    hands = mon("Iron Hands", "Quark Drive", "", ["Drain Punch", "Wild Charge", "Ice Punch", "Swords Dance"],
                tera="Fighting")
    boost = {"bestStat": "atk", **({"fromBooster": True} if booster else {})}
    us = side("us", [hands], [{"volatiles": {"quarkdrive": boost}}])
    them = side("them", [BLISSEY])
    st = state(us, them, field={"terrain": "electricterrain", "terrainDuration": 1})
    async with LeafHub() as hub:
        await hub.build("quark", "gen9randombattle", [st])
        (leaf,) = await hub.leaves("quark", [(0, "move 4", "move 1", SEEDS[0])])
        assert leaf.error is None, leaf.error
        assert "|-fieldend|move: Electric Terrain" in leaf.lines, leaf.lines
        assert ("|-end|p1a: Iron Hands|Quark Drive" in leaf.lines) is not booster, leaf.lines


async def test_a_team_formats_bench_keeps_its_level_and_a_hidden_forme_is_either():
    async with LeafHub() as hub:
        teams, _ = await hub.sample("gen9randombattle", [], 24, 1, [1, 2, 3, 4],
                                    pool=[{"species": "Urshifu", "level": 50}])
        assert {t[0]["species"] for t in teams} == {"Urshifu", "Urshifu-Rapid-Strike"}
        assert {t[0]["level"] for t in teams} == {50}
        teams, _ = await hub.sample("gen4randombattle", [], 2, 6, [1, 2, 3, 4], level=100)
        assert {s["level"] for t in teams for s in t} == {100}


async def test_throat_chop_keeps_our_sound_moves_disabled():
    loud = mon("Noivern", "Infiltrator", "Choice Specs", ["Boomburst", "Draco Meteor", "Flamethrower", "U-turn"],
               tera="Normal")
    async with LeafHub() as hub:
        (built,) = await hub.build("chop", "gen9randombattle", [state(
            side("us", [loud], [{"volatiles": {"throatchop": {"seen": 0}}}]), side("them", [BLISSEY]))])
        moves = built.request["active"][0]["moves"]
        assert [m.get("disabled", False) for m in moves] == [True, False, False, False], moves


async def test_booster_energy_used_up_at_the_built_start_waits_for_the_sun_to_end_as_in_the_game():
    """Our Great Tusk holds Booster Energy under a sun that is ending, boosted by the sun: the
    built start (no sun yet) uses the item up; restored, it starts the boost when the sun ends."""
    tusk = mon("Great Tusk", "Protosynthesis", "Booster Energy",
               ["Headlong Rush", "Ice Spinner", "Knock Off", "Rapid Spin"], tera="Ground")
    us = side("us", [tusk], [{"volatiles": {"protosynthesis": {"bestStat": "atk"}}}])
    st = state(us, side("them", [BLISSEY]), field={"weather": "sunnyday", "weatherDuration": 1})
    async with LeafHub() as hub:
        (built,) = await hub.build("booster", "gen9randombattle", [st])
        assert built.request["side"]["pokemon"][0]["item"] == "boosterenergy"
        (leaf,) = await hub.leaves("booster", [(0, "move 4", "move 2", SEEDS[0])])
        assert leaf.error is None, leaf.error
        assert "|-weather|none" in leaf.lines, leaf.lines
        assert "|-enditem|p1a: Great Tusk|Booster Energy" in leaf.lines, leaf.lines
        assert "|-activate|p1a: Great Tusk|ability: Protosynthesis|[fromitem]" in leaf.lines, leaf.lines


async def test_a_fitted_spread_gives_the_request_s_hidden_power_power():
    """Gen 4: IVs 31/30/30/31/31/31 give Hidden Power Ice 70; the spread fitted to the same
    stats and that power gives it too."""
    nape = mon("Infernape", "Blaze", "Life Orb", ["Flamethrower", "Hidden Power Ice", "Close Combat", "Nasty Plot"],
               level=100)
    nape["ivs"] = {"hp": 31, "atk": 30, "def": 30, "spa": 31, "spd": 31, "spe": 31}
    nape["evs"] = {"hp": 0, "atk": 4, "def": 0, "spa": 252, "spd": 0, "spe": 252}
    async with LeafHub() as hub:
        (real,) = await hub.build("hp-real", "gen4randombattle", [state(side("us", [nape]), side("them", [BLISSEY]))])
        want = real.request["active"][0]["moves"][1]["move"]
        assert want == "Hidden Power Ice 70", want
        stats = real.request["side"]["pokemon"][0]["stats"]
        maxhp = hp(real.request["side"]["pokemon"][0]["condition"].split("/")[1])
        fit = {k: v for k, v in nape.items() if k not in ("ivs", "evs")}
        fit.update(fit={"hp": maxhp, **stats}, fitHpPower=70)
        (built,) = await hub.build("hp-fit", "gen4randombattle", [state(side("us", [fit]), side("them", [BLISSEY]))])
        assert built.request["active"][0]["moves"][1]["move"] == want
        assert built.request["side"]["pokemon"][0]["stats"] == stats


@pytest.mark.parametrize("been_in", [True, False])
async def test_a_pokemon_that_has_been_in_has_spent_intrepid_sword(been_in):
    zacian = mon("Zacian-Crowned", "Intrepid Sword", "Rusted Sword",
                 ["Behemoth Blade", "Close Combat", "Play Rough", "Swords Dance"], tera="Fighting")
    us = side("us", [BLISSEY, zacian], [None, {"beenIn": True} if been_in else None])
    async with LeafHub() as hub:
        await hub.build("sword", "gen9randombattle", [state(us, side("them", [HEATRAN]))])
        (leaf,) = await hub.leaves("sword", [(0, "switch 2", "move 3", SEEDS[0])])
        assert leaf.error is None, leaf.error
        assert ("|-ability|p1a: Zacian|Intrepid Sword|boost" in leaf.lines) is not been_in, leaf.lines


async def test_castform_s_forme_follows_the_patched_weather_not_the_start_s():
    castform = mon("Castform", "Forecast", "Leftovers", ["Weather Ball", "Energy Ball", "Thunderbolt", "Ice Beam"])
    ninetales = mon("Ninetales", "Drought", "Heat Rock", ["Fire Blast", "Energy Ball", "Nasty Plot", "Will-O-Wisp"])
    async with LeafHub() as hub:
        (built,) = await hub.build("forecast", "gen4randombattle", [state(side("us", [castform]), side("them", [ninetales]))])
        (leaf,) = await hub.leaves("forecast", [(0, "move 1", "move 2", SEEDS[0])])
        assert leaf.error is None, leaf.error
        assert "|-resisted|p1a: Castform" not in leaf.lines, leaf.lines  # still Normal: Energy Ball is neutral


async def test_our_traced_ability_is_the_request_s_not_what_the_built_start_traced():
    porygon = mon("Porygon2", "Trace", "Eviolite", ["Tri Attack", "Recover", "Ice Beam", "Thunder Wave"], tera="Ghost")
    async with LeafHub() as hub:
        for decision, patch, want in [("trace0", None, "intimidate"), ("trace1", {"ability": "pressure"}, "pressure")]:
            (built,) = await hub.build(decision, "gen9randombattle",
                                       [state(side("us", [porygon], [patch]), side("them", [GYARADOS]))])
            assert built.request["side"]["pokemon"][0]["ability"] == want


async def test_a_shiny_set_is_built_shiny():
    async with LeafHub() as hub:
        (built,) = await hub.build("shiny", "gen4randombattle",
                                   [state(side("us", [{**JOLTEON, "shiny": True}]), side("them", [BLISSEY]))])
        assert built.request["side"]["pokemon"][0]["details"].endswith(", shiny")


async def test_a_changed_type_is_built_and_protean_spent_changes_it_no_more():
    """A Greninja whose Protean made it Ground: Thunderbolt does not touch it; spent (gen 9: once a
    switch-in), its Surf leaves it Ground; not spent, Surf makes it Water again."""
    greninja = mon("Greninja", "Protean", "Life Orb", ["Surf", "Earth Power", "Ice Beam", "U-turn"], tera="Water")
    async with LeafHub() as hub:
        lines = {}
        for spent in (True, False):
            change = {"types": ["Ground"], **({"ability": "protean"} if spent else {})}
            them = side("them", [greninja], [{"volatiles": {"typechange": change}}])
            await hub.build(f"tc{spent}", "gen9randombattle", [state(side("us", [JOLTEON]), them)])
            (leaf,) = await hub.leaves(f"tc{spent}", [(0, "move 1", "move 1", SEEDS[0])])
            assert leaf.error is None, leaf.error
            lines[spent] = leaf.lines
            assert "|-immune|p2a: Greninja" in leaf.lines, leaf.lines  # Thunderbolt on a Ground type
        assert "typechange|Water" not in lines[True], lines[True]
        assert "|-start|p2a: Greninja|typechange|Water|[from] ability: Protean" in lines[False], lines[False]


@pytest.mark.parametrize("fmt", GENS)
async def test_a_future_sight_on_its_way_hits_after_the_turn_ends_left(fmt):
    slowking = mon("Slowking", "Regenerator", "Leftovers", ["Future Sight", "Scald", "Slack Off", "Thunder Wave"],
                   tera="Water")
    async with LeafHub() as hub:
        for left in (1, 2):
            them = side("them", [BLISSEY, slowking])
            us = side("us", [GARCHOMP], future={"move": "futuresight", "source": 1, "residuals": left})
            await hub.build(f"fs{left}", fmt, [state(us, them)])
            (leaf,) = await hub.leaves(f"fs{left}", [(0, "move 4", "move 1", SEEDS[0])])
            assert leaf.error is None, leaf.error
            assert ("|-end|p1a: Garchomp|move: Future Sight" in leaf.lines) is (left == 1), leaf.lines


async def test_a_built_state_names_the_opponents_strongest_attack_on_our_active():
    async with LeafHub() as hub:
        (built,) = await hub.build("atk", "gen4randombattle", [state(side("us", [JOLTEON]), side("them", [GYARADOS]))])
        assert built.attack == "move 2", built  # Earthquake (2x on Jolteon) over STAB Waterfall
        gengar = mon("Gengar", "Levitate", "Life Orb", ["Shadow Ball", "Focus Blast", "Thunderbolt", "Sludge Bomb"])
        snorlax = mon("Snorlax", "Thick Fat", "Leftovers", ["Body Slam", "Return", "Curse", "Rest"])
        (built,) = await hub.build("none", "gen4randombattle", [state(side("us", [gengar]), side("them", [snorlax]))])
        assert built.attack == "", built  # no attack touches a Ghost: no reply is modelled


async def test_heal_block_disables_our_healing_move_and_ends_after_its_turns():
    blissey = mon("Blissey", "Natural Cure", "Leftovers", ["Soft-Boiled", "Seismic Toss", "Toxic", "Thunder Wave"],
                  tera="Fairy")
    async with LeafHub() as hub:
        (built,) = await hub.build("hb", "gen9randombattle", [state(
            side("us", [blissey], [{"hpFraction": 0.5, "volatiles": {"healblock": {"duration": 1}}}]),
            side("them", [GYARADOS]))])
        assert [m.get("disabled", False) for m in built.request["active"][0]["moves"]] == [True, False, False, False]
        (leaf,) = await hub.leaves("hb", [(0, "move 2", "move 3", SEEDS[0])])
        assert leaf.error is None, leaf.error
        assert "|-end|p1a: Blissey|move: Heal Block" in leaf.lines, leaf.lines


@pytest.mark.parametrize("fmt", GENS)
async def test_an_opponent_locked_into_outrage_has_no_other_choice_and_tires_by_the_rule(fmt):
    async with LeafHub() as hub:
        tired = {}
        for used in (1, 2):
            for s in range(8):
                them = side("them", [GARCHOMP], [{"volatiles": {"lockedmove": {"move": "outrage", "used": used}}}])
                (built,) = await hub.build(f"lock{used}{s}", fmt, [state(side("us", [SKARMORY]), them, seed=(s, 2, 3, 4))])
                assert {c.split()[:2] == ["move", "1"] for c in built.theirs} == {True}, built.theirs  # no switch
                (leaf,) = await hub.leaves(f"lock{used}{s}", [(0, "move 2", built.theirs[0], SEEDS[0])])
                assert leaf.error is None, leaf.error
                assert "|move|p2a: Garchomp|Outrage|p1a: Skarmory|[from] lockedmove" in leaf.lines, leaf.lines
                tired.setdefault(used, set()).add("|-start|p2a: Garchomp|confusion|[fatigue]" in leaf.lines)
        # after two turns a lock is in its third and last; after one, in its second of two or of three
        assert tired == {1: {True, False}, 2: {True}}, tired
    with pytest.raises(LeafRequestError):
        async with LeafHub() as hub:
            them = side("them", [GARCHOMP], [{"volatiles": {"lockedmove": {"move": "outrage", "used": 3}}}])
            await hub.build("lock3", "gen9randombattle", [state(side("us", [SKARMORY]), them)])


async def test_slow_start_keeps_the_turns_left_the_state_names():
    gigas = mon("Regigigas", "Slow Start", "Leftovers", ["Body Slam", "Knock Off", "Substitute", "Protect"])
    async with LeafHub() as hub:
        for left, ends in ((1, True), (3, False), (0, False)):
            us = side("us", [gigas], [{"abilityState": {"counter": left}}])
            await hub.build(f"ss{left}", "gen4randombattle", [state(us, side("them", [SKARMORY]))])
            (leaf,) = await hub.leaves(f"ss{left}", [(0, "move 4", "move 2", SEEDS[0])])
            assert leaf.error is None, leaf.error
            assert ("|-end|p1a: Regigigas|Slow Start" in leaf.lines) is ends, (left, leaf.lines)


async def _spawning(hub: LeafHub) -> asyncio.Task:
    """``hub.start()`` under way, caught while its process is being created (no pipes yet)."""
    task = asyncio.ensure_future(hub.start())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while hub.proc is None and not task.done() and loop.time() < deadline:
        await asyncio.sleep(0)
    assert hub.proc is not None and hub.proc.transport is None, "the start was not caught mid-spawn"
    return task


async def test_a_request_while_the_process_is_being_created_says_it_is_not_running():
    # Another decision's start is under way: this one must not find a process without pipes.
    hub = LeafHub()
    start = await _spawning(hub)
    try:
        with pytest.raises(LeafHubDied, match="not running"):
            await hub.ping()
        await start
        await hub.ping()
    finally:
        start.cancel()
        await asyncio.gather(start, return_exceptions=True)
        await hub.close()


async def test_a_close_during_the_start_ends_the_process_and_fails_the_start_without_a_cancel():
    hub = LeafHub()
    start = await _spawning(hub)
    proc = hub.proc
    try:
        await hub.close()
        await given_up(start, proc, LeafHubError, "leafhub.js was closed")
    finally:
        await ended(start, proc)
        await hub.close()


async def test_a_request_cancelled_while_the_pipe_is_full_leaves_nothing_pending():
    async with LeafHub() as hub:
        hub.proc.pause_writing()  # as asyncio does when the pipe holds past its high-water mark
        ping = asyncio.ensure_future(hub.ping())
        for _ in range(5):
            await asyncio.sleep(0)
        assert not ping.done()  # waiting for the pipe to drain
        ping.cancel()
        await asyncio.gather(ping, return_exceptions=True)
        assert hub._pending == {}
        hub.proc.resume_writing()
        await hub.ping()
