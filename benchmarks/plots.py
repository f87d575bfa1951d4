"""Draw the pictures of docs/results.md from the CSV files beside this script.

    python benchmarks/plots.py            # writes docs/throughput-concurrency.png

Each CSV says in its header comment the date, code and command that made its rows.
"""

import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"
LABELS = {"cores": "two cores the limit", "throttled": "simulator throttled to half"}


def read_rows(name: str) -> list[dict[str, str]]:
    with open(HERE / name, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def throughput_by_concurrency(out: Path) -> None:
    rows = read_rows("concurrency.csv")
    fig, (ax_rate, ax_lat) = plt.subplots(1, 2, figsize=(10, 4))
    for colour, condition in zip(("tab:blue", "tab:orange"), LABELS):
        sub = [r for r in rows if r["condition"] == condition]
        x = [int(r["concurrency"]) for r in sub]
        ax_rate.plot(x, [float(r["ceiling_battles_s"]) for r in sub], "--", color=colour,
                     label=f"ceiling, {LABELS[condition]}")
        ax_rate.plot(x, [float(r["maple_battles_s"]) for r in sub], "o-", color=colour,
                     label=f"maple-async, {LABELS[condition]}")
        for xi, r in zip(x, sub):
            ax_rate.annotate(f"{float(r['ratio']):.2f}", (xi, float(r["maple_battles_s"])),
                             textcoords="offset points", xytext=(4, -12), fontsize=8)
        ax_lat.plot(x, [float(r["latency_p50_ms"]) for r in sub], "o-", color=colour,
                    label=f"p50, {LABELS[condition]}")
        ax_lat.plot(x, [float(r["latency_p99_ms"]) for r in sub], "s:", color=colour,
                    label=f"p99, {LABELS[condition]}")
    for ax in (ax_rate, ax_lat):
        ax.set_xscale("log", base=2)
        ax.set_xticks([16, 64, 128], ["16", "64", "128"])
        ax.set_xlabel("battles in flight")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_rate.set_ylim(bottom=0)
    ax_rate.set_ylabel("battles/s (labels: ratio to the ceiling)")
    ax_rate.set_title("throughput against the RandomPlayer ceiling")
    ax_lat.set_ylim(bottom=0)
    ax_lat.set_ylabel("decision latency, ms")
    ax_lat.set_title("request to order")
    fig.suptitle("maple-async bench by concurrency, 2-core VM, 2026-11-24 (e0512a4)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


def main() -> int:
    throughput_by_concurrency(DOCS / "throughput-concurrency.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
