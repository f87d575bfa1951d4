"""``maple-async report RUN_DIR``: a run's learning curves and its evaluation table in one
picture (PNG) or page (HTML), drawn with matplotlib from the run folder alone (no
TensorBoard server)."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import UserError
from ..learn.metrics import wilson_interval

MIN_GAMES_PER_POINT = 100  # win-rate points pool updates until their interval is readable

# Published learning curves, drawn beside a run's curve points of the same format and
# opponent. Quoted by third parties from Wang 2024 (MIT thesis, PPO self-play, gen 4 random
# battles, poke-env's SimpleHeuristicsPlayer never trained against); not re-measured here.
PUBLISHED = {("gen4randombattle", "heuristics"): (
    "Wang 2024 (quoted)", [(6e6, 0.575), (40e6, 0.80), (150e6, 0.786)])}


def read_metrics(run_dir: Path) -> dict[str, np.ndarray]:
    """``metrics.csv`` as columns of floats (NaN where a row has no value)."""
    path = run_dir / "metrics.csv"
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a folder (give a training run folder, e.g. runs/default)")
    if not path.exists():
        raise UserError(f"{run_dir} has no metrics.csv: not a training run folder, or no update has "
                        f"finished yet")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        raise UserError(f"{path} has no rows yet: no update has finished")
    header, body = rows[0], rows[1:]

    def num(x: str) -> float:
        try:
            return float(x)
        except ValueError:
            return math.nan

    return {k: np.array([num(r[i]) if i < len(r) else math.nan for r in body]) for i, k in enumerate(header)}


def pooled_win_rates(sides: np.ndarray, rate: np.ndarray, games: np.ndarray,
                     min_games: int = MIN_GAMES_PER_POINT) -> tuple[np.ndarray, ...]:
    """Consecutive updates pooled until each point has ``min_games``: (x, win rate, low, high)."""
    xs, ps, lo, hi = [], [], [], []
    wins = n = 0.0
    for x, r, g in zip(sides, rate, games):
        if not (np.isfinite(r) and np.isfinite(g)) or g <= 0:
            continue
        wins += r * g
        n += g
        if n >= min_games:
            a, b = wilson_interval(wins, int(n))
            xs.append(x), ps.append(wins / n), lo.append(a), hi.append(b)
            wins = n = 0.0
    return tuple(np.array(v) for v in (xs, ps, lo, hi))


def smooth(y: np.ndarray, frac: float = 0.04) -> np.ndarray:
    """A centred moving average over ~4% of the run (NaNs skipped)."""
    w = max(1, int(len(y) * frac)) | 1
    if w == 1:
        return y
    ok = np.isfinite(y)
    kernel = np.ones(w)
    num = np.convolve(np.where(ok, y, 0.0), kernel, mode="same")
    den = np.convolve(ok.astype(float), kernel, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def _read_curve(run_dir: Path) -> list[dict]:
    """``curve.csv`` rows (``maple-async curve``), or none."""
    from .curve import read_rows
    try:
        return [r for r in read_rows(run_dir / "curve.csv") if r.get("win_rate") not in (None, "")]
    except (OSError, csv.Error):
        return []


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _config(cfg_text: str) -> dict:
    import yaml
    try:
        return yaml.safe_load(cfg_text) or {}
    except yaml.YAMLError:
        return {}


def _config_text(run_dir: Path) -> str:
    """The run's config.yaml, or "" when it has none."""
    path = run_dir / "config.yaml"
    return path.read_text() if path.exists() else ""


def _battle_format(cfg_text: str) -> str:
    return _config(cfg_text).get("runner", {}).get("battle_format", "")


def by_decisions(ax, curve: list[dict], battle_format: str, title: str = "") -> bool:
    """The curve points that know their decisions (steps) on ``ax``, log x, with the published
    points of the same format and opponent marked as quoted; whether anything was drawn."""
    drawn = False
    for opp in dict.fromkeys(r["opponent"] for r in curve):
        pts = sorted((int(r["decisions"]), float(r["win_rate"]), float(r["ci_low"]), float(r["ci_high"]),
                      r["label"]) for r in curve if r["opponent"] == opp and int(r.get("decisions") or 0) > 0)
        if not pts:
            continue
        x, y, lo, hi, labels = zip(*pts)
        line = ax.errorbar(x, y, yerr=[np.subtract(y, lo), np.subtract(hi, y)], fmt="o-", capsize=3, ms=5,
                           label=f"this run vs {opp} ({labels[-1]}, 95% CI)")
        for xi, yi in zip(x, y):
            ax.annotate(f"{yi:.3f}", (xi, yi), textcoords="offset points", xytext=(4, -12), fontsize=8)
        published = PUBLISHED.get((battle_format, opp))
        if published:
            name, ppts = published
            px, py = zip(*ppts)
            ax.plot(px, py, "x:", ms=9, mew=2, color=line[0].get_color(), alpha=0.6,
                    label=f"{name} vs {opp}")
        drawn = True
    if drawn:
        ax.set_xscale("log")
        ax.set(title=title or f"{battle_format}: win rate by decisions trained on (maple-async curve)",
               xlabel="decisions (steps) trained on", ylabel="win rate", ylim=(0, 1))
        ax.axhline(0.5, color="grey", lw=0.5)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=9, loc="lower right")
    return drawn


