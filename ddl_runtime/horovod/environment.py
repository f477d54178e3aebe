"""Horovod's ``HOROVOD_*`` settings mapped onto the runtime's ``DDL_*`` settings.

``hvd.init()`` calls :func:`apply` before the runtime starts (the runtime reads only ``DDL_*``,
through ``jobenv.JobEnvironment``) and :func:`after_init` once it runs.  The mapping:

======================================  ===================================================
``HOROVOD_FUSION_THRESHOLD`` (bytes)    ``DDL_FUSION_MB`` (bytes / 2**20; 0 = no fusion)
``HOROVOD_STALL_CHECK_TIME_SECONDS``    ``DDL_STALL_WARNING_S``
``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`` ``DDL_STALL_SHUTDOWN_S`` (0 = never)
``HOROVOD_STALL_CHECK_DISABLE=1``       no stall warnings (``DDL_STALL_WARNING_S`` = 1 day)
``HOROVOD_CACHE_CAPACITY``              ``DDL_RESPONSE_CACHE`` (descriptors cached; 0 = no response cache)
``HOROVOD_TIMELINE=path``               Chrome trace: rank 0 writes ``path``, rank r
                                        ``path`` with ``.rank<r>`` before the extension
``HOROVOD_TIMELINE=DYNAMIC``            nothing until ``hvd.start_timeline(path)``
``HOROVOD_TIMELINE_MARK_CYCLES=1``      CYCLE_START marks, one per negotiation round
``HOROVOD_CYCLE_TIME``                  accepted, no effect: a bucket is reduced the moment
                                        its last gradient is ready (there is no cycle)
======================================  ===================================================

A ``DDL_*`` variable set explicitly (``ddlrun --timeline``, the job's environment) wins over
its Horovod twin, with a notice.  Other ``HOROVOD_*`` variables that change Horovod's
behaviour get one notice line each on rank 0; those that only select how Horovod was built
or are set by ``horovodrun`` for its own use are ignored silently.  A value that is not a
number raises ``DDLInputError`` naming the variable, identically on every rank, before any
communication.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, MutableMapping, Optional, Tuple

from ..errors import DDLInputError

ONE_DAY_S = 86400.0

# Settings Horovod reads at run time that wml does not replicate, with the reason.
NO_EFFECT = {
    "HOROVOD_CYCLE_TIME": "reductions start as soon as a bucket of gradients is ready (no background cycle)",
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "the runtime picks the hierarchical allreduce itself from the node layout",
    "HOROVOD_HIERARCHICAL_ALLGATHER": "allgather is always flat",
    "HOROVOD_AUTOTUNE": "no autotuning; set HOROVOD_FUSION_THRESHOLD (or DDL_FUSION_MB) by hand",
    "HOROVOD_MPI_THREADS_DISABLE": "the runtime asks MPI for the thread level it needs",
    "HOROVOD_NUM_NCCL_STREAMS": "GPU reductions use one NCCL or CUDA-aware MPI stream",
    "HOROVOD_BATCH_D2D_MEMCOPIES": "not applicable (no batched device copies)",
    "HOROVOD_THREAD_AFFINITY": "there is no background thread to pin",
    "HOROVOD_DISABLE_GROUP_FUSION": "groups are always reduced as their own buckets",
    "HOROVOD_ELASTIC": "elastic training is not supported",
    "HOROVOD_ADASUM_MPI_CHUNK_SIZE": "Adasum exchanges each half in one message (no chunking)",
    "HOROVOD_ENABLE_XLA_OPS": "not applicable",
    "HOROVOD_GLOO_TIMEOUT_SECONDS": "collectives run over MPI, not Gloo",
    "HOROVOD_CONTROLLER": "collectives run over MPI",
    "HOROVOD_CPU_OPERATIONS": "collectives run over MPI",
}
# Build-time switches, horovodrun's own bookkeeping, and settings every implementation accepts.
SILENT_PREFIXES = ("HOROVOD_WITH_", "HOROVOD_WITHOUT_", "HOROVOD_GPU", "HOROVOD_BUILD_", "HOROVOD_GLOO_",
                   "HOROVOD_CUDA_", "HOROVOD_NCCL_", "HOROVOD_ROCM_", "HOROVOD_CMAKE", "HOROVOD_DEBUG")
SILENT = {"HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
          "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME", "HOROVOD_LOG_LEVEL", "HOROVOD_LOG_HIDE_TIME",
          "HOROVOD_DYNAMIC_PROCESS_SETS", "HOROVOD_STALL_CHECK_DISABLE", "HOROVOD_TIMELINE",
          "HOROVOD_TIMELINE_MARK_CYCLES",
          "HOROVOD_FUSION_THRESHOLD", "HOROVOD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
          "HOROVOD_CACHE_CAPACITY",
          "HOROVOD_MPI", "HOROVOD_SHIM"}


@dataclass(frozen=True)
class HorovodSettings:
    """What the job's ``HOROVOD_*`` variables ask for."""

    ddl: Tuple[Tuple[str, str], ...] = ()      # DDL_* variables to set
    timeline: Optional[str] = None             # HOROVOD_TIMELINE=path (not DYNAMIC)
    dynamic_timeline: bool = False             # HOROVOD_TIMELINE=DYNAMIC
    mark_cycles: bool = False                  # HOROVOD_TIMELINE_MARK_CYCLES=1
    notices: Tuple[str, ...] = field(default_factory=tuple)


