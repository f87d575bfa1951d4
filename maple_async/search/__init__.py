"""Search at decision time on Showdown's own simulator.

The parts, each testable alone: :mod:`.belief` (a decision's sampled battle states, with every
carried effect an entry of one table, :mod:`.belief.effects`), ``leafhub.js`` (Node: builds
those states and plays one turn of a joint action per leaf; its modules in ``leafhub/``),
:mod:`.leaves` (its Python client), :mod:`.searcher` (per decision: belief, leaves, payoff
tables), :mod:`.choice` (pure functions from payoff tables to an action), :mod:`.value` (leaf
values from the agent's own network), :mod:`.player` (the network-free ``search`` opponent);
:mod:`.pokeengine` (a second engine over the same belief, read through ``describe.js``).
"""
