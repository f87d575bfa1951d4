"""Long-run bounds (opt-in: MAPLE_SOAK=1 pytest -m soak; MAPLE_SOAK_BATTLES, default 10000)."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.soak,
    # Belt and braces: a `-m` on the command line replaces the default `-m 'not soak'`.
    pytest.mark.skipif(not os.environ.get("MAPLE_SOAK"), reason="opt-in: MAPLE_SOAK=1 pytest -m soak"),
]


@pytest.mark.parametrize("transport", ["simulator", "websocket"])
def test_tables_and_rss_stay_bounded(transport):
    n = int(os.environ.get("MAPLE_SOAK_BATTLES", "10000"))
    every = max(n // 10, 100)
    p = subprocess.run([sys.executable, "tests/soak.py", "--battles", str(n), "--every", str(every),
                        "--concurrency", "64", "--transport", transport],
                       capture_output=True, text=True, timeout=4 * 3600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert rows[-1]["battles"] == n
    for r in rows:
        # In flight at most 64 battles per player; finished ones are forgotten after 10 s.
        assert r["hidden"] <= 2 * 64 and r["live"] <= 2 * 64 and r["pending"] <= 2 * 64
        assert r["poke_env_battles"] <= 2 * 64 + 2 * 200, r
        assert r["routes"] <= 3 * 64 + 2 * 200, r  # in flight, and websocket locks of recent ones
    assert rows[-1]["hidden"] == 0 and rows[-1]["live"] == 0
    first, last = rows[0], rows[-1]
    assert last["rss_mb"] - first["rss_mb"] < 300, (first, last)
