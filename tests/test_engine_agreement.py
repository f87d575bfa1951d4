"""poke-engine against Showdown on a fixed corpus of positions from real battles (gens 1, 4 and
9 random battles): each position's snapshot, the joint choices drawn for it and
Showdown's outcome of each over many seeds, recorded by ``maple-async engine agree --corpus``.

No Showdown runs here: the engine replays every joint choice of the translated snapshot, and
* its outcomes are the ones recorded (the translation and the engine are deterministic: a change
  in either shows here first, pair by pair);
* the share of joint choices agreeing with Showdown is at least what docs/search.md reports.
"""

import asyncio
import collections
import json
from pathlib import Path

import pytest

from maple_async.search.engines import generations
from maple_async.search.pokeengine import agreement as ag
from maple_async.search.pokeengine import build
from maple_async.search.pokeengine.pool import EnginePool

CORPUS = Path(__file__).parent / "data" / "engine_agreement.json.gz"
# The share of this corpus's own joint choices that agree, per generation (a floor: the engine's
# outcomes must not drift away from Showdown's). The corpus: the first 30 positions per format of
# the agreement docs/search.md reports (240 seeds, 4 joint choices each).
FLOOR = {1: 0.96, 4: 0.97, 9: 0.98}


def corpus() -> list[dict]:
    return ag.read_corpus(CORPUS)


@pytest.fixture(scope="module")
def engines():
    return {g: build.ensure(g) for g in sorted({generations([p["format"]])[0] for p in corpus()})}


def test_the_engine_replays_the_corpus_as_recorded_and_agrees_with_showdown(engines):
    replayed = asyncio.run(ag.replay(corpus()))
    assert len(replayed) >= 100
    changed = []
    agree: dict = collections.defaultdict(list)
    for pos, r, (mine, theirs) in replayed:
        for was, now in zip(r.engine, (mine, theirs)):
            if abs(was.hp - now.hp) > 1e-4 or abs(was.ko - now.ko) > 1e-4:
                changed.append((pos["format"], r.position, r.ours, r.theirs, was, now))
        r.engine = [mine, theirs]
        agree[generations([pos["format"]])[0]].append(r.agrees)
    assert not changed, f"{len(changed)} pairs replay differently, e.g. {changed[:3]}"
    for gen, flags in agree.items():
        assert sum(flags) / len(flags) >= FLOOR[gen], (gen, sum(flags), len(flags))


def test_a_forme_change_is_followed_both_ways():
    """Mimikyu's Disguise breaks in the turn: Showdown's brief keys it by its name, the
    engine keeps it at its index under a new name; both count its HP and its faint."""
    before = {"name": "Mimikyu", "species": "mimikyu", "baseSpecies": "mimikyu", "hp": 100, "maxhp": 200,
              "fainted": False}
    sd = ag.showdown_outcome(before, [{"Mimikyu": [75, 200, False]}, {"Mimikyu": [0, 200, True]}])
    assert sd.hp == pytest.approx((-25 - 100) / 200 / 2) and sd.ko == 0.5
    outcomes = [(50.0, {"side_one": {"pokemon": [{"id": "MIMIKYUBUSTED", "hp": 75}]}}),
                (50.0, {"side_one": {"pokemon": [{"id": "MIMIKYUBUSTED", "hp": 0}]}})]
    en = ag.engine_outcome(before, 0, "side_one", outcomes)
    assert en.hp == pytest.approx(sd.hp) and en.ko == 0.5


@pytest.mark.integration
async def test_a_position_the_engine_fails_is_counted_and_the_others_compared(monkeypatch):
    """A worker that dies on one position (the pool starts it again) costs that position, counted
    by kind, not the whole measurement."""
    from maple_async.search.pokeengine.pool import EngineDied
    positions = [json.loads(x) for x in (Path(__file__).parent / "data" / "engine_positions.jsonl").read_text().splitlines()]
    real, calls = EnginePool.request, []

    async def request(self, msg, budget_s, worker=None):
        calls.append(msg["op"])
        if msg["op"] == "instructions" and calls.count("instructions") == 1:
            raise EngineDied("engine worker 0 of generation 4 exited (exit 0)")
        return await real(self, msg, budget_s, worker)

    monkeypatch.setattr(EnginePool, "request", request)
    rows, corpus_, refused = await ag.compare(positions, pairs=2, seeds=4, seed=1)
    assert refused == {"engine died": 1}
    assert rows and {r.position for r in rows} == {1} and len(corpus_) == 1


