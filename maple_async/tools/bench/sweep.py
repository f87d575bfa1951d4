"""``bench --sweep``: the settings it steps through, every combination of them."""

from __future__ import annotations

import itertools


def parse_sweep(spec: str) -> list[dict]:
    """``"concurrency=8,32 max_wait_ms=0,2"`` -> every combination as override dicts."""
    from ...config import ConfigError
    aliases = {"concurrency": "runner.concurrency", "max_wait_ms": "batcher.max_wait_ms",
               "wait_per_side_ms": "batcher.wait_per_side_ms",
               "max_batch_size": "batcher.max_batch_size", "network": "network.kind",
               "quiet_gaps": "batcher.quiet_gaps", "simulators": "server.simulators",
               "transport": "server.transport"}
    axes = []
    for part in spec.split():
        name, _, values = part.partition("=")
        if not values:
            raise ConfigError(f"--sweep: expected name=v1,v2,... got {part!r}")
        key = aliases.get(name, name)
        vals = [v for v in values.split(",") if v]
        axes.append([(key, v) for v in vals])
    return [dict(combo) for combo in itertools.product(*axes)]
