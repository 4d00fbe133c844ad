"""The trainer: joins segments with rewards into GRPO groups and trains the policy (grpo.py)."""
