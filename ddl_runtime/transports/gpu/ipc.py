"""Device-side collectives for ranks that share one GPU: the ``ipc`` transport.

Ranks whose tensors live on one GPU reduce, broadcast and gather them in that GPU's memory, as
CUDA-aware MPI implementations do within a node.  Each rank owns a *slot* of device memory,
exported once as a CUDA IPC handle and opened by every other rank; handles are exchanged (over
MPI) when a group is made and again only when a call needs a larger slot, as the pinned pool
keeps its buffers.  Each rank also exports two interprocess CUDA events: `ready` (its slot holds
this call's data) and `done` (it finished reading every peer's slot).

Call g (calls run in the same order on every rank of a group: agreed signatures, or the
negotiated order; one group per stream of calls), on the caller's stream:
  1. wait for every peer's `done` of call g-1 (nobody still reads this rank's slot);
  2. copy the inputs into the slot and record `ready`; the host publishes "ready g" (one
     shared-memory word per rank);
  3. once every peer published g (a host spin: the peers' records are issued), wait for their
     `ready` events and combine the slots in rank order into the outputs (sum, avg, min, max:
     bit-identical on every rank), or copy the root's slot (broadcast), or every slot's rows
     (allgather);
  4. record `done`; the host publishes "done g".
The host never waits for the GPU: results are on the caller's stream, in order, and a call returns
once it has issued its work (allreduce_n_async overlaps with the caller's later work).

Faults: the host spins check their peers; a peer process that died (same host: its pid is gone or
a zombie) or finalized is this rank's DDLError naming it, a peer that does not arrive is a line
every DDL_STALL_WARNING_S naming it and an error after DDL_STALL_SHUTDOWN_S: never a silent hang.
A group that failed stays failed (its slots may be half written).

The logic is `IpcGroup` over a `Backend`: `CudaBackend` (torch's CUDA IPC: a storage's
_share_cuda_ handle through torch.multiprocessing.reductions.reduce_tensor / rebuild_cuda_tensor,
torch.cuda.Event(interprocess=True) with ipc_handle / from_ipc_handle) and `StandInBackend`, its
CPU stand-in (ipc_standin.py): slots in POSIX shared memory (the handle is the segment's name), a
"stream" that is a worker thread running the device work in order, and events that are
shared-memory counters (record: the stream sets it to g; wait: the stream spins until it reaches
g), so CI runs the handle exchange, the ordering and the fault logic with real MPI ranks.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence

import numpy as np
from mpi4py import MPI

from ...core.stats import collective
from ...errors import DDLError

ALIGN = 256  # byte offset of each tensor in a slot
GROW = 1 << 20  # slots grow in whole MiB, at least doubling
WORDS = 4  # per rank, in the group's shared words: pid, ready, done, spare
PID, READY, DONE = 0, 1, 2
REDUCE_OPS = ("sum", "avg", "min", "max")


# -- backends --------------------------------------------------------------------------------------
class CudaBackend:
    """CUDA IPC on the rank's GPU; device work is issued on the caller's current stream."""

    def __init__(self, device_index: int):
        torch = sys.modules["torch"]
        self.torch = torch
        self.device = torch.device("cuda", device_index)

    def alloc(self, nbytes: int):
        return self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device)

    def export(self, buf) -> Any:
        from torch.multiprocessing.reductions import reduce_tensor
        return reduce_tensor(buf)  # (rebuild_cuda_tensor, args): the storage's cudaIpcMemHandle

    def open(self, handle: Any):
        rebuild, args = handle
        args = list(args)
        args[6] = self.device.index  # the device: this process's number for the shared GPU, not the exporter's
        return rebuild(*args)  # cudaIpcOpenMemHandle, cached by torch per handle

    def release(self, buf) -> None:
        pass  # dropped references close the mapping (torch's storage)

    def new_event(self):
        with self.torch.cuda.device(self.device):
            event = self.torch.cuda.Event(interprocess=True)
            event.record(self.torch.cuda.current_stream(self.device))  # created on this GPU
        return event

    def export_event(self, event) -> Any:
        return bytes(event.ipc_handle())

    def open_event(self, handle: Any):
        return self.torch.cuda.Event.from_ipc_handle(self.device, handle)

    def launch(self, work: Callable[[], None]) -> None:
        with self.torch.no_grad():
            work()  # enqueued on the caller's stream

    def record(self, event, g: int) -> None:
        event.record(self.torch.cuda.current_stream(self.device))

    def wait_event(self, event, g: int, check: Callable[[], None]) -> None:
        self.torch.cuda.current_stream(self.device).wait_event(event)

    def settle(self, check: Callable[[], None]) -> None:
        """Nothing: results are in order on the caller's stream (as NCCL's work.wait())."""

    def settled(self) -> bool:
        return True

    def synchronize(self, check: Callable[[], None]) -> None:
        """Wait for the caller's stream without a blocking driver call, checking the peers."""
        done = self.torch.cuda.Event()
        done.record(self.torch.cuda.current_stream(self.device))
        spins = 0
        while not done.query():
            spins += 1
            if spins % 64 == 0:
                check()
            time.sleep(0) if spins < 1000 else time.sleep(0.0002)