def _number(env: Mapping[str, str], name: str, minimum: float = 0.0) -> Optional[float]:
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise DDLInputError(f"{name}={env[name]!r} is not a number") from None
    if not value >= minimum or value == float("inf"):
        raise DDLInputError(f"{name}={env[name]!r} must be a finite number >= {minimum:g}")
    return value


def _switch(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def read(env: Mapping[str, str] = os.environ) -> HorovodSettings:
    """The settings and notices for ``env`` (no side effects)."""
    ddl: Dict[str, str] = {}
    notices: List[str] = []
    threshold = _number(env, "HOROVOD_FUSION_THRESHOLD")
    if threshold is not None:
        ddl["DDL_FUSION_MB"] = f"{threshold / 2**20:g}"
    if _switch(env, "HOROVOD_STALL_CHECK_DISABLE"):
        ddl["DDL_STALL_WARNING_S"] = f"{ONE_DAY_S:g}"
    else:
        warning = _number(env, "HOROVOD_STALL_CHECK_TIME_SECONDS")
        if warning is not None:
            if warning <= 0:
                raise DDLInputError(f"HOROVOD_STALL_CHECK_TIME_SECONDS={env['HOROVOD_STALL_CHECK_TIME_SECONDS']!r} "
                                    f"must be greater than 0")
            ddl["DDL_STALL_WARNING_S"] = f"{warning:g}"
    capacity = _number(env, "HOROVOD_CACHE_CAPACITY")
    if capacity is not None:
        if capacity != int(capacity):
            raise DDLInputError(f"HOROVOD_CACHE_CAPACITY={env['HOROVOD_CACHE_CAPACITY']!r} must be a whole number")
        ddl["DDL_RESPONSE_CACHE"] = str(int(capacity))
    shutdown = _number(env, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")
    if shutdown:  # 0 means never, as in Horovod
        ddl["DDL_STALL_SHUTDOWN_S"] = f"{shutdown:g}"
    timeline = (env.get("HOROVOD_TIMELINE") or "").strip() or None
    dynamic = timeline == "DYNAMIC"
    if timeline is not None and env.get("DDL_TIMELINE"):
        notices.append(f"HOROVOD_TIMELINE={timeline} ignored: DDL_TIMELINE={env['DDL_TIMELINE']} "
                       f"(ddlrun --timeline) already records a timeline")
        timeline, dynamic = None, False
    for key, value in list(ddl.items()):
        if env.get(key, "") not in ("", value):
            notices.append(f"{key}={env[key]} is set, so its Horovod equivalent ({value}) is not used")
            del ddl[key]
    for name in sorted(k for k in env if k.startswith("HOROVOD_")):
        if name in NO_EFFECT:
            notices.append(f"{name}={env[name]} has no effect with wml: {NO_EFFECT[name]}")
        elif name not in SILENT and not name.startswith(SILENT_PREFIXES):
            notices.append(f"{name}={env[name]} is not a setting wml knows; ignored")
    return HorovodSettings(ddl=tuple(sorted(ddl.items())), timeline=None if dynamic else timeline,
                           dynamic_timeline=dynamic, notices=tuple(notices),
                           mark_cycles=(env.get("HOROVOD_TIMELINE_MARK_CYCLES") or "").strip().lower()
                           in ("1", "true", "yes", "on"))


_settings: Optional[HorovodSettings] = None


def apply(env: MutableMapping[str, str] = os.environ) -> HorovodSettings:
    """Before the runtime starts: put the DDL_* equivalents into ``env`` (os.environ)."""
    global _settings
    settings = read(env)
    for key, value in settings.ddl:
        env[key] = value
    _settings = settings
    return settings


def after_init() -> None:
    """Once the runtime runs: notices on rank 0, the timeline's clock, HOROVOD_TIMELINE=path."""
    from ..state import runtime as _rt
    from . import timeline

    rt = _rt.current()
    settings = _settings or read()
    timeline.agree_epoch(rt)
    if rt.rank == 0:
        from ..core import log as _log
        for notice in settings.notices:
            _log.log(f"horovod: {notice}")
    if settings.timeline:
        timeline.start_timeline(settings.timeline, mark_cycles=settings.mark_cycles)
