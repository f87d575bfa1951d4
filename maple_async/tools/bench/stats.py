"""The bench's arithmetic: a window's counts (:class:`Window`), percentiles, ratios, the 95%
confidence interval of a mean, rounds pooled into one window, and the summary figures."""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...collect.match import Rates
from .machine import cpu_limit


def percentile(values, q: float) -> float:
    """``q``-th percentile (0-100) with linear interpolation; NaN for no values."""
    if len(values) == 0:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (beyond: 1.96).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean_ci95(values) -> tuple[float, float]:
    """Mean of ``values`` and the half-width of its 95% confidence interval (Student's t;
    NaN for fewer than two finite values)."""
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=np.float64)
    if len(v) == 0:
        return float("nan"), float("nan")
    if len(v) < 2:
        return float(v.mean()), float("nan")
    t = _T95[len(v) - 2] if len(v) - 1 <= len(_T95) else 1.96
    return float(v.mean()), float(t * v.std(ddof=1) / math.sqrt(len(v)))


@dataclass
class Window(Rates):
    """Counts over one steady-state window."""

    seconds: float = 0.0
    battles: int = 0
    decisions: int = 0
    cpu_s: float = 0.0  # process CPU time (all Python threads)
    batch_sizes: list = field(default_factory=list)
    latencies: list = field(default_factory=list)
    timed: int = 0  # decisions whose encode / bookkeeping CPU was measured (a sample)
    encode_s: float = 0.0
    forward_s: float = 0.0
    bookkeeping_s: float = 0.0
    in_flight: float = 0.0  # mean battles in flight during the window
    batches: int = 0  # inference batches flushed in the window
    wait_limit_s: float = 0.0  # sum over those batches of the batcher's max wait at the flush
    server_cpu_s: float = float("nan")  # CPU time of the managed Showdown's processes (NaN: unknown)
    updates: int = 0  # learning windows: updates, and those that held collection (learner behind)
    held_updates: int = 0

    def us_per_decision(self, seconds: float) -> float:
        return 1e6 * seconds / self.decisions if self.decisions else float("nan")

    def us_per_timed(self, seconds: float) -> float:
        """Per decision, for the times measured on the sampled decisions only."""
        return 1e6 * seconds / self.timed if self.timed else float("nan")

    @classmethod
    def side_by_side(cls, windows: list["Window"]) -> "Window":
        """Windows measured at the same time in several processes, as one machine's: counts
        and CPU summed over the mean window length, samples joined."""
        n = len(windows)
        return cls(
            seconds=sum(w.seconds for w in windows) / n, battles=sum(w.battles for w in windows),
            decisions=sum(w.decisions for w in windows), cpu_s=sum(w.cpu_s for w in windows),
            timed=sum(w.timed for w in windows),
            batch_sizes=[b for w in windows for b in w.batch_sizes],
            latencies=[t for w in windows for t in w.latencies],
            encode_s=sum(w.encode_s for w in windows), forward_s=sum(w.forward_s for w in windows),
            bookkeeping_s=sum(w.bookkeeping_s for w in windows), batches=sum(w.batches for w in windows),
            wait_limit_s=sum(w.wait_limit_s for w in windows),
            server_cpu_s=sum(w.server_cpu_s for w in windows), in_flight=sum(w.in_flight for w in windows))

    def __add__(self, other: "Window") -> "Window":
        """Two windows as one (counts and times summed, samples joined)."""
        total = self.seconds + other.seconds
        return Window(
            seconds=total, battles=self.battles + other.battles,
            decisions=self.decisions + other.decisions, cpu_s=self.cpu_s + other.cpu_s,
            timed=self.timed + other.timed,
            batch_sizes=self.batch_sizes + other.batch_sizes,
            latencies=self.latencies + other.latencies,
            encode_s=self.encode_s + other.encode_s, forward_s=self.forward_s + other.forward_s,
            bookkeeping_s=self.bookkeeping_s + other.bookkeeping_s,
            batches=self.batches + other.batches, wait_limit_s=self.wait_limit_s + other.wait_limit_s,
            server_cpu_s=self.server_cpu_s + other.server_cpu_s,
            in_flight=(self.in_flight * self.seconds + other.in_flight * other.seconds) / total
            if total > 0 else 0.0,
            updates=self.updates + other.updates, held_updates=self.held_updates + other.held_updates)


# -- rounds (`--repeats`): pooled into one long window, and compared round by round ---------

def pooled(windows: list[Window]) -> Window:
    """Rounds of one phase as one window: the machine's drift between phases averages out."""
    return functools.reduce(operator.add, windows)


