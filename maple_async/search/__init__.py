"""Search at decision time on Showdown's own simulator (issue 62).

The parts, each testable alone: ``leafhub.js`` (Node: builds a decision's sampled battle
states and plays one turn of a joint action per leaf), :mod:`.leaves` (its Python client),
:mod:`.choice` (pure functions from payoff tables to an action).
"""
