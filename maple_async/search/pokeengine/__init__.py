"""Search on poke-engine, a fast Rust model of the game (an optional extra).

:mod:`.build` compiles the engine once per generation into the project's home; :mod:`.translate`
turns a sampled state (a built state's snapshot, in plain terms) into the engine's state and our
choices into its words; :mod:`.worker` runs the engine in a process of its own per generation;
:mod:`.pool` keeps those processes (faults, hangs, restarts); :mod:`.searcher` searches one
decision over the belief's sampled states.
"""
