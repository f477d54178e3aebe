"""A sweep as the scheduler's job array: the directive, the variable holding the index, and
what ``--max-running K`` becomes on each scheduler.

- Slurm: ``#SBATCH --array=0-<N-1>%K``; ``SLURM_ARRAY_TASK_ID`` (https://slurm.schedmd.com/job_array.html:
  "%" separator = the most tasks running at once; MaxArraySize bounds the index).
- LSF: ``#BSUB -J "name[1-N]%K"`` (indices start at 1; ``%K`` the job slot limit);
  ``LSB_JOBINDEX`` (IBM LSF bsub -J; MAX_JOB_ARRAY_SIZE, 1000 by default).
- PBS Pro: ``#PBS -J 0-<N-1>``; ``PBS_ARRAY_INDEX``.  ``-J`` takes no limit on running subjobs,
  so ``--max-running K`` gives K subjobs, subjob j running trials j, j+K, j+2K ... one after
  another (its walltime is a trial's times their number); an array of one is a plain job.
- Cobalt has no arrays: a sweep there runs packed.
Each array element's output also goes to the job's own files (LSF ``%J.%I``, PBS Pro
``^array_index^``; Slurm's ``%j`` is already each element's)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ..errors import WmlError


@dataclass(frozen=True)
class ArraySpec:
    directives: Tuple[str, ...]
    index: str                   # shell text of the element's index ("$SLURM_ARRAY_TASK_ID")
    base: int = 0                # the first index (LSF: 1)
    stride: int = 1              # trials per element are index, index+stride, ... (PBS --max-running)
    lsf_job_name: Optional[str] = None
    per_element: int = 1         # trials one element runs one after another


def array_spec(scheduler: str, n: int, max_running: Optional[int], job_name: str) -> ArraySpec:
    k = max_running if max_running and max_running < n else None
    if scheduler == "slurm":
        return ArraySpec((f"#SBATCH --array=0-{n - 1}" + (f"%{k}" if k else ""),), '"$SLURM_ARRAY_TASK_ID"')
    if scheduler == "lsf":
        return ArraySpec((), '"$LSB_JOBINDEX"', base=1,
                         lsf_job_name=f'"{job_name}[1-{n}]' + (f"%{k}" if k else "") + '"')
    if scheduler == "pbs":
        elements = k or n
        per = -(-n // elements)
        if elements == 1:
            return ArraySpec((), "0", stride=1, per_element=n)
        return ArraySpec((f"#PBS -J 0-{elements - 1}",), '"$PBS_ARRAY_INDEX"', stride=elements if k else 1,
                         per_element=per)
    raise WmlError(f"the {scheduler} scheduler has no job arrays: run the sweep packed (--pack NODES)")


def array_output(scheduler: str, path: str) -> str:
    """A default output path made distinct per array element."""
    if scheduler == "lsf" and "%I" not in path:
        return path.replace("%J", "%J.%I") if "%J" in path else path + ".%I"
    if scheduler == "pbs" and "^array_index^" not in path:
        stem, dot, ext = path.rpartition(".")
        return f"{stem}.^array_index^.{ext}" if dot else path + ".^array_index^"
    return path
