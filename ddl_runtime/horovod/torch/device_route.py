"""horovod.torch's device route: CUDA tensors on the NCCL transport, moved and reduced on the GPU.

Where the job's transport is NCCL (ddl_runtime.transports.gpu.transport: every rank owns its
GPU), a CUDA tensor on the rank's GPU is submitted as it is (announced "<dtype>@cuda"), negotiated
by name like any request, and once every rank has it, run in the negotiated order on the process
set's process group (ddl_runtime.collectives.negotiated_device -> transports/gpu/nccl.py,
nccl_ops.py): allreduce, allgather (first dims may differ), broadcast (in place or not), alltoall
(with splits), reducescatter, their grouped forms, on the global set or a process set, with joined ranks as on the host (their zeros in an
allreduce; the other collectives refuse).  Scaling (average, pre/postscale) is done on the device
in the tensor's dtype, as Horovod's GPU build does.  As there, every rank count takes it, one rank
included.  Reductions need a dtype NCCL reduces (not bool, int16); moves take any dtype (bytes).
What the route does not take goes through the host staging (mpi_ops._staging).

XPU tensors (Aurora) take the same route on torch.distributed's xccl group (oneCCL) where every
rank's torch has xccl (transports/gpu/family.py, decided from what init gathered), else host memory;
on a process set other than the global one once the xccl group exists (the global set's first XPU
collective makes it: at_add_process_set opens only the CUDA transport's group).

`DEVICES` is the device types the route takes: CI adds "cpu" to run it on CPU tensors through a
gloo group (tests/runtime/mpi_scripts/hvd_device_route_job.py).
"""
from __future__ import annotations

import sys
from typing import Any, List, Sequence

import torch

from ddl_runtime.collectives.negotiation import Handle

from ..common.requests import submit

DEVICES = {"cuda", "xpu"}
NCCL_REDUCE_DTYPES = {torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
                      torch.float32, torch.float64}


def takes(tensors: Sequence[Any], process_set, reduce: bool = False) -> bool:
    """Whether a request takes the device route: tensors on this rank's GPU (DEVICES), of a dtype the
    collective takes there, in a job whose agreed transport is NCCL; a process set other than the
    global one only once the runtime's process group exists (made when a set is added: at_add_process_set), so that its
    subgroup is made by its members alone.  The same on every rank."""
    if not tensors:
        return False
    from ddl_runtime.state import runtime
    from ddl_runtime.transports.gpu.transport import decided, decided_route, state
    rt = runtime.get()
    if rt is None:
        return False
    xpu = isinstance(tensors[0], torch.Tensor) and tensors[0].device.type == "xpu"
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type not in DEVICES:
            return False
        if reduce and t.dtype not in NCCL_REDUCE_DTYPES:
            return False
        if t.device.type == "cuda" and t.device.index != state(rt).index:
            return False  # another GPU than the rank's: through host memory, as before
    if xpu:  # xccl where every rank's torch has it (decided from what init gathered), else host memory
        chosen_xpu = decided_route(rt, "xpu")
        if chosen_xpu is None or chosen_xpu.backend is None:
            return False
    else:
        chosen = decided(rt)
        if chosen is None or chosen.name != "nccl":
            return False
    set_id = getattr(process_set, "process_set_id", None) if process_set is not None else 0
    if set_id == 0:
        return True
    if set_id is None:
        return False  # not registered: the usual path says so
    return _world_exists()


def _world_exists() -> bool:
    from ddl_runtime.transports.gpu import nccl
    dist = sys.modules["torch"].distributed
    return nccl._group is not None or (dist.is_available() and dist.is_initialized())


def at_add_process_set(rt) -> None:
    """hvd.add_process_set (collective over the job): where the transport is decided NCCL already
    (every rank named its GPU at init), make the runtime's process group now, on every rank, so that
    a process set's first device collective needs its members only (its subgroup).  Nothing where it
    is not decided or cannot be made: that set's CUDA tensors then go through the host staging."""
    from ddl_runtime.errors import DDLError
    from ddl_runtime.transports.gpu import nccl
    from ddl_runtime.transports.gpu.transport import decided
    try:
        chosen = decided(rt)
    except DDLError:
        return
    if chosen is None or chosen.name != "nccl" or not torch.distributed.is_available():
        return
    try:
        nccl.process_group(rt)
    except DDLError:
        return


def _device(tensors: Sequence[torch.Tensor]) -> str:
    return tensors[0].device.type


# -- the requests ----------------------------------------------------------------------------------
def allgather_start(tensors: Sequence[torch.Tensor], name, process_set, what: str, group: bool):
    inputs = [t.detach().reshape(1) if t.dim() == 0 else t.detach().contiguous() for t in tensors]
    handle = submit("allgather", name, (), inputs, [None] * len(inputs), process_set, what, group=group,
                    device=_device(tensors))

    def finish(h: Handle) -> List[torch.Tensor]:
        return list(h.request.outputs)
    return handle, finish


def broadcast_start(tensor: torch.Tensor, root: int, name, process_set, inplace: bool, what: str):
    """In place: received into `tensor` (a contiguous copy first where it is not contiguous); else into
    a new tensor, the root's a copy of its input (Horovod's output)."""
    direct = inplace and tensor.is_contiguous()
    target = tensor.detach() if direct else tensor.detach().clone(memory_format=torch.contiguous_format)
    handle = submit("broadcast", name, (root,), [target], [target], process_set, what, device=_device([tensor]))

    def finish(_h: Handle) -> torch.Tensor:
        if not inplace:
            return target
        if not direct:
            with torch.no_grad():
                tensor.copy_(target)
        return tensor
    return handle, finish


def alltoall_start(tensor: torch.Tensor, send: List[int], splits, name, process_set, what: str):
    handle = submit("alltoall", name, (), [tensor.detach().contiguous()], [None], process_set, what,
                    extra=tuple(send), device=_device([tensor]))

    def finish(h: Handle):
        rdev = splits.device if isinstance(splits, torch.Tensor) else torch.device("cpu")
        return h.request.outputs[0], torch.tensor(h.result, dtype=torch.int32, device=rdev)
    return handle, finish


def reducescatter_start(tensors: Sequence[torch.Tensor], name, op_name: str, pre: float, post: float,
                        process_set, what: str, group: bool, scaled, postscale_of):
    """Summed on the device; `scaled(t, factor)` prescales before and postscales (with the average's
    1/size: `postscale_of`) after, on the device in the tensor's dtype."""
    inputs = [scaled(t.detach(), pre).contiguous() for t in tensors]
    handle = submit("reducescatter", name, (op_name, pre, post), inputs, [None] * len(inputs), process_set, what,
                    group=group, device=_device(tensors))
    factor = postscale_of(op_name, post, process_set, "cuda", what)

    def finish(h: Handle) -> List[torch.Tensor]:
        return [scaled(out, factor) for out in h.request.outputs]
    return handle, finish, op_name

