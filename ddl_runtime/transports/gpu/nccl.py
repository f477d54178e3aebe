"""The NCCL transport: collectives on device tensors through a torch.distributed process group.

Every function takes its process group as a parameter, so the same code runs on CUDA tensors
through the runtime's NCCL group and, in CI, on CPU tensors through a gloo group bootstrapped
the same way (`process_group(rt, "gloo")`).  Tensors are fused per dtype into one flat buffer
(a single tensor is reduced where it lies), reduced with one all_reduce, and copied back; the
work is enqueued on the caller's stream order (NCCL's own stream waits for it) and results are
in order on the caller's stream after `wait()`.
"""
from __future__ import annotations

import socket
import sys
from typing import Callable, List, Sequence

from ...core.stats import collective
from ...errors import DDLError
from .family import TWINS, TorchBuild, missing_backend

_group = None
_owned = False  # True when the runtime created the process group (finalize destroys it)


def process_group(rt, backend: str = "nccl"):
    """The runtime's process group, created on first use (collectively: every rank gets here).
    Rank 0 opens a TCPStore on a free port and broadcasts its address over the control communicator.
    `backend`: nccl (NCCL, or RCCL in torch's ROCm build), xccl (oneCCL, XPU tensors), gloo; one this
    torch lacks is one line naming what to install (family.py), raised before any communication."""
    global _group, _owned
    torch = sys.modules["torch"]
    dist = torch.distributed
    if _group is not None:
        return _group
    build = TorchBuild.of(torch)
    if not build.has(backend):
        raise DDLError(missing_backend(backend, build))
    backend = TWINS.get(backend, backend)
    if dist.is_initialized():
        if dist.get_backend() != backend:
            raise DDLError(f"torch.distributed is already initialized with backend '{dist.get_backend()}'; "
                           f"GPU tensors need {backend}")
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


class Pending:
    """Reductions enqueued on the group; wait() orders the caller's stream after them, finishes
    (avg, copies out of fused buffers) and returns `results`."""

    def __init__(self, works: list, finish: Callable[[], None], results: list):
        self._works, self._finish, self.results = works, finish, results
        self._finished = False

    @collective
    def done(self) -> bool:
        return self._finished or all(w.is_completed() for w in self._works)

    @collective
    def wait(self) -> list:
        if not self._finished:
            for work in self._works:
                work.wait()
            self._finish()
            self._finished = True
        return self.results


def allreduce_start(group, tensors: Sequence, op: str, size: int, results: list) -> Pending:
    """Start reducing `tensors` in place (sum, avg, min, max); fused per dtype."""
    torch = sys.modules["torch"]
    dist = torch.distributed
    reduce_op = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM,
                 "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op]
    by_dtype: dict = {}
    for t in tensors:
        if t.numel():
            by_dtype.setdefault(t.dtype, []).append(t)
    works, flats = [], []
    for group_tensors in by_dtype.values():
        if len(group_tensors) == 1:
            flat = group_tensors[0].detach().view(-1)
        else:
            flat = torch.cat([t.detach().reshape(-1) for t in group_tensors])
        flats.append((flat, group_tensors))
        works.append(dist.all_reduce(flat, op=reduce_op, group=group, async_op=True))

    def finish() -> None:
        for flat, group_tensors in flats:
            if op == "avg":
                flat.div_(size)
            if len(group_tensors) > 1:
                for t, part in zip(group_tensors, torch.split(flat, [t.numel() for t in group_tensors])):
                    t.detach().copy_(part.view_as(t))
    return Pending(works, finish, results)


def allreduce(group, tensors: Sequence, op: str, size: int) -> None:
    allreduce_start(group, tensors, op, size, []).wait()


def broadcast(group, tensors: Sequence, root: int) -> None:
    dist = sys.modules["torch"].distributed
    works = [dist.broadcast(t.detach(), src=root, group=group, async_op=True) for t in tensors if t.numel()]
    for work in works:
        work.wait()


def allgather(group, tensor, size: int):
    """Every rank's `tensor` concatenated along the first dim (first dims may differ); a new tensor
    on the input's device.  A 0-d tensor counts as one row."""
    torch = sys.modules["torch"]
    dist = torch.distributed
    t = tensor.detach().reshape(1) if tensor.dim() == 0 else tensor.detach()
    count = torch.tensor([t.shape[0]], dtype=torch.int64, device=t.device)
    counts_t = [torch.empty_like(count) for _ in range(size)]
    dist.all_gather(counts_t, count, group=group)
    counts: List[int] = [int(c.item()) for c in counts_t]
    rows, rest = max(counts), tuple(t.shape[1:])
    if t.shape[0] < rows:
        t = torch.cat([t, t.new_zeros((rows - t.shape[0],) + rest)])
    parts = [t.new_empty((rows,) + rest) for _ in range(size)]
    if rows:
        dist.all_gather(parts, t.contiguous(), group=group)
    return torch.cat([p[:c] for p, c in zip(parts, counts)])
