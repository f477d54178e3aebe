"""The progress engine: fused buckets in flight, their stage chains, and the polling wait.

Buckets are queued in a fixed order (the same on every rank, derived from the tensor list
signature).  `progress()` packs and posts queued buckets while fewer than `max_inflight`
are in flight, tests in-flight requests, posts each bucket's next stage in bucket order,
and unpacks finished buckets straight into the user's tensors.  `wait()` blocks in MPI on
the oldest request while the watchdog thread looks for stalls and ranks that left; without
that thread (MPI below THREAD_MULTIPLE) it polls and runs the watchdog's checks itself,
yielding the CPU when the node has more ranks than cores.
"""
from __future__ import annotations

import os
import time
from collections import deque
from typing import Callable, Deque, List, Optional, Sequence

import numpy as np
from mpi4py import MPI

from ..core.stats import collective
from .algorithms import Algorithms, Chain
from .fusion import BucketSpec, Pool
from .buffers import TensorRef, store_result, widen
from ..errors import DDLError
from ..timeline import LANES, TID_HOST, TID_MPI, ref_rows

YIELD_AFTER_S = 50e-6


class Handle:
    """An allreduce in progress.  `wait()` returns the (in-place) reduced tensors."""

    def __init__(self, engine: "Engine", results: list, buckets: int):
        self.engine = engine
        self.results = results
        self.remaining = buckets

    @collective
    def done(self) -> bool:
        if self.remaining:
            self.engine.progress()
        return self.remaining == 0

    @collective
    def wait(self) -> list:
        if self.remaining:
            self.engine.wait(lambda: self.remaining == 0)
        return self.results


class Bucket:
    def __init__(self, spec: BucketSpec, refs: Sequence[TensorRef], op: str, scale: Optional[float],
                 algorithm: str, handle: Handle, index: int):
        self.spec = spec
        self.refs = refs
        self.op = op
        self.scale = scale
        self.algorithm = algorithm
        self.handle = handle
        self.index = index
        self.buf: Optional[np.ndarray] = None
        self.chain: Optional[Chain] = None
        self.stage = -1  # stage currently posted; -1 before the first
        self.request: Optional[MPI.Request] = None
        self.t0 = 0.0

    @property
    def nbytes(self) -> int:
        return self.spec.length * self.spec.dtype.itemsize

    def settled(self) -> bool:
        """All stages posted (only the last may still run): later buckets may post theirs."""
        return self.chain is not None and self.stage >= self.chain.count - 1


