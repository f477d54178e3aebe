"""What the user asks for: one plain dataclass, the same for every site."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from .errors import WmlError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ResourceRequest:
    """A job's resources and attributes.  ``None`` means "the site's default"."""

    nodes: int = 1
    ranks_per_node: Optional[int] = None      # default: GPUs per node, or 1 on CPU-only sites
    gpus_per_rank: Optional[int] = None       # default: GPUs per node / ranks per node
    ranks_per_gpu: Optional[int] = None       # K consecutive local ranks share one GPU; default 1
    cores_per_rank: Optional[int] = None      # default: fair share of the usable cores
    threads_per_core: Optional[int] = None    # hw threads per core a rank uses (SMT level)
    walltime: Optional[int] = None            # minutes
    walltime_s: Optional[int] = None          # -t to the second (the local site ends its jobs there)
    queue: Optional[str] = None
    qos: Optional[str] = None                 # Slurm --qos beside the partition (Frontier's debug)
    project: Optional[str] = None
    job_name: str = "wml-job"
    output: Optional[str] = None              # scheduler output file (pattern as the scheduler reads it)
    error: Optional[str] = None
    after: Optional[str] = None               # job id this job waits for (afterok)
    conda_env: Optional[str] = None
    modules: Tuple[str, ...] = ()
    exports: Tuple[Tuple[str, str], ...] = ()
    rack_contiguous: bool = False
    alloc_flags: Tuple[str, ...] = ()         # LSF -alloc_flags words beyond the SMT level (gpumps, NVME)
    gpu_binding: Optional[str] = None         # per-rank | local-rank; default the site's
    gpu_sharing: Optional[str] = None         # mps | time-slice (ranks sharing a GPU); default the site's
    stage_env: Optional[str] = None           # on | auto | off (--stage-env[=auto]); default the site's
    container: Optional[str] = None           # --container IMAGE (none: no container); default the site's image
    container_runtime: Optional[str] = None   # one of the site's container runtimes; default its own
    stage_image: Optional[str] = None         # on | off: the image file copied to node-local storage (default the site's)
    # passed to the scheduler in its own spelling (passthrough.py)
    mem: Optional[str] = None                 # per node: 64G
    exclusive: bool = False
    reservation: Optional[str] = None
    mail: Optional[str] = None                # user or address, mailed when the job ends or fails
    begin: Optional[str] = None               # HH:MM or YYYY-MM-DDTHH:MM[:SS]
    constraint: Optional[str] = None          # node features
    directives: Tuple[str, ...] = ()          # whole directive lines of the site's scheduler
    restarts: Optional[int] = None            # ddlrun --restarts N (a lost node, a hang, a crash); default the site's
    spare_nodes: int = 0                      # nodes asked for beyond the layout, for a restart to take (--spare-nodes)

    def __post_init__(self) -> None:
        for name in ("nodes", "ranks_per_node", "gpus_per_rank", "ranks_per_gpu", "cores_per_rank",
                     "threads_per_core", "walltime"):
            v = getattr(self, name)
            if v is None:
                continue
            low = 0 if name == "gpus_per_rank" else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                opt = "--" + name.replace("_", "-")
                raise WmlError(f"{opt} must be an integer >= {low}, got {v!r}")
        for name in ("restarts", "spare_nodes"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise WmlError(f"--{name.replace('_', '-')} must be an integer >= 0, got {v!r}")
        if (self.ranks_per_gpu or 1) > 1 and self.gpus_per_rank is not None and self.gpus_per_rank != 1:
            what = "CPU-only ranks share no GPU" if self.gpus_per_rank == 0 else \
                f"a rank sharing a GPU has that one GPU, not {self.gpus_per_rank}"
            raise WmlError(f"--ranks-per-gpu {self.ranks_per_gpu} with --gpus-per-rank {self.gpus_per_rank}: {what}; "
                           "drop --gpus-per-rank")
        for key, _ in self.exports:
            if not ENV_NAME.match(key):
                raise WmlError(f"--export {key!r}: not a valid environment variable name")
        for word in self.alloc_flags:
            if not re.match(r"^[A-Za-z0-9_.:=-]+$", word):
                raise WmlError(f"--alloc-flags {word!r}: not an LSF allocation flag (letters, digits, _ . : = -)")
            if re.match(r"^smt\d+$", word, re.I):
                raise WmlError(f"--alloc-flags {word!r}: the SMT level follows --threads-per-core; give --threads-per-core {word[3:]}")
        if self.gpu_binding not in (None, "per-rank", "local-rank"):
            raise WmlError(f"--gpu-binding {self.gpu_binding!r}: expected per-rank or local-rank")
        if self.gpu_sharing not in (None, "mps", "time-slice"):
            raise WmlError(f"--gpu-sharing {self.gpu_sharing!r}: expected mps or time-slice")
        if self.stage_env not in (None, "on", "auto", "off"):
            raise WmlError(f"--stage-env={self.stage_env}: expected --stage-env, --stage-env=auto or --stage-env=off")
        if self.stage_image not in (None, "on", "off"):
            raise WmlError(f"--stage-image {self.stage_image!r}: give on or off")
        if self.after is not None and not re.match(r"^[A-Za-z0-9_.\[\]-]+$", self.after):
            raise WmlError(f"--after {self.after!r}: not a job id")

    @property
    def export_dict(self) -> Dict[str, str]:
        return dict(self.exports)


def parse_exports(items: list[str]) -> Tuple[Tuple[str, str], ...]:
    """``KEY=VALUE`` strings (from ``--export``) to pairs; a bare ``KEY`` is refused."""
    out = []
    for item in items:
        if "=" not in item:
            raise WmlError(f"--export {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        if not ENV_NAME.match(k):
            raise WmlError(f"--export {item!r}: {k!r} is not a valid environment variable name")
        out.append((k, v))
    return tuple(out)

