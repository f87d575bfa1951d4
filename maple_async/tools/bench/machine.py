"""The machine under the bench: what its cores allow, the managed Showdown's CPU time, and
a Showdown slowed down on purpose."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Optional

from ...nodeproc import group_cpu_s, process_groups


def cpu_limit(cores: int, us_per_decision: float) -> float:
    """Decisions/s the machine's cores allow at a CPU cost of ``us_per_decision`` (Showdown's
    and this process's together); NaN when the cost is unknown."""
    return cores * 1e6 / us_per_decision if us_per_decision > 0 else float("nan")


def server_cpu(pgid: Optional[int]) -> float:
    """CPU time of the managed Showdown's processes; NaN when unknown (no ``pgid``, or its
    processes can't be read)."""
    v = group_cpu_s(pgid)
    return float("nan") if v is None else v


@contextlib.contextmanager
def throttled(pgid: Optional[int], fraction: float, period_s: float = 0.02):
    """Slow a managed server down on purpose: its process group is stopped (SIGSTOP) for
    ``fraction`` of every ``period_s`` while the block runs, so a bench shows how the flush
    rule does on a slower simulator on the same day. ``fraction`` 0: no throttle."""
    if not fraction or not pgid:
        yield
        return
    done = threading.Event()

    def signal_all(sig):
        for g in process_groups(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(g, sig)

    def cycle():
        while not done.is_set():
            signal_all(signal.SIGSTOP)
            done.wait(fraction * period_s)
            signal_all(signal.SIGCONT)
            done.wait((1 - fraction) * period_s)

    thread = threading.Thread(target=cycle, name="maple-throttle", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        signal_all(signal.SIGCONT)