class Engine:
    def __init__(self, algorithms: Algorithms, watchdog, timeline, max_inflight: int = 2):
        self.algorithms = algorithms
        self.watchdog = watchdog
        self.timeline = timeline
        self.max_inflight = max_inflight
        self.oversubscribed = False  # set by the runtime: more ranks on this node than cores
        self.pool = Pool()
        self.queued: Deque[Bucket] = deque()
        self.active: List[Bucket] = []
        self._counter = 0
        # called while a wait polls: progresses the negotiated stream (collectives/negotiated.py), whose
        # peers may be blocked on this rank in shared memory; set, waits poll instead of blocking
        self.idle: Optional[Callable[[], None]] = None

    # -- submitting -----------------------------------------------------------------------
    def submit(self, specs: Sequence[BucketSpec], refs: Sequence[TensorRef], op: str,
               scale: Optional[float], algorithm: str, results: list) -> Handle:
        handle = Handle(self, results, len(specs))
        for spec in specs:
            self.queued.append(Bucket(spec, refs, op, scale, algorithm, handle, self._counter))
            self._counter += 1
        self.progress()
        return handle

    # -- progress -------------------------------------------------------------------------
    def progress(self) -> None:
        settled = True
        finished = False
        for bucket in self.active:
            if bucket.request is not None and bucket.request.Test():
                bucket.request = None
                if bucket.stage == bucket.chain.count - 1:
                    self._complete(bucket)
                    finished = True
                    continue
            if bucket.request is None and settled:
                bucket.stage += 1
                bucket.request = bucket.chain.post(bucket.stage)
            settled = settled and bucket.settled()
        if finished:
            self.active = [b for b in self.active if b.chain is not None]
        while self.queued and len(self.active) < self.max_inflight:
            bucket = self.queued.popleft()
            self._start(bucket, settled)
            self.active.append(bucket)
            settled = settled and bucket.settled()

    def _start(self, bucket: Bucket, may_post: bool) -> None:
        spec, tl = bucket.spec, self.timeline
        t0 = time.perf_counter()
        if spec.inplace:
            index, start, stop, _ = spec.segments[0]
            ref = bucket.refs[index]
            bucket.buf = ref.dst[start:stop]
            if ref.out is not None:  # out-of-place: MPI reduces in the output, so the values start there
                np.copyto(bucket.buf, ref.flat[start:stop])
        else:
            buf = self.pool.take(spec.dtype, spec.length)
            for index, start, stop, offset in spec.segments:
                ref = bucket.refs[index]
                if ref.widened:
                    widen(ref.flat[start:stop], ref.dtype, buf[offset:offset + stop - start])
                else:
                    np.copyto(buf[offset:offset + stop - start], ref.flat[start:stop])
            bucket.buf = buf
            if tl.enabled:
                tl.span("PACK", TID_HOST, t0, time.perf_counter(),
                        {"bucket": bucket.index, "bytes": bucket.nbytes, "tensors": len(spec.segments)})
        bucket.chain = Chain(self.algorithms, bucket.algorithm, bucket.buf, bucket.op, self.pool)
        bucket.t0 = time.perf_counter()
        if may_post:
            bucket.stage = 0
            bucket.request = bucket.chain.post(0)

    def _complete(self, bucket: Bucket) -> None:
        spec, tl = bucket.spec, self.timeline
        t1 = time.perf_counter()
        if tl.enabled:
            tl.span("ALLREDUCE", TID_MPI + bucket.index % LANES, bucket.t0, t1,
                    {"algorithm": bucket.algorithm, "bytes": bucket.nbytes, "bucket": bucket.index,
                     "dtype": spec.dtype.name, "op": bucket.op})
            tl.tensors_reduced(ref_rows(bucket.refs[i] for i, _, _, _ in spec.segments), "MPI_ALLREDUCE", bucket.t0, t1)
        bucket.chain.release()
        buf, scale = bucket.buf, bucket.scale
        if spec.inplace:
            if scale is not None:
                np.divide(buf, scale, out=buf)
        else:
            for index, start, stop, offset in spec.segments:
                ref = bucket.refs[index]
                store_result(ref, buf[offset:offset + stop - start], ref.dst[start:stop], scale)
            self.pool.give(buf)
            if tl.enabled:
                tl.span("UNPACK", TID_HOST, t1, time.perf_counter(),
                        {"bucket": bucket.index, "bytes": bucket.nbytes})
        bucket.chain = None
        bucket.buf = None
        bucket.handle.remaining -= 1

    # -- waiting --------------------------------------------------------------------------
    def wait(self, condition: Callable[[], bool]) -> None:
        """Until `condition()` holds: progress everything in flight, then block in MPI on the oldest
        request (the watchdog thread watches meanwhile).  Without a watchdog thread, poll instead."""
        start = time.perf_counter()
        watchdog = self.watchdog
        watchdog.waiting_since = start
        try:
            if watchdog.threaded and self.idle is None:
                while True:
                    self.progress()
                    if condition():
                        break
                    head = next((b.request for b in self.active if b.request is not None), None)
                    if head is None:
                        raise DDLError("internal error: waiting with nothing in flight")
                    head.Wait()
            else:
                self._poll_until(condition, start)
        finally:
            watchdog.waiting_since = None
        if self.timeline.enabled:
            end = time.perf_counter()
            if end - start > 1e-4:
                self.timeline.span("WAIT", TID_HOST, start, end)

    def _poll_until(self, condition: Callable[[], bool], start: float) -> None:
        spins = 0
        while True:
            self.progress()
            if condition():
                return
            spins += 1
            if spins & 15 == 0:
                if self.idle is not None:
                    self.idle()
                now = time.perf_counter()
                waited = now - start
                if not self.watchdog.threaded:
                    self.watchdog.check(now)
                if waited > 1.0:
                    time.sleep(0.0005)  # a long wait: stop burning a core
                elif self.oversubscribed and waited > YIELD_AFTER_S:
                    os.sched_yield()  # more ranks than cores here: let a peer rank run

    def wait_request(self, request: MPI.Request) -> None:
        """Wait for one request that is not a bucket (agreement, bcast, allgather)."""
        self.wait_requests([request])

    def wait_requests(self, requests: List[MPI.Request]) -> None:
        """Block in MPI when nothing else is in flight; otherwise keep the buckets moving too."""
        start = time.perf_counter()
        watchdog = self.watchdog
        watchdog.waiting_since = start
        try:
            if watchdog.threaded and not self.active and not self.queued and self.idle is None:
                MPI.Request.Waitall(requests)
            else:
                self._poll_until(lambda: MPI.Request.Testall(requests), start)
        finally:
            watchdog.waiting_since = None
