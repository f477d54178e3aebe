"""The global process set's negotiated allreduces through shared memory of their own (one host).

Once negotiated, a request runs in table order, the same on every rank (negotiation.py), so it
can use the shared-memory algorithms of group.py.  It must not use the native engine's group:
native collectives (ddl_runtime.allreduce_n, FlatAllreduce, ...) run in program order, and ranks
notice that a negotiation round completed at different points of their programs, so rank 0
could run negotiated op R inside a wait before native op N while rank 1 runs N first.  Hence:

* a second `ShmGroup` (its own control block, arenas, small arena and result regions, so its
  own barrier sequence), opened collectively when the global set's controller is made in a
  job whose native collectives use shared memory;
* the negotiation rounds' slot exchange moves to shared memory too (`SlotExchange`: what the
  controller's MPI_Iallgather did, non-blocking, at the cost of one shared-memory barrier), so
  a steady-state small allreduce costs two barriers' hand-offs and no MPI progress;
* a rank blocked in a native wait (the native group's barriers, the engine's MPI waits) keeps
  the negotiated stream moving (`ShmGroup.idle` / `Engine.idle`: process_sets.Registry), so a
  peer blocked in a negotiated op is never left waiting on a rank that waits in the other
  stream.  Negotiated ops never run native collectives, so the other direction needs nothing;
* a negotiated op's wait aborts the job, naming the op and the rank, when a peer finalized
  (the watchdog heard its exit): it will never arrive.

An allreduce group (fused per dtype and op by the controller) takes, by its descriptor only,
so alike on every rank: the one-barrier small path (one dtype, not float16, <= 256 KB), the
shared result regions (float32/64, int32/64 over 256 KB, sum or average; results that the
caller did not place are handed out from there without a copy, which is what TensorFlow's
out-of-place results need), else the arena; `None` when the arena has no room (the caller
then uses MPI).  Prescale / postscale and integer averages follow kernels.py's arithmetic
(prescale into the wide type, reduce, divide, postscale, cast), so results are bit-identical to
the MPI path's wherever the sum's order is (two ranks; exactly representable values).
Joined ranks contribute zeros.  Product, other dtypes and other process sets stay on MPI.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
from mpi4py import MPI

from ..engine import kernels
from ..engine.buffers import TensorRef, _dtype_name
from ..errors import DDLError
from .negotiation import SLOT_BYTES
from .ops import _cut
from ..transports.shm.output_pool import RESULTS
from ..transports.shm.output_pool import aligned_bytes
from .response_cache import CARRY_BYTES
from ..transports.shm.group import ALIGN, UFUNCS, ShmGroup, sum_in_rank_order
from ..engine.signature import digest

OPS = {"sum": "sum", "average": "sum", "min": "min", "max": "max"}  # Horovod's op -> group.py's ufunc
DTYPES = frozenset(("float16", "float32", "float64", "int32", "int64"))


class NegotiatedShm:
    """Shared memory for one controller's (the global set's) allreduces; see the module docstring."""

    def __init__(self, rt, controller) -> None:  # collective over the job's ranks
        self.rt = rt
        self.controller = controller
        self.group = ShmGroup(rt.shm.comm.Dup(), rt.watchdog, rt.engine.oversubscribed)
        self.group.idle = self._check_peers
        self.rounds = SlotExchange(self.group.comm, SLOT_BYTES, CARRY_BYTES)
        self.scratch = aligned_bytes(CARRY_BYTES)  # a cached allreduce's combined rows
        self.running = ""  # the op this rank is executing (for the abort message)

    @staticmethod
    def takes(dtype: str, op: str) -> bool:
        """Whether an allreduce group of this dtype and op runs here (alike on every rank)."""
        return op in OPS and dtype in DTYPES

    def _check_peers(self) -> None:
        """In a negotiated op's wait: a peer that finalized will never arrive."""
        late = self.group.left_behind(self.rt.watchdog.exited)
        if late:
            self.rt.abort(f"{self.running}: rank{'s' if len(late) > 1 else ''} {','.join(map(str, late))} "
                          "finalized before taking part in it; it was negotiated on every rank")

    # -- allreduce ------------------------------------------------------------------------
    def allreduce(self, inputs: Sequence[Optional[np.ndarray]], outputs: Sequence[Optional[np.ndarray]],
                  dtype: np.dtype, counts: Sequence[int], names: Sequence[str], op: str, prescale: float,
                  postscale: float) -> Optional[List[np.ndarray]]:
        """Reduce one negotiated group; returns the flat results (the given outputs, or memory
        picked here where an output is None), or None when shared memory has no room (every rank
        alike: use MPI).  None inputs (a joined rank) contribute zeros."""
        size = self.group.size
        self.running = f"allreduce '{names[0]}'" + (f" (+{len(names) - 1} fused)" if len(names) > 1 else "")
        wide = kernels.reduce_dtype(dtype)
        plain = prescale == 1.0 and postscale == 1.0 and (op != "average" or dtype.kind == "f")
        srcs: List[np.ndarray] = []
        for src, n in zip(inputs, counts):
            if src is None:
                src = np.zeros(n, dtype=wide if not plain else dtype)
            else:
                src = src.reshape(-1)
                if not plain and (prescale != 1.0 or src.dtype != wide):
                    into = np.empty(n, dtype=wide)
                    kernels.prescaled(src, prescale, into)
                    src = into
            srcs.append(src)
        if plain:  # straight into the outputs, averages divided on the way
            dsts = [None if o is None else o.reshape(-1) for o in outputs]
            scale = float(size) if op == "average" else None
        else:  # the wide sums, then kernels.finished as on the MPI path
            dsts = [np.empty(n, dtype=wide) for n in counts]
            scale = None
        refs = [TensorRef(None, name, _dtype_name(src.dtype if not plain else dtype), (n,), src, "numpy")
                for name, src, n in zip(names, srcs, counts)]
        ufunc = OPS[op]
        stamp = digest(("negotiated allreduce", op, _dtype_name(dtype), tuple(names), tuple(counts)))
        sums = self._reduce(refs, dsts, ufunc, scale, stamp)
        if sums is None:
            return None
        if plain:
            return [s if o is None else o.reshape(-1) for s, o in zip(sums, outputs)]
        results = []
        for s, o, n in zip(sums, outputs, counts):
            out = RESULTS.take((n,), dtype) if o is None else o.reshape(-1)
            kernels.finished(s, size if op == "average" else 1, postscale, out)
            results.append(out)
        return results

    # -- cached small allreduces: the data in the round (response_cache.py) -------------------
    @staticmethod
    def pack(inputs: Sequence[np.ndarray], carry: tuple, into: np.ndarray) -> None:
        """Copy a cached allreduce's inputs into its place in this rank's next round row."""
        dtype, counts, _ = carry
        np.concatenate([a.reshape(-1) for a in inputs], out=into[:sum(counts) * dtype.itemsize].view(dtype))

    def reduce_carried(self, carry: tuple, offsets: Sequence[int], op: str,
                       outputs: Sequence[Optional[np.ndarray]]) -> List[np.ndarray]:
        """Combine every rank's packed copy (at `offsets` in its row of the round just completed)
        in rank order into `outputs` (None: memory picked here); returns the flat results."""
        dtype, counts, _ = carry
        nbytes = sum(counts) * dtype.itemsize
        rows = self.rounds.data_rows()
        packed = [rows[r][o:o + nbytes].view(dtype) for r, o in enumerate(offsets)]
        total = self.scratch[:nbytes].view(dtype)
        sum_in_rank_order(UFUNCS[OPS[op]], packed, total)
        divisor = np.array(self.group.size, dtype=dtype) if op == "average" else None
        results, at = [], 0
        for n, out in zip(counts, outputs):
            out = RESULTS.take((n,), dtype) if out is None else out.reshape(-1)
            part = total[at:at + n]
            at += n
            if divisor is None:
                np.copyto(out, part)
            else:
                np.divide(part, divisor, out=out)
            results.append(out)
        return results

    def _reduce(self, refs: List[TensorRef], dsts: List[Optional[np.ndarray]], op: str, scale: Optional[float],
                stamp: int) -> Optional[List[np.ndarray]]:
        group = self.group
        key = group.results.layout_key(refs) if op == "sum" else None
        if key is not None and not group.small_eligible(refs):
            flat = group.results.allreduce(refs, key, op, scale, stamp)
            if flat is False:
                raise DDLError(f"{self.running}: internal error: ranks executed different negotiated groups")
            if flat is not None:
                sums = _cut(flat, [r.flat for r in refs])
                for i, d in enumerate(dsts):
                    if d is not None:
                        np.copyto(d, sums[i])
                        sums[i] = d
                return sums
            # agreed, but no shared memory left for results: the arena into private memory
        for r, d in zip(refs, dsts):
            r.out = d if d is not None else RESULTS.take((r.numel,), np.dtype(r.dtype))
        if group.small_eligible(refs):
            if not group.allreduce_small(refs, op, scale, stamp):
                raise DDLError(f"{self.running}: internal error: ranks executed different negotiated groups")
        else:
            if not group.barrier(stamp):
                raise DDLError(f"{self.running}: internal error: ranks executed different negotiated groups")
            if not group.allreduce(refs, op, scale):
                return None
        return [r.out for r in refs]

    def close(self) -> None:
        """Free the windows (collective)."""
        self.rounds.free()
        self.group.free()


