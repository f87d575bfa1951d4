"""A training run: the one learning loop (:mod:`.loop`), the transports that connect it to
collectors in this process, in worker processes or in Ray actors (:mod:`.transports`), and
what every process sets up first (:mod:`.process`)."""
