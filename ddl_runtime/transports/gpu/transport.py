"""One device transport per job, chosen from what every rank reports at init and agreed by every rank.

  * ``nccl``: the runtime's torch.distributed NCCL group (nccl.py), where every rank owns its GPU;
  * ``ipc``: device-side collectives through CUDA IPC (ipc.py), where every rank is on one GPU
    (NCCL refuses two ranks of one communicator on one device: "Duplicate GPU detected");
  * ``host``: host staging (host.py) through the CPU engine, where some ranks share a GPU and
    others do not (what IPC within one GPU cannot do), or where ``DDL_GPU_TRANSPORT=host``.

Every rank sends its GPU's identity (devices.py) and its ``DDL_GPU_TRANSPORT`` over the control
communicator at init (`at_init`: one small allgather); every rank then decides from the same list,
so a bad or disagreeing setting, or NCCL forced on a shared GPU, is the same one-line error on
every rank, raised at the first CUDA collective.  Where torch was not loaded at init no rank could
name its GPU: the list is gathered again at the first CUDA collective (every rank is there).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ...errors import DDLError, DDLInputError, DDLMismatchError
from .devices import GpuIdentity, local_identity, rank_gpu_index, shared_gpus
from .family import Route, TorchBuild, route

ENV = "DDL_GPU_TRANSPORT"
TRANSPORTS = ("nccl", "ipc", "host")


@dataclass(frozen=True)
class Transport:
    name: str  # one of TRANSPORTS
    reason: str  # why, for messages and the README's "which transport did my job get"


@dataclass
class GpuState:
    """The runtime's device state (Runtime.gpu): the agreed transport and what it keeps between calls."""

    index: Optional[int]  # this rank's CUDA index, None without a GPU
    everyone: Optional[list] = None  # every rank's (DDL_GPU_TRANSPORT, GpuIdentity or None, XPU route said), at init
    transport: Optional[Transport] = None
    staging: Any = None  # host.Staging, made on the first host-staged call
    staged: Any = None  # staged.StagedStream (the host transport's async allreduces), False where none can be
    ipc_groups: Dict[str, Any] = field(default_factory=dict)  # ipc.IpcGroup per stream of calls, made on first use
    routes: Dict[str, Route] = field(default_factory=dict)  # device type -> its agreed route (agree_route)


def state(rt) -> GpuState:
    if rt.gpu is None:
        rt.gpu = GpuState(rank_gpu_index(rt.local_gpuid))
    return rt.gpu


def _mine(gpu: GpuState) -> tuple:
    """What this rank sends: its setting, its GPU, and how it would move XPU tensors (None without torch)."""
    return (os.environ.get(ENV, ""), local_identity(gpu.index),
            _route_said("xpu") if "torch" in sys.modules else None)


def at_init(rt) -> GpuState:
    """The device state at init: every rank's setting and GPU (collective, on every rank)."""
    gpu = GpuState(rank_gpu_index(rt.local_gpuid))
    gpu.everyone = rt.control.allgather(_mine(gpu))
    return gpu


def _known(everyone: Optional[list]) -> bool:
    return everyone is not None and any(e[1] is not None for e in everyone)


def decided(rt) -> Optional[Transport]:
    """The transport without communicating: decided from what init gathered when a rank named its
    GPU then (identically on every rank, errors included), else None."""
    gpu = state(rt)
    if gpu.transport is None and _known(gpu.everyone):
        gpu.transport = decide([e[0] for e in gpu.everyone], [e[1] for e in gpu.everyone])
    return gpu.transport


