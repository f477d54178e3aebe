"""What the framework Checkpointers (torch's, TensorFlow's) share: the `every` / `steps` settings
and `step_end`, the step boundary where the ranks agree on the stop.  A subclass provides
`save(step)`."""
from __future__ import annotations

import abc
from typing import Optional

from ..errors import DDLInputError
from ..state import runtime as _rt
from . import saving, stop


class StepBoundary(abc.ABC):
    every: Optional[int] = None
    steps: Optional[int] = None
    active: bool = False

    def _boundary(self, every: Optional[int], steps: Optional[int]) -> None:
        """Checks and keeps `every` and `steps`; active when there is a checkpoint directory."""
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise DDLInputError(f"Checkpointer: every={every!r} must be a positive number of steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise DDLInputError(f"Checkpointer: steps={steps!r} must be the run's positive number of steps")
        self.every, self.steps = every, steps
        self.active = saving.directory() is not None
        if every is not None and not self.active:
            saving.require_directory(f"Checkpointer(every={every})")

    @abc.abstractmethod
    def save(self, step: int):
        """Collective: save now as the checkpoint of `step` (each framework's)."""

    def step_end(self, step: int) -> bool:
        """Call after each completed step on every rank.  When the ranks agree to stop, saves and
        exits with status 75 (never returns); else saves every `every` steps.  Returns whether it saved.
        With ``steps``, the last step only returns (every rank knows it: no agreement to make)."""
        rt = _rt.get()
        if rt is not None:
            rt.stats.run_step = step      # the step the run reached, in this rank's record (core/stats.py)
        if not self.active:
            return False
        if self.steps is not None and step >= self.steps - 1:
            return False
        if stop.agree(step):
            self.save(step)
            saving.exit_resume()
        if self.every and (step + 1) % self.every == 0:
            self.save(step)
            return True
        return False
