"""Collaborative training (hivemind.optim): the progress tracker so far."""
from .progress_tracker import GlobalTrainingProgress, LocalTrainingProgress, ProgressTracker, TrainingProgressSchema

__all__ = ["ProgressTracker", "GlobalTrainingProgress", "LocalTrainingProgress", "TrainingProgressSchema"]
