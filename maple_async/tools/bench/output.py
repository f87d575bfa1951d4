"""What the bench prints and writes: a run's report, the sweep's table, the machine-scale
report, ``bench --env``'s table, the JSON, and the problems a summary shows."""

from __future__ import annotations

import json
import math
import sys


def progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def report(s: dict, label: str = "") -> str:
    lines = [
        f"== maple-async bench {label}".rstrip(),
        f"ceiling (RandomPlayer vs RandomPlayer): {s['ceiling_battles_per_s']:.2f} battles/s, "
        f"{s['ceiling_decisions_per_s']:.0f} decisions/s",
        f"maple-async self-play:                  {s['runner_battles_per_s']:.2f} battles/s, "
        f"{s['decisions_per_s']:.0f} decisions/s",
        f"decisions per battle:                   {s.get('decisions_per_battle', math.nan):.1f} "
        f"(ceiling: {s.get('ceiling_decisions_per_battle', math.nan):.1f})",
        f"ratio to ceiling:                       {s['ratio']:.3f} (battles), "
        f"{s['decisions_ratio']:.3f} (decisions)",
        f"inference batch size:                   mean {s['mean_batch_size']:.1f}, "
        f"p50 {s['p50_batch_size']:.0f}, p95 {s['p95_batch_size']:.0f} "
        f"(battles in flight {s['battles_in_flight']:.0f}: {100 * s.get('batch_share_of_in_flight', float('nan')):.0f}%; "
        f"max wait {s.get('mean_wait_limit_ms', float('nan')):.1f} ms)",
        f"decision latency (request -> order):    p50 {s['p50_latency_ms']:.1f} ms, "
        f"p99 {s['p99_latency_ms']:.1f} ms",
        f"CPU per decision:                       encode {s['encode_us_per_decision']:.0f} us, "
        f"batch+forward {s['forward_us_per_decision']:.0f} us, "
        f"bookkeeping {s['bookkeeping_us_per_decision']:.0f} us "
        f"(encode+bookkeeping {s['cpu_us_per_decision']:.0f} us)",
        f"whole process CPU per decision:         {s['process_cpu_us_per_decision']:.0f} us "
        f"(ceiling: {s['ceiling_process_cpu_us_per_decision']:.0f} us, poke-env parsing included)",
    ]
    srv, srv_c = s.get("server_cpu_us_per_decision", math.nan), s.get("ceiling_server_cpu_us_per_decision", math.nan)
    if math.isfinite(srv) and math.isfinite(srv_c):
        lines.append(f"Showdown CPU per decision:              {srv:.0f} us (ceiling: {srv_c:.0f} us)")
        lines.append(f"machine CPU limit:                      {s['cpu_limit_decisions_per_s']:.0f} decisions/s "
                     f"({s['cores']} cores at Showdown's + this process's CPU per decision); "
                     f"maple-async at {s['decisions_share_of_cpu_limit']:.3f} of it")
    if "round_ratios" in s:
        lines.append(f"rounds (ceiling and maple-async interleaved): {len(s['round_ratios'])}, ratio per round "
                     + " ".join(f"{r:.3f}" for r in s["round_ratios"]))
        if round_ci_text(s):
            lines.append(f"ratio per round, mean and 95% CI:       {round_ci_text(s, 3)}")
    if "learn_battles_per_s" in s:
        lines.append(f"with learning on:                       {s['learn_battles_per_s']:.2f} battles/s "
                     f"(ratio {s['learn_ratio']:.3f})")
        lsrv = s.get("learn_server_cpu_us_per_decision", math.nan)
        if math.isfinite(lsrv):
            lines.append(f"  CPU per decision while learning:      this process {s['learn_process_cpu_us_per_decision']:.0f} us "
                         f"(learner included), Showdown {lsrv:.0f} us; cores busy {s['learn_cpu_busy_share']:.3f}")
        if s.get("learn_updates"):
            lines.append(f"  updates in the window:                {s['learn_updates']}, "
                         f"{s['learn_held_updates']} holding collection (the learner behind)")
    return "\n".join(lines)


