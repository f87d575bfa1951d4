"""How closely poke-engine plays a turn as Showdown does, on positions from real battles.

A position is one searched decision of a real battle, as the search recorded it
(``search.record``): the belief's sampled state, which ``leafhub.js`` builds again exactly. For
each position, up to ``pairs`` joint choices (ours, theirs) are drawn among both sides' legal
choices; each is played by Showdown from the built state ``seeds`` times, and given to the
engine's ``generate_instructions`` on the translated state (its outcomes with their exact
probabilities). Per joint choice and side, the Pokémon active at the turn's start is compared:

* its expected HP change, as a fraction of its max HP (Showdown: the mean over the seeds);
* its chance to faint in the turn.

A pair agrees when both actives' expected HP changes are within ``HP_TOLERANCE`` and their KO
chances within ``KO_TOLERANCE``. The rest are listed by mechanic: each disagreement's features
(the moves used, the actives' items, abilities and statuses, the weather) are counted against
how often each feature occurs, so a mechanic the engine models differently stands out.
"""

from __future__ import annotations

import collections
import gzip
import json
import logging
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional

log = logging.getLogger("maple_async.search.engine")

HP_TOLERANCE = 0.03
KO_TOLERANCE = 0.05


@dataclass
class Outcome:
    """One side's active over a turn: expected HP change (of max HP) and chance to faint."""
    species: str
    hp: float
    ko: float


@dataclass
class Compared:
    """One joint choice of one position: Showdown's outcome and the engine's, per side."""
    format: str
    position: int
    ours: str
    theirs: str
    showdown: list  # [Outcome for side one (us), Outcome for side two]
    engine: list
    features: list = field(default_factory=list)
    # Showdown against itself: its seeds' two halves agree within twice the tolerances (each
    # half's mean strays twice as far as the whole's, so this is how often an engine exactly
    # Showdown's would agree with the whole: the measurement's own floor). None: not measured.
    halves_agree: Optional[bool] = None

    @property
    def agrees(self) -> bool:
        return within(self.showdown, self.engine)

    def to_json(self) -> dict:
        d = asdict(self)
        d["agrees"] = self.agrees
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Compared":
        d = dict(d)
        d.pop("agrees", None)
        for k in ("showdown", "engine"):
            d[k] = [Outcome(**o) for o in d[k]]
        return cls(**d)


def within(a: list, b: list, scale: float = 1.0) -> bool:
    """Two sides' outcomes agree: HP change and KO chance within the tolerances (times ``scale``)."""
    return all(abs(x.hp - y.hp) <= scale * HP_TOLERANCE and abs(x.ko - y.ko) <= scale * KO_TOLERANCE
               for x, y in zip(a, b))


def active_of(snap_side: dict) -> dict:
    return snap_side["pokemon"][snap_side["active"]]


def showdown_outcome(before: dict, afters: list[dict]) -> Outcome:
    """``before``: the active's snapshot at the start; ``afters``: each seed's brief of its side
    (name -> [hp, maxhp, fainted]: a forme change keeps its key)."""
    sp = before["species"]
    key = before["name"]
    hps, kos = [], []
    for after in afters:
        hp, maxhp, fainted = after[key]
        hps.append((hp - before["hp"]) / before["maxhp"])
        kos.append(1.0 if fainted and not before["fainted"] else 0.0)
    n = max(len(hps), 1)
    return Outcome(sp, sum(hps) / n, sum(kos) / n)


def engine_outcome(before: dict, index: int, side_key: str, outcomes: list) -> Outcome:
    """The engine's outcomes of one joint choice, (percentage, summary) each, for the Pokémon at
    ``index`` of its side (the engine keeps a side's Pokémon in place; a forme change renames it)."""
    sp = before["species"]
    total = sum(p for p, _ in outcomes) or 1.0
    hp = ko = 0.0
    for p, summary in outcomes:
        mon = summary[side_key]["pokemon"][index]
        w = p / total
        hp += w * (mon["hp"] - before["hp"]) / before["maxhp"]
        if mon["hp"] <= 0 < before["hp"]:
            ko += w
    return Outcome(sp, hp, ko)