def decide(settings: Sequence[str], identities: Sequence[Optional[GpuIdentity]]) -> Transport:
    """The transport from every rank's raw DDL_GPU_TRANSPORT ('' when unset) and GPU identity."""
    bad = [(r, v) for r, v in enumerate(settings) if v.strip().lower() not in TRANSPORTS + ("",)]
    if bad:
        rank, value = bad[0]
        raise DDLInputError(f"{ENV}={value!r} (rank {rank}) must be one of {', '.join(TRANSPORTS)}, "
                            "or unset to choose from the GPUs")
    values = [v.strip().lower() for v in settings]
    if len(set(values)) > 1:
        groups: Dict[str, List[int]] = {}
        for rank, value in enumerate(values):
            groups.setdefault(value, []).append(rank)
        sides = "; ".join(f"{_ranks(r)}: {v or 'unset'}" for v, r in groups.items())
        raise DDLMismatchError(f"ranks disagree about {ENV} ({sides}); set it alike on every rank")
    forced = values[0] if values else ""
    shared = shared_gpus(identities)
    if shared:
        uuid, ranks = next(iter(shared.items()))
        sharing = f"{_ranks(ranks)} share GPU {uuid}" + (f" (and {len(shared) - 1} more GPUs are shared)"
                                                           if len(shared) > 1 else "")
        if forced == "nccl":
            raise DDLError(f"{ENV}=nccl, but {sharing}: NCCL cannot run two ranks of one communicator on one "
                           f"GPU; unset {ENV} or set it to ipc or host")
        if forced == "host":
            return Transport("host", f"{ENV}=host")
        ranks = next(iter(shared.values()))
        if len(shared) == 1 and len(ranks) == len(identities):
            return Transport("ipc", f"{ENV}=ipc" if forced else f"{sharing}: every rank on it (CUDA IPC)")
        if forced == "ipc":
            raise DDLError(f"{ENV}=ipc, but {sharing} and not every rank is on it: the ipc transport needs "
                           f"every rank on one GPU; unset {ENV} or set it to host")
        return Transport("host", f"{sharing}, not every rank on it")
    if forced == "ipc" and len(identities) > 1:
        raise DDLError(f"{ENV}=ipc, but the ranks own their GPUs: the ipc transport needs every rank on one GPU; "
                       f"unset {ENV} or set it to nccl or host")
    if forced:
        return Transport(forced, f"{ENV}={forced}")
    return Transport("nccl", "every rank owns its GPU")


def agree(rt) -> Transport:
    """This job's transport (collective where init saw no GPU: every rank of a CUDA collective gets
    here after its signature agreed)."""
    gpu = state(rt)
    if decided(rt) is None:
        gpu.everyone = rt.control.allgather(_mine(gpu))
        gpu.transport = decide([e[0] for e in gpu.everyone], [e[1] for e in gpu.everyone])
    return gpu.transport


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))


_ERRORS = {cls.__name__: cls for cls in (DDLError, DDLInputError, DDLMismatchError)}


def _route_said(device: str) -> tuple:
    """This rank's route for `device`'s tensors as every rank can compare it: ("", Route) or
    (error type, its line)."""
    try:
        return ("", route(device, TorchBuild.of(sys.modules["torch"]), os.environ.get(ENV, "").strip().lower()))
    except DDLError as exc:
        return (type(exc).__name__, str(exc))


def _settle(device: str, everyone: Sequence[tuple]) -> Route:
    """This rank's route from every rank's `_route_said`: a rank's failure, or ranks that would move
    the tensors differently, is the same one line on every rank."""
    failed = [(r, s) for r, s in enumerate(everyone) if s[0]]
    if failed:
        rank, (kind, text) = failed[0]
        raise _ERRORS.get(kind, DDLError)(f"rank {rank}: {text}")
    groups: Dict[str, List[int]] = {}
    for rank, (_, chosen) in enumerate(everyone):
        groups.setdefault(chosen.backend or "host memory", []).append(rank)
    if len(groups) > 1:
        sides = "; ".join(f"{_ranks(r)}: {b}" for b, r in groups.items())
        host = groups.get("host memory", [0])[0]  # the side whose reason names what to install, if any
        raise DDLMismatchError(f"ranks disagree about how {device} tensors move ({sides}); rank {host}: "
                               f"{everyone[host][1].describe()}; set {ENV} alike and use one torch build on every rank")
    return everyone[0][1]


def decided_route(rt, device: str) -> Optional[Route]:
    """The route of `device`'s tensors without communicating: from what init gathered (XPU; torch
    loaded at init), identically on every rank, errors included; else None."""
    gpu = state(rt)
    if device not in gpu.routes and device == "xpu" and gpu.everyone and all(e[2] for e in gpu.everyone):
        gpu.routes[device] = _settle(device, [e[2] for e in gpu.everyone])
    return gpu.routes.get(device)


def agree_route(rt, device: str) -> Route:
    """The agreed route of `device`'s tensors (family.py): as init decided it, else gathered now
    (collective: every rank of the first call on such tensors gets here after its signature agreed)."""
    gpu = state(rt)
    if decided_route(rt, device) is None:
        gpu.routes[device] = _settle(device, rt.control.allgather(_route_said(device)))
    return gpu.routes[device]