def round_ci_text(s: dict, digits: int = 2) -> str:
    """``"mean (low to high)"`` of a summary's per-round ratios; "" without a finite CI."""
    m, h = s.get("round_ratio_mean", float("nan")), s.get("round_ratio_ci95", float("nan"))
    if not math.isfinite(h):
        return ""
    return f"{m:.{digits}f} ({m - h:.{digits}f} to {m + h:.{digits}f})"


# Rounds whose ratios differ by more than this factor are reported (see problems()).
ROUND_SPREAD_WARN = 1.2


def problems(summary: dict) -> tuple[list[str], list[str]]:
    """(errors, warnings) about a summary's figures: a phase that made no decisions did
    not run (its figures are not a measurement); one with no finished battle measured too
    short a window for battles/s; rounds (``--repeats``) whose ratios disagree show that
    the machine's speed moved during the run."""
    errors, warnings = [], []
    for key, name in (("ceiling_decisions_per_s", "the ceiling (RandomPlayer)"),
                      ("decisions_per_s", "maple-async self-play")):
        if not summary.get(key, 0) > 0:
            errors.append(f"{name} made no decisions in its window: it failed to play "
                          "(see the errors above)")
    for key, name in (("ceiling_battles_per_s", "the ceiling"), ("runner_battles_per_s", "maple-async")):
        if not summary.get(key, 0) > 0 and not errors:
            warnings.append(f"no battle of {name} finished in the window: battles/s needs a "
                            "longer --seconds")
    rounds = [r for r in summary.get("round_ratios", ()) if r > 0]
    if len(rounds) > 1 and max(rounds) > ROUND_SPREAD_WARN * min(rounds):
        warnings.append(f"the rounds disagree (ratio {min(rounds):.3f} to {max(rounds):.3f}): "
                        "the machine's speed changed during the run (other processes, or "
                        "other tenants of a shared VM); the pooled figures average it out "
                        "only over more --repeats or longer --seconds")
    return errors, warnings


def check_finite_positive(summary: dict) -> list[str]:
    keys = ("ceiling_battles_per_s", "runner_battles_per_s", "ratio", "decisions_per_s",
            "mean_batch_size", "cpu_us_per_decision")
    return [k for k in keys if not (isinstance(summary.get(k), (int, float))
                                    and math.isfinite(summary[k]) and summary[k] > 0)]


def sweep_table(rows: list[tuple[dict, dict]]) -> str:
    """One row per combination: the swept settings (every key that was swept), then the
    figures."""
    short = {"runner.concurrency": "concurrency", "batcher.max_wait_ms": "max_wait_ms",
             "batcher.wait_per_side_ms": "wait_per_side_ms", "batcher.quiet_gaps": "quiet_gaps",
             "server.simulators": "simulators"}
    keys = list(dict.fromkeys(k for over, _ in rows for k in over)) or ["runner.concurrency"]
    names = [short.get(k, k) for k in keys]
    ci = any(round_ci_text(s) for _, s in rows)
    learn = any("learn_decisions_per_s" in s for _, s in rows)
    head = " ".join(f"{n:>11}" for n in names) + f" {'ceiling b/s':>11} {'maple b/s':>9} {'ratio':>6} " \
        f"{'dec/s':>6} {'batch':>6} {'wait ms':>7} {'p99 ms':>7} {'enc+book us':>11}" + (f" {'rounds: mean, 95% CI':>24}" if ci else "") \
        + (f" {'learn dec/s':>11} {'held/upd':>8} {'busy':>5}" if learn else "")
    out = [head]
    for over, s in rows:
        line = (" ".join(f"{str(over.get(k, '-')):>{max(11, len(n))}}" for k, n in zip(keys, names))
                + f" {s['ceiling_battles_per_s']:>11.2f} {s['runner_battles_per_s']:>9.2f} {s['ratio']:>6.2f} "
                f"{s['decisions_per_s']:>6.0f} {s['mean_batch_size']:>6.1f} "
                f"{s.get('mean_wait_limit_ms', float('nan')):>7.1f} {s['p99_latency_ms']:>7.1f} "
                f"{s['cpu_us_per_decision']:>11.0f}")
        if ci:
            line += f" {round_ci_text(s) or '-':>24}"
        if learn:
            line += (f" {s.get('learn_decisions_per_s', float('nan')):>11.0f} "
                     f"{str(s.get('learn_held_updates', '-')) + '/' + str(s.get('learn_updates', '-')):>8} "
                     f"{s.get('learn_cpu_busy_share', float('nan')):>5.2f}")
        out.append(line)
    return "\n".join(out)


