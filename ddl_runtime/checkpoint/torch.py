"""torch's one-or-two-line addition for training that outlives a job.

    ckpt = Checkpointer(model, optimizer, steps=steps, scheduler=scheduler)   # anything with state_dict()
    for step in range(ckpt.restore(), steps):                      # 0, or the step after the saved one
        ...forward, backward, optimizer.step()...
        ckpt.step_end(step)             # agrees on the stop; on a stop saves and exits 75

Works with a plain ddl_runtime loop and with ``ddl_runtime.torch.DistributedOptimizer`` (or
Horovod's), whose gradient reduction already carries the stop flag, so the agreement costs
nothing.  Saved: the model's and optimizer's ``state_dict()``, every extra object's, the step,
and (by ddl_runtime.checkpoint.save) every rank's random streams.  The data position is the step:
derive the batch from it (deterministic order), or pass a sampler with ``state_dict()``.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..errors import DDLInputError
from ..transports.gpu.hostcopy import to_host
from . import saving
from .boundary import StepBoundary

FRAMEWORK = "torch"


class Checkpointer(StepBoundary):
    """Saves and restores a torch training run at step boundaries (see the module docstring).

    Without a checkpoint directory ($WML_CHECKPOINT_DIR, or checkpoint.configure(directory=...))
    it does nothing: the same script runs in one job unchanged.  ``every``: also save every that many steps (without stopping), so a crash loses at most that
    many; by default only the agreed stop saves.  ``steps``: the run's number of steps, when
    known: the last step (``steps - 1``) finishes the run even when a stop was asked for (the loop
    ends, the program exits 0 and the chain is done), where without it a stop agreed there saves
    and exits 75, and the next job only restores and ends.
    """

    def __init__(self, model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None,
                 every: Optional[int] = None, steps: Optional[int] = None, **objects: Any) -> None:
        if not isinstance(model, torch.nn.Module):
            raise DDLInputError(f"Checkpointer: model is a {type(model).__name__}, not a torch.nn.Module")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise DDLInputError(f"Checkpointer: optimizer is a {type(optimizer).__name__}, not a torch.optim.Optimizer")
        for name, obj in objects.items():
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
                raise DDLInputError(f"Checkpointer: {name}={type(obj).__name__} has no state_dict()/load_state_dict()")
        self._boundary(every, steps)
        self.model, self.optimizer, self.objects = model, optimizer, objects
        self.restored_step: Optional[int] = None

    def state(self) -> dict:
        """What is saved, with CUDA tensors copied to the host (a checkpoint does not name a device;
        restore's load_state_dict puts each value on its parameter's device)."""
        out = {"model": self.model.state_dict()}
        if self.optimizer is not None:
            out["optimizer"] = self.optimizer.state_dict()
        out.update({f"object:{name}": obj.state_dict() for name, obj in self.objects.items()})
        return to_host(out)

    def restore(self) -> int:
        """Collective: load the newest checkpoint into the model, optimizer and objects; returns
        the step to start from (0 when there is none)."""
        restored = saving.load() if self.active else None
        if restored is None:
            return 0
        state = restored.state
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        for name, obj in self.objects.items():
            obj.load_state_dict(state[f"object:{name}"])
        self.restored_step = restored.step
        return restored.step + 1

    def save(self, step: int):
        """Collective: save now as the checkpoint of `step` (a completed step)."""
        return saving.save(self.state(), step, framework=FRAMEWORK)
