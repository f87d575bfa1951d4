"""Which engine searches: ``search.engine`` resolved once per command, and the searcher it makes.

``showdown`` plays every turn in Showdown's own simulator (:class:`~.searcher.Searcher`);
``poke-engine`` runs the Rust engine's tree search over the belief's states
(:class:`~.pokeengine.searcher.EngineSearcher`); ``auto`` takes poke-engine where it can run
(built for the formats' generations, or cargo present to build it) and Showdown's simulator
elsewhere. :func:`resolve` settles it before any battle starts and builds what is missing, with
progress lines, so no battle waits on a compile; :func:`make_searcher` builds a player's searcher.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

from ..config import SearchConfig
from .leaves import LeafHub
from .pokeengine import build


def generations(formats: Iterable[str]) -> list[int]:
    """The generations of format ids (``gen4randombattle`` -> 4)."""
    gens = set()
    for fmt in formats:
        digits = "".join(ch for ch in fmt[3:5] if ch.isdigit()) if fmt.startswith("gen") else ""
        gens.add(int(digits) if digits else 9)
    return sorted(gens)


def resolve(search: SearchConfig, formats: Iterable[str], quiet: bool = False) -> SearchConfig:
    """``search`` with ``engine`` settled for these formats; poke-engine's builds done. A machine
    that cannot build it: ``auto`` says so in one line and searches on Showdown's simulator;
    ``poke-engine`` raises :class:`~.pokeengine.build.EngineUnavailable` (a user error)."""
    gens = generations(formats)
    engine = search.engine
    if engine == "auto":
        if all(build.installed(g) for g in gens) or build.cargo() is not None:
            engine = "poke-engine"
        else:
            engine = "showdown"
            if not quiet:
                print("[maple-async] search: poke-engine is not built and cargo is not on PATH: "
                      "searching on Showdown's simulator (install Rust's cargo for the faster engine)",
                      flush=True)
    if engine == "poke-engine":
        for g in gens:
            build.ensure(g, quiet=quiet)
    return dataclasses.replace(search, engine=engine)


def make_searcher(search: Optional[SearchConfig], seed: int = 0, value=None):
    """A searcher for a player: the engine ``search.engine`` names (``auto`` as resolve would)."""
    search = search or SearchConfig()
    engine = search.engine
    if engine == "auto":  # commands resolve() first; a library caller unresolved gets this
        engine = "poke-engine" if build.cargo() is not None else "showdown"
    if engine == "poke-engine":
        from .pokeengine.searcher import EngineSearcher
        return EngineSearcher(LeafHub(), search, seed, value=value)
    from .searcher import Searcher
    return Searcher(LeafHub(), search, seed, value=value)