def engine_outcomes(snap: dict, us: int, outcomes: list) -> list[Outcome]:
    """:func:`engine_outcome` of both actives of a snapshot, ours (side one) first."""
    return [engine_outcome(active_of(snap["sides"][side_i]), snap["sides"][side_i]["active"], key, outcomes)
            for side_i, key in ((us, "side_one"), (1 - us, "side_two"))]


def features(snap: dict, us: int, ours_move: str, theirs_move: str) -> list[str]:
    """What a joint choice involves, for the breakdown by mechanic."""
    out = [f"gen{snap['gen']}"]
    for label, choice, side in (("ours", ours_move, us), ("theirs", theirs_move, 1 - us)):
        mon = active_of(snap["sides"][side])
        if choice.startswith("move"):
            parts = choice.split()
            i = int(parts[1]) - 1
            out.append(f"move:{mon['moves'][i]['id']}")
            if len(parts) > 2:
                out.append(f"gimmick:{parts[2]}")
        else:
            out.append("switch")
        if mon.get("item"):
            out.append(f"item:{mon['item']}")
        if mon.get("ability"):
            out.append(f"ability:{mon['ability']}")
        if mon.get("status"):
            out.append(f"status:{mon['status']}")
        for v in mon.get("volatiles") or {}:
            out.append(f"volatile:{v}")
    fld = snap.get("field") or {}
    if fld.get("weather"):
        out.append(f"weather:{fld['weather']}")
    if fld.get("terrain"):
        out.append(f"terrain:{fld['terrain']}")
    return out


def draw_pairs(ours: list[str], theirs: list[str], n: int, rng: random.Random) -> list[tuple[str, str]]:
    pairs = [(a, b) for a in ours for b in theirs]
    rng.shuffle(pairs)
    return pairs[:n]


