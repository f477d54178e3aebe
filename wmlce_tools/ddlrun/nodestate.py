"""Which of a job's nodes its scheduler has taken away, after an attempt failed (``ddlrun
--restarts``, heal.py): a node lost under a running job takes its ranks' exit reports with it
(and the launcher may kill the ranks of the healthy nodes unreported too), but the scheduler knows.

- Slurm: ``scontrol show job -o $SLURM_JOB_ID``'s ``NodeList``.  With ``--no-kill`` (the job
  script's ``#SBATCH --no-kill`` under --restarts) a node that fails is taken out of the job and
  the job goes on (sbatch(1)); a node of the allocation no longer in it is lost.
- Other schedulers: none asked; the ranks' reports decide (heal.classify).

The command goes through the schedulers' one path (``Scheduler.run_command``: a missing tool or a
silent server is an answer within seconds); no answer is no node lost.
"""
from __future__ import annotations

from typing import List, Mapping, Sequence

from .hostlist import expand_hostlist

WAIT_S = 15.0


def lost_hosts(scheduler: str, env: Mapping[str, str], hosts: Sequence[str]) -> List[str]:
    """Those of ``hosts`` the scheduler no longer counts in this job (in their order)."""
    if scheduler != "slurm" or not env.get("SLURM_JOB_ID"):
        return []
    from ..errors import WmlError
    from ..schedulers import get_scheduler

    try:
        proc = get_scheduler("slurm").run_command(["scontrol", "show", "job", "-o", env["SLURM_JOB_ID"]],
                                                  wait_s=WAIT_S)
    except WmlError:
        return []
    if proc.returncode != 0:
        return []
    field = next((w for w in proc.stdout.split() if w.startswith("NodeList=")), None)
    if field is None or field == "NodeList=(null)":
        return []
    try:
        now = set(expand_hostlist(field.partition("=")[2]))
    except WmlError:
        return []
    return [h for h in hosts if h not in now]
