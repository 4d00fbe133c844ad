"""Rollout workers: play rollout requests on real desktops and write every turn to the log."""