def _title(run_dir: Path, m: dict, cfg_text: str) -> str:
    cfg = _config(cfg_text)
    runner, net, train = cfg.get("runner", {}), cfg.get("network", {}), cfg.get("train", {})
    minutes = float(np.nanmax(m["time_s"])) / 60 if "time_s" in m else math.nan
    return (f"{run_dir.name}: {runner.get('battle_format', '?')}, {net.get('kind', '?')} "
            f"{net.get('hidden_size', '')}, opponents {train.get('opponents', '?')}, seed {runner.get('seed')}\n"
            f"{int(np.nanmax(m['update']))} updates, {int(np.nanmax(m['battles'])):,} battle sides, "
            f"{minutes:.1f} min of training")


def draw(run_dir: Path):
    """The report figure of ``run_dir``, and what it read beside ``metrics.csv`` (eval.json,
    config.yaml, curve.csv rows) for the HTML page."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = read_metrics(run_dir)
    cfg_text = _config_text(run_dir)
    ev = _read_json(run_dir / "eval.json")
    x = m.get("battles", np.arange(len(next(iter(m.values())))))
    curve = _read_curve(run_dir)
    steps = any(int(r.get("decisions") or 0) > 0 for r in curve)  # a fourth row: the curve by decisions
    fig, axes = plt.subplots(4 if steps else 3, 3, figsize=(17, 17 if steps else 12.5))
    if steps:
        for a in axes[3]:
            a.remove()
        by_decisions(fig.add_subplot(4, 1, 4), curve, _battle_format(cfg_text))
    fig.suptitle(_title(run_dir, m, cfg_text), fontsize=12)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    ax = axes[0, 0]
    opps = sorted(k.split("/", 1)[1] for k in m if k.startswith("win_rate/"))
    for i, opp in enumerate(opps):
        games = m.get(f"games/{opp}")
        c = colors[i % len(colors)]
        if games is not None:
            px, p, lo, hi = pooled_win_rates(x, m[f"win_rate/{opp}"], games)
            ax.plot(px, p, color=c, label=opp)
            ax.fill_between(px, lo, hi, color=c, alpha=0.2)
        else:  # older runs: no counts, no band
            ax.plot(x, smooth(m[f"win_rate/{opp}"]), color=c, label=opp)
    if ev:  # the final evaluation, at the run's end: diamonds with their intervals
        for j, r in enumerate(ev.get("results", [])):
            lo_, hi_ = r["ci95"]
            ax.errorbar([x[-1] * (1.0 + 0.015 * j)], [r["win_rate"]], yerr=[[r["win_rate"] - lo_], [hi_ - r["win_rate"]]],
                        fmt="D", color="black" if r["label"] == "held out" else colors[(opps.index(r["opponent"])
                        if r["opponent"] in opps else j) % len(colors)], capsize=3, ms=5,
                        label=f"eval vs {r['opponent']} ({r['label']})")
    for j, opp in enumerate(dict.fromkeys(r["opponent"] for r in curve)):  # maple-async curve's points
        pts = sorted((float(r["battle_sides"]), float(r["win_rate"]), float(r["ci_low"]), float(r["ci_high"]),
                      r["label"]) for r in curve if r["opponent"] == opp)
        cx, cy, clo, chi, labels = zip(*pts)
        color = "black" if labels[-1] == "held out" else colors[(opps.index(opp) if opp in opps else j) % len(colors)]
        ax.errorbar(cx, cy, yerr=[np.subtract(cy, clo), np.subtract(chi, cy)], fmt="s--", color=color, capsize=3,
                    ms=4, lw=1, label=f"curve vs {opp} ({labels[-1]})")
    ax.set(title=f"training win rate per opponent (95% CI, >= {MIN_GAMES_PER_POINT} battles a point)",
           xlabel="battle sides", ylabel="win rate", ylim=(0, 1))
    ax.axhline(0.5, color="grey", lw=0.5)
    ax.legend(fontsize=8)

    def curves(ax, keys, title, ylabel="", log=False):
        drawn = False
        for k in keys:
            if k in m and np.isfinite(m[k]).any():
                ax.plot(x, m[k], alpha=0.25, lw=0.8)
                ax.plot(x, smooth(m[k]), color=ax.lines[-1].get_color(), label=k)
                drawn = True
        ax.set(title=title, xlabel="battle sides", ylabel=ylabel)
        if log and drawn:
            ax.set_yscale("symlog", linthresh=1e-3)
        if drawn:
            ax.legend(fontsize=8)

    curves(axes[0, 1], [k for k in m if k.startswith("reward/")], "reward per battle side, by component")
    curves(axes[0, 2], ["pg_loss", "v_loss"], "losses")
    curves(axes[1, 0], ["entropy"], "policy entropy (nats)")
    curves(axes[1, 1], ["approx_kl", "clipfrac"], "approx KL and clip fraction", log=True)
    curves(axes[1, 2], ["explained_variance"], "value explained variance")
    curves(axes[2, 0], ["battles_per_s", "mean_batch_size"], "throughput: sides/s, mean inference batch")
    ax2 = axes[2, 0].twinx()
    if "decisions_per_s" in m:
        ax2.plot(x, smooth(m["decisions_per_s"]), color="black", lw=1, ls="--", label="decisions/s")
        ax2.set_ylabel("decisions/s")
        ax2.legend(fontsize=8, loc="lower right")
    curves(axes[2, 1], ["lr"], "learning rate (dashed: policy lag, updates)")
    if "policy_lag" in m:
        ax3 = axes[2, 1].twinx()
        ax3.plot(x, smooth(m["policy_lag"]), color="black", lw=1, ls="--")
        ax3.set_ylabel("policy lag")

    ax = axes[2, 2]
    ax.axis("off")
    ax.set_title("evaluation after training (eval.json)" if ev else "no evaluation (train.eval_battles: 0)")
    if ev:
        rows = [[r["opponent"], r["label"], f"{r['win_rate']:.3f}", f"{r['ci95'][0]:.3f}-{r['ci95'][1]:.3f}",
                 str(r["battles"])] for r in ev.get("results", [])]
        table = ax.table(cellText=rows, colLabels=["opponent", "in training?", "win rate", "95% CI", "battles"],
                         loc="upper center", cellLoc="center")
        table.scale(1, 1.6)
        ratings = ev.get("ratings", {})
        text = "ratings (Bradley-Terry, Elo scale):\n" + "\n".join(
            f"  {p}: {v:.0f}" for p, v in sorted(ratings.items(), key=lambda kv: -kv[1]))
        ax.text(0.02, 0.02, text, transform=ax.transAxes, fontsize=9, va="bottom", family="monospace")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig, ev, cfg_text, curve


def draw_by_decisions(run_dir: Path):
    """One panel: the run's curve points by decisions, beside the published ones."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = _read_curve(run_dir)
    cfg_text = _config_text(run_dir)
    fmt, seed = _battle_format(cfg_text), _config(cfg_text).get("runner", {}).get("seed")
    fig, ax = plt.subplots(figsize=(9, 5.5))
    if not by_decisions(ax, curve, fmt, f"{run_dir.name} ({fmt}, seed {seed}): "
                                        f"win rate by decisions trained on"):
        plt.close(fig)
        raise UserError(f"{run_dir / 'curve.csv'} has no points with decisions: run maple-async curve "
                        f"{run_dir} --decisions 1e6,2e6,... first")
    fig.tight_layout()
    return fig, None, cfg_text, curve