def read_positions(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_corpus(path: Path) -> list[dict]:
    """A corpus ``engine agree --corpus`` wrote (JSON, or gzipped JSON)."""
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        return json.load(f)


async def replay(corpus: list[dict], workers: int = 1) -> list[tuple[dict, Compared, list[Outcome]]]:
    """Each joint choice a corpus recorded, with the engine's outcome of it now ([ours, theirs]):
    the translation and the engine run again, Showdown does not (its outcomes are the recorded
    ones, from the same built states and seeds)."""
    from ..belief import Refusal
    from ..engines import generations
    from .pool import EnginePool
    from .translate import translate
    out = []
    pools: dict = {}
    try:
        for pos in corpus:
            gen = generations([pos["format"]])[0]
            if gen not in pools:
                pools[gen] = await EnginePool(gen, workers).start()
            snap = pos["snapshot"]
            try:
                t = translate(snap, pos["us"])
            except Refusal as r:  # the translation now refuses what it took when recorded
                log.warning("a %s position is refused now (%s): its pairs are left out", pos["format"], r.reason)
                continue
            us = 0 if snap["sides"][0]["id"] == pos["us"] else 1
            rows = [Compared.from_json(r) for r in pos["pairs"] if r["ours"] in t.to_engine]
            pairs = [(t.to_engine[r.ours], t.their_to_engine.get(r.theirs, "none")) for r in rows]
            if not pairs:
                continue
            reply = await pools[gen].request({"op": "instructions", "state": t.spec, "pairs": pairs}, 5.0)
            for r, outcomes in zip(rows, reply["outcomes"]):
                out.append((pos, r, engine_outcomes(snap, us, outcomes)))
    finally:
        for pool in pools.values():
            await pool.close()
    return out


def breakdown(rows: Iterable[Compared], least: int = 5) -> list[tuple[str, int, int]]:
    """Per feature: (feature, pairs with it, disagreeing pairs with it), the most disagreeing
    first, for features seen at least ``least`` times."""
    seen: collections.Counter = collections.Counter()
    bad: collections.Counter = collections.Counter()
    for r in rows:
        for f in set(r.features):
            seen[f] += 1
            if not r.agrees:
                bad[f] += 1
    out = [(f, n, bad[f]) for f, n in seen.items() if n >= least and bad[f]]
    return sorted(out, key=lambda x: (-x[2] / x[1], -x[2]))


def summary_lines(rows: list[Compared]) -> list[str]:
    by_format: dict = collections.defaultdict(list)
    for r in rows:
        by_format[r.format].append(r)
    lines = []
    for fmt, rs in sorted(by_format.items()):
        ok = sum(r.agrees for r in rs)
        line = (f"{fmt}: {ok}/{len(rs)} joint choices agree ({ok / max(len(rs), 1):.1%}) "
                f"over {len({r.position for r in rs})} positions")
        halves = [r.halves_agree for r in rs if r.halves_agree is not None]
        if halves:
            line += (f"; Showdown against itself at these seeds (its halves): {sum(halves) / len(halves):.1%}, "
                     f"the most an exact engine would show")
        lines.append(line)
    return lines


async def compare_position(hub, pool, pos: dict, index: int, pairs: int, seeds: int, rng: random.Random,
                           translate_fn) -> tuple[Optional[dict], list[Compared]]:
    """Every drawn joint choice of one recorded position, played both ways; also the built
    state's snapshot (what the engine was given)."""
    decision = f"agree:{index}"
    built = await hub.build(decision, pos["format"], [pos["state"]], us=pos["us"], describe=True)
    try:
        b = built[0]
        snap = b.snapshot
        t = translate_fn(snap, pos["us"])
        us = 0 if snap["sides"][0]["id"] == pos["us"] else 1
        chosen = [(a, c) for a, c in draw_pairs(b.ours, b.theirs, pairs, rng)
                  if a in t.to_engine and (c in t.their_to_engine or c == "wait")]
        if not chosen:
            return snap, []
        specs = [(0, a, c, [rng.randrange(1 << 16) for _ in range(4)]) for a, c in chosen for _ in range(seeds)]
        leaves = await hub.leaves(decision, specs, brief=True)
        engine_pairs = [(t.to_engine[a], t.their_to_engine.get(c, "none")) for a, c in chosen]
        reply = await pool.request({"op": "instructions", "state": t.spec, "pairs": engine_pairs}, budget_s=5.0)
    finally:
        await hub.drop(decision)
    out = []
    for j, (a, c) in enumerate(chosen):
        got = [leaf for leaf in leaves[j * seeds:(j + 1) * seeds] if leaf.error is None and leaf.brief]
        if len(got) < seeds // 2:
            continue  # Showdown refused the pair (a choice the built state does not allow)
        sd, halves = [], ([], [])
        for side_i in (us, 1 - us):
            before = active_of(snap["sides"][side_i])
            sd.append(showdown_outcome(before, [g.brief[side_i] for g in got]))
            for h in (0, 1):
                halves[h].append(showdown_outcome(before, [g.brief[side_i] for g in got[h::2]]))
        en = engine_outcomes(snap, us, reply["outcomes"][j])
        out.append(Compared(pos["format"], index, a, c, sd, en, features(snap, us, a, c),
                            halves_agree=within(*halves, scale=2.0)))
    return snap, out


async def compare(positions: list[dict], pairs: int, seeds: int, seed: int = 0, workers: int = 1,
                  progress=None) -> tuple[list[Compared], list[dict], collections.Counter]:
    """Every position compared: the rows, the corpus (each position's snapshot, side and joint
    choices with Showdown's outcomes: what the tests replay against the engine alone) and the
    positions the translation refused, by reason."""
    from ..belief import Refusal
    from ..engines import generations
    from ..leaves import LeafHub
    from .pool import EngineError, EnginePool
    from .translate import translate
    rng = random.Random(seed)
    rows: list[Compared] = []
    corpus: list[dict] = []
    refused: collections.Counter = collections.Counter()
    pools: dict = {}
    async with LeafHub() as hub:
        try:
            for i, pos in enumerate(positions):
                gen = generations([pos["format"]])[0]
                if gen not in pools:
                    pools[gen] = await EnginePool(gen, workers).start()
                try:
                    snap, got = await compare_position(hub, pools[gen], pos, i, pairs, seeds, rng, translate)
                except Refusal as r:
                    refused[r.reason] += 1
                    continue
                except EngineError as e:  # the pool restarts its worker; the position is lost
                    refused[f"engine {type(e).__name__.removeprefix('Engine').lower()}"] += 1
                    log.warning("position %d: %s", i, e)
                    continue
                rows += got
                if got:
                    corpus.append({"format": pos["format"], "us": pos["us"], "snapshot": snap,
                                   "pairs": [r.to_json() for r in got]})
                if progress is not None:
                    progress(i + 1, len(positions), rows)
        finally:
            for pool in pools.values():
                await pool.close()
    return rows, corpus, refused
