"""The host-staging transport, as Horovod's CPU path does it, for ranks that share a GPU.

Per call: the inputs are copied device-to-host into pinned buffers reused across calls
(`PinnedPool`, keyed by dtype and length), on a side stream that first waits for the caller's
stream (an event), so the copy starts once the work that produced the inputs has run and the
caller's later work is not waited for; the host waits only for that copy.  The host buffers go
through the CPU engine (shared memory on one host, MPI otherwise: the `reduce_host` etc.
callables ops.py passes in), then back host-to-device on the side stream, and the caller's
stream waits for that copy (an event): results are on the input's device, in order on the
caller's stream, and the host thread does not wait for them.

Pool reuse is safe because every copy of a pooled buffer runs on the one side stream: a
buffer handed back while its host-to-device copy is still queued is next written by a
device-to-host copy queued after it, and host code writes it only after that copy finished.

`HostCopies` stands in for the streams where tensors are CPU tensors, so the pool and the
order of copies and reductions run in CI; only the CUDA streams and events need a GPU.
"""
from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Callable, List, Sequence, Tuple

KEEP_SHAPES = 16  # (dtype, length) entries the pool keeps; the least recently used go first


class PinnedPool:
    """Host buffers reused across calls: `take(numel, dtype)` a 1-D buffer, `give` it back.

    `allocate(numel, dtype)` makes a new one (pinned memory where CUDA is present).
    `allocations` counts the buffers ever made (what the tests check for reuse).
    """

    def __init__(self, allocate: Callable, keep: int = KEEP_SHAPES):
        self._allocate = allocate
        self._keep = keep
        self._free: "OrderedDict[Tuple, List]" = OrderedDict()
        self.allocations = 0

    def take(self, numel: int, dtype):
        key = (dtype, numel)
        free = self._free.get(key)
        if free:
            self._free.move_to_end(key)
            return free.pop()
        self.allocations += 1
        return self._allocate(numel, dtype)

    def give(self, buf) -> None:
        key = (buf.dtype, buf.numel())
        self._free.setdefault(key, []).append(buf)
        self._free.move_to_end(key)
        while len(self._free) > self._keep:
            self._free.popitem(last=False)


def pinned_allocator(numel: int, dtype):
    torch = sys.modules["torch"]
    return torch.empty(numel, dtype=dtype, pin_memory=True)


def cpu_allocator(numel: int, dtype):
    return sys.modules["torch"].empty(numel, dtype=dtype)


class CudaCopies:
    """Copies on a side stream of `device`, ordered against the caller's stream by events."""

    def __init__(self, device: int):
        torch = sys.modules["torch"]
        self.torch = torch
        self.device = torch.device("cuda", device)
        self.side = torch.cuda.Stream(self.device)

    def to_host(self, srcs: Sequence, dsts: Sequence) -> None:
        torch = self.torch
        caller = torch.cuda.current_stream(self.device)
        ready = torch.cuda.Event()
        ready.record(caller)
        copied = torch.cuda.Event()
        with torch.cuda.stream(self.side):
            self.side.wait_event(ready)  # the inputs are written once the caller's earlier work ran
            for src, dst in zip(srcs, dsts):
                dst.copy_(src.detach().reshape(-1), non_blocking=True)
                src.record_stream(self.side)
            copied.record(self.side)
        copied.synchronize()  # the host reads the buffers next

    def to_device(self, srcs: Sequence, dsts: Sequence) -> None:
        torch = self.torch
        caller = torch.cuda.current_stream(self.device)
        copied = torch.cuda.Event()
        with torch.cuda.stream(self.side):
            for src, dst in zip(srcs, dsts):
                dst.detach().view(-1).copy_(src, non_blocking=True)
                dst.record_stream(self.side)
            copied.record(self.side)
        caller.wait_event(copied)  # the caller's later work sees the results


class HostCopies:
    """The same copies for CPU tensors, done at once (CI runs the staging logic with these)."""

    def to_host(self, srcs: Sequence, dsts: Sequence) -> None:
        for src, dst in zip(srcs, dsts):
            dst.copy_(src.detach().reshape(-1))

    def to_device(self, srcs: Sequence, dsts: Sequence) -> None:
        for src, dst in zip(srcs, dsts):
            dst.detach().view(-1).copy_(src)


class Staging:
    """Pool + copies: the host-staged collectives."""

    def __init__(self, pool: PinnedPool, copies):
        self.pool, self.copies = pool, copies

    @classmethod
    def for_device(cls, index: int) -> "Staging":
        return cls(PinnedPool(pinned_allocator), CudaCopies(index))

    def _stage(self, tensors: Sequence) -> Tuple[list, list]:
        """Pooled host buffers (one per dtype) holding `tensors`; returns (buffers, per-tensor views)."""
        totals: "OrderedDict" = OrderedDict()
        for t in tensors:
            totals[t.dtype] = totals.get(t.dtype, 0) + t.numel()
        buffers = {dtype: self.pool.take(n, dtype) for dtype, n in totals.items()}
        offsets = dict.fromkeys(totals, 0)
        views = []
        for t in tensors:
            start = offsets[t.dtype]
            views.append(buffers[t.dtype][start:start + t.numel()])
            offsets[t.dtype] = start + t.numel()
        return list(buffers.values()), views

    def allreduce(self, tensors: Sequence, reduce_host: Callable[[list], None]) -> None:
        """Reduce `tensors` in place: D2H into pooled buffers, `reduce_host(host views shaped as
        the tensors)`, H2D back."""
        buffers, views = self._stage(tensors)
        try:
            self.copies.to_host(tensors, views)
            reduce_host([v.view(t.shape) for v, t in zip(views, tensors)])
            self.copies.to_device(views, tensors)
        finally:
            for buf in buffers:
                self.pool.give(buf)

    def bcast(self, tensors: Sequence, is_root: bool, bcast_host: Callable[[list], None]) -> None:
        buffers, views = self._stage(tensors)
        try:
            if is_root:
                self.copies.to_host(tensors, views)
            bcast_host([v.view(t.shape) for v, t in zip(views, tensors)])
            if not is_root:
                self.copies.to_device(views, tensors)
        finally:
            for buf in buffers:
                self.pool.give(buf)

    def allgather(self, tensor, gather_host: Callable):
        """`gather_host(host copy)` returns the gathered CPU tensor; the result goes to a new tensor on
        the input's device."""
        buffers, (view,) = self._stage([tensor])
        try:
            self.copies.to_host([tensor], [view])
            gathered = gather_host(view.view(tensor.shape))
        finally:
            for buf in buffers:
                self.pool.give(buf)
        out = tensor.new_empty(tuple(gathered.shape))
        self.copies.to_device([gathered.reshape(-1)], [out])
        return out
