"""``maple-async curve RUN_DIR``: a run's saved checkpoints evaluated against baselines, as a
learning curve by training minutes, battle sides and decisions (``RUN_DIR/curve.csv``, TensorBoard
``curve/<opponent>``, drawn by ``maple-async report``); with ``--search`` each checkpoint searches
its decisions, in rows of their own.

The training metrics only show opponents in the mix; this is how a held-out opponent's
win rate is followed through a run, and how two runs are compared at equal wall time, at
equal battle counts or at equal decisions (steps, as published curves count them). Points already in ``curve.csv`` are not played again."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Optional

from ..errors import UserError
from ..learn import checkpoint as ckpt

FIELDS = ["update", "battle_sides", "decisions", "minutes", "opponent", "label", "battles", "wins", "losses", "ties",
          "win_rate", "ci_low", "ci_high", "checkpoint"]
_NAME = re.compile(r"^(ckpt|weights)_(\d+)\.pt$")


@dataclass
class Point:
    update: int
    path: Path
    sides: int
    seconds: float
    decisions: int = 0

    @property
    def minutes(self) -> float:
        return self.seconds / 60.0


def _metrics_times(run_dir: Path) -> dict[int, tuple[int, float, int]]:
    """update -> (battle sides, training seconds, decisions) from ``metrics.csv``."""
    out: dict[int, tuple[int, float, int]] = {}
    path = run_dir / "metrics.csv"
    if path.exists():
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                try:
                    out[int(row["update"])] = (int(float(row["battles"])), float(row["time_s"]),
                                               int(float(row.get("decisions") or 0)))
                except (KeyError, TypeError, ValueError):
                    continue
    return out


def saved_points(run_dir: Path) -> list[Point]:
    """Every saved checkpoint of the run (weights-only snapshots preferred: smaller to read),
    by update, with its battle sides, training time and decisions trained on."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        raise UserError(f"{run_dir} has no checkpoints/ folder: give a training run folder (train.run_dir)")
    files: dict[int, Path] = {}
    for p in sorted(folder.iterdir()):
        m = _NAME.match(p.name)
        if m and (m.group(1) == "weights" or int(m.group(2)) not in files):
            files[int(m.group(2))] = p
    times = _metrics_times(run_dir)
    points = []
    for upd, path in sorted(files.items()):
        if upd in times:
            sides, seconds, decisions = times[upd]
        else:
            counters = ckpt.load(path)["counters"]
            sides, seconds = int(counters["battles"]), float(counters["seconds"])
            decisions = int(counters.get("decisions", 0))
        points.append(Point(upd, path, sides, seconds, decisions))
    if not points:
        raise UserError(f"{folder} holds no checkpoints (ckpt_*.pt or weights_*.pt)")
    return points


def select(points: list[Point], minutes: Optional[list[float]] = None, n_points: int = 6,
           sides: Optional[list[int]] = None, decisions: Optional[list[int]] = None) -> list[Point]:
    """The checkpoints nearest to each of ``minutes`` of training, or to each of ``sides``
    battle sides (two runs compared at equal battle counts), or to each of ``decisions``
    trained on, or to ``n_points`` times spread evenly over the run (the last always
    included); in update order, no repeats."""
    if decisions:
        at, targets = attrgetter("decisions"), decisions
    elif sides:
        at, targets = attrgetter("sides"), sides
    else:
        end = points[-1].seconds
        at = attrgetter("seconds")
        targets = [m * 60.0 for m in minutes] if minutes else [end * (k + 1) / n_points for k in range(n_points)]
    chosen = {min(points, key=lambda p: (abs(at(p) - t), -p.update)).update for t in targets}
    if not minutes and not sides and not decisions:
        chosen.add(points[-1].update)
    return [p for p in points if p.update in chosen]


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _header(path: Path) -> Optional[list]:
    if not path.exists():
        return None
    with open(path, newline="") as f:
        return next(csv.reader(f), None)


def rewrite(path: Path, rows: list[dict]) -> None:
    """``curve.csv`` with today's columns (a missing one left blank), replaced whole."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, restval="", extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def fill_decisions(path: Path, points: list[Point]) -> None:
    """Rows of an older ``curve.csv`` (no decisions column) gain their checkpoint's decisions."""
    rows = read_rows(path)
    at = {p.update: p.decisions for p in points if p.decisions}
    blank = [r for r in rows if not r.get("decisions") and int(r["update"]) in at]
    for r in blank:
        r["decisions"] = at[int(r["update"])]
    if blank:  # (an older header alone is migrated by append_row)
        rewrite(path, rows)


def append_row(path: Path, row: dict) -> None:
    header = _header(path)
    if header is not None and header != FIELDS:  # an older curve.csv: today's columns first
        rewrite(path, read_rows(path))
    new = not path.exists()
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)


def done(rows: list[dict], update: int, opponent: str, battles: int) -> bool:
    """Whether ``curve.csv`` already has this point with at least ``battles`` battles."""
    return any(int(r["update"]) == update and r["opponent"] == opponent and int(r["battles"]) >= battles
               for r in rows)


