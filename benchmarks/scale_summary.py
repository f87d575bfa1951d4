#!/usr/bin/env python
"""Steady-state throughput of one training run from its metrics.csv (updates after 20 s)."""

import csv
import sys


def main(path: str, label: str, skip_s: float = 20.0) -> None:
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if float(r["time_s"]) >= skip_s]
    if len(rows) < 2:
        print(f"shards={label}: too few updates after {skip_s:.0f}s")
        return
    first, last = rows[0], rows[-1]
    dt = float(last["time_s"]) - float(first["time_s"])
    sides = (float(last["battles"]) - float(first["battles"])) / dt
    dec = (float(last["decisions"]) - float(first["decisions"])) / dt

    def mean(k):
        return sum(float(r[k]) for r in rows) / len(rows)
    print(f"shards={label}: steady {dt:.0f}s: {sides:.2f} trained battle sides/s ({sides / 2:.2f} battles/s "
          f"self-play), {dec:.0f} decisions/s, mean batch {mean('mean_batch_size'):.1f}, "
          f"policy lag {mean('policy_lag'):.2f}, learner samples/s {mean('samples_per_s'):.0f}, "
          f"updates {len(rows)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
