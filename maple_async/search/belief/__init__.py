"""Belief: a decision's sampled full battle states, from the player's view.

From a poke-env singles battle and its current request, :func:`sample_states` draws ``k``
STATEs in ``leafhub.js``'s format: our side exact (:mod:`.ours`), the opponent's revealed facts
kept and the rest drawn from public knowledge (:mod:`.opponent`), every carried effect read
from the battle's protocol (:mod:`.protocol`) by its entry of one table (:mod:`.effects`,
its readers in :mod:`.readers`), put together in :mod:`.sampling`. What cannot be represented
faithfully raises :class:`Refusal` with a short ``reason`` (``doubles``, ``forced_switch``,
``illusion``, ``transform``, ``ditto``, ``volatile:<name>``, ``locked_move``, ``recharge``,
``two_turn_move``, ``substitute_hp``, ``forme_change``, ...): never approximated silently.
"""

from .ours import check_ours
from .protocol import Refusal
from .sampling import Belief, build_states, sample_states

__all__ = ["Belief", "Refusal", "build_states", "check_ours", "sample_states"]