def _strict(x):
    """NaN and infinities as null: strict JSON readers refuse them."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_strict(v) for v in x]
    return x


def to_json(summary: dict) -> str:
    return json.dumps(_strict(summary), indent=2, sort_keys=True, allow_nan=False)


def shards_report(s: dict) -> str:
    lines = [report(s, f"(machine: {s['shards']} shards, {s['cores']} cores)")]
    for i, p in enumerate(s["per_shard"]):
        lines.append(f"  shard {i}: ceiling {p['ceiling_battles_per_s']:.2f} b/s, maple-async "
                     f"{p['runner_battles_per_s']:.2f} b/s, ratio {p['ratio']:.3f}, "
                     f"{p['decisions_per_s']:.0f} decisions/s, mean batch {p['mean_batch_size']:.1f}")
    split = s["cpu_split_us_per_decision"]
    lines.append(f"CPU per decision by process kind:       Showdown {split['showdown']:.0f} us, "
                 f"shard processes {split['shard_processes']:.0f} us")
    return "\n".join(lines)


def env_report(result: dict) -> str:
    """The bench's table: every phase's decisions/s and battles/s, the ratios."""
    rows = ["| phase | battles in flight / envs | decisions/s | battles/s | ratio | CPU us/decision (ours / Showdown) |",
            "|---|---|---|---|---|---|"]
    for name, w in result["phases"].items():
        if "error" in w:
            rows.append(f"| {name} | | error: {w['error']} | | | |")
            continue
        size = w.get("battles_in_flight", w.get("envs", ""))
        ratio = ""
        if "ratio_to_ceiling" in w:
            m, h = w["ratio_mean"], w["ratio_ci95"]
            ci = f", rounds {m:.2f} ± {h:.2f}" if h == h else ""
            ratio = f"{w['ratio_to_ceiling']:.2f} of the ceiling{ci}"
            if "x_best_pokeenv" in w:
                ratio += f"; {w['x_best_pokeenv']:.1f}x best poke-env"
        elif "x_best_pokeenv" in w:
            ratio = f"{w['x_best_pokeenv']:.1f}x best poke-env (the learner's side only)"
        elif "ratio_to_async" in w:
            ratio = f"{w['ratio_to_async']:.2f} of the async API (one process)"
        cpu = ""
        if "cpu_us_per_decision" in w:
            cpu = f"{w['cpu_us_per_decision']:.0f} / {w.get('server_cpu_us_per_decision', float('nan')):.0f}"
        rows.append(f"| {name} | {size} | {w['decisions_per_s']:.0f} | {w['battles_per_s']:.2f} | {ratio} | {cpu} |")
    head = (f"bench --env: {result['battle_format']}, {result['repeats']} round(s) of {result['seconds']:.0f} s "
            f"windows after {result['warmup_s']:.0f} s warm-up, one server; best poke-env set-up: "
            f"{result['best_pokeenv']}")
    return head + "\n" + "\n".join(rows)
