"""Checkpoints of an expert server: ``<dir>/<uid>/checkpoint_last.pt`` per expert (its
module, optimizer and scheduler), written whole then renamed into place, so that a
crash mid-write leaves the previous checkpoint."""
import os
from pathlib import Path
from typing import Dict

import torch

from .module_backend import ModuleBackend

LAST = "checkpoint_last.pt"


def store_experts(backends: Dict[str, ModuleBackend], checkpoint_dir: str) -> None:
    for uid, backend in backends.items():
        folder = Path(checkpoint_dir) / uid
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{LAST}.{os.getpid()}.partial"
        with backend.lock:
            torch.save(backend.state_dict(), partial)
        os.replace(partial, folder / LAST)


def load_experts(backends: Dict[str, ModuleBackend], checkpoint_dir: str) -> None:
    """Loads the checkpoint of every expert that has one (the others keep their state)."""
    for uid, backend in backends.items():
        path = Path(checkpoint_dir) / uid / LAST
        if path.exists():
            with backend.lock:
                backend.load_state_dict(torch.load(path))
