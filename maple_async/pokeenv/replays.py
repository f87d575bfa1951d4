"""Battles kept as Showdown replays: an HTML file the usual client plays back in a browser
(poke-env's replay template, which loads Showdown's replay viewer when online) and the raw
protocol log beside it, named by time, opponent and result. A folder holds at most
``keep`` battles: the oldest go first."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

log = logging.getLogger("maple_async.replays")

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def result_word(battle) -> str:
    return "won" if battle.won else "lost" if battle.lost else "tie"


class ReplayWriter:
    """Writes one finished battle in ``every`` (the first one included) to ``folder``."""

    def __init__(self, folder, every: int = 1, keep: int = 1000):
        if every < 1 or keep < 1:
            raise ValueError("every and keep must be >= 1")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.every = every
        self.keep = keep
        self.seen = 0
        self.written = 0
        self.pruned = 0
        # Names start with the time, so sorting them sorts battles oldest first.
        self._kept = sorted(p.stem for p in self.folder.glob("*.html"))

    def finished(self, battle, opponent: str = "") -> None:
        """Called once per finished battle; ``opponent``: a label (default: the opponent's
        user name)."""
        self.seen += 1
        if (self.seen - 1) % self.every:
            return
        try:
            self.write(battle, opponent or battle.opponent_username or "opponent")
        except OSError as e:  # a full disk must not end the run
            log.warning("replay of %s not written: %s", battle.battle_tag, e)

    def write(self, battle, opponent: str) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        stem = _UNSAFE.sub("_", f"{stamp}-{battle.battle_tag}-vs-{opponent}-{result_word(battle)}")
        html = self.folder / f"{stem}.html"
        battle.save_replay(html)
        (self.folder / f"{stem}.log").write_text(battle._build_replay_log() + "\n", encoding="utf-8")
        self.written += 1
        self._kept.append(stem)
        while len(self._kept) > self.keep:
            old = self._kept.pop(0)
            for suffix in (".html", ".log"):
                (self.folder / f"{old}{suffix}").unlink(missing_ok=True)
            self.pruned += 1
        return html
