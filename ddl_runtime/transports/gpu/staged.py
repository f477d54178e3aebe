"""The host transport's asynchronous allreduce: staged reductions that overlap with the caller's work.

`allreduce_n_async` of CUDA tensors on the host transport (ranks that share a GPU where not every
rank is on it, or `DDL_GPU_TRANSPORT=host`) returns once its copies are queued, as the NCCL and IPC
routes do, instead of holding the caller's thread while the GPU finishes the work that produces
the tensors, the host reduces and the results go back:

  * caller's thread, at the call (after the signature agreed on every rank): the tensors are queued
    device-to-host into pooled host buffers on the staging's side stream (host.py), after the
    caller's stream's work so far; the operation joins this rank's FIFO and the call returns;
  * the stream's thread, one per rank, in submission order (the same on every rank: calls are
    agreed in order): wait for the copy to land, reduce the host buffers across the ranks in shared
    memory of its own, queue the results host-to-device on the side stream, hand the buffers back;
  * `wait()`: until the thread finished the operation, then the caller's stream waits for the
    host-to-device copies (an event): results in order on the caller's stream.

Why a thread and a `ShmGroup` of its own: a reduction cannot wait for the next ddl_runtime call
to make progress (ranks reach their calls at different points, and a rank blocked in a native
collective would wait for a peer blocked in this one), and it must not share the native group's
barrier sequence, which the caller's thread keeps using meanwhile.  Its own control block and
arenas make it an independent stream, ordered like negotiated.py's: the same operations in the
same order on every rank, one barrier before each (a rank's arena is written only when every peer
has finished reading the previous result from it).  The thread never calls MPI: arenas grow, and
the group's plans are made, on the caller's thread, after the stream drained (shapes seen before
take the cached plan).

Where no such group can be made (ranks on several hosts, DDL_SHM=0, no room in /dev/shm, an op
shared memory does not reduce), the synchronous staging of host.py runs instead.

Faults: the thread never raises into the void.  An error in it (a peer that finalized before
taking part, a failed copy) is kept, and the caller's next call into the stream aborts the job
naming this rank and the operation, so every rank ends.  A wait marks the rank as waiting for the
stall inspector (DDL_STALL_WARNING_S names who has not arrived; DDL_STALL_SHUTDOWN_S aborts).
"""
from __future__ import annotations

import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence

from mpi4py import MPI

from ...core.stats import collective
from ...engine.buffers import TensorRef, as_tensor
from ..shm.group import UFUNCS, ShmGroup

POLL_S = 0.02  # how often a waiting caller runs the stall checks (the watchdog's own grain)


class _Unwatched:
    """What `ShmGroup` reads of a watchdog, for the stream's thread: its waits are the caller's
    business (the caller's `wait()` is marked for the real watchdog); never checked from here."""

    waiting_since: Optional[float] = None
    threaded = True


@dataclass
class StagedOp:
    """One allreduce in the stream."""

    what: str
    targets: list  # the device tensors, reduced in place
    lease: Any  # host.Lease: the pooled host buffers (views shaped as `targets`)
    refs: List[TensorRef]  # the lease's views, as the shared-memory group reduces them
    op: str
    scale: Optional[float]
    copied: Any  # the device-to-host copies' event (copies.start_to_host)
    back: Any = None  # the host-to-device copies' event, set by the thread
    finished: threading.Event = field(default_factory=threading.Event)


class StagedPending:
    """What `StagedStream.start` returns: done() polls, wait() returns `results` once they are on the
    caller's stream."""

    def __init__(self, stream: "StagedStream", op: StagedOp, results: list):
        self._stream, self._op, self.results = stream, op, results
        self._joined = False

    @collective
    def done(self) -> bool:
        self._stream.check()
        return self._op.finished.is_set()

    @collective
    def wait(self) -> list:
        if not self._joined:
            self._stream.wait_for(self._op)
            self._stream.staging.copies.join(self._op.back)
            self._joined = True
        return self.results


