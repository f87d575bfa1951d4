"""What the policy sees: the observation encoder and action mask (:mod:`.encoding`), the
columns derived per batch (:mod:`.features`) and the reward (:mod:`.rewards`)."""
