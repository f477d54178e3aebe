"""Everything ddl_runtime reads from the job's environment, in one dataclass.

`JobEnvironment.from_environ()` is the only place that looks at environment variables
(see docs/ARCHITECTURE.md, "The contract between ddlrun and ddl_runtime").  It needs no
MPI, so a per-rank launcher shim can use it before exec'ing the training script.
Bad values raise `DDLInputError` naming the variable; every rank reads the same variables,
so every rank raises the same error before any communication.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

from ..errors import DDLInputError
from .topology import Mode, parse_mode

DEFAULT_STALL_WARNING_S = 60.0
DEFAULT_STATS_INTERVAL_S = 60.0
GPU_BINDINGS = ("per-rank", "local-rank")


@dataclass(frozen=True)
class LauncherInfo:
    """What the process launcher says about this process (None where it says nothing)."""

    name: str  # "jsrun", "openmpi", "hydra", "alps", "slurm" or "none"
    rank: Optional[int] = None
    size: Optional[int] = None
    local_rank: Optional[int] = None
    local_size: Optional[int] = None
    node_id: Optional[int] = None  # a node index shared by the ranks of one node (Slurm only)


@dataclass(frozen=True)
class JobEnvironment:
    """The job's DDL settings and launcher facts for this process."""

    mode: Optional[Mode] = None
    emulate_nodes: Optional[int] = None
    gpu_binding: Optional[str] = None
    layout_gpus: Tuple[Tuple[int, ...], ...] = ()
    cuda_visible_devices: Optional[Tuple[str, ...]] = None
    fusion_mb: Optional[float] = None
    stall_warning_s: float = DEFAULT_STALL_WARNING_S
    stall_shutdown_s: Optional[float] = None
    timeline: Optional[str] = None
    shared_memory: bool = True  # DDL_SHM: one-host jobs reduce through shared memory
    response_cache: Optional[int] = None  # DDL_RESPONSE_CACHE: descriptors the negotiation caches (0: none)
    stats_dir: Optional[str] = None  # DDL_STATS_DIR, else $WML_JOB_DIR/stats: each rank's record (core/stats.py)
    stats_interval_s: float = DEFAULT_STATS_INTERVAL_S  # DDL_STATS_INTERVAL_S: the record rewritten this often
    heartbeat_dir: Optional[str] = None  # DDL_HEARTBEAT_DIR (ddlrun --restarts): each rank's heartbeat (core/heartbeat.py)
    hang_k: Optional[float] = None       # DDL_HANG_K: hung after K x the median step (default heartbeat.DEFAULT_K)
    hang_floor_s: Optional[float] = None     # DDL_HANG_FLOOR_S: ... and never before this (heartbeat.DEFAULT_FLOOR_S)
    hang_io_floor_s: Optional[float] = None  # DDL_HANG_IO_FLOOR_S: a checkpoint save or load's floor
    launcher: LauncherInfo = field(default_factory=lambda: LauncherInfo("none"))

    @classmethod
    def from_environ(cls, env: Mapping[str, str] = os.environ) -> "JobEnvironment":
        return cls(
            mode=_mode_from_options(env.get("DDL_OPTIONS", "")),
            emulate_nodes=_positive_int(env, "DDL_EMULATE_NODES"),
            gpu_binding=_gpu_binding(env),
            layout_gpus=_layout_gpus(env.get("DDL_LAYOUT_GPUS", "")),
            cuda_visible_devices=_visible_devices(env.get("CUDA_VISIBLE_DEVICES")),
            fusion_mb=_non_negative_float(env, "DDL_FUSION_MB"),
            stall_warning_s=_positive_float(env, "DDL_STALL_WARNING_S") or DEFAULT_STALL_WARNING_S,
            stall_shutdown_s=_positive_float(env, "DDL_STALL_SHUTDOWN_S"),
            timeline=env.get("DDL_TIMELINE") or None,
            shared_memory=_switch(env, "DDL_SHM", True),
            response_cache=_non_negative_int(env, "DDL_RESPONSE_CACHE"),
            stats_dir=stats_dir(env),
            stats_interval_s=_positive_float(env, "DDL_STATS_INTERVAL_S") or DEFAULT_STATS_INTERVAL_S,
            heartbeat_dir=os.path.abspath(env["DDL_HEARTBEAT_DIR"]) if env.get("DDL_HEARTBEAT_DIR") else None,
            hang_k=_positive_float(env, "DDL_HANG_K"),
            hang_floor_s=_positive_float(env, "DDL_HANG_FLOOR_S"),
            hang_io_floor_s=_positive_float(env, "DDL_HANG_IO_FLOOR_S"),
            launcher=detect_launcher(env),
        )

    def gpu_for_local_rank(self, local_rank: int) -> Optional[int]:
        """The GPU index (as CUDA numbers it in this process) for `local_rank`, or None.

        `per-rank`: the launcher already narrowed CUDA_VISIBLE_DEVICES, so this rank's GPU is 0.
        `local-rank` (or no binding given): all GPUs are visible; the rank takes the first GPU
        ddlrun laid out for it (DDL_LAYOUT_GPUS) or else `local_rank % visible GPUs`.
        """
        if self.gpu_binding == "per-rank":
            return 0
        if self.layout_gpus:
            if local_rank >= len(self.layout_gpus):
                raise DDLInputError(
                    f"DDL_LAYOUT_GPUS lists GPUs for {len(self.layout_gpus)} local ranks; "
                    f"local rank {local_rank} has none"
                )
            return self.layout_gpus[local_rank][0]
        if self.cuda_visible_devices is not None:
            n = len(self.cuda_visible_devices)
            return local_rank % n if n else None
        return None

    def torchrun_variables(self, rank: int, size: int, local_rank: int, local_size: int,
                           group_rank: int, master_addr: str, master_port: int) -> dict:
        """The torchrun environment variables for one rank (for ddlrun's per-rank shim)."""
        return {
            "RANK": str(rank), "WORLD_SIZE": str(size),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(local_size),
            "GROUP_RANK": str(group_rank),
            "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
        }


