"""GPU tensors (CUDA, ROCm, XPU): the device transports.

ops.py validates a call, agrees on its signature and on where its tensors are (devices.py:
a CUDA tensor on a rank without a GPU, on a GPU other than the rank's, or a group that mixes
devices is one line on every rank), then hands the tensors here:

  * one rank: the identity (no copy, no process group);
  * `DDL_CUDA_AWARE_MPI=1` and an MPI dtype: device buffers straight to MPI (mpi.py);
  * else the job's transport, chosen at the first CUDA collective and agreed by every rank
    (transport.py): NCCL through the runtime's torch.distributed group where every rank owns
    its GPU (nccl.py), CUDA IPC in the GPU's memory where every rank is on one GPU (ipc.py),
    host staging through the CPU engine where some ranks share a GPU and others not (host.py;
    `allreduce_n_async` there runs in a thread of its own over shared memory of its own, so it
    overlaps with the caller's work: staged.py).  `DDL_GPU_TRANSPORT=nccl|ipc|host` forces one.

Device families (family.py): ROCm tensors are `cuda` tensors to torch's HIP build and take all of
the above, its `nccl` backend being RCCL; XPU tensors (Aurora) take torch.distributed's `xccl`
backend (oneCCL) where this torch has it, else host memory through the CPU engine (xpu.py).

Results are on the input's device, in order on the caller's stream.  The host callables
(`reduce_host`, `bcast_host`, `gather_host`) are ops.py's CPU collectives without their
agreement, which has already happened.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ...engine.buffers import TensorRef
from . import ipc, mpi, nccl, xpu
from .host import Staging
from .staged import StagedStream
from .transport import agree, decided, state


def drain(rt) -> None:
    """Finish the staged allreduces in flight (finalize, before this rank announces its exit)."""
    staged = rt.gpu.staged if rt.gpu is not None else None
    if staged:
        staged.drain()


def shutdown(rt=None, collective: bool = True) -> None:
    """Destroy the process group the runtime created, if any, the IPC groups and the staged stream
    (finalize; their shared memory is freed collectively only when every rank finalized)."""
    if rt is not None:
        ipc.shutdown(rt, collective)
        staged = rt.gpu.staged if rt.gpu is not None else None
        if staged:
            staged.close(collective)
            rt.gpu.staged = None
    nccl.shutdown()


def host_staging(rt) -> Staging:
    """The host staging of this rank's GPU (pinned pool, side stream), made once; horovod.torch
    stages CUDA tensors through it too."""
    gpu = state(rt)
    if gpu.staging is None:
        gpu.staging = Staging.for_device(gpu.index)
    return gpu.staging


def staged_stream(rt):
    """The host transport's stream of asynchronous allreduces (staged.py), opened on first use
    (collective: every rank of a host-staged allreduce_n_async gets here); None where the job has
    no shared memory for it."""
    gpu = state(rt)
    if gpu.staged is None:
        gpu.staged = StagedStream.open(rt, host_staging(rt)) or False
    return gpu.staged or None


def allreduce_start(rt, refs: Sequence[TensorRef], targets: Sequence, op: str, results: list,
                    reduce_host: Callable[[list], None], what: str = "allreduce",
                    asynchronous: bool = False):
    """Reduce the device tensors `targets` (the refs' tensors, or their outputs) in place; returns
    a handle whose wait() returns `results`.  `asynchronous` (allreduce_n_async): on the host
    transport the reduction overlaps with the caller's work (staged.py)."""
    if rt.size > 1:
        if xpu.takes(refs):
            return xpu.allreduce_start(rt, targets, op, results, reduce_host)
        if mpi.takes(refs):
            mpi.allreduce(rt, [_retarget(r, t) for r, t in zip(refs, targets)], op)
        elif agree(rt).name == "nccl":
            return nccl.allreduce_start(nccl.process_group(rt), targets, op, rt.size, results)
        elif agree(rt).name == "ipc":
            return ipc.group(rt).allreduce_start(targets, op, results)
        else:
            stream = staged_stream(rt) if asynchronous and StagedStream.takes(op) else None
            pending = stream.start(targets, op, what, results) if stream is not None else None
            if pending is not None:
                return pending
            host_staging(rt).allreduce(targets, reduce_host)
    return nccl.Pending([], lambda: None, results)


def bcast(rt, refs: Sequence[TensorRef], root: int, bcast_host: Callable[[list], None]) -> None:
    if rt.size == 1:
        return
    if xpu.takes(refs):
        xpu.bcast(rt, [r.obj for r in refs], root, bcast_host)
    elif mpi.enabled():
        mpi.bcast(rt, refs, root)
    elif agree(rt).name == "nccl":
        nccl.broadcast(nccl.process_group(rt), [r.obj for r in refs], root)
    elif agree(rt).name == "ipc":
        ipc.group(rt).bcast([r.obj for r in refs], root).wait()
    else:
        host_staging(rt).bcast([r.obj for r in refs], rt.rank == root, bcast_host)


def allgather(rt, ref: TensorRef, gather_host: Callable):
    """Every rank's tensor concatenated along the first dim, as a new tensor on the input's device."""
    tensor = ref.obj
    if rt.size == 1:
        return (tensor.detach().reshape(1) if tensor.dim() == 0 else tensor.detach()).clone()
    if xpu.takes([ref]):
        return xpu.allgather(rt, tensor, gather_host)
    if agree(rt).name == "nccl":
        return nccl.allgather(nccl.process_group(rt), tensor, rt.size)
    if agree(rt).name == "ipc":
        return ipc.group(rt).allgather(tensor).wait()[0]
    return host_staging(rt).allgather(tensor, gather_host)


def device_allreduce_start(rt, tensors: Sequence, op: str, stream: str = "negotiated", comm=None):
    """Reduce device tensors in place on the job's device route (NCCL, or CUDA IPC where every rank
    is on one GPU); `stream`/`comm`: horovod's negotiated calls use an IPC group of their own (they
    interleave with ddl_runtime's own calls differently on each rank).  Returns a handle (wait())."""
    chosen = decided(rt)  # no communication here: horovod decided the route before submitting
    if chosen is not None and chosen.name == "ipc":
        return ipc.group(rt, stream, comm).allreduce_start(tensors, op, [])
    return nccl.allreduce_start(nccl.process_group(rt), tensors, op, rt.size, [])


def _retarget(ref: TensorRef, tensor) -> TensorRef:
    if tensor is ref.obj:
        return ref
    return TensorRef(tensor, ref.name, ref.dtype, ref.shape, None, ref.kind, ref.device, index=ref.index)
