"""Learning: stateless networks (:mod:`.networks`), recurrent PPO and behaviour cloning
(:mod:`.learner`), checkpoint files (:mod:`.checkpoint`) and the run's metrics, CSV and
TensorBoard (:mod:`.metrics`)."""
