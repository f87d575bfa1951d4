"""maple-async: fast recurrent RL for Pokémon Showdown.

Data path, one package per stage: ``server`` (Showdown) -> ``pokeenv`` (players, battle
state, websocket) -> ``collect`` (battles as coroutines, trajectories) -> ``obs`` (encoder,
derived features, rewards) -> ``inference`` (batcher, hidden state, policy) -> ``learn``
(networks, recurrent PPO, checkpoints) -> ``run`` (the learning loop and its transports);
``tools`` (eval, bench) and ``cli`` sit on top.
"""

__version__ = "0.2.2"
