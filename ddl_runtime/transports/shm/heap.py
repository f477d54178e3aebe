"""Tensors that live in shared memory, so a one-host allreduce reads them where they are.

`ddl_runtime.shared_zeros(shape, dtype)` (collective: every rank calls it with the same shape
and dtype, in the same order) hands out a zeroed numpy array carved from this rank's part of a
shared window; every rank's array sits at the same offset of its own part.  Gradients kept in
such arrays (as torch DDP's ``gradient_as_bucket_view`` keeps them in its buckets) need no
copy into an arena: `allreduce_n` / `allreduce_n_async` of tensors that all lie in the heap
(in place, one dtype group each, not float16/bfloat16) run `SharedHeap.allreduce`:

  agreement barrier (the digest covers every tensor's heap offset, so ranks holding different
  buffers get a mismatch error, not wrong sums);
  reduce and push: rank r adds every peer's slice r of each tensor into its own slice r, 1 MB
          at a time (avg divides the piece while it is in cache), and writes the piece straight
          back into every peer's slice r, whose lines it has just read (no cold write);
  barrier: every rank's tensors now hold every slice; nobody touches a peer's memory after it,
          so the caller may change its tensors (zero_grad) at once.

Per rank that is a read of its slice and of the peers' same slices, and writes of memory just
read: less than half the memory traffic of the arena path (copy in, reduce, copy out), and two
barriers.
The heap only grows (a bump allocator over windows of at least SEGMENT_BYTES, allocated
collectively); finalize frees a window only when no array handed out from it is still alive
(each hand-out is rooted in an array the heap holds a weak reference to, as in output_pool),
so a gradient kept past finalize stays readable; such windows stay mapped until the process ends.  Outside a one-host shared-memory job `shared_zeros`
returns an ordinary np.zeros array and the usual path runs.
"""
from __future__ import annotations

import bisect
import time
import weakref
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from mpi4py import MPI

from ...engine.algorithms import split_counts
from ...engine.buffers import TensorRef
from ...timeline import TID_MPI, ref_rows

SEGMENT_BYTES = 64 << 20
NO_ROOM = {"shared_zeros": "shared_zeros hands out ordinary memory (reduced through the arena or MPI)",
           "results": "out-of-place results go to private memory"}
ALIGN = 64
PIECE_BYTES = 1 << 20
UFUNCS = {"sum": np.add, "avg": np.add}


@dataclass
class Segment:
    win: MPI.Win
    parts: List[np.ndarray]  # every rank's part (uint8)
    base: int  # address of my part
    size: int
    used: int = 0
    handed: List[Tuple[weakref.ref, str]] = field(default_factory=list)  # roots handed out, and what for


