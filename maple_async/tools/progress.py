"""Progress of a long command: battles done, the running win rate and the time left.

On a terminal one line is redrawn in place (a bar); in a log (the stream is not a terminal)
a line is printed every ``every_s`` seconds. The command's own lines (a row per opponent,
the final result) stay as they are: the bar is erased before each of them, and a log gets
no progress line at the end. ``eval``, ``curve``, ``play``, ``pretrain`` and ``bench`` use
it; ``train`` prints its own line per update.

A command follows the won/lost/tied counts of the match playing now (:meth:`Progress.follow`):
the battles done are those of the matches it finished plus this one's, the win rate is this
match's (against one opponent). The time left comes from the rate so far over the battles
still to play, or from a planned length (``seconds``: bench's windows, pretrain's minutes),
whichever ends first.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
from typing import Callable, Optional, TextIO

EVERY_S = 30.0  # a log's line
REDRAW_S = 0.5  # a terminal's bar


def duration(seconds: float) -> str:
    """``42s``, ``5m08s``, ``2h05m``."""
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """``label``: the command (``[eval] ...``); ``total``: the battles it plays (0: not known
    ahead, as in bench); ``seconds``: its planned length (0: none)."""

    def __init__(self, label: str, total: int = 0, *, seconds: float = 0.0, stream: Optional[TextIO] = None,
                 tty: Optional[bool] = None, every_s: float = EVERY_S, redraw_s: float = REDRAW_S,
                 clock: Callable[[], float] = time.monotonic, width: Optional[int] = None):
        self.label, self.total, self.seconds = label, total, seconds
        self.stream = stream if stream is not None else sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        self.tty = tty if tty is not None else bool(isatty and isatty())
        self.every_s, self.redraw_s, self.clock, self.width = every_s, redraw_s, clock, width
        self.t0 = clock()
        self.t_play: Optional[float] = None  # the first match's start: the rate counts from there
        self.last = self.t0  # the last line (a log) or bar (a terminal)
        self.finished = 0  # battles of the matches followed before this one
        self.results: Optional[dict] = None
        self.name = ""
        self.win_rate = True
        self.drawn = 0  # characters of the bar on screen (0: none)
        self._ticker: Optional[asyncio.Task] = None

    # -- what the command tells it --------------------------------------------------------
    def follow(self, results: dict, name: str = "", win_rate: bool = True) -> None:
        """From now on count ``results`` (``won``/``lost``/``tied``, updated as battles end) of
        the match ``name`` (``vs random``); ``win_rate=False``: its win rate means nothing
        (self-play)."""
        self.settle()
        self.results, self.name, self.win_rate = results, name, win_rate
        if self.t_play is None:
            self.t_play = self.clock()

    def settle(self) -> None:
        """The match followed has ended: its battles count as done, and the bar is erased
        (the command prints its row next)."""
        if self.results is not None:
            self.finished += self._played(self.results)
            self.results = None
        self.clear()

    def clear(self) -> None:
        """Erase the bar (before the command prints a line of its own)."""
        if self.drawn:
            self.stream.write("\r" + " " * self.drawn + "\r")
            self.stream.flush()
            self.drawn = 0

    # -- what it shows ----------------------------------------------------------------------
    @staticmethod
    def _played(r: dict) -> int:
        return r["won"] + r["lost"] + r["tied"]

    def done(self) -> int:
        return self.finished + (self._played(self.results) if self.results is not None else 0)

    def left_s(self, now: float) -> Optional[float]:
        """Seconds left: at the rate so far over the battles still to play, or to the planned
        end, whichever comes first (None: not known yet)."""
        done = self.done()
        out = []
        if self.total and done and self.t_play is not None:
            out.append((now - self.t_play) / done * max(self.total - done, 0))
        if self.seconds:
            out.append(max(self.seconds - (now - self.t0), 0.0))
        return min(out) if out else None

    def _match(self, short: bool) -> str:
        r = self.results
        if r is None:
            return ""
        who = self.name
        n = self._played(r)
        if not self.win_rate or not n:
            return who
        rate = (r["won"] + 0.5 * r["tied"]) / n
        if short:
            return f"{who} {rate:.3f}".strip()
        return f"{who + ': ' if who else ''}win rate {rate:.3f} ({r['won']}W/{r['lost']}L/{r['tied']}T)"

    def line(self, now: float) -> str:
        """A log's line:
        ``[eval] 57/200 battles (28%) | vs random: win rate 0.614 (35W/22L/0T) | 2m10s, ~5m28s left``."""
        done = self.done()
        count = f"{done}/{self.total} battles ({done / self.total:.0%})" if self.total else f"{done} battles"
        left = self.left_s(now)
        clock = duration(now - self.t0) + (f", ~{duration(left)} left" if left is not None else "")
        return " | ".join(p for p in (f"[{self.label}] {count}", self._match(False), clock) if p)

    def bar(self, now: float, columns: int) -> str:
        """A terminal's line: ``[eval] [######----------------] 57/200 | vs random 0.614 | ~5m28s left``."""
        done, left = self.done(), self.left_s(now)
        share = done / self.total if self.total else (min((now - self.t0) / self.seconds, 1.0)
                                                      if self.seconds else 0.0)
        filled = int(round(20 * min(share, 1.0)))
        count = f"{done}/{self.total}" if self.total else f"{done} battles"
        tail = f"~{duration(left)} left" if left is not None else duration(now - self.t0)
        text = " | ".join(p for p in (f"[{self.label}] [{'#' * filled}{'-' * (20 - filled)}] {count}",
                                      self._match(True), tail) if p)
        return text[:max(columns - 1, 10)]  # a wrapped line could not be redrawn in place

    def tick(self) -> None:
        """Redraw the bar (a terminal) or print a line once ``every_s`` has passed (a log)."""
        now = self.clock()
        if self.tty:
            if now - self.last < self.redraw_s:
                return
            columns = self.width or shutil.get_terminal_size().columns
            text = self.bar(now, columns)
            self.stream.write("\r" + text.ljust(self.drawn))
            self.drawn = max(len(text), self.drawn)
        else:
            if now - self.last < self.every_s:
                return
            self.stream.write(self.line(now) + "\n")
        self.stream.flush()
        self.last = now

    def start(self, poll_s: Optional[float] = None) -> None:
        """Tick from now on (every ``redraw_s`` on a terminal, every second in a log), until :meth:`stop`."""
        async def loop():
            while True:
                await asyncio.sleep(poll_s or (self.redraw_s if self.tty else 1.0))
                self.tick()
        self._ticker = asyncio.get_running_loop().create_task(loop())

    def stop(self) -> None:
        """No more ticks; the bar erased."""
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        self.settle()

    @contextlib.asynccontextmanager
    async def shown(self, poll_s: Optional[float] = None):
        """:meth:`start` for the body, :meth:`stop` after it."""
        self.start(poll_s)
        try:
            yield self
        finally:
            self.stop()

def stream_for(json_path: Optional[str]) -> TextIO:
    """stdout, or stderr when stdout carries the JSON (``--json -``)."""
    return sys.stderr if json_path == "-" else sys.stdout
