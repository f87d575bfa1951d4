"""Tools around a policy: evaluation against baselines and checkpoints, the throughput bench."""
