"""The segmenter: trajectories from the log cut into training segments (Visual Context Segmentation)."""
