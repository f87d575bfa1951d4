"""``maple-async engine agree``: how closely poke-engine plays a turn as Showdown does, on
positions the search recorded from real battles (:mod:`maple_async.search.pokeengine.agreement`).

Prints, per format, the share of joint choices whose actives' expected HP change and KO chance
agree, then the mechanics the disagreements involve (each feature's disagreeing pairs out of
its pairs); ``--json`` keeps every compared pair, ``--corpus`` the positions with Showdown's
outcomes for the tests to replay against the engine alone, and ``--replay CORPUS`` replays one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..errors import UserError
from ..search.pokeengine import agreement as ag


async def run_agree(args) -> int:
    if getattr(args, "replay", None):
        return await run_replay(args)
    if not args.positions:
        raise UserError("engine agree needs position files (write them with --search.record PATH), "
                        "or --replay CORPUS")
    if args.pairs < 1 or args.seeds < 1:
        raise UserError("--pairs and --seeds must be >= 1")
    positions = []
    for path in args.positions:
        if not Path(path).exists():
            raise UserError(f"{path}: no such position file")
        positions += ag.read_positions(Path(path))
    t0 = time.perf_counter()
    last = [t0]

    def progress(done: int, total: int, rows) -> None:
        now = time.perf_counter()
        if now - last[0] >= 10 or done == total:
            last[0] = now
            agree = sum(r.agrees for r in rows)
            left = (now - t0) / done * (total - done)
            print(f"[engine] {done}/{total} positions, {len(rows)} joint choices, {agree / max(len(rows), 1):.1%} "
                  f"agree; {left:.0f}s left", flush=True)

    rows, corpus, refused = await ag.compare(positions, args.pairs, args.seeds, args.seed, progress=progress)
    report(args, rows, refused)
    if args.corpus:
        Path(args.corpus).write_text(json.dumps(corpus))
    return 0


async def run_replay(args) -> int:
    path = Path(args.replay)
    if not path.exists():
        raise UserError(f"{path}: no such corpus file (write one with engine agree --corpus PATH)")
    if args.positions:
        raise UserError("engine agree --replay takes no position files: the corpus holds its positions")
    rows = []
    for _, row, now in await ag.replay(ag.read_corpus(path)):
        row.engine = now
        rows.append(row)
    print(f"[engine] {path}: Showdown's outcomes as recorded, the engine's now")
    report(args, rows, None)
    return 0


def report(args, rows: list, refused) -> None:
    for line in ag.summary_lines(rows):
        print(f"[engine] {line}")
    if refused:
        print("[engine] positions the translation refused: "
              + ", ".join(f"{k} {v}" for k, v in refused.most_common()))
    print(f"[engine] disagreements by mechanic (tolerances: HP {ag.HP_TOLERANCE:.0%} of max HP, "
          f"KO chance {ag.KO_TOLERANCE:.2f}):")
    for feature, n, bad in ag.breakdown(rows)[:25]:
        print(f"[engine]   {feature}: {bad}/{n}")
    if args.json:
        Path(args.json).write_text(json.dumps([r.to_json() for r in rows], indent=1))
