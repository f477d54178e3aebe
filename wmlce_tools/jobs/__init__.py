"""The jobs layer (beside `jobscript`), the job registry and lifecycle: jobs wml submitted, in SQLite
(`registry.py`), and what happens to them after the submit: refresh from the scheduler,
cancel, logs, wait (`lifecycle.py`).  The states every scheduler's states map to are the
schedulers' (`schedulers/states.py`).

May import: `schedulers` and the layers below it.  Never `jobscript`, `runs`, `options`,
`api` or `cli` (what shows a chain or a sweep in `wml jobs` lives in `runs/`, the commands in
`cli/jobs.py`).
"""
from __future__ import annotations

from ..schedulers.states import FINAL_STATES, JobState

__all__ = ["FINAL_STATES", "JobState"]
