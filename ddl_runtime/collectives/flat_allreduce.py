"""One flat buffer reduced again and again under one signature: a training step's small bucket.

`allreduce_n_async([flat])` of the same tensor every step already skips re-validation (refcache),
but on one host it still costs five passes over the bucket: the caller copies its gradients into
the flat tensor, the runtime packs that tensor into the shared-memory small arena
(ShmGroup.allreduce_small), adds every rank's packed copy, divides the sum back into the tensor,
and the caller copies the result out.  FlatAllreduce lets the caller write straight into the
arena and read straight from the sum, with nothing validated per call:

    red = FlatAllreduce(count, np.float32, "grad-bucket:0", op="avg")
    buf = red.buffer()         # fill it with this rank's values (one of two fixed arrays)
    out = red.start().wait()   # every rank's values reduced; valid until the next buffer()

On one host (bucket of at most shm.SMALL_BYTES, a dtype the arena holds as is) buffer() is this
rank's slot in the small-arena half of the next barrier, start() is that barrier (carrying the
signature's digest: the agreement) followed by the sum of every rank's slot in rank order into an
array of this object's own, divided in place for "avg": the bits allreduce_small gives, done
before start() returns.  The signature is the one allreduce_n_async makes for a tensor of this
name, dtype and shape, so a rank calling any other collective gets the usual mismatch error
naming both, the stall inspector names who has not arrived, and a peer that reduces such a
tensor through allreduce_n_async takes part correctly.  Nothing else may run a collective
between buffer() and start() (the arena half belongs to the next barrier): start() refuses then.

Anywhere else (several hosts, no shared memory, a larger bucket) buffer() is a private array and
start() is allreduce_n_async of it (asynchronous, reduced in place).
"""
from __future__ import annotations

import numbers
import time
from typing import Optional, Tuple

import numpy as np

from ..core.stats import collective
from ..state import runtime as _rt
from ..engine.buffers import as_tensor
from ..engine.engine import Handle
from ..errors import DDLError, DDLInputError
from .ops import REDUCE_N_OPS, _check_avg, _check_op, _describe, _entry, allreduce_n_async
from ..transports.shm.output_pool import aligned_bytes
from ..transports.shm.group import SMALL_BYTES, sum_in_rank_order
from ..engine.signature import digest, raise_mismatch
from ..timeline import TID_HOST, TID_MPI

WHAT = "allreduce_n_async"


class FlatAllreduce:
    """A flat array of `count` elements reduced across every rank each time start() runs."""

    def __init__(self, count: int, dtype, name: str, op: str = "avg") -> None:
        _check_op(op, REDUCE_N_OPS, "FlatAllreduce")
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            raise DDLInputError(f"FlatAllreduce: count must be a positive integer, got {count!r}")
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise DDLInputError(f"FlatAllreduce: {dtype!r} is not a numpy dtype") from None
        self.count = count = int(count)
        self.op = op
        self.name = str(name)
        self._private = np.zeros(count, dtype=self.dtype)
        ref = as_tensor(self._private, self.name)
        _check_avg(op, [ref], "FlatAllreduce")
        self._signature = ((WHAT, op), (_entry(ref),))
        self._digest = digest(self._signature)
        self._what = _describe(WHAT, [ref])
        self._widened = ref.widened
        self._owner: Optional[_rt.Runtime] = None  # the runtime the arena views below belong to
        self._slots: Tuple[Tuple[np.ndarray, ...], ...] = ()  # per arena half: every rank's slot
        self._total: Optional[np.ndarray] = None
        self._staged: Optional[int] = None  # the barrier epoch buffer() handed a slot out for

    def _shared(self, rt: "_rt.Runtime"):
        """The host's ShmGroup when this reduction takes the arena, else None (decided per runtime)."""
        shm = rt.shm
        if shm is None or rt.size == 1 or self._widened or self._private.nbytes > SMALL_BYTES:
            return None
        if self._owner is not rt:
            self._slots = tuple(shm.small_packed(half, self.dtype, self.count) for half in (0, 1))
            self._total = aligned_bytes(self._private.nbytes).view(self.dtype)
            self._owner = rt
        return shm

    def buffer(self) -> np.ndarray:
        """The array to fill with this rank's values before the next start()."""
        rt = _rt.current()
        shm = self._shared(rt)
        if shm is None:
            self._staged = None
            return self._private
        self._staged = shm.epoch
        return self._slots[(shm.epoch + 1) & 1][shm.rank]

    @collective
    def start(self) -> Handle:
        """Reduce what buffer() was filled with; the handle's wait() returns the reduced array,
        which holds the result until the next buffer() (other collectives leave it alone)."""
        rt = _rt.current()
        shm = self._shared(rt)
        if shm is None:
            handle = allreduce_n_async([self._private], op=self.op, names=[self.name])
            return _Private(handle, self._private)
        staged, self._staged = self._staged, None
        if staged != shm.epoch:
            raise DDLError(f"FlatAllreduce {self.name!r}: start() without buffer() just before it"
                           + ("" if staged is None else " (another collective ran in between)"))
        half = (staged + 1) & 1
        slots, total = self._slots[half], self._total
        timeline = rt.timeline
        t0 = time.perf_counter()
        rt.watchdog.start(self._what)
        if not shm.barrier(self._digest):
            raise_mismatch(f"{self._what} (collective #{rt.watchdog.seq})", rt.control.allgather(self._signature))
        t1 = time.perf_counter()
        sum_in_rank_order(np.add, slots, total)
        t2 = time.perf_counter()
        if self.op == "avg":
            np.divide(total, np.array(rt.size, dtype=self.dtype), out=total)
        if timeline.enabled:
            args = {"algorithm": "shm-flat", "bytes": total.nbytes, "op": self.op, "dtype": self.dtype.name}
            timeline.span("ALLREDUCE", TID_MPI, t0, t2, dict(args, agreement_us=round((t1 - t0) * 1e6, 1)))
            timeline.span("UNPACK", TID_HOST, t2, time.perf_counter(), args)
            timeline.tensors_reduced([(self.name, self.dtype.name, (total.size,))], "SHM_ALLREDUCE", t0, t2)
        return Handle(rt.engine, total, 0)


class _Private:
    """start()'s handle off the arena: wait() gives the private array, reduced in place."""

    __slots__ = ("handle", "array")

    def __init__(self, handle, array: np.ndarray) -> None:
        self.handle, self.array = handle, array

    @collective
    def done(self) -> bool:
        return self.handle.done()

    @collective
    def wait(self) -> np.ndarray:
        self.handle.wait()
        return self.array