def key_of(opponent: str, search: bool, greedy: bool = False) -> str:
    """``curve.csv``'s opponent: the searched and the greedy (argmax) agent's rows apart from the
    sampled ones of the same opponent (``done``, the table, the report)."""
    from ..collect.search_agent import NAME
    tags = [t for t, on in ((NAME, search), ("greedy", greedy)) if on]
    return opponent + "".join(f" [{t}]" for t in tags)


def row_of(point: Point, res, label: str) -> dict:
    lo, hi = res.ci95
    return {"update": point.update, "battle_sides": point.sides, "decisions": point.decisions,
            "minutes": round(point.minutes, 2),
            "opponent": res.opponent, "label": label, "battles": res.battles, "wins": res.wins,
            "losses": res.losses, "ties": res.ties, "win_rate": round(res.win_rate, 4),
            "ci_low": round(lo, 4), "ci_high": round(hi, 4), "checkpoint": point.path.name}


def table(rows: list[dict]) -> list[str]:
    """One line per checkpoint, one column per opponent: win rate (95% CI)."""
    opps = list(dict.fromkeys(r["opponent"] for r in rows))
    labels = {r["opponent"]: r["label"] for r in rows}
    by = {(int(r["update"]), r["opponent"]): r for r in rows}
    ups = sorted({int(r["update"]) for r in rows})
    head = f"{'update':>7} {'minutes':>8} {'sides':>8} {'decisions':>10}  " + "  ".join(
        f"{o + ' (' + labels[o] + ')':<28}" for o in opps)
    out = [head]
    for u in ups:
        first = next(r for (uu, _), r in by.items() if uu == u)
        cells = []
        for o in opps:
            r = by.get((u, o))
            cells.append(f"{float(r['win_rate']):.3f} ({float(r['ci_low']):.3f}-{float(r['ci_high']):.3f}) "
                         f"n={r['battles']}" if r else "-")
        dec = first.get("decisions") or ""
        dec = f"{int(dec) / 1e6:.2f}M" if dec else "-"
        out.append(f"{u:>7} {float(first['minutes']):>8.1f} {int(first['battle_sides']):>8} {dec:>10}  "
                   + "  ".join(f"{c:<28}" for c in cells))
    return out


async def run_curve(cfg, run_dir: Path, points: list[Point], opponents: list[str], n_battles: int,
                    greedy: bool = False, search=None) -> int:
    """Play each point against each opponent not yet in ``curve.csv``, appending a row as
    each finishes, then print the table of the chosen points. ``search``: a
    :class:`~maple_async.config.SearchConfig`: each checkpoint searches its decisions (its rows
    are ``<opponent> [agent+search]``, TensorBoard ``curve_search/<opponent>``)."""
    from ..collect.agent import Agent
    from ..learn.metrics import MetricsLog
    from ..run.process import setup_process
    from ..showdown import showdown_for
    from .evaluate import evaluate_config, policy_from_checkpoint, searching, training_label
    from .progress import Progress

    device = setup_process(cfg)
    out = run_dir / "curve.csv"
    rows = read_rows(out)
    keys = {o: key_of(o, search is not None, greedy) for o in opponents}
    tag = "curve" + ("_search" if search is not None else "") + ("_greedy" if greedy else "")
    todo = [(p, o) for p in points for o in opponents if not done(rows, p.update, keys[o], n_battles)]
    print(f"[curve] {len(points)} checkpoints x {len(opponents)} opponents, {n_battles} battles each: "
          f"{len(todo)} to play ({len(points) * len(opponents) - len(todo)} already in {out})", flush=True)
    tb = MetricsLog(run_dir, cfg.train.tensorboard, quiet=True) if todo else None
    loaded: dict = {}  # the checkpoint being played, read once for all its opponents
    progress = Progress("curve", len(todo) * n_battles)
    try:
        async with showdown_for(cfg.server, runner=cfg.runner) as server, progress.shown():
            for p, o in todo:
                if p.update not in loaded:
                    loaded = {p.update: policy_from_checkpoint(str(p.path), device, greedy=greedy,
                                                               battle_format=cfg.runner.battle_format)}
                policy, ckpt_cfg = loaded[p.update]
                make_agent = searching(search, ckpt_cfg) if search is not None else Agent
                res = await evaluate_config(cfg, policy, server.url, o, n_battles, cfg.runner.concurrency,
                                            label=keys[o], make_agent=make_agent, progress=progress)
                label = training_label(o, ckpt_cfg.train)
                rows.append(row_of(p, res, label))
                append_row(out, rows[-1])
                if tb is not None:
                    tb.scalars(p.update, {f"{tag}/{o}": res.win_rate})
                print(f"[curve] update {p.update} ({p.minutes:.1f} min, {p.sides} sides, "
                      f"{p.decisions / 1e6:.2f}M decisions) vs {keys[o]} ({label}): "
                      f"{res.summary()}", flush=True)
                if res.note:
                    print(f"[curve] update {p.update} vs {keys[o]}: {res.note}", flush=True)
    finally:
        if tb is not None:
            tb.close()
    chosen = {p.update for p in points}
    print("\n".join("[curve] " + line for line in table(
        [r for r in rows if int(r["update"]) in chosen and r["opponent"] in keys.values()])))
    print(f"[curve] {out}; drawn by maple-async report {run_dir}")
    return 0
