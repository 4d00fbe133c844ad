"""A load generator: simulated environments answering rollout requests from recordings."""
