"""Out-of-place allreduce results that live in shared memory, so peers write them directly.

A framework whose tensors are immutable (TensorFlow) needs every reduction out of place: the
sources are only read and the results go to fresh memory.  Through the arena (group.py) that
costs a copy in, the reduction and a copy out into memory that is not in cache (a read for
ownership per line: 1.12-1.18x the in-place path on ResNet-50).  Here the results themselves
sit in shared memory and the copy out disappears:

  copy in:  each rank copies the parts of its sources that the *other* ranks own (its slice
            of the virtual flat buffer it keeps in its own sources) into its result region;
  barrier:  carries the signature's digest and which result region each rank took;
  reduce and push: rank r reads its own slice straight from its sources, adds every peer's
            copy of that slice from the peer's region, writes the sum into its own region and
            into every peer's region (lines it has just read: no cold write), 1 MB at a time;
  barrier:  every region now holds every slice; nobody writes a peer's region after it.

A region is one block of the shared heap (collective windows, see heap.py) holding a
call's results packed one after another at 64-byte aligned offsets (output_pool.packed_layout),
kept per layout (dtype, sizes) and reused once nothing refers to the results any more
(the same weak-reference rule as output_pool).  Ranks let go of results at different
moments, so each rank picks its own free region and publishes its index with the barrier;
every rank's list of regions for a layout is the same, because regions are only ever added
collectively: when any rank has none free, every rank adds one (an extra barrier then, as the
ranks that had none copy in after it).  Past RESULT_BYTES regions in all, or
when /dev/shm has no room for one more (ShmGroup.room_for), a call that would need a new one
takes the arena path into private memory instead (all ranks decide that alike).
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...engine.buffers import TensorRef, _dtype_name
from .output_pool import ALIGN, packed_layout
from .heap import PIECE_BYTES, UFUNCS
from ...timeline import TID_HOST, TID_MPI, ref_rows

RESULT_BYTES = 2 << 30  # shared memory kept for results, every layout together
MIN_BYTES = 256 << 10  # smaller calls take the one-barrier small path (shm.SMALL_BYTES)
DTYPES = ("float32", "float64", "int32", "int64")


@dataclass
class Region:
    parts: List[np.ndarray]  # every rank's bytes of this region (uint8)
    handed: Optional[weakref.ref] = None  # root of the results handed out from my part


class SharedResults:
    """Result regions of the host's ranks (see the module docstring)."""

    def __init__(self, heap) -> None:
        self.heap = heap
        self.group = heap.group
        self.regions: Dict[tuple, List[Region]] = {}
        self.kept_bytes = 0
        self.plans: Dict[tuple, tuple] = {}

    @staticmethod
    def layout_key(refs: Sequence[TensorRef]) -> Optional[tuple]:
        """(dtype, sizes) when these sources can take this path: one dtype of DTYPES, more than
        MIN_BYTES in all; else None.  Depends on the signature only, so it is alike on every rank."""
        if not refs:
            return None
        dtype = refs[0].flat.dtype
        if _dtype_name(dtype) not in DTYPES or refs[0].widened:
            return None
        nbytes = 0
        for r in refs:
            if r.flat.dtype != dtype:
                return None
            nbytes += r.flat.nbytes
        if nbytes <= MIN_BYTES:
            return None
        return (dtype, tuple(r.numel for r in refs))

    def allreduce(self, refs: Sequence[TensorRef], key: tuple, op: str, scale: Optional[float], digest: int,
                  timeline=None):
        """Agree on `digest` and reduce the sources `refs` into a result region.

        Returns the region's flat array (results at packed_layout offsets), False when the ranks'
        digests differ (nothing reduced), or None when the results would need more shared memory
        than RESULT_BYTES or /dev/shm has: the agreement has then happened and the caller reduces elsewhere."""
        group = self.group
        dtype, sizes = key
        regions = self.regions.setdefault(key, [])
        t0 = time.perf_counter()
        pick, flat = self._take(regions, dtype)
        flats = [r.flat for r in refs]
        if flat is not None:
            plan = self._plan(key, regions, pick)
            _copy_in(plan, flats)
        t1 = time.perf_counter()
        if not group.barrier(digest, pick):
            self._release(regions, pick)
            return False
        picks = group.words()
        if min(picks) < 0:  # someone had no free region: every rank adds one, alike
            nbytes = packed_layout(sizes, dtype.itemsize)[1] * dtype.itemsize
            parts = self.heap.allocate_everywhere(nbytes, "results") if self.kept_bytes + nbytes <= RESULT_BYTES else None
            if parts is None:  # past the cap, or no room in /dev/shm: every rank alike
                self._release(regions, pick)
                return None
            regions.append(Region(parts))
            self.kept_bytes += nbytes
            added = len(regions) - 1
            picks = [added if p < 0 else p for p in picks]
            if flat is None:
                pick, flat = added, self._hand_out(regions[added], dtype)
                _copy_in(self._plan(key, regions, pick), flats)
            group.barrier()  # the ranks that had no region have now copied in too
        t2 = time.perf_counter()
        ufunc = UFUNCS[op]
        for i, a, b, mine, peers in self._reduce_plan(key, regions, tuple(picks)):
            src = flats[i]
            ufunc(src[a:b], peers[0], out=mine)
            for peer in peers[1:]:
                ufunc(mine, peer, out=mine)
            if scale is not None:
                np.divide(mine, scale, out=mine)
            for peer in peers:
                np.copyto(peer, mine)
        group.barrier()
        if timeline is not None and timeline.enabled:
            nbytes = sum(r.nbytes for r in refs)
            timeline.span("PACK", TID_HOST, t0, t1, {"bytes": nbytes, "tensors": len(refs), "algorithm": "shm-results"})
            timeline.span("ALLREDUCE", TID_MPI, t2, time.perf_counter(),
                          {"algorithm": "shm-results", "bytes": nbytes, "op": op, "dtype": dtype.name,
                           "agreement_us": round((t2 - t1) * 1e6, 1)})
            timeline.tensors_reduced(ref_rows(refs), "SHM_ALLREDUCE", t2, time.perf_counter())
        return flat

    def _take(self, regions: List[Region], dtype: np.dtype) -> Tuple[int, Optional[np.ndarray]]:
        """My first free region (index, its flat results array), or (-1, None)."""
        for i, region in enumerate(regions):
            if region.handed is None or region.handed() is None:
                return i, self._hand_out(region, dtype)
        return -1, None

    def _hand_out(self, region: Region, dtype: np.dtype) -> np.ndarray:
        flat = np.frombuffer(memoryview(region.parts[self.group.rank]), dtype=dtype)
        region.handed = weakref.ref(flat)  # every view made from it keeps `flat` alive
        return flat

    @staticmethod
    def _release(regions: List[Region], pick: int) -> None:
        if pick >= 0:
            regions[pick].handed = None

    def _plan(self, key: tuple, regions: List[Region], pick: int) -> list:
        """Copy-in pieces (tensor, start, stop, my region's view there): the elements of my
        sources that the peers own."""
        plan = self.plans.get((key, pick))
        if plan is None:
            if len(self.plans) > 256:
                self.plans.clear()
            mine = regions[pick].parts[self.group.rank]
            plan = self.plans[(key, pick)] = [(i, a, b, _view(mine, o + a, o + b, key[0]))
                                              for i, a, b, o in self._pieces(key)[0]]
        return plan

    def _reduce_plan(self, key: tuple, regions: List[Region], picks: Tuple[int, ...]) -> list:
        """Reduce pieces (tensor, start, stop, my region's view, the peers' region views), at
        most PIECE_BYTES each, for the elements I own, with every rank's region as picked."""
        plan = self.plans.get((key, picks))
        if plan is None:
            if len(self.plans) > 256:
                self.plans.clear()
            me, dtype = self.group.rank, key[0]
            parts = [regions[p].parts[r] for r, p in enumerate(picks)]
            step = max(1, PIECE_BYTES // dtype.itemsize)
            plan = []
            for i, a, b, o in self._pieces(key)[1]:
                for lo in range(a, b, step):
                    hi = min(b, lo + step)
                    views = [_view(part, o + lo, o + hi, dtype) for part in parts]
                    plan.append((i, lo, hi, views[me], tuple(v for r, v in enumerate(views) if r != me)))
            self.plans[(key, picks)] = plan
        return plan

    def _pieces(self, key: tuple) -> Tuple[list, list]:
        """Per tensor (index, start, stop, offset in the region): the runs the peers own, and
        mine.  The packed layout is split into one contiguous, 64-byte aligned slice per rank."""
        dtype, sizes = key
        group, me = self.group, self.group.rank
        offsets, total = packed_layout(sizes, dtype.itemsize)
        step = max(1, ALIGN // dtype.itemsize)
        bounds = [(total * k // group.size) // step * step for k in range(group.size)] + [total]
        lo, hi = bounds[me], bounds[me + 1]
        theirs, mine = [], []
        for i, (o, n) in enumerate(zip(offsets, sizes)):
            a, b = min(max(lo - o, 0), n), min(max(hi - o, 0), n)  # my run of tensor i: [a, b)
            if a < b:
                mine.append((i, a, b, o))
            for s, e in ((0, a), (b, n)):
                if s < e:
                    theirs.append((i, s, e, o))
        return theirs, mine

    def clear(self) -> None:
        """Drop the regions (finalize); results still alive keep their window mapped (heap.py)."""
        self.regions, self.plans, self.kept_bytes = {}, {}, 0


def _view(part: np.ndarray, start: int, stop: int, dtype: np.dtype) -> np.ndarray:
    return part[start * dtype.itemsize:stop * dtype.itemsize].view(dtype)


def _copy_in(plan: list, flats: Sequence[np.ndarray]) -> None:
    for i, a, b, dst in plan:
        np.copyto(dst, flats[i][a:b])
