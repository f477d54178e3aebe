"""GPU (CUDA) tensors: CUDA-aware MPI pass-through, otherwise NCCL through torch.distributed.

`DDL_CUDA_AWARE_MPI=1` (set it when the site's MPI is CUDA-aware, e.g. Spectrum MPI with
`jsrun --smpiargs="-gpu"`) passes device buffers straight to MPI, one in-place allreduce per
tensor (float32/float64/int32/int64; 16-bit floats go through NCCL since MPI cannot reduce
them).  Otherwise the runtime bootstraps a torch.distributed NCCL process group itself: rank 0
opens a TCPStore on a free port and broadcasts its address over MPI.  Tensors are fused per
dtype into one flat buffer with torch.cat, reduced with one NCCL all_reduce, and copied back.

The CPU path is ddl_runtime's tested path; this module has only been exercised where a GPU
is present.  Tensors on other devices (meta, mps, xla, ...) raise DDLInputError.
"""
from __future__ import annotations

import os
import socket
import sys
from typing import List, Sequence

from mpi4py import MPI

from .algorithms import MPI_OPS
from .buffers import TensorRef
from .errors import DDLError, DDLInputError

_MPI_CUDA_TYPES = {"float32": MPI.FLOAT, "float64": MPI.DOUBLE, "int32": MPI.INT32_T, "int64": MPI.INT64_T}
_group = None
_owned = False  # True when the runtime created the process group (finalize destroys it)


def _check_devices(refs: Sequence[TensorRef]) -> None:
    for ref in refs:
        if ref.device != "cuda":
            raise DDLInputError(f"tensor '{ref.name}' is on device '{ref.device}'; only cpu and cuda tensors are supported")


def cuda_aware_mpi() -> bool:
    return os.environ.get("DDL_CUDA_AWARE_MPI", "").lower() in ("1", "true", "yes")


def _nccl_group(rt, backend: str = "nccl"):
    """The NCCL process group, created on first use (collectively, so every rank must get here)."""
    global _group, _owned
    torch = sys.modules["torch"]
    dist = torch.distributed
    if _group is not None:
        return _group
    if dist.is_initialized():
        if dist.get_backend() != "nccl":
            raise DDLError(f"torch.distributed is already initialized with backend '{dist.get_backend()}'; "
                           "GPU tensors need NCCL")
        _group = dist.group.WORLD
        return _group
    if rt.rank == 0:
        store = dist.TCPStore(socket.gethostname(), 0, rt.size, is_master=True, wait_for_workers=False)
        address = (socket.gethostname(), store.port)
    else:
        address = None
    address = rt.control.bcast(address, root=0)
    if rt.rank != 0:
        store = dist.TCPStore(address[0], address[1], rt.size, is_master=False)
    dist.init_process_group(backend, store=store, rank=rt.rank, world_size=rt.size)
    _group = dist.group.WORLD
    _owned = True
    return _group


def shutdown() -> None:
    """Destroy the process group the runtime created (finalize); one the user made stays."""
    global _group, _owned
    if _owned:
        dist = sys.modules["torch"].distributed
        if dist.is_initialized():
            dist.destroy_process_group()
    _group, _owned = None, False


def allreduce(rt, refs: Sequence[TensorRef], op: str) -> None:
    _check_devices(refs)
    if rt.size == 1:  # the identity: no copy, no kernel, no process group
        return
    torch = sys.modules["torch"]
    if cuda_aware_mpi() and all(r.dtype in _MPI_CUDA_TYPES for r in refs):
        for ref in refs:
            flat = ref.obj.detach().view(-1)
            if flat.numel():
                torch.cuda.current_stream().synchronize()
                request = rt.algorithms.flat.Iallreduce(MPI.IN_PLACE, [flat, _MPI_CUDA_TYPES[ref.dtype]], MPI_OPS[op])
                rt.engine.wait_request(request)
                if op == "avg":
                    flat.div_(rt.size)
        return
    dist = torch.distributed
    group = _nccl_group(rt)
    reduce_op = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM,
                 "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op]
    by_dtype: dict = {}
    for ref in refs:
        if ref.obj.numel():
            by_dtype.setdefault(ref.obj.dtype, []).append(ref.obj)
    for tensors in by_dtype.values():
        flat = torch.cat([t.detach().reshape(-1) for t in tensors])
        dist.all_reduce(flat, op=reduce_op, group=group)
        if op == "avg":
            flat.div_(rt.size)
        for t, part in zip(tensors, torch.split(flat, [t.numel() for t in tensors])):
            t.detach().copy_(part.view_as(t))


class _Done:
    def __init__(self, results: List):
        self.results = results

    def done(self) -> bool:
        return True

    def wait(self) -> List:
        return self.results


def allreduce_async(rt, refs: Sequence[TensorRef], op: str, results: List):
    """NCCL runs on its own CUDA stream; the reduction is enqueued now and ordered on the device."""
    allreduce(rt, refs, op)
    return _Done(results)


def bcast(rt, refs: Sequence[TensorRef], root: int) -> None:
    _check_devices(refs)
    if rt.size == 1:
        return
    torch = sys.modules["torch"]
    if cuda_aware_mpi():
        torch.cuda.current_stream().synchronize()
        for ref in refs:
            flat = ref.obj.detach().view(-1).view(torch.uint8)
            rt.engine.wait_request(rt.control.Ibcast([flat, MPI.BYTE], root=root))
        return
    group = _nccl_group(rt)
    for ref in refs:
        torch.distributed.broadcast(ref.obj.detach(), src=root, group=group)