class SharedHeap:
    """Every rank's shared-memory arrays at matching offsets (see the module docstring)."""

    def __init__(self, group) -> None:
        self.group = group
        self.segments: List[Segment] = []
        self.bases: List[int] = []  # my parts' addresses, sorted (a new window may map lower)
        self.order: List[int] = []  # segment index of each entry of `bases`
        self.views: Dict[tuple, tuple] = {}
        self.kept: List[Segment] = []  # windows left mapped at finalize (their arrays outlived it)

    def allocate(self, nbytes: int, purpose: str = "shared_zeros") -> Optional[np.ndarray]:
        """Zeroed bytes at the same (segment, offset) on every rank (collective, same sizes in
        order); None on every rank when a new segment would not fit in /dev/shm."""
        nbytes = -(-max(nbytes, 1) // ALIGN) * ALIGN
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg.used + nbytes > seg.size:
            size = max(SEGMENT_BYTES, nbytes)
            what = f"shared memory for {purpose}"
            if not self.group.room_for(size, what, NO_ROOM[purpose], say=size == nbytes):
                if size == nbytes or not self.group.room_for(nbytes, what, NO_ROOM[purpose]):
                    return None
                size = nbytes  # a small /dev/shm: a segment of just this size
            win = MPI.Win.Allocate_shared(size, 1, comm=self.group.comm)
            win.Lock_all(MPI.MODE_NOCHECK)
            parts = [np.frombuffer(win.Shared_query(r)[0], dtype=np.uint8) for r in range(self.group.size)]
            mine = parts[self.group.rank]
            mine[:] = 0  # fresh tmpfs pages are zero already; this makes it a promise
            seg = Segment(win, parts, mine.__array_interface__["data"][0], size)
            self.segments.append(seg)
            at = bisect.bisect(self.bases, seg.base)
            self.bases.insert(at, seg.base)
            self.order.insert(at, len(self.segments) - 1)
        start = seg.used
        seg.used += nbytes
        root = np.frombuffer(memoryview(seg.parts[self.group.rank][start:start + nbytes]), dtype=np.uint8)
        seg.handed.append((weakref.ref(root), purpose))  # every view made from it keeps `root` alive
        return root

    def allocate_everywhere(self, nbytes: int, purpose: str) -> Optional[List[np.ndarray]]:
        """allocate(nbytes) (collective), returned as every rank's bytes at that offset; mine is
        the root that the heap watches (see free).  None where allocate gives None."""
        root = self.allocate(nbytes, purpose)
        if root is None:
            return None
        i, offset = self.locate(root)
        parts = self.segments[i].parts
        return [root if r == self.group.rank else part[offset:offset + root.nbytes] for r, part in enumerate(parts)]

    def locate(self, flat: np.ndarray) -> Optional[Tuple[int, int]]:
        """(segment, offset) of a contiguous array lying wholly inside my part of the heap, else None."""
        if not self.bases:
            return None
        addr = flat.__array_interface__["data"][0]
        at = bisect.bisect_right(self.bases, addr) - 1
        if at < 0:
            return None
        i = self.order[at]
        seg = self.segments[i]
        offset = addr - seg.base
        return (i, offset) if offset + flat.nbytes <= seg.size else None

    def locate_all(self, refs: Sequence[TensorRef]) -> Optional[tuple]:
        """Every ref's (segment, offset) when all lie in the heap, are not float16/bfloat16 and are
        reduced in place; else None."""
        if not self.bases or not refs:
            return None
        locs = []
        for r in refs:
            if r.widened or r.out is not None:
                return None
            loc = self.locate(r.flat)
            if loc is None:
                return None
            locs.append(loc)
        return tuple(locs)

    def allreduce(self, refs: Sequence[TensorRef], locs: tuple, op: str, scale: Optional[float], digest: int,
                  timeline=None) -> bool:
        """Agree on `digest`, then reduce `refs` (at `locs` on every rank) in place; False on a mismatch."""
        group = self.group
        t0 = time.perf_counter()
        if not group.barrier(digest):
            return False
        t1 = time.perf_counter()
        key = (locs, tuple(r.flat.dtype for r in refs), tuple(r.numel for r in refs))
        plan = self.views.get(key)
        if plan is None:
            plan = self.views[key] = self._plan(refs, locs)
        me, ufunc = group.rank, UFUNCS[op]
        for own, peers, lo, hi, step in plan:
            for a in range(lo, hi, step):
                b = min(hi, a + step)
                piece = own[a:b]
                for peer in peers:
                    ufunc(piece, peer[a:b], out=piece)
                if scale is not None:
                    np.divide(piece, scale, out=piece)
                for peer in peers:
                    np.copyto(peer[a:b], piece)
        group.barrier()
        if timeline is not None and timeline.enabled:
            nbytes = sum(r.nbytes for r in refs)
            timeline.span("ALLREDUCE", TID_MPI, t1, time.perf_counter(),
                          {"algorithm": "shm-heap", "bytes": nbytes, "op": op, "tensors": len(refs),
                           "agreement_us": round((t1 - t0) * 1e6, 1), "rank": me})
            timeline.tensors_reduced(ref_rows(refs), "SHM_ALLREDUCE", t1, time.perf_counter())
        return True

    def _plan(self, refs: Sequence[TensorRef], locs: tuple) -> list:
        """Per tensor: (my array, the peers' arrays, my slice's bounds, piece length)."""
        group = self.group
        if len(self.views) > 256:
            self.views.clear()
        me = group.rank
        reduce = []
        for r, (s, offset) in zip(refs, locs):
            seg = self.segments[s]
            arrays = [part[offset:offset + r.nbytes].view(r.flat.dtype) for part in seg.parts]
            bounds = np.cumsum([0] + split_counts(r.numel, group.size)).tolist()
            step = max(1, PIECE_BYTES // r.flat.itemsize)
            if bounds[me] < bounds[me + 1]:
                reduce.append((arrays[me], tuple(a for p, a in enumerate(arrays) if p != me),
                               bounds[me], bounds[me + 1], step))
        return reduce

    def free(self) -> set:
        """Free the windows no handed-out array still uses; returns the purposes of the arrays
        that keep windows mapped."""
        self.views = {}
        in_use = set()
        for seg in self.segments:
            live = {purpose for ref, purpose in seg.handed if ref() is not None}
            if live:
                in_use |= live
                self.kept.append(seg)  # in use: unmapping it would make those arrays crash the process
                continue
            seg.parts = []
            seg.win.Unlock_all()
            seg.win.Free()
        self.segments, self.bases, self.order = [], [], []
        return in_use
