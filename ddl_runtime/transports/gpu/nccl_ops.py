"""Horovod's data-moving collectives on device tensors through a torch.distributed process group.

Like nccl.py, every function takes its process group as a parameter: on the NCCL transport it is
the runtime's NCCL group (or a process set's subgroup, `subgroup`), and in CI a gloo group over
CPU tensors runs the very same code.  What Horovod's GPU build does (nccl_operations.cc):

  * broadcast and allgather move bytes (`ncclChar`): any dtype, views as uint8;
  * allgather of equal first dims is one all_gather into the fused output; first dims that differ
    are padded to the longest (Horovod broadcasts each rank's part instead) and compacted after;
    a group of tensors is fused into one buffer per rank;
  * alltoall is one all_to_all_single on the byte rows (Horovod: grouped ncclSend/ncclRecv);
  * reducescatter sums with reduce_scatter_single (the caller scales, as for allreduce); rows that
    do not divide evenly (the first ranks get one more) are padded to the longest part.  On gloo
    (CI), which has no reduce-scatter of its own, the padded tensor is all-reduced instead.

Each `*_start` enqueues the work (async, on NCCL's stream, ordered after the caller's) and returns
an nccl.Pending whose wait() returns the outputs, on the input's device.  The ranks passed here are
ranks *of the group* (a process set's own numbering).
"""
from __future__ import annotations

import sys
from typing import List, Sequence

from .nccl import Pending


def _torch():
    return sys.modules["torch"]


def _gather_single(dist):
    """torch's one-tensor all-gather: ``all_gather_single`` where torch has it (torch 2.13, here,
    has it and warns that the older name ``all_gather_into_tensor`` is deprecated), else the older name."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _reduce_scatter_single(dist):
    """``reduce_scatter_single`` where torch has it, else ``reduce_scatter_tensor`` (deprecated where it does)."""
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _bytes(t):
    """A contiguous tensor's memory as a flat uint8 tensor (a view where it is contiguous)."""
    torch = _torch()
    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat


def _row_bytes(t) -> int:
    n = t.element_size()
    for d in t.shape[1:]:
        n *= int(d)
    return n


def subgroup(world, ranks: Sequence[int]):
    """A process group of `ranks` (world ranks), made by those ranks only (a process set's first
    device collective runs on its members only)."""
    dist = _torch().distributed
    return dist.new_group(list(ranks), use_local_synchronization=True)


def broadcast_start(group, tensors: Sequence, root: int) -> Pending:
    """Broadcast `tensors` from group rank `root` in place, as bytes."""
    dist = _torch().distributed
    works, copies = [], []
    for t in tensors:
        if not t.numel():
            continue
        buf = _bytes(t)
        works.append(dist.broadcast(buf, group_src=root, group=group, async_op=True))
        if buf.data_ptr() != t.data_ptr():  # a non-contiguous tensor: received into a copy
            copies.append((t, buf))

    def finish() -> None:
        for t, buf in copies:
            t.detach().copy_(buf.view(t.dtype).view(t.shape))
    return Pending(works, finish, list(tensors))


def allgather_start(group, tensors: Sequence, rows: Sequence[Sequence[int]], rank: int) -> Pending:
    """Every rank's tensors concatenated along the first dim: `rows[i][r]` is the first dim of
    tensor i on group rank r (known from negotiation); 0-d tensors count as one row.  The outputs
    (new tensors on the inputs' device) are the Pending's results."""
    torch = _torch()
    dist = torch.distributed
    ts = [t.detach().reshape(1) if t.dim() == 0 else t.detach() for t in tensors]
    size = len(rows[0]) if rows else 1
    widths = [_row_bytes(t) for t in ts]
    per_rank = [sum(rows[i][r] * widths[i] for i in range(len(ts))) for r in range(size)]
    block = max(per_rank) if per_rank else 0
    device = ts[0].device
    mine = [_bytes(t) for t in ts]
    send = mine[0] if len(mine) == 1 else torch.cat(mine) if mine else torch.empty(0, dtype=torch.uint8,
                                                                                    device=device)
    if send.numel() < block:
        send = torch.cat([send, send.new_zeros(block - send.numel())])
    gathered = torch.empty(block * size, dtype=torch.uint8, device=device)
    works = [_gather_single(dist)(gathered, send, group=group, async_op=True)] if block else []
    results: List = [None] * len(ts)

    def finish() -> None:
        parts: List[list] = [[] for _ in ts]
        for r in range(size):
            at = r * block
            for i, t in enumerate(ts):
                n = rows[i][r] * widths[i]
                parts[i].append(gathered[at:at + n])
                at += n
        for i, t in enumerate(ts):
            flat = parts[i][0] if size == 1 else torch.cat(parts[i])
            if flat.storage_offset() % t.element_size():  # after a tensor of a narrower dtype in the group
                flat = flat.clone()
            out = flat.view(t.dtype) if widths[i] else torch.empty(0, dtype=t.dtype, device=device)
            results[i] = out.reshape((sum(rows[i]),) + tuple(t.shape[1:]))
    return Pending(works, finish, results)


def alltoall_start(group, tensor, send_rows: Sequence[int], recv_rows: Sequence[int]) -> Pending:
    """send_rows[r] rows of `tensor` to group rank r, recv_rows[r] rows from it, concatenated in rank
    order into a new tensor (the Pending's results[0])."""
    torch = _torch()
    dist = torch.distributed
    t = tensor.detach()
    width = _row_bytes(t)
    out = torch.empty((sum(recv_rows),) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
    works = []
    if width and (sum(send_rows) or sum(recv_rows)):
        works.append(dist.all_to_all_single(_bytes(out), _bytes(t), [n * width for n in recv_rows],
                                            [n * width for n in send_rows], group=group, async_op=True))
    return Pending(works, lambda: None, [out])


def reducescatter_start(group, tensors: Sequence, rows: Sequence[Sequence[int]], rank: int) -> Pending:
    """Sum `tensors` across the group; group rank r gets rows[i][r] rows of tensor i (consecutive, in
    rank order).  Sums only: the caller scales on the device (average, pre/postscale)."""
    torch = _torch()
    dist = torch.distributed
    works, results, slices = [], [], []
    native = _native_reduce_scatter(group)
    for t, parts in zip(tensors, rows):
        t = t.detach().contiguous()
        longest = max(parts)
        rest = tuple(t.shape[1:])
        if all(p == longest for p in parts):
            src = t
        else:  # padded to the longest part per rank
            src = t.new_zeros((longest * len(parts),) + rest)
            at = 0
            for r, p in enumerate(parts):
                src[r * longest:r * longest + p] = t[at:at + p]
                at += p
        if native:
            out = t.new_empty((longest,) + rest)
            if out.numel():
                works.append(_reduce_scatter_single(dist)(out, src, group=group, async_op=True))
        else:  # the whole (padded) tensor summed; this rank's part taken from it
            out = src.clone()
            if out.numel():
                works.append(dist.all_reduce(out, group=group, async_op=True))
            out = out[rank * longest:(rank + 1) * longest]
        slices.append((out, parts[rank]))
        results.append(None)

    def finish() -> None:
        for i, (out, mine) in enumerate(slices):
            results[i] = out[:mine]
    return Pending(works, finish, results)


def _native_reduce_scatter(group) -> bool:
    """NCCL reduce-scatters (ncclReduceScatter); gloo has none of its own: torch runs it as a Work that
    never reports completion until waited on, which a negotiated, polled collective cannot use."""
    return _torch().distributed.get_backend(group) == "nccl"
