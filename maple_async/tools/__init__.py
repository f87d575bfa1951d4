"""Tools around a policy: evaluation against baselines and checkpoints (:mod:`.evaluate`),
the throughput bench (:mod:`.bench`), behaviour-cloning warm starts (:mod:`.pretrain`), a
run's report (:mod:`.report`), and the agent behind a user name (:mod:`.serve`)."""