class StagedStream:
    """The rank's staged allreduces in flight and the thread that runs them (see the module docstring)."""

    def __init__(self, rt, staging, group: ShmGroup):
        self.rt, self.staging, self.group = rt, staging, group
        self.group.idle = self._check_peers
        self._queue: "deque[StagedOp]" = deque()
        self._ready = threading.Condition()
        self._last: Optional[StagedOp] = None
        self._running: Optional[StagedOp] = None
        self.error: Optional[str] = None
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="ddl_runtime-staged", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, rt, staging) -> Optional["StagedStream"]:
        """A stream over shared memory of its own, or None where the job has no shared-memory group
        (collective over the job's ranks, who all decide alike)."""
        if rt.shm is None:
            return None
        comm = rt.shm.comm.Dup()
        try:
            group = ShmGroup(comm, _Unwatched(), rt.engine.oversubscribed)
        except Exception:  # noqa: BLE001 - every rank falls back to the synchronous staging
            group = None
        if not rt.world.allreduce(group is not None, op=MPI.LAND):  # every rank made one, or nobody uses it
            if group is not None:
                group.free()
            else:
                comm.Free()
            return None
        return cls(rt, staging, group)

    @staticmethod
    def takes(op: str) -> bool:
        return op in UFUNCS

    # -- the caller's thread ----------------------------------------------------------------
    def start(self, targets: Sequence, op: str, what: str, results: list) -> Optional[StagedPending]:
        """Queue the reduction of `targets` (in place); None when shared memory has no room for it
        (every rank alike: the caller stages synchronously instead)."""
        self.check()
        lease, copied = self.staging.start_copy_out(targets)
        try:
            refs = [as_tensor(v, f"{what}[{i}]") for i, v in enumerate(lease.views)]
            if not self._planned(refs):
                self.staging.copies.finish_to_host(copied)
                self.staging.give_back(lease)
                return None
        except BaseException:
            self.staging.copies.finish_to_host(copied)
            self.staging.give_back(lease)
            raise
        item = StagedOp(what, list(targets), lease, refs, op, float(self.group.size) if op == "avg" else None,
                        copied)
        with self._ready:
            self._queue.append(item)
            self._last = item
            self._ready.notify()
        return StagedPending(self, item, results)

    def _planned(self, refs: Sequence[TensorRef]) -> bool:
        """Whether the group can reduce `refs`; a shape not seen before is planned (and the arena grown:
        collective, every rank at the same operation) once the thread has nothing in flight."""
        group = self.group
        if group.small_eligible(refs):
            return True
        key = tuple((r.numel, r.dtype) for r in refs)
        cached = group.plans.get(key)
        if cached is not None and cached.generation == group.generation:
            return True
        self.drain()
        return group.compiled(refs) is not None

    def wait_for(self, item: Optional[StagedOp]) -> None:
        """Until the thread finished `item` (and so every operation queued before it), marked as a wait
        for the stall inspector; an error of the thread aborts the job."""
        if item is None:
            return
        if not item.finished.is_set():
            watchdog = self.rt.watchdog
            outer, watchdog.waiting_since = watchdog.waiting_since, time.perf_counter()
            try:
                while not item.finished.wait(POLL_S):
                    self.check()
                    if not watchdog.threaded:
                        watchdog.check(time.perf_counter())
            finally:
                watchdog.waiting_since = outer
        self.check()

    def drain(self) -> None:
        self.wait_for(self._last)

    def check(self) -> None:
        if self.error is not None:
            self.rt.abort(self.error)

    def close(self, collective: bool) -> None:
        """Finish what is queued, stop the thread; free the shared memory when every rank closes."""
        if not collective:
            self._closing = True
            with self._ready:
                self._ready.notify()
            return  # a rank is missing: its peers' barriers may never complete; the daemon thread stays
        self.drain()
        with self._ready:
            self._closing = True
            self._ready.notify()
        self._thread.join()
        self.group.free()

    # -- the stream's thread --------------------------------------------------------------------
    def _run(self) -> None:
        torch = sys.modules.get("torch")
        index = self.rt.gpu.index if self.rt.gpu is not None else None
        if torch is not None and index is not None and torch.cuda.is_available():
            torch.cuda.set_device(index)  # the CUDA device is per thread
        while True:
            with self._ready:
                while not self._queue and not self._closing:
                    self._ready.wait()
                if not self._queue:
                    return
                item = self._queue.popleft()
            if self.error is None:
                self._running = item
                try:
                    self._reduce(item)
                except _PeerLeft as exc:
                    self.error = str(exc)
                except BaseException as exc:  # noqa: BLE001 - kept for the caller's thread to abort with
                    self.error = (f"{item.what}: the staged reduction failed on this rank: "
                                  f"{type(exc).__name__}: {exc}")
                self._running = None
            item.finished.set()

    def _reduce(self, item: StagedOp) -> None:
        staging, group = self.staging, self.group
        staging.copies.finish_to_host(item.copied)
        if group.small_eligible(item.refs):
            group.allreduce_small(item.refs, item.op, item.scale, 0)
        else:
            group.barrier()  # every peer has read the last result from my arena
            if not group.allreduce(item.refs, item.op, item.scale):
                raise RuntimeError("no plan for a shape the caller planned")  # not reached: planned first
        item.back = staging.copies.start_to_device([v.reshape(-1) for v in item.lease.views], item.targets)
        staging.give_back(item.lease)

    def _check_peers(self) -> None:
        """In the thread's barrier: a peer that finalized will never arrive."""
        late = self.group.left_behind(self.rt.watchdog.exited)
        if late:
            running = self._running.what if self._running is not None else "a staged allreduce"
            raise _PeerLeft(f"{running}: rank{'s' if len(late) > 1 else ''} {','.join(map(str, late))} "
                            "finalized before taking part in it")


class _PeerLeft(Exception):
    pass

