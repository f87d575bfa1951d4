"""Battles as coroutines: one decision (:mod:`.agent`), two players on a server
(:mod:`.match`), and the training lanes with fault recovery (:mod:`.collector`)."""
