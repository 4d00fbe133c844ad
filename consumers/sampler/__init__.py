"""The sampler: Frontier Sampling over the task pool, feeding rollout requests."""
