"""The progress engine: fused buckets in flight, their stage chains, and the polling wait.

Buckets are queued in a fixed order (the same on every rank, derived from the tensor list
signature).  `progress()` packs and posts queued buckets while fewer than `max_inflight`
are in flight, tests in-flight requests, posts each bucket's next stage in bucket order,
and unpacks finished buckets straight into the user's tensors.  Nothing ever blocks in
MPI: `wait()` polls, yields the CPU when waiting long, and lets the watchdog look for
stalls and ranks that left.
"""
from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np
from mpi4py import MPI

from .algorithms import Algorithms, Chain
from .buffers import TensorRef, narrow, widen
from .timeline import LANES, TID_HOST, TID_MPI

Segment = Tuple[int, int, int, int]  # (tensor index, start, stop, offset in the bucket buffer)


@dataclass(frozen=True)
class BucketSpec:
    """A bucket in a plan: a reduce dtype, a length and the tensor pieces it holds."""

    dtype: np.dtype
    length: int
    segments: Tuple[Segment, ...]
    inplace: bool  # True: the buffer IS one tensor's memory (no pack, no unpack copy)


def plan_buckets(refs: Sequence[TensorRef], bucket_bytes: int) -> List[BucketSpec]:
    """Group tensors into buckets of at most `bucket_bytes` per reduce dtype, in list order.

    A tensor of at least `bucket_bytes` is reduced in place in bucket-sized chunks (no copy)
    unless it must be widened (float16/bfloat16), in which case each chunk is converted
    into a float32 buffer.  `bucket_bytes` 0 gives one bucket per tensor.
    """
    specs: List[BucketSpec] = []
    open_: Dict[np.dtype, Tuple[List[Segment], int]] = {}
    order: List[np.dtype] = []

    def close(dtype: np.dtype) -> None:
        segments, length = open_.pop(dtype)
        if segments:
            specs.append(BucketSpec(dtype, length, tuple(segments), False))

    for index, ref in enumerate(refs):
        n = ref.numel
        if n == 0:
            continue
        dtype = ref.reduce_dtype
        itemsize = dtype.itemsize
        if bucket_bytes <= 0 or n * itemsize >= bucket_bytes:
            chunk = n if bucket_bytes <= 0 else max(1, bucket_bytes // itemsize)
            for start in range(0, n, chunk):
                stop = min(n, start + chunk)
                specs.append(BucketSpec(dtype, stop - start, ((index, start, stop, 0),), not ref.widened))
            continue
        if dtype not in open_:
            open_[dtype] = ([], 0)
            order.append(dtype)
        segments, length = open_[dtype]
        if length + n > bucket_bytes // itemsize:
            close(dtype)
            segments, length = [], 0
        segments.append((index, 0, n, length))
        open_[dtype] = (segments, length + n)
    for dtype in order:
        if dtype in open_:
            close(dtype)
    return specs


class Pool:
    """Reusable scratch arrays keyed by (dtype, length): no page faults on every step."""

    def __init__(self, keep: int = 8):
        self.free: Dict[Tuple[np.dtype, int], List[np.ndarray]] = {}
        self.keep = keep

    def take(self, dtype: np.dtype, n: int) -> np.ndarray:
        stack = self.free.get((np.dtype(dtype), n))
        return stack.pop() if stack else np.empty(n, dtype=dtype)

    def give(self, arr: np.ndarray) -> None:
        stack = self.free.setdefault((arr.dtype, arr.size), [])
        if len(stack) < self.keep:
            stack.append(arr)


class Handle:
    """An allreduce in progress.  `wait()` returns the (in-place) reduced tensors."""

    def __init__(self, engine: "Engine", results: list, buckets: int, finish: Optional[Callable] = None):
        self.engine = engine
        self.results = results
        self.remaining = buckets
        self._finish = finish
        self._finished = False

    def done(self) -> bool:
        if self.remaining:
            self.engine.progress()
        return self.remaining == 0

    def wait(self) -> list:
        if self.remaining:
            self.engine.wait(lambda: self.remaining == 0)
        if not self._finished:
            self._finished = True
            if self._finish is not None:
                self._finish()
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
        self.pool = Pool()
        self.queued: Deque[Bucket] = deque()
        self.active: List[Bucket] = []
        self._counter = 0

    # -- submitting -----------------------------------------------------------------------
    def submit(self, specs: Sequence[BucketSpec], refs: Sequence[TensorRef], op: str,
               scale: Optional[float], algorithm: str, results: list,
               finish: Optional[Callable] = None) -> Handle:
        handle = Handle(self, results, len(specs), finish)
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
            bucket.buf = bucket.refs[index].flat[start:stop]
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
        bucket.chain.release()
        buf, scale = bucket.buf, bucket.scale
        if spec.inplace:
            if scale is not None:
                np.divide(buf, scale, out=buf)
        else:
            for index, start, stop, offset in spec.segments:
                ref = bucket.refs[index]
                src, dst = buf[offset:offset + stop - start], ref.flat[start:stop]
                if ref.widened:
                    narrow(src, ref.dtype, dst, scale)
                elif scale is not None:
                    np.divide(src, scale, out=dst)
                else:
                    np.copyto(dst, src)
            self.pool.give(buf)
            if tl.enabled:
                tl.span("UNPACK", TID_HOST, t1, time.perf_counter(),
                        {"bucket": bucket.index, "bytes": bucket.nbytes})
        bucket.chain = None
        bucket.buf = None
        bucket.handle.remaining -= 1

    # -- waiting --------------------------------------------------------------------------
    def wait(self, condition: Callable[[], bool]) -> None:
        """Poll until `condition()` holds, progressing everything in flight."""
        start = time.perf_counter()
        spins = 0
        while True:
            self.progress()
            if condition():
                break
            spins += 1
            if spins & 31 == 0:
                now = time.perf_counter()
                waited = now - start
                self.watchdog.check(waited, now)
                if waited > 0.002:
                    os.sched_yield()
                if waited > 1.0:
                    time.sleep(0.0005)
        if self.timeline.enabled:
            end = time.perf_counter()
            if end - start > 1e-4:
                self.timeline.span("WAIT", TID_HOST, start, end)

    def wait_request(self, request: MPI.Request) -> None:
        self.wait(request.Test)