def detect_launcher(env: Mapping[str, str] = os.environ) -> LauncherInfo:
    """Rank facts from the launcher's own variables, most specific launcher first.

    MPI launchers come before Slurm because `mpiexec` inside an sbatch script inherits the
    batch step's SLURM_* variables, which describe the script, not the rank.
    """
    if "JSM_NAMESPACE_RANK" in env:
        return LauncherInfo("jsrun", _int(env, "JSM_NAMESPACE_RANK"), _int(env, "JSM_NAMESPACE_SIZE"),
                            _int(env, "JSM_NAMESPACE_LOCAL_RANK"), _int(env, "JSM_NAMESPACE_LOCAL_SIZE"))
    if "OMPI_COMM_WORLD_RANK" in env:
        return LauncherInfo("openmpi", _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE"),
                            _int(env, "OMPI_COMM_WORLD_LOCAL_RANK"), _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"))
    if "PALS_RANKID" in env:
        # HPE PALS (mpiexec on Polaris/Aurora): PALS_* per rank, PMI_SIZE/PMI_LOCAL_SIZE from Cray PMI
        return LauncherInfo("pals", _int(env, "PALS_RANKID"), _int(env, "PMI_SIZE"),
                            _int(env, "PALS_LOCAL_RANKID"), _int(env, "PMI_LOCAL_SIZE"), _int(env, "PALS_NODEID"))
    if "PMI_RANK" in env and "MPI_LOCALRANKID" in env:
        return LauncherInfo("hydra", _int(env, "PMI_RANK"), _int(env, "PMI_SIZE"),
                            _int(env, "MPI_LOCALRANKID"), _int(env, "MPI_LOCALNRANKS"))
    if "ALPS_APP_PE" in env:
        # ALPS_APP_PE is the global PE (rank); aprun does not export a per-node rank.
        return LauncherInfo("alps", rank=_int(env, "ALPS_APP_PE"))
    if "SLURM_STEP_ID" in env and "SLURM_PROCID" in env and "SLURM_LOCALID" in env:
        return LauncherInfo("slurm", _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"),
                            _int(env, "SLURM_LOCALID"), _slurm_local_size(env), _int(env, "SLURM_NODEID"))
    return LauncherInfo("none")


def _mode_from_options(options: str) -> Optional[Mode]:
    try:
        words = shlex.split(options)
    except ValueError as exc:
        raise DDLInputError(f"DDL_OPTIONS={options!r} cannot be split into words: {exc}") from None
    mode = None
    for i, word in enumerate(words):
        if word.startswith("-mode="):
            mode = word.split("=", 1)[1]
        elif word == "-mode":
            if i + 1 >= len(words):
                raise DDLInputError(f"DDL_OPTIONS={options!r}: -mode needs a value such as p:6x2x1x1")
            mode = words[i + 1]
    return parse_mode(mode, source="DDL_OPTIONS -mode") if mode is not None else None


def _int(env: Mapping[str, str], name: str) -> Optional[int]:
    value = env.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise DDLInputError(f"{name}={value!r} is not an integer") from None


def _positive_int(env: Mapping[str, str], name: str) -> Optional[int]:
    value = _int(env, name)
    if value is not None and value < 1:
        raise DDLInputError(f"{name}={value} must be a positive integer")
    return value


def _non_negative_int(env: Mapping[str, str], name: str) -> Optional[int]:
    value = _int(env, name)
    if value is not None and value < 0:
        raise DDLInputError(f"{name}={value} must be 0 or more")
    return value


def _float(env: Mapping[str, str], name: str) -> Optional[float]:
    value = env.get(name)
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        raise DDLInputError(f"{name}={value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise DDLInputError(f"{name}={value!r} must be a finite number")
    return number


def _positive_float(env: Mapping[str, str], name: str) -> Optional[float]:
    value = _float(env, name)
    if value is not None and value <= 0:
        raise DDLInputError(f"{name}={env[name]!r} must be greater than 0")
    return value


def _non_negative_float(env: Mapping[str, str], name: str) -> Optional[float]:
    value = _float(env, name)
    if value is not None and value < 0:
        raise DDLInputError(f"{name}={env[name]!r} must be 0 or more")
    return value


def _switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = (env.get(name) or "").strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise DDLInputError(f"{name}={env[name]!r} must be 1 or 0 (on or off)")


def stats_dir(env: Mapping[str, str] = os.environ) -> Optional[str]:
    """Where each rank writes its record (core/stats.py): DDL_STATS_DIR, else $WML_JOB_DIR/stats."""
    if env.get("DDL_STATS_DIR"):
        return os.path.abspath(env["DDL_STATS_DIR"])
    job_dir = env.get("WML_JOB_DIR")
    return os.path.join(job_dir, "stats") if job_dir else None


def _gpu_binding(env: Mapping[str, str]) -> Optional[str]:
    value = env.get("DDL_GPU_BINDING") or None
    if value is not None and value not in GPU_BINDINGS:
        raise DDLInputError(f"DDL_GPU_BINDING={value!r} must be one of {', '.join(GPU_BINDINGS)}")
    return value


def _layout_gpus(text: str) -> Tuple[Tuple[int, ...], ...]:
    if not text.strip():
        return ()
    try:
        return tuple(tuple(int(g) for g in part.split(",")) for part in text.split(";"))
    except ValueError:
        raise DDLInputError(
            f"DDL_LAYOUT_GPUS={text!r} must look like '0;1;2;3' or '0,1;2,3' (GPU ids per local rank)"
        ) from None


def _visible_devices(text: Optional[str]) -> Optional[Tuple[str, ...]]:
    if text is None:
        return None
    return tuple(part for part in text.split(",") if part.strip())


def _slurm_local_size(env: Mapping[str, str]) -> Optional[int]:
    # SLURM_TASKS_PER_NODE looks like "2(x3),1"; the node's own count is at SLURM_NODEID.
    text, node = env.get("SLURM_TASKS_PER_NODE"), _int(env, "SLURM_NODEID")
    if not text or node is None:
        return None
    counts = []
    for part in text.split(","):
        if "(x" in part:
            count, repeat = part.rstrip(")").split("(x")
            counts.extend([int(count)] * int(repeat))
        else:
            counts.append(int(part))
    return counts[node] if node < len(counts) else None
