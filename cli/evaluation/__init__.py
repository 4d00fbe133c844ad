"""Evaluation: a policy's pass rate on tasks it never trained on (stats.py pure, run.py on the log)."""