class SlotExchange:
    """A negotiation round's allgather of one fixed slot per rank, through shared memory.

    What the controller's MPI_Iallgather does, at the cost of a shared-memory barrier: `start`
    writes this rank's slot into its row for the round's parity, then its round number; the
    round is complete once every rank's number reached it, and `Test` then copies every row.
    A rank writes the row of round e+2 only after completing e+1, which every peer started only
    after completing (and copying) round e.  Non-blocking, like the MPI request it replaces."""

    def __init__(self, comm, slot_bytes: int, data_bytes: int) -> None:  # collective over comm
        self.slot_bytes = slot_bytes
        self.rank = comm.Get_rank()
        self.win = MPI.Win.Allocate_shared(ALIGN + 2 * (slot_bytes + data_bytes), 1, comm=comm)
        self.win.Lock_all(MPI.MODE_NOCHECK)
        parts = [ShmGroup._query(self.win, r, np.uint8) for r in range(comm.Get_size())]
        self.rounds = [p[:8].view(np.int64) for p in parts]
        self.rows = [(p[ALIGN:ALIGN + slot_bytes], p[ALIGN + slot_bytes:ALIGN + 2 * slot_bytes]) for p in parts]
        at = ALIGN + 2 * slot_bytes  # a data row per parity after the slots (ALIGN-aligned: slot_bytes is)
        self.data = [(p[at:at + data_bytes], p[at + data_bytes:at + 2 * data_bytes]) for p in parts]
        self.rounds[self.rank][0] = 0
        self.round = 0
        self.win.Sync()
        comm.Barrier()

    def next_data(self) -> np.ndarray:
        """This rank's data row for the next round (written before `start`)."""
        return self.data[self.rank][(self.round + 1) & 1]

    def data_rows(self) -> List[np.ndarray]:
        """Every rank's data row of the last round (read after it completed, before the next `start`)."""
        half = self.round & 1
        return [d[half] for d in self.data]

    def start(self, slot: np.ndarray, slots: np.ndarray) -> "_Round":
        self.round = e = self.round + 1
        np.copyto(self.rows[self.rank][e & 1], slot)
        self.win.Sync()
        self.rounds[self.rank][0] = e
        return _Round(self, e, slots)

    def free(self) -> None:
        self.rows, self.rounds, self.data = [], [], []
        self.win.Unlock_all()
        self.win.Free()


class _Round:
    """One round in flight: `Test()` as on an MPI request."""

    __slots__ = ("exchange", "round", "slots", "done")

    def __init__(self, exchange: SlotExchange, e: int, slots: np.ndarray) -> None:
        self.exchange, self.round, self.slots, self.done = exchange, e, slots, False

    def Test(self) -> bool:  # noqa: N802 - mpi4py's spelling
        if self.done:
            return True
        x, e = self.exchange, self.round
        for r in x.rounds:
            if r[0] < e:
                return False
        x.win.Sync()
        half = e & 1
        for r, rows in enumerate(x.rows):
            self.slots[r] = rows[half]
        self.done = True
        return True
