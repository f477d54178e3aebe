"""Negotiated collectives of device tensors (horovod.torch on the NCCL transport), run in the
negotiated order on the process set's process group, on the device (transports/gpu/nccl_ops.py),
no host copy.

The negotiation (collectives/negotiation.py) matches requests by name as for host tensors; a request
whose tensors are announced "<dtype>@<device>" is posted here instead of to MPI.  The global set
runs on the runtime's process group (nccl.process_group); a process set on a subgroup of its
members, made at its first device collective (the runtime's group must exist already: horovod.torch
makes it when a process set is added on the NCCL transport, see horovod/torch/device_route.py).
"""
from __future__ import annotations

from typing import Any

from ..engine import kernels
from ..transports.gpu import nccl, nccl_ops
from ..transports.gpu.transport import decided_route


class DeviceFlight(kernels.InFlight):
    """A device collective in flight: done when the process group's work is."""

    pending: Any = None

    def test(self) -> bool:
        if not self.done and self.pending.done():
            self.finish()
            self.done = True
        return self.done


def group_of(ctl, device: str = "cuda"):
    """The process group of the controller's process set; the runtime's group is opened with the
    backend of `device`'s family: nccl (NCCL, RCCL in a ROCm build) or, for XPU tensors, xccl."""
    from ..state import runtime
    rt = runtime.current()
    chosen = decided_route(rt, device) if device == "xpu" else None
    world = nccl.process_group(rt, chosen.backend if chosen is not None and chosen.backend else "nccl")
    if ctl.set_id == 0:
        return world
    group = getattr(ctl, "device_group", None)
    if group is None:
        group = ctl.device_group = nccl_ops.subgroup(world, ctl.global_ranks)
    return group


def post(ctl, kind: str, entry, handle) -> kernels.InFlight:
    """Start the negotiated `kind` ("allgather", "broadcast", "alltoall", "reducescatter") of this
    rank's request on the device; returns its flight (done when the group's work is, outputs set)."""
    req = handle.request
    group = group_of(ctl, req.device)
    size = ctl.size
    if kind == "allgather":
        rows = [[int(entry.descs[r][3][i][2][0]) if entry.descs[r][3][i][2] else 1 for r in range(size)]
                for i in range(len(req.tensors))]
        handle.result = rows
        pending = nccl_ops.allgather_start(group, req.inputs, rows, ctl.rank)
    elif kind == "broadcast":
        pending = nccl_ops.broadcast_start(group, req.outputs, ctl.global_ranks.index(req.params[0]))
    elif kind == "alltoall":
        recv = [int(entry.descs[r][4][ctl.rank]) for r in range(size)]
        handle.result = recv
        pending = nccl_ops.alltoall_start(group, req.inputs[0], list(req.extra), recv)
    elif kind == "reducescatter":
        rows = [kernels.scatter_rows(shape[0], size) for _, _, shape in req.tensors]
        pending = nccl_ops.reducescatter_start(group, req.inputs, rows, ctl.rank)
    else:
        raise ValueError(f"no device route for {kind}")

    def finish() -> None:
        req.outputs = list(pending.wait())
    flight = DeviceFlight([], finish, label=kind.upper())
    flight.pending = pending
    return flight
