"""maple-async: fast recurrent RL for Pokémon Showdown.

Data path: server (Showdown) -> runner (battles as coroutines) -> encoding (obs + mask)
-> batcher (one forward per batch) -> networks (stateless policy) -> trajectories
-> learner (recurrent PPO).
"""

__version__ = "0.1.0"
