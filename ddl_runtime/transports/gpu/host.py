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
device-to-host copy queued after it, and host code writes it only after that copy finished;
a buffer the host writes first (`Staging.lease`: a broadcast's receivers, an output) is taken,
then the side stream drained, so a copy queued before it was handed back has run.  The pool
takes a lock: the staged stream's thread (staged.py) hands buffers back while the caller's
thread takes them, and both queue copies on the side stream (CUDA streams take work from any
thread, in the order it was queued).  An asynchronous operation (horovod.torch's handles) holds its
buffers (a `Lease`) until its result was copied back: operations in flight at once never share one.

`HostCopies` stands in for the streams where tensors are CPU tensors, so the pool and the
order of copies and reductions run in CI; only the CUDA streams and events need a GPU.
"""
from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, List, Sequence, Tuple

KEEP_SHAPES = 16  # (dtype, length) entries the pool keeps; the least recently used go first


@dataclass
class Lease:
    """Pooled host buffers taken for one operation, and the views (shaped as its tensors) into them.
    An asynchronous operation holds its lease until its result was copied back (`Staging.give_back`)."""

    buffers: list
    views: list


class PinnedPool:
    """Host buffers reused across calls: `take(numel, dtype)` a 1-D buffer, `give` it back.

    `allocate(numel, dtype)` makes a new one (pinned memory where CUDA is present).
    `allocations` counts the buffers ever made (what the tests check for reuse).
    """

    def __init__(self, allocate: Callable, keep: int = KEEP_SHAPES):
        self._allocate = allocate
        self._keep = keep
        self._free: "OrderedDict[Tuple, List]" = OrderedDict()
        self._lock = threading.Lock()
        self.allocations = 0

    def take(self, numel: int, dtype):
        key = (dtype, numel)
        with self._lock:
            free = self._free.get(key)
            if free:
                self._free.move_to_end(key)
                return free.pop()
            self.allocations += 1
        return self._allocate(numel, dtype)

    def give(self, buf) -> None:
        key = (buf.dtype, buf.numel())
        with self._lock:
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
        self.finish_to_host(self.start_to_host(srcs, dsts))  # the host reads the buffers next

    def start_to_host(self, srcs: Sequence, dsts: Sequence):
        """Queue the device-to-host copies after the caller's work so far; the host does not wait.
        Returns what `finish_to_host` waits for (an event)."""
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
        return copied

    def finish_to_host(self, copied) -> None:
        """Block this thread until the copies of `start_to_host` landed in host memory."""
        copied.synchronize()

    def start_to_device(self, srcs: Sequence, dsts: Sequence):
        """Queue host-to-device copies on the side stream (any thread), after what it holds already: for
        a staged allreduce, its device-to-host copies, which waited for the caller's work on `dsts`.
        Returns what `join` orders the caller's stream after (an event)."""
        torch = self.torch
        copied = torch.cuda.Event()
        with torch.cuda.device(self.device), torch.cuda.stream(self.side):
            for src, dst in zip(srcs, dsts):
                dst.detach().view(-1).copy_(src, non_blocking=True)
                dst.record_stream(self.side)
            copied.record(self.side)
        return copied

    def join(self, copied) -> None:
        """The caller's stream (this thread's current stream) waits for `start_to_device`'s copies."""
        self.torch.cuda.current_stream(self.device).wait_event(copied)

    def to_device(self, srcs: Sequence, dsts: Sequence) -> None:
        torch = self.torch
        caller = torch.cuda.current_stream(self.device)
        free = torch.cuda.Event()
        free.record(caller)
        copied = torch.cuda.Event()
        with torch.cuda.stream(self.side):
            self.side.wait_event(free)  # the caller's earlier work on dsts (or on their memory) ran first
            for src, dst in zip(srcs, dsts):
                dst.detach().view(-1).copy_(src, non_blocking=True)
                dst.record_stream(self.side)
            copied.record(self.side)
        caller.wait_event(copied)  # the caller's later work sees the results

    def drain(self) -> None:
        """Wait for the copies queued on the side stream (before the host writes a pooled buffer)."""
        self.side.synchronize()


class HostCopies:
    """The same copies for CPU tensors, done at once (CI runs the staging logic with these)."""

    def drain(self) -> None:
        pass

    def to_host(self, srcs: Sequence, dsts: Sequence) -> None:
        for src, dst in zip(srcs, dsts):
            dst.copy_(src.detach().reshape(-1))

    def to_device(self, srcs: Sequence, dsts: Sequence) -> None:
        for src, dst in zip(srcs, dsts):
            dst.detach().view(-1).copy_(src)

    def start_to_host(self, srcs: Sequence, dsts: Sequence) -> None:
        self.to_host(srcs, dsts)

    def finish_to_host(self, copied) -> None:
        pass

    def start_to_device(self, srcs: Sequence, dsts: Sequence) -> None:
        self.to_device(srcs, dsts)

    def join(self, copied) -> None:
        pass


class Staging:
    """Pool + copies: the host-staged collectives."""

    def __init__(self, pool: PinnedPool, copies):
        self.pool, self.copies = pool, copies

    @classmethod
    def for_device(cls, index: int) -> "Staging":
        return cls(PinnedPool(pinned_allocator), CudaCopies(index))

    def lease(self, specs: Sequence[Tuple[tuple, object]]) -> Lease:
        """Pooled host buffers (one per dtype) for tensors of these (shape, dtype), for the host to write
        (a broadcast's receivers, an output); they stay out of the pool until `give_back(lease)`.  The
        side stream's queued copies finish after the buffers are taken: one queued before a buffer was
        given back may still read it."""
        lease = self._take(specs)
        self.copies.drain()
        return lease

    def _take(self, specs: Sequence[Tuple[tuple, object]]) -> Lease:
        totals: "OrderedDict" = OrderedDict()
        for shape, dtype in specs:
            totals[dtype] = totals.get(dtype, 0) + _numel(shape)
        buffers = {dtype: self.pool.take(n, dtype) for dtype, n in totals.items()}
        offsets = dict.fromkeys(totals, 0)
        views = []
        for shape, dtype in specs:
            start, n = offsets[dtype], _numel(shape)
            views.append(buffers[dtype][start:start + n].view(shape))
            offsets[dtype] = start + n
        return Lease(list(buffers.values()), views)

    def give_back(self, lease: Lease) -> None:
        """Return a lease's buffers to the pool: only once nothing reads or writes them any more, except
        host-to-device copies already queued (see the module's note on the side stream)."""
        for buf in lease.buffers:
            self.pool.give(buf)
        lease.buffers = []

    def copy_out(self, tensors: Sequence) -> Lease:
        """`tensors` copied device-to-host into a new lease (the host may read it on return)."""
        lease = self._take([(tuple(t.shape), t.dtype) for t in tensors])
        try:
            self.copies.to_host(tensors, [v.view(-1) for v in lease.views])
        except BaseException:
            self.give_back(lease)
            raise
        return lease

    def start_copy_out(self, tensors: Sequence) -> Tuple[Lease, object]:
        """`tensors` queued device-to-host into a new lease, the host not waiting: it may read the lease
        after `copies.finish_to_host(token)` (staged.py's thread does)."""
        lease = self._take([(tuple(t.shape), t.dtype) for t in tensors])
        try:
            token = self.copies.start_to_host(tensors, [v.view(-1) for v in lease.views])
        except BaseException:
            self.give_back(lease)
            raise
        return lease, token

    def copy_in(self, hosts: Sequence, dsts: Sequence) -> None:
        """Host tensors (a lease's views, or other host memory) into the device tensors `dsts`, ordered
        before the caller's later work."""
        self.copies.to_device([h.reshape(-1) for h in hosts], dsts)

    def allreduce(self, tensors: Sequence, reduce_host: Callable[[list], None]) -> None:
        """Reduce `tensors` in place: D2H into pooled buffers, `reduce_host(host views shaped as
        the tensors)`, H2D back."""
        lease = self.copy_out(tensors)
        try:
            reduce_host(lease.views)
            self.copy_in(lease.views, tensors)
        finally:
            self.give_back(lease)

    def bcast(self, tensors: Sequence, is_root: bool, bcast_host: Callable[[list], None]) -> None:
        lease = self.copy_out(tensors) if is_root else self.lease([(tuple(t.shape), t.dtype) for t in tensors])
        try:
            bcast_host(lease.views)
            if not is_root:
                self.copy_in(lease.views, tensors)
        finally:
            self.give_back(lease)

    def allgather(self, tensor, gather_host: Callable):
        """`gather_host(host copy)` returns the gathered CPU tensor; the result goes to a new tensor on
        the input's device."""
        lease = self.copy_out([tensor])
        try:
            gathered = gather_host(lease.views[0])
        finally:
            self.give_back(lease)
        out = tensor.new_empty(tuple(gathered.shape))
        self.copy_in([gathered], [out])
        return out


def _numel(shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