def write(run_dir, out: Optional[str] = None, decisions_only: bool = False) -> Path:
    """Draw the report of ``run_dir`` into ``out`` (default ``RUN_DIR/report.png``; ``.html``
    embeds the picture, the evaluation table and the config); ``decisions_only``: only the
    curve by decisions beside the published points."""
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    path = Path(out) if out else run_dir / "report.png"
    if path.suffix.lower() not in (".png", ".html"):
        raise UserError(f"--out must end in .png or .html, got {str(path)!r}")
    if decisions_only and not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a folder (give a training run folder, e.g. runs/default)")
    fig, ev, cfg_text, curve = draw_by_decisions(run_dir) if decisions_only else draw(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.suffix.lower() == ".png":
            fig.savefig(path, dpi=90)
        else:
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=90)
            path.write_text(_html(run_dir, base64.b64encode(buf.getvalue()).decode(), ev, cfg_text, curve))
    finally:
        plt.close(fig)
    return path


def _html(run_dir: Path, png_b64: str, ev: Optional[dict], cfg_text: str, curve: list[dict]) -> str:
    rows = ""
    if ev:
        rows = "".join(
            f"<tr><td>{html.escape(r['player'])}</td><td>{html.escape(r['opponent'])}</td>"
            f"<td>{html.escape(r['label'])}</td><td>{r['win_rate']:.3f}</td>"
            f"<td>{r['ci95'][0]:.3f}&ndash;{r['ci95'][1]:.3f}</td><td>{r['battles']}</td></tr>"
            for r in ev.get("results", []))
        rows = ("<h2>Evaluation</h2><table border=1 cellpadding=4><tr><th>player</th><th>opponent</th>"
                "<th>in training?</th><th>win rate</th><th>95% CI</th><th>battles</th></tr>" + rows + "</table>")
    if curve:
        from .curve import table
        rows += ("<h2>Checkpoints against baselines (maple-async curve)</h2><pre>"
                 + html.escape("\n".join(table(curve))) + "</pre>")
    return (f"<!DOCTYPE html><meta charset='utf-8'><title>maple-async report: {html.escape(run_dir.name)}</title>"
            f"<h1>{html.escape(str(run_dir))}</h1><img src='data:image/png;base64,{png_b64}' style='max-width:100%'>"
            f"{rows}<h2>Config</h2><pre>{html.escape(cfg_text)}</pre>\n")
