"""Jobs wml submitted: the registry (SQLite, ``registry.py``) and the one set of job states
every scheduler's states map to (``states.py``)."""
from __future__ import annotations

from .states import FINAL_STATES, JobState

__all__ = ["FINAL_STATES", "JobState"]