@pytest.mark.integration
async def test_a_permanent_forme_change_is_followed_in_showdowns_outcome():
    """Eiscue's Ice Face breaks under a physical hit: Showdown changes its base species for good
    (Eiscue-Noice), and the turn's outcome still finds it (by its name, which no forme changes)."""
    from maple_async.search.leaves import LeafHub
    evs = {s: 84 for s in ("hp", "atk", "def", "spa", "spd", "spe")}
    ours = [{"species": "Eiscue", "name": "Eiscue", "level": 80, "ability": "Ice Face", "item": "Leftovers",
             "moves": ["Belly Drum"], "evs": evs}]
    theirs = [{"species": "Snorlax", "name": "Snorlax", "level": 80, "ability": "Thick Fat", "item": "Leftovers",
               "moves": ["Body Slam"], "evs": evs}]
    state = {"seed": [1, 2, 3, 4], "turn": 1, "p1": {"name": "us", "team": ours}, "p2": {"name": "them", "team": theirs}}
    async with LeafHub() as hub:
        built = await hub.build("eiscue", "gen9randombattle", [state], us="p1", describe=True)
        leaves = await hub.leaves("eiscue", [(0, "move 1", "move 1", [i, 2, 3, 4]) for i in range(4)], brief=True)
        await hub.drop("eiscue")
    snap = built[0].snapshot
    before = ag.active_of(snap["sides"][0])
    afters = [leaf.brief[0] for leaf in leaves if leaf.error is None]
    assert afters
    out = ag.showdown_outcome(before, afters)
    assert out.ko == 0.0 and out.hp < 0  # Belly Drum's half; the body slam broke the ice face


def test_showdown_against_itself_is_reported_beside_the_agreement():
    """The measurement's floor: how often Showdown's two halves of seeds agree (at twice the
    tolerances, as each half strays twice as far) is printed beside the engine's agreement."""
    o = ag.Outcome
    assert ag.within([o("a", -0.30, 0.0)], [o("a", -0.25, 0.0)], scale=2.0)
    assert not ag.within([o("a", -0.30, 0.0)], [o("a", -0.25, 0.0)])
    rows = [ag.Compared("gen4randombattle", i, "move 1", "move 1", [o("a", 0, 0)], [o("a", d, 0)],
                        halves_agree=h) for i, (d, h) in enumerate([(0, True), (0.1, True), (0, False), (0, True)])]
    (line,) = ag.summary_lines(rows)
    assert line.startswith("gen4randombattle: 3/4 joint choices agree (75.0%) over 4 positions")
    assert "Showdown against itself at these seeds (its halves): 75.0%" in line
    old = ag.Compared.from_json({k: v for k, v in rows[0].to_json().items() if k != "halves_agree"})
    assert old.halves_agree is None  # a corpus recorded before still loads


def test_engine_agree_replays_a_corpus_from_the_command_line(engines, tmp_path, capsys):
    """``engine agree --replay``: the corpus's Showdown outcomes against the engine now, no
    Showdown run; the same figures as the test above, and the rows kept with --json."""
    from maple_async.cli import main
    out = tmp_path / "rows.json"
    assert main(["engine", "agree", "--replay", str(CORPUS), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert len(rows) == sum(len(p["pairs"]) for p in corpus())
    for gen in (1, 4, 9):  # the engine replays as recorded: the corpus's own figures, counted apart
        recorded = [ag.Compared.from_json(r).agrees for p in corpus() for r in p["pairs"]
                    if p["format"] == f"gen{gen}randombattle"]
        assert f"gen{gen}randombattle: {sum(recorded)}/{len(recorded)} joint choices agree" in printed
    # a corpus that is not there: one line, no traceback
    assert main(["engine", "agree", "--replay", str(tmp_path / "none.json")]) == 2
    assert "no such corpus file" in capsys.readouterr().err
