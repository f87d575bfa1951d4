"""The battle's protocol read back, and the words a state is written in.

poke-env keeps what a battle shows now; a sampled state also needs when an effect started, how
many turns or failed moves it has seen and who set it: :class:`Protocol` searches the battle's
messages for them. What cannot be represented faithfully raises :class:`Refusal`.
"""

from __future__ import annotations

import re
from typing import Optional

# Species that may be another in disguise: any Pokémon on the field may be one of them.
ILLUSION = {"zoroark", "zorua", "zoroarkhisui", "zoruahisui"}
SWITCH_IN = {"switch", "drag", "replace"}


class Refusal(Exception):
    """A decision whose state cannot be represented faithfully; ``reason`` names why (a short
    key the counters group by), the message says more."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def to_id(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def move_id(request_id: str) -> str:
    """A request's move id as a set's: Hidden Power's type stays, its power (and Return's) goes."""
    return re.sub(r"\d+$", "", request_id)


def parse_details(details: str) -> dict:
    parts = [p.strip() for p in details.split(",")]
    out = {"species": parts[0], "level": 100, "gender": ""}
    for p in parts[1:]:
        if p.startswith("L") and p[1:].isdigit():
            out["level"] = int(p[1:])
        elif p in ("M", "F"):
            out["gender"] = p
        elif p.startswith("tera:"):
            out["tera"] = p[5:]
        elif p == "shiny":
            out["shiny"] = True
    return out


def parse_condition(condition: str) -> tuple[int, int, str]:
    """'123/250 par' -> (123, 250, 'par'); '0 fnt' -> (0, 0, 'fnt')."""
    hp, _, status = condition.partition(" ")
    if "/" not in hp:
        return 0, 0, status or "fnt"
    cur, mx = hp.split("/")
    return int(cur), int(mx), status


class Protocol:
    """The battle's messages (poke-env's ``Battle._replay_data``), searched for what poke-env does
    not keep: when an effect started, how many turns or failed moves it has seen, who set it."""

    def __init__(self, battle):
        self.events = [m for m in battle._replay_data if len(m) > 1]

    @staticmethod
    def who(ident: str) -> tuple[str, str]:
        """'p2a: Gyarados' -> ('p2', 'Gyarados')."""
        side, _, name = ident.partition(": ")
        return side[:2], name

    def last(self, test, before: Optional[int] = None) -> int:
        end = len(self.events) if before is None else before
        for i in range(end - 1, -1, -1):
            if test(self.events[i]):
                return i
        return -1

    def count(self, test, after: int) -> int:
        return sum(1 for m in self.events[after + 1:] if test(m))

    def turns_since(self, i: int) -> int:
        return self.count(lambda m: m[1] == "turn", i)

    def ends_since(self, i: int) -> int:
        """Turn ends (residuals: '|upkeep|') after event ``i``."""
        return self.count(lambda m: m[1] == "upkeep", i)

    def switched_in(self, side: str, name: str) -> int:
        return self.last(lambda m: m[1] in SWITCH_IN and self.who(m[2]) == (side, name))

    def mine(self, m: list, side: str, name: str, pos: int = 2) -> bool:
        return len(m) > pos and self.who(m[pos]) == (side, name)

    def source_before(self, i: int) -> Optional[tuple[str, str, str]]:
        """Who set what started at event ``i``: its ``[of]`` Pokémon (an ability or item) or the
        user of the last move before it; (side, name, "ability" | "move")."""
        m = self.events[i]
        of = [p[5:] for p in m if p.startswith("[of] ")]
        if of and any(p.startswith("[from] ability:") for p in m):
            return (*self.who(of[0]), "ability")
        j = self.last(lambda e: e[1] == "move", before=i)
        if j >= 0:
            return (*self.who(self.events[j][2]), "move")
        return None
