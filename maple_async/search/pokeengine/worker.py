"""The engine worker: one process per generation's build of poke-engine, started by :mod:`.pool`.

Only this module imports ``poke_engine``, and only in the worker, from the generation's own
folder put first on ``sys.path``: the parent never loads a build, so one process may keep
workers of several generations. The worker answers one request at a time on its pipe:

* ``{"id", "op": "mcts", "state": SPEC, "ms", "iterations", "threads"}`` -> each side's
  choices in the engine's words with their visits and total score, and the iterations run;
* ``{"id", "op": "instructions", "state": SPEC, "pairs": [[ours, theirs], ...]}`` -> for each
  joint choice the turn's outcomes, each with its probability and the state after it (HP,
  status and fainting of every Pokémon, the actives, boosts);
* ``{"id", "op": "names", "kind", "names"}`` -> which of the names the engine does not know.

SPEC is :func:`~.translate.translate`'s nested dict of the engine's constructor arguments. A
Rust panic reaches Python as pyo3's ``PanicException``, a ``BaseException`` that cannot be
pickled: it is caught by type here and answered as ``{"ok": false, "kind": "panic"}``; the
worker goes on. Its stderr (where Rust prints a panic) goes to a log file.
"""

from __future__ import annotations

import os
import sys
import time

from ...procs import Failed, enter_worker

BOOSTS = ("attack_boost", "defense_boost", "special_attack_boost", "special_defense_boost", "speed_boost",
          "accuracy_boost", "evasion_boost")


def engine_state(pe, spec: dict):
    """The engine's ``State`` from a SPEC."""
    sides = []
    for key in ("side_one", "side_two"):
        s = dict(spec[key])
        s["pokemon"] = [pe.Pokemon(**{**p, "moves": [pe.Move(**m) for m in p["moves"]]}) for p in s["pokemon"]]
        s["side_conditions"] = pe.SideConditions(**s.get("side_conditions", {}))
        s["volatile_status_durations"] = pe.VolatileStatusDurations(**s.get("volatile_status_durations", {}))
        s["volatile_statuses"] = set(s.get("volatile_statuses", ()))
        if "wish" in s:
            s["wish"] = tuple(s["wish"])
        if "future_sight" in s:
            s["future_sight"] = tuple(s["future_sight"])
        sides.append(pe.Side(**s))
    rest = {k: v for k, v in spec.items() if k not in ("side_one", "side_two")}
    return pe.State(side_one=sides[0], side_two=sides[1], **rest)


def summary(state) -> dict:
    """What an outcome left: per side the active's index and boosts, each Pokémon's HP and status."""
    out = {}
    for key in ("side_one", "side_two"):
        side = getattr(state, key)
        out[key] = {
            "active": int(side.active_index),
            "pokemon": [{"id": p.id, "hp": p.hp, "maxhp": p.maxhp, "status": str(p.status).lower()}
                        for p in side.pokemon],
            "boosts": [getattr(side, b) for b in BOOSTS],
            "substitute": side.substitute_health,
            "volatiles": sorted(str(v).lower() for v in side.volatile_statuses),
        }
    return out


def probe(pe, kind: str, name: str) -> bool:
    """Whether the engine knows ``name`` as a ``kind`` (pokemon, move, item, ability, volatile): it
    reads a name it does not know as "none" (a volatile: as nothing), so the name must come back
    from its own state."""
    if kind == "pokemon":
        mon = pe.Pokemon(id=name)
    elif kind == "move":
        mon = pe.Pokemon(moves=[pe.Move(id=name)])
    elif kind == "item":
        mon = pe.Pokemon(item=name)
    elif kind == "ability":
        mon = pe.Pokemon(ability=name, base_ability=name)
    elif kind != "volatile":
        raise ValueError(f"no kind {kind!r}")
    try:
        if kind == "volatile":
            side = pe.Side(volatile_statuses={name})
            back = pe.State.from_string(pe.State(side_one=side).to_string()).side_one
            return name.lower() in {str(v).lower() for v in back.volatile_statuses}
        back = pe.State.from_string(pe.State(side_one=pe.Side(pokemon=[mon])).to_string()).side_one.pokemon[0]
    except BaseException as e:  # noqa: BLE001 - a Rust panic is a BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return False
    got = {"pokemon": back.id, "move": back.moves[0].id if back.moves else "", "item": back.item,
           "ability": back.ability}[kind]
    return str(got).lower() == name.lower()


def handle(pe, msg: dict, known: dict) -> dict:
    op = msg["op"]
    if op == "mcts":
        state = engine_state(pe, msg["state"])
        t0 = time.perf_counter()
        r = pe.mcts(state, int(msg.get("ms", 100)), int(msg.get("iterations", 0)), int(msg.get("threads", 1)))
        ms = (time.perf_counter() - t0) * 1000
        return {"ours": [(o.move_choice, o.visits, o.total_score) for o in r.s1],
                "theirs": [(o.move_choice, o.visits, o.total_score) for o in r.s2],
                "iterations": r.iteration_count, "ms": ms}
    if op == "instructions":
        state = engine_state(pe, msg["state"])
        out = []
        for ours, theirs in msg["pairs"]:
            # the search names a switch "switch <species>", generate_instructions the species alone
            outcomes = pe.generate_instructions(state, ours.removeprefix("switch "), theirs.removeprefix("switch "))
            out.append([(o.percentage, summary(state.apply_instructions(o))) for o in outcomes])
        return {"outcomes": out}
    if op == "names":
        kind = msg["kind"]
        cache = known.setdefault(kind, {})
        for name in msg["names"]:
            if name not in cache:
                cache[name] = probe(pe, kind, name)
        return {"unknown": [n for n in msg["names"] if not cache[n]]}
    if op == "ping":
        return {}
    raise ValueError(f"unknown op {op!r}")


def main(conn, engine_path: str, log_path: str) -> None:
    """The worker's loop (``procs.spawn`` target): load the build, say ready, answer requests."""
    if enter_worker() is None:
        return
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 2)  # Rust prints its panics on fd 2
        os.close(fd)
        sys.path.insert(0, engine_path)
        import poke_engine as pe
    except BaseException:  # noqa: BLE001 - reported to the parent, then the worker ends
        conn.send(Failed.now("start"))
        return
    conn.send({"ready": True, "path": getattr(pe, "__file__", "")})
    known: dict = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError) as e:
            print(f"engine worker: the pool's end of the pipe closed ({type(e).__name__})", file=sys.stderr)
            return
        if msg is None:
            return
        try:
            reply = {"id": msg.get("id"), "ok": True, **handle(pe, msg, known)}
        except BaseException as e:  # noqa: BLE001 - a panic is a BaseException; the worker goes on
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            kind = "panic" if type(e).__name__ == "PanicException" else "error"
            reply = {"id": msg.get("id"), "ok": False, "kind": kind, "error": f"{type(e).__name__}: {e}"[:500]}
        try:
            conn.send(reply)
        except (OSError, ValueError) as e:
            print(f"engine worker: its answer to {msg.get('op')!r} could not be sent: {e!r}", file=sys.stderr)
            return
