"""The judge: scores finished trajectories from their collected artifacts into `reward`."""
