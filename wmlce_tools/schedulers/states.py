"""The one set of job states.  Each scheduler module maps its own words onto these
(``schedulers/slurm.py``: PD/R/CG/CD/F/CA/TO...; ``lsf.py``: PEND/RUN/DONE/EXIT...;
``cobalt.py``: queued/running/exiting...)."""
from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    """A job's state as wml reports it.  The value is the name, so it stores and prints as-is."""

    PENDING = "PENDING"        # queued, held, waiting on a dependency
    RUNNING = "RUNNING"        # started (including completing / exiting)
    COMPLETED = "COMPLETED"    # ended with exit code 0
    FAILED = "FAILED"          # ended with a non-zero exit code, or a node failure
    CANCELLED = "CANCELLED"    # killed by a user or an administrator
    TIMEOUT = "TIMEOUT"        # killed at its walltime limit
    UNKNOWN = "UNKNOWN"        # the scheduler no longer knows or would not say

    def __str__(self) -> str:  # "RUNNING", not "JobState.RUNNING"
        return self.value

    @property
    def final(self) -> bool:
        """True once the job has ended; its state will not change again."""
        return self in FINAL_STATES

    @classmethod
    def parse(cls, text: str) -> "JobState":
        """``"running"`` / ``"RUNNING"`` -> JobState.RUNNING; anything else -> UNKNOWN."""
        try:
            return cls[str(text).strip().upper()]
        except KeyError:
            return cls.UNKNOWN


FINAL_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT})
