"""Collaborative training (hivemind.optim): the Optimizer and its parts."""
from .grad_averager import GradientAverager
from .optimizer import Optimizer
from .progress_tracker import GlobalTrainingProgress, LocalTrainingProgress, ProgressTracker, TrainingProgressSchema
from .state_averager import TrainingStateAverager

__all__ = ["Optimizer", "GradientAverager", "TrainingStateAverager", "ProgressTracker", "GlobalTrainingProgress",
           "LocalTrainingProgress", "TrainingProgressSchema"]