# -- the group -------------------------------------------------------------------------------------
@dataclass
class IpcPending:
    """A call's handle: wait() returns its results (in order on the caller's stream; the stand-in
    drains its stream), raising the group's error if a peer failed meanwhile."""

    group: "IpcGroup"
    results: list
    _finished: bool = False

    @collective
    def done(self) -> bool:
        if not self._finished and self.group.backend.settled():
            self._finished = True
        return self._finished

    @collective
    def wait(self) -> list:
        if not self._finished:
            self.group.backend.settle(self.group.check_peers)
            self._finished = True
        return self.results


@dataclass
class _Layout:
    offsets: List[int] = field(default_factory=list)
    nbytes: List[int] = field(default_factory=list)
    total: int = 0


def _layout(tensors: Sequence) -> _Layout:
    lay = _Layout()
    at = 0
    for t in tensors:
        n = t.numel() * t.element_size()
        lay.offsets.append(at)
        lay.nbytes.append(n)
        at += -(-n // ALIGN) * ALIGN
    lay.total = at
    return lay


class IpcGroup:
    """One stream of device collectives among ranks that share a GPU (collective to make: every
    rank of `comm`, all on one host)."""

    def __init__(self, comm: MPI.Comm, backend, what: str = "GPU collective",
                 stall_warning_s: float = 60.0, stall_shutdown_s: Optional[float] = None,
                 departed: Callable[[], Sequence[int]] = lambda: (), idle: Callable[[], None] = lambda: None,
                 log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)):
        self.comm = comm.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.backend, self.what = backend, what
        self.stall_warning_s, self.stall_shutdown_s = stall_warning_s, stall_shutdown_s
        self.departed, self.idle, self.log = departed, idle, log
        self.win = MPI.Win.Allocate_shared(8 * WORDS * self.size if self.rank == 0 else 0, 8, comm=self.comm)
        buf, _ = self.win.Shared_query(0)
        self.words = np.ndarray((self.size, WORDS), dtype=np.int64, buffer=buf)
        self.words[self.rank] = (os.getpid(), 0, 0, 0)
        self.ready, self.done = backend.new_event(), backend.new_event()
        events = self.comm.allgather((backend.export_event(self.ready), backend.export_event(self.done)))
        self.peer_ready = [None if p == self.rank else backend.open_event(events[p][0]) for p in range(self.size)]
        self.peer_done = [None if p == self.rank else backend.open_event(events[p][1]) for p in range(self.size)]
        self.comm.Barrier()  # every pid written before anyone checks one
        self.g = 0
        self.capacity = 0
        self.slot = None
        self.slots: list = []
        self.exchanges = 0  # slot handle exchanges so far (the tests: once per size class, not per call)
        self.broken: Optional[str] = None
        self.calling = ""

    # -- faults -----------------------------------------------------------------------------------
    def check_peers(self, ranks: Optional[Sequence[int]] = None) -> None:
        """Raise DDLError naming a peer that died or finalized (and mark the group broken)."""
        if self.broken:
            raise DDLError(self.broken)
        gone = set(self.departed())
        lost = []  # every peer found gone: a survivor that raised and exited may be seen before the first to die
        for p in (range(self.size) if ranks is None else ranks):
            if p == self.rank:
                continue
            pid = int(self.words[p, PID])
            if p in gone or not _alive(pid):
                lost.append(f"rank {p} " + ("finalized" if p in gone else f"died (pid {pid})"))
        if lost:
            self.broken = (f"{self.calling or self.what}: {', '.join(lost)} while ranks sharing this GPU "
                           "held each other's CUDA IPC handles; this GPU group cannot continue")
            raise DDLError(self.broken)

    def _spin(self, column: int, g: int, ranks: Sequence[int]) -> None:
        """Host wait until every rank of `ranks` published `g` in `column`."""
        start = warned = time.monotonic()
        spins = 0
        while True:
            late = [p for p in ranks if self.words[p, column] < g]
            if not late:
                return
            spins += 1
            if spins % 64:
                if spins > 2000:
                    time.sleep(0.00005)
                continue
            self.check_peers(late)
            self.idle()
            now = time.monotonic()
            if now - warned >= self.stall_warning_s:
                warned = now
                self.log(f"ddl_runtime: {self.calling}: waiting for rank{'s' if len(late) > 1 else ''} "
                         f"{','.join(map(str, late))} (sharing this GPU) for {now - start:.0f} s")
            if self.stall_shutdown_s is not None and now - start >= self.stall_shutdown_s:
                self.broken = (f"{self.calling}: rank{'s' if len(late) > 1 else ''} {','.join(map(str, late))} "
                               f"did not arrive in {now - start:.0f} s; giving up")
                raise DDLError(self.broken)

    # -- slots ------------------------------------------------------------------------------------
    def _ensure(self, nbytes: int) -> None:
        """Every rank's slot holds `nbytes` (collective; every rank asks for the same size)."""
        if nbytes <= self.capacity:
            return
        self.backend.synchronize(self.check_peers)  # this rank reads no old slot any more
        self.comm.Barrier()  # nor does anyone else
        old = self.slot
        self.slots = []
        self.capacity = max(-(-nbytes // GROW) * GROW, 2 * self.capacity)
        self.slot = self.backend.alloc(self.capacity)
        handles = self.comm.allgather(self.backend.export(self.slot))
        self.slots = [self.slot if p == self.rank else self.backend.open(handles[p]) for p in range(self.size)]
        self.exchanges += 1
        self.comm.Barrier()  # every peer mapped the new slots before any old one goes
        if old is not None:
            self.backend.release(old)

    def _begin(self, what: str) -> int:
        if self.broken:
            raise DDLError(self.broken)
        self.calling = what
        self.g += 1
        g = self.g
        others = [p for p in range(self.size) if p != self.rank]
        self._spin(DONE, g - 1, others)
        for p in others:  # nobody still reads this rank's slot (call g-1)
            self.backend.wait_event(self.peer_done[p], g - 1, self.check_peers)
        return g

    def _publish_ready(self, g: int, ranks: Sequence[int]) -> None:
        self.backend.record(self.ready, g)
        self.words[self.rank, READY] = g
        self._spin(READY, g, [p for p in ranks if p != self.rank])
        for p in ranks:
            if p != self.rank:
                self.backend.wait_event(self.peer_ready[p], g, self.check_peers)

    def _finish(self, g: int) -> None:
        self.backend.record(self.done, g)
        self.words[self.rank, DONE] = g

    def _views(self, slot, lay: _Layout, tensors: Sequence) -> list:
        return [slot[o:o + n].view(t.dtype).view(-1) for o, n, t in zip(lay.offsets, lay.nbytes, tensors)]

    # -- collectives ------------------------------------------------------------------------------
    def allreduce(self, tensors: Sequence, op: str, what: str = "allreduce") -> IpcPending:
        """Reduce `tensors` (this rank's, on the shared GPU) in place; every rank gets the same bits."""
        if op not in REDUCE_OPS:
            raise DDLError(f"{what}: op {op!r} is not one of {', '.join(REDUCE_OPS)}")
        tensors = [t for t in tensors if t.numel()]
        lay = _layout(tensors)
        self._ensure(lay.total)
        g = self._begin(what)
        mine = self._views(self.slot, lay, tensors)
        self.backend.launch(lambda: [m.copy_(t.detach().reshape(-1)) for m, t in zip(mine, tensors)])
        self._publish_ready(g, range(self.size))
        every = [self._views(slot, lay, tensors) for slot in self.slots]
        size = self.size

        def combine():
            torch = self.backend.torch
            for i, t in enumerate(tensors):
                out = t.detach().view(-1) if t.is_contiguous() else torch.empty_like(every[0][i])
                parts = [views[i] for views in every]
                if op in ("sum", "avg"):
                    torch.add(parts[0], parts[1], out=out) if size > 1 else out.copy_(parts[0])
                    for part in parts[2:]:
                        out.add_(part)
                    if op == "avg":
                        out.div_(size)
                else:
                    fn = torch.minimum if op == "min" else torch.maximum
                    fn(parts[0], parts[1], out=out) if size > 1 else out.copy_(parts[0])
                    for part in parts[2:]:
                        fn(out, part, out=out)
                if not t.is_contiguous():
                    t.detach().copy_(out.view(t.shape))
        self.backend.launch(combine)
        self._finish(g)
        return IpcPending(self, list(tensors))

    def allreduce_start(self, tensors: Sequence, op: str, results: list) -> IpcPending:
        """allreduce, the handle's wait() returning `results` (ddl_runtime.transports.gpu's Pending contract)."""
        pending = self.allreduce(tensors, op)
        pending.results = results
        return pending

    def bcast(self, tensors: Sequence, root: int, what: str = "bcast") -> IpcPending:
        tensors = [t for t in tensors if t.numel()]
        lay = _layout(tensors)
        self._ensure(lay.total)
        g = self._begin(what)
        if self.rank == root:
            mine = self._views(self.slot, lay, tensors)
            self.backend.launch(lambda: [m.copy_(t.detach().reshape(-1)) for m, t in zip(mine, tensors)])
        self._publish_ready(g, [root])
        if self.rank != root:
            theirs = self._views(self.slots[root], lay, tensors)
            self.backend.launch(lambda: [t.detach().view(-1).copy_(s) if t.is_contiguous()
                                         else t.detach().copy_(s.view(t.shape)) for s, t in zip(theirs, tensors)])
        self._finish(g)
        return IpcPending(self, list(tensors))

    def allgather(self, tensor, what: str = "allgather"):
        """Every rank's `tensor` concatenated along dim 0 (first dims may differ), a new tensor."""
        t = tensor.detach().reshape(1) if tensor.dim() == 0 else tensor.detach()
        rows = self.comm.allgather(int(t.shape[0]))
        rest = tuple(t.shape[1:])
        row_numel = int(np.prod(rest)) if rest else 1
        row_bytes = row_numel * t.element_size()  # alike on every rank (the signature agreed on it)
        self._ensure(max(rows) * max(row_bytes, 1))
        g = self._begin(what)
        n = t.numel() * t.element_size()
        mine = self.slot[0:n].view(t.dtype)
        self.backend.launch(lambda: mine.copy_(t.reshape(-1)))
        self._publish_ready(g, range(self.size))
        out = t.new_empty((sum(rows),) + rest)
        parts = [slot[0:r * row_numel * t.element_size()].view(t.dtype) for slot, r in zip(self.slots, rows)]

        def gather():
            at = 0
            flat = out.view(-1)
            for part in parts:
                flat[at:at + part.numel()].copy_(part)
                at += part.numel()
        self.backend.launch(gather)
        self._finish(g)
        return IpcPending(self, [out])

    def close(self) -> None:
        """Free the shared words (collective); the backend's memory goes with the process."""
        try:
            self.backend.synchronize(lambda: None)
        except BaseException:  # noqa: BLE001 - closing after a failure
            pass
        self.slots, self.slot = [], None
        self.win.Free()
        self.comm.Free()


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not published yet
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return True


# -- the runtime's groups --------------------------------------------------------------------------
def group(rt, stream: str = "native", comm: Optional[MPI.Comm] = None) -> IpcGroup:
    """The runtime's IPC group for one stream of calls ("native": ddl_runtime's ops in program order
    over rt.control; "negotiated": horovod's in table order over the controller's `comm`), made on
    first use (collective: every rank gets here at the same call of that stream)."""
    from .transport import state
    gpu = state(rt)
    groups = gpu.ipc_groups
    if stream not in groups:
        env = rt.env
        groups[stream] = IpcGroup(rt.control if comm is None else comm, CudaBackend(gpu.index),
                                  what=f"GPU collective ({stream})", stall_warning_s=env.stall_warning_s,
                                  stall_shutdown_s=env.stall_shutdown_s,
                                  departed=lambda: list(rt.watchdog.exited),
                                  idle=(lambda: rt.engine.idle and rt.engine.idle()) if stream == "native" else
                                  (lambda: None))
    return groups[stream]


def shutdown(rt, collective: bool = True) -> None:
    """Close the runtime's groups (finalize); without `collective` (a rank did not finalize) they
    are only dropped."""
    gpu = getattr(rt, "gpu", None)
    groups = gpu.ipc_groups if gpu is not None else {}
    for name in sorted(groups):
        if collective:
            groups[name].close()
    if groups:
        gpu.ipc_groups = {}