def pooled_figures(windows: list[dict]) -> dict:
    """Rounds of one phase as one window, for a phase's figures as ``bench --env`` keeps them
    (a dict): counts and seconds summed, rates over the total, CPU weighted by decisions; the
    rounds' own rates under ``"rounds"``. Rounds that failed (``"error"``) are left out."""
    ok = [w for w in windows if "error" not in w]
    if not ok:
        return dict(windows[0])
    out = dict(ok[0])
    for k in ("decisions", "battles", "seconds"):
        out[k] = sum(w[k] for w in ok)
    out["decisions_per_s"] = out["decisions"] / out["seconds"]
    out["battles_per_s"] = out["battles"] / out["seconds"]
    for k in ("cpu_us_per_decision", "server_cpu_us_per_decision"):
        if k in out:
            out[k] = sum(w[k] * w["decisions"] for w in ok) / out["decisions"]
    out["rounds"] = [w["decisions_per_s"] for w in ok]
    return out


def round_ratios(ours, ceilings) -> tuple[list[float], float, float]:
    """Each round's rate as a share of the same round's ceiling; their mean and the half-width
    of its 95% confidence interval."""
    ratios = [ratio(a, b) for a, b in zip(ours, ceilings)]
    return (ratios, *mean_ci95(ratios))


# -- the summary: every figure the report prints and the JSON holds ------------------------

def summarise(ceiling: Window, runner: Window, learn: Optional[Window] = None,
              cores: Optional[int] = None) -> dict:
    from ...server import cores as machine_cores
    cores = cores or machine_cores()
    mean_batch = float(np.mean(runner.batch_sizes)) if runner.batch_sizes else 0.0
    cost = runner.us_per_decision(runner.server_cpu_s) + runner.us_per_decision(runner.cpu_s)
    out = {
        "ceiling_battles_per_s": ceiling.battles_per_s,
        "ceiling_decisions_per_s": ceiling.decisions_per_s,
        "runner_battles_per_s": runner.battles_per_s,
        "ratio": ratio(runner.battles_per_s, ceiling.battles_per_s),
        "decisions_per_s": runner.decisions_per_s,
        "decisions_ratio": ratio(runner.decisions_per_s, ceiling.decisions_per_s),
        # a battle's length sets how Showdown's per-battle work (team generation, rooms) weighs
        "decisions_per_battle": ratio(runner.decisions, runner.battles),
        "ceiling_decisions_per_battle": ratio(ceiling.decisions, ceiling.battles),
        "mean_batch_size": mean_batch,
        "p50_batch_size": percentile(runner.batch_sizes, 50),
        "p95_batch_size": percentile(runner.batch_sizes, 95),
        "battles_in_flight": runner.in_flight,
        # mean batch as a share of the battles in flight (a battle has two sides here)
        "batch_share_of_in_flight": ratio(mean_batch, runner.in_flight),
        # the batcher's max wait after a batch's first request, averaged over batches
        "mean_wait_limit_ms": 1e3 * runner.wait_limit_s / runner.batches if runner.batches else float("nan"),
        "p50_latency_ms": 1e3 * percentile(runner.latencies, 50),
        "p99_latency_ms": 1e3 * percentile(runner.latencies, 99),
        # encode + bookkeeping: the Python work maple-async adds per decision
        "cpu_us_per_decision": runner.us_per_timed(runner.encode_s + runner.bookkeeping_s),
        "encode_us_per_decision": runner.us_per_timed(runner.encode_s),
        "forward_us_per_decision": runner.us_per_decision(runner.forward_s),
        "bookkeeping_us_per_decision": runner.us_per_timed(runner.bookkeeping_s),
        "process_cpu_us_per_decision": runner.us_per_decision(runner.cpu_s),
        "ceiling_process_cpu_us_per_decision": ceiling.us_per_decision(ceiling.cpu_s),
        # the managed Showdown's CPU (node: server and simulators) per decision (NaN: --server)
        "server_cpu_us_per_decision": runner.us_per_decision(runner.server_cpu_s),
        "ceiling_server_cpu_us_per_decision": ceiling.us_per_decision(ceiling.server_cpu_s),
        "window_s": runner.seconds,
        # what the cores allow at maple-async's CPU per decision (Showdown's + this process's),
        # and maple-async's decisions/s as a share of it (NaN without the server's CPU)
        "cores": cores,
        "cpu_limit_decisions_per_s": cpu_limit(cores, cost),
        "decisions_share_of_cpu_limit": ratio(runner.decisions_per_s, cpu_limit(cores, cost)),
    }
    if learn is not None:
        out["learn_battles_per_s"] = learn.battles_per_s
        out["learn_ratio"] = ratio(learn.battles_per_s, ceiling.battles_per_s)
        out["learn_decisions_per_s"] = learn.decisions_per_s
        # what learning costs per decision, and how much of the cores the window kept busy
        out["learn_process_cpu_us_per_decision"] = learn.us_per_decision(learn.cpu_s)
        out["learn_server_cpu_us_per_decision"] = learn.us_per_decision(learn.server_cpu_s)
        out["learn_cpu_busy_share"] = ratio(learn.cpu_s + learn.server_cpu_s, cores * learn.seconds)
        out["learn_updates"], out["learn_held_updates"] = learn.updates, learn.held_updates
    return out
