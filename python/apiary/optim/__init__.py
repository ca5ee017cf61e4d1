"""Collaborative training (hivemind.optim): the progress tracker and the gradient averager so far."""
from .grad_averager import GradientAverager
from .progress_tracker import GlobalTrainingProgress, LocalTrainingProgress, ProgressTracker, TrainingProgressSchema

__all__ = ["GradientAverager", "ProgressTracker", "GlobalTrainingProgress", "LocalTrainingProgress", "TrainingProgressSchema"]
