"""Collaborative training (hivemind.optim): the Optimizer and its parts."""
from .diloco import DiLoCo
from .grad_averager import GradientAverager
from .optimizer import Optimizer
from .power_sgd_averager import PowerSGDGradientAverager
from .progress_tracker import GlobalTrainingProgress, LocalTrainingProgress, ProgressTracker, TrainingProgressSchema
from .state_averager import TrainingStateAverager

__all__ = ["Optimizer", "DiLoCo", "GradientAverager", "PowerSGDGradientAverager", "TrainingStateAverager", "ProgressTracker", "GlobalTrainingProgress",
           "LocalTrainingProgress", "TrainingProgressSchema"]
