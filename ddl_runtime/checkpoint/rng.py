"""This rank's random number streams: Python's `random`, numpy's global generator, torch's (CPU
and, when CUDA is initialized, every GPU's).  torch is read only when the program imported it."""
from __future__ import annotations

import random
import sys
from typing import Any, Dict

import numpy as np


def capture() -> Dict[str, Any]:
    states: Dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state()}
    torch = sys.modules.get("torch")
    if torch is not None:
        states["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states["torch_cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore(states: Dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch = sys.modules.get("torch")
    if "torch" in states:
        if torch is None:
            import torch
        torch.set_rng_state(states["torch"])
        if "torch_cuda" in states and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(states["torch_cuda"])
