"""The site profile schema: what a site YAML file may say, validated on load.

A new site is data, not code: copy a file from ``site_configs/``, change the numbers, and
``wml site validate FILE`` tells you, with file, line and key, what is wrong.  The JSON schema
(``wml site schema``) is generated from these models, so the documentation cannot drift.
"""
from __future__ import annotations

from typing import Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..walltime import parse_walltime

SCHEDULERS = ("lsf", "cobalt", "slurm", "local")
LAUNCHERS = ("jsrun", "aprun", "srun", "mpiexec")
PLATFORMS = ("linux-64", "linux-ppc64le", "linux-aarch64", "osx-64", "osx-arm64")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeSpec(_Strict):
    """One compute node, as a job sees it (usable cores only: cores reserved for the system
    are left out, as on Summit where 1 core per socket is not schedulable)."""

    sockets: int = Field(ge=1, description="CPU sockets per node")
    cores_per_socket: int = Field(ge=1, description="usable cores per socket")
    threads_per_core: int = Field(1, ge=1, le=8, description="hardware threads per core (SMT level available)")
    gpus_per_socket: int = Field(0, ge=0, description="GPUs attached to each socket")
    memory_gb: Optional[float] = Field(None, gt=0, description="memory per node in GB")
    detect: bool = Field(False, description="detect cores and GPUs on this machine at load time (local site)")

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def gpus(self) -> int:
        return self.sockets * self.gpus_per_socket


class WalltimeBin(_Strict):
    """Walltime limit for jobs up to ``max_nodes`` nodes (e.g. Summit's scheduling bins)."""

    max_nodes: int = Field(ge=1)
    max_walltime: str

    @field_validator("max_walltime")
    @classmethod
    def _walltime(cls, v: str) -> str:
        parse_walltime(v)
        return v


class QueueSpec(_Strict):
    """A queue (LSF, Cobalt) or partition (Slurm) and its limits."""

    min_nodes: int = Field(1, ge=1)
    max_nodes: int = Field(ge=1)
    max_walltime: str = Field(description="HH:MM or HH:MM:SS")
    min_walltime: Optional[str] = None
    default: bool = False
    walltime_bins: List[WalltimeBin] = Field(
        default_factory=list, description="smaller jobs may have shorter limits; first bin whose max_nodes fits applies"
    )
    description: str = ""

    @field_validator("max_walltime", "min_walltime")
    @classmethod
    def _walltime(cls, v: Optional[str]) -> Optional[str]:
        if v is not None:
            parse_walltime(v)
        return v

    @model_validator(mode="after")
    def _nodes(self) -> "QueueSpec":
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} is above max_nodes {self.max_nodes}")
        return self


class DetectSpec(_Strict):
    """How ``wml site detect`` recognises this site: any hostname pattern matching, or all of
    the environment patterns matching (when there are any)."""

    hostnames: List[str] = Field(default_factory=list, description="fnmatch patterns for the login/batch host name")
    environment: Dict[str, str] = Field(
        default_factory=dict, description="variable -> fnmatch pattern that must all match (e.g. LMOD_SYSTEM_NAME: summit)"
    )


class LauncherOptions(_Strict):
    """How the site's launcher is driven."""

    bind: Optional[str] = Field(None, description="jsrun -b / srun --cpu-bind / aprun -cc value; default per launcher")
    cuda_aware_mpi: bool = Field(False, description="jsrun --smpiargs=\"-gpu\" (Spectrum MPI CUDA-aware)")
    srun_mpi: Optional[str] = Field(None, description="srun --mpi=<plugin> (e.g. pmi2, pmix)")
    extra_args: List[str] = Field(default_factory=list, description="appended to every launch line")


class SiteProfile(_Strict):
    """A machine wml knows how to run jobs on."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    scheduler: Literal["lsf", "cobalt", "slurm", "local"]
    launcher: Literal["jsrun", "aprun", "srun", "mpiexec"]
    platform: Literal["linux-64", "linux-ppc64le", "linux-aarch64", "osx-64", "osx-arm64"]
    node: NodeSpec
    total_nodes: int = Field(ge=1, description="nodes in the machine")
    nodes_per_rack: Optional[int] = Field(None, ge=1)
    default_threads_per_core: Optional[int] = Field(
        None, ge=1, description="SMT level a job gets by default (Summit: smt4); defaults to node.threads_per_core"
    )
    queues: Dict[str, QueueSpec] = Field(default_factory=dict)
    gpu_binding: Literal["per-rank", "local-rank"] = Field(
        "per-rank",
        description="per-rank: each rank sees only its GPUs (CUDA_VISIBLE_DEVICES); "
        "local-rank: all GPUs visible, the runtime picks by local rank",
    )
    modules: List[str] = Field(default_factory=list, description="modules loaded in every job script")
    environment: Dict[str, str] = Field(default_factory=dict, description="variables exported in every job")
    alloc_flags: Optional[str] = Field(None, description="LSF #BSUB -alloc_flags default (e.g. smt4)")
    attrs: Optional[str] = Field(None, description="Cobalt --attrs (e.g. mcdram=cache:numa=quad)")
    launcher_options: LauncherOptions = Field(default_factory=LauncherOptions)
    detect: DetectSpec = Field(default_factory=DetectSpec)
    docs: List[str] = Field(default_factory=list, description="where the facts in this profile come from")

    @model_validator(mode="after")
    def _consistent(self) -> "SiteProfile":
        if self.scheduler != "local" and not self.queues:
            raise ValueError("a batch site needs at least one queue")
        defaults = [n for n, q in self.queues.items() if q.default]
        if len(defaults) > 1:
            raise ValueError(f"more than one default queue: {', '.join(defaults)}")
        for qname, q in self.queues.items():
            if q.max_nodes > self.total_nodes:
                raise ValueError(f"queue {qname!r} allows {q.max_nodes} nodes but the machine has {self.total_nodes}")
        if self.default_threads_per_core and self.default_threads_per_core > self.node.threads_per_core:
            raise ValueError("default_threads_per_core is above node.threads_per_core")
        return self

    # Convenience -------------------------------------------------------------------
    @property
    def default_queue(self) -> Optional[str]:
        for n, q in self.queues.items():
            if q.default:
                return n
        return next(iter(self.queues), None)

    @property
    def smt(self) -> int:
        return self.default_threads_per_core or self.node.threads_per_core
