"""Learning: stateless networks (:mod:`.networks`), recurrent PPO (:mod:`.learner`),
checkpoint files (:mod:`.checkpoint`) and the run's metrics (:mod:`.metrics`)."""
