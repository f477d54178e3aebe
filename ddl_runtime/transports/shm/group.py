"""Intra-node shared memory: the signature agreement and the allreduce of a one-node job.

When every rank of the job sits on one host *and* on one node of the job's grouping (so not
under DDL_EMULATE_NODES or a mode string with several nodes), the ranks open two MPI-3 shared
windows (`MPI.Win.Allocate_shared` on the host communicator):

* a control block, one 64-byte slot per rank: a barrier epoch, two digest cells and two word
  cells (a rank's `word` for a barrier, e.g. which result region it took: results.py).  A barrier
  is "write my epoch, wait until every slot holds at least it" (each cell has one writer, so no
  atomics are needed; `Win.Sync` is the memory fence on either side).  The digest of the
  collective's signature travels with the epoch, so agreeing on a signature costs one barrier.
  Two digest cells alternate by epoch parity: a rank cannot write epoch e+2 before every rank
  has left barrier e+1, i.e. before every rank has read the digests of barrier e.
* a data arena per rank, grown collectively (only after an agreement, where every rank holds the
  same plan and so asks for the same size);
* a small arena per rank (2 x SMALL_BYTES, fixed) for reductions of at most SMALL_BYTES in one
  dtype, the steady state of a small model's step (`ShmGroup.allreduce_small`): each rank packs
  its tensors into its half of the small arena for this barrier's parity (one np.concatenate),
  then the barrier that carries the signature's digest is the only one: after it every rank
  adds all ranks' packed buffers in rank order (so every rank gets the same bits) and unpacks.
  Halves alternate by barrier epoch: a rank packs for barrier e only after passing e-1, which
  every peer reached only after reading what was packed for e-2.  A mismatched call reduces
  nothing (the digests differ on every rank), and the fixed size means no collective growth
  before the agreement.  flat_allreduce.FlatAllreduce uses the same halves and barrier, its
  caller writing straight into `small_packed` and reading the sum from a private array.

Allreduce of a tensor list (`ShmGroup.allreduce`): the list is laid out per reduce dtype in one
virtual flat buffer split into `local_size` contiguous slices; rank i owns slice i.  Each slice
is cut into chunks (CHUNK_BYTES); round k handles chunk k of every slice:
  publish: copy (or widen) the parts of my tensors in the other ranks' chunks into my arena;
  reduce: my chunk = my tensors + every peer's arena there, into my arena and back into my
          tensors (avg divides on the way back);
  gather: copy the other ranks' reduced chunks from their arenas into my tensors.
Schedule: publish 0, barrier, then per round k: reduce k, publish k+1, barrier, gather k; so
one barrier per round, and what a round touches is still in cache when the next step reads it.
The next collective's agreement barrier keeps a rank from overwriting its arena while a peer
still gathers from it.  Every wait is a spin on the control block that yields the CPU after
20 us, naps 50 us at a time after 2 ms and 0.5 ms after a second, and marks the rank as waiting for the stall inspector (watchdog), which names
who has not arrived and aborts on DDL_STALL_SHUTDOWN_S or when a rank leaves.

MPICH unlinks the file behind a shared window once every rank has mapped it, so the memory goes
when the processes end and a crashed job leaves nothing in /dev/shm (tests/runtime/test_shm.py
checks the mappings and a crash); `ShmGroup.free()` (finalize) releases it earlier.

/dev/shm is a tmpfs whose size may be far below the node's memory (64 MB in a default Docker or
Kubernetes container): a window larger than its free space maps fine and then kills the rank
with SIGBUS on the first touch of a page past the end.  So every window that grows (the arena,
heap segments, result regions) first asks `ShmGroup.room_for` (collective over the host's
ranks: the least free space any of them sees, so they all decide alike).  Without room the
arena's reductions take the MPI path, `shared_zeros` hands out ordinary memory and results go
to private memory; the host's first rank says so once, with the sizes.
"""
from __future__ import annotations

import bisect
import os
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from mpi4py import MPI

from ...engine.algorithms import split_counts
from ...engine.buffers import TensorRef, store_result, widen
from ...core import stats as _stats
from ...core.log import log
from .output_pool import aligned_bytes
from .heap import SharedHeap
from .results import SharedResults
from ...timeline import TID_HOST, TID_MPI, ref_rows

SLOT_BYTES = 64  # one cache line per rank: [epoch, digest(even epochs), digest(odd epochs),
#                  word(even), word(odd), arrival(even), arrival(odd), -]
ALIGN = 64
MIN_ARENA = 1 << 20
CHUNK_BYTES = 1 << 20  # per rank and round: what a round touches stays in the caches
SMALL_BYTES = 256 << 10  # up to this much (one dtype, not widened) takes the one-barrier path
SHM_DIR = "/dev/shm"  # where MPICH's shared windows live
SHM_HEADROOM = 8 << 20  # free space a new window must leave (MPICH's rounding, its own segments)
SPIN_BEFORE_YIELD_S = 20e-6
NAP_AFTER_S = 2e-3  # then short sleeps: a loaded or oversubscribed host needs the core back
SLEEP_AFTER_S = 1.0
UFUNCS = {"sum": np.add, "avg": np.add, "min": np.minimum, "max": np.maximum}


@dataclass(frozen=True)
class Piece:
    """A run of one tensor's elements at `offset` in its dtype group of the virtual buffer."""

    tensor: int
    start: int
    stop: int
    group: int
    offset: int
    owner: int  # the rank whose slice holds it


@dataclass(frozen=True)
class DtypeGroup:
    dtype: np.dtype  # the reduce dtype
    byte_offset: int  # in the arena
    length: int


Round = Tuple[Tuple[Piece, ...], Tuple[Piece, ...]]  # (my pieces, the other ranks' pieces)


@dataclass(frozen=True)
class ShmPlan:
    groups: Tuple[DtypeGroup, ...]
    rounds: Tuple[Round, ...]  # chunk k of every rank's slice
    nbytes: int

    @property
    def own(self) -> Tuple[Piece, ...]:
        return tuple(p for own, _ in self.rounds for p in own)

    @property
    def others(self) -> Tuple[Piece, ...]:
        return tuple(p for _, others in self.rounds for p in others)


def plan(refs: Sequence[TensorRef], local_size: int, local_rank: int,
         chunk_bytes: int = CHUNK_BYTES) -> ShmPlan:
    """Lay the tensors out per reduce dtype (list order), cut each dtype run into one slice per
    rank and each slice into chunks of `chunk_bytes` (0: one chunk); round k holds chunk k of
    every slice, so the data a round touches stays in cache between its steps."""
    order: List[np.dtype] = []
    members: Dict[np.dtype, List[Tuple[int, int]]] = {}
    for index, ref in enumerate(refs):
        if ref.numel:
            dtype = ref.reduce_dtype
            if dtype not in members:
                members[dtype] = []
                order.append(dtype)
            members[dtype].append((index, ref.numel))
    groups: List[DtypeGroup] = []
    rounds: List[Tuple[List[Piece], List[Piece]]] = []
    offset_bytes = 0
    for g, dtype in enumerate(order):
        tensors = members[dtype]
        starts = np.cumsum([0] + [n for _, n in tensors]).tolist()
        length = starts[-1]
        groups.append(DtypeGroup(dtype, offset_bytes, length))
        offset_bytes += -(-length * dtype.itemsize // ALIGN) * ALIGN
        bounds = np.cumsum([0] + split_counts(length, local_size)).tolist()
        chunk = max(1, chunk_bytes // dtype.itemsize) if chunk_bytes > 0 else max(1, length)
        for owner in range(local_size):
            for k, lo in enumerate(range(bounds[owner], bounds[owner + 1], chunk)):
                hi = min(bounds[owner + 1], lo + chunk)
                while len(rounds) <= k:
                    rounds.append(([], []))
                pieces = rounds[k][0] if owner == local_rank else rounds[k][1]
                i = bisect.bisect_right(starts, lo) - 1
                while i < len(tensors) and starts[i] < hi:
                    a, b = max(starts[i], lo), min(starts[i + 1], hi)
                    if a < b:
                        pieces.append(Piece(tensors[i][0], a - starts[i], b - starts[i], g, a, owner))
                    i += 1
    return ShmPlan(tuple(groups), tuple((tuple(o), tuple(x)) for o, x in rounds), offset_bytes)


class ShmGroup:
    """The job's ranks on one host sharing a control block and one data arena per rank."""

    def __init__(self, comm: MPI.Comm, watchdog, oversubscribed: bool):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.watchdog = watchdog
        self.oversubscribed = oversubscribed
        self.epoch = 0
        self.ctl_win = MPI.Win.Allocate_shared(SLOT_BYTES, 1, comm=comm)
        self.ctl_win.Lock_all(MPI.MODE_NOCHECK)
        self.slots = [self._query(self.ctl_win, r, np.int64) for r in range(self.size)]
        self.mine = self.slots[self.rank]
        self.mine[:] = 0
        self.data_win: Optional[MPI.Win] = None
        self.arenas: List[np.ndarray] = []
        self.capacity = 0
        self.generation = 0
        self.plans: Dict[tuple, Tuple[ShmPlan, int, list]] = {}
        self.small_win = MPI.Win.Allocate_shared(2 * SMALL_BYTES, 1, comm=comm)
        self.small_win.Lock_all(MPI.MODE_NOCHECK)
        self.small_arenas = [self._query(self.small_win, r, np.uint8) for r in range(self.size)]
        self.small_sum = aligned_bytes(SMALL_BYTES)
        self.small_views: Dict[tuple, tuple] = {}
        self.no_room_said: set = set()  # what has been told about a full /dev/shm (once each)
        self.heap = SharedHeap(self)  # ddl_runtime.shared_zeros: tensors that live here
        # whether its agreement barriers (those with a digest) carry the ranks' arrivals for their
        # records (core/stats.py): the native group's, set by the runtime
        self.carries_arrivals = False
        # called now and then while a barrier waits: the job's native group progresses the
        # negotiated stream there, whose own group checks that no peer has left (negotiated.py)
        self.idle: Optional[Callable[[], None]] = None
        self.results = SharedResults(self.heap)  # out-of-place results that peers write directly
        self.ctl_win.Sync()
        comm.Barrier()

    @staticmethod
    def _query(win: MPI.Win, rank: int, dtype) -> np.ndarray:
        buf, _ = win.Shared_query(rank)
        return np.frombuffer(buf, dtype=np.uint8).view(dtype)

    # -- synchronisation ------------------------------------------------------------------
    def barrier(self, digest: int = 0, word: int = 0) -> bool:
        """Wait for every local rank; True when all of them passed the same `digest`.  Each rank's
        `word` can be read with words() until this rank's next barrier.  An agreement (a digest)
        of a group that carries arrivals also carries this rank's (core/stats.py: arrival()), and
        tells the record the last rank's."""
        self.epoch = e = self.epoch + 1
        cell = 1 + (e & 1)
        mine = self.mine
        mine[cell] = digest
        mine[3 + (e & 1)] = word
        record = _stats.CURRENT if digest and self.carries_arrivals else None
        if record is not None:
            arrival = mine[5 + (e & 1)] = record.arrival()
        self.ctl_win.Sync()
        mine[0] = e
        slots = self.slots
        for slot in slots:
            if slot[0] < e:
                self._wait(e)
                break
        self.ctl_win.Sync()
        if record is not None:
            at = 5 + (e & 1)   # a peer writes this cell again only after every rank passed barrier e+1
            record.arrived(arrival, max(int(slot[at]) for slot in slots))
        return all(slot[cell] == digest for slot in slots)

    def left_behind(self, exited) -> List[int]:
        """Of the ranks in `exited` (those that finalized, as the watchdog heard), the ones that had not
        reached this rank's current barrier: they will never arrive (one that arrived, then left, is fine)."""
        if not exited:
            return []
        self.ctl_win.Sync()
        return [r for r in sorted(exited) if self.slots[r][0] < self.epoch]

    def words(self) -> List[int]:
        """Every rank's `word` of the last barrier (a peer writes that cell again only after
        every rank has passed the next barrier)."""
        cell = 3 + (self.epoch & 1)
        return [int(slot[cell]) for slot in self.slots]

    def _wait(self, e: int) -> None:
        slots, watchdog = self.slots, self.watchdog
        start = time.perf_counter()
        outer = watchdog.waiting_since  # a negotiated op may run inside a native wait (idle)
        watchdog.waiting_since = start
        spins = 0
        try:
            while True:
                if all(slot[0] >= e for slot in slots):
                    return
                spins += 1
                if spins & 7 == 0:
                    if self.idle is not None:
                        self.idle()
                    now = time.perf_counter()
                    waited = now - start
                    if not watchdog.threaded:
                        watchdog.check(now)
                    if waited > SLEEP_AFTER_S:
                        time.sleep(0.0005)  # a long wait: stop burning a core
                    elif waited > NAP_AFTER_S:
                        time.sleep(50e-6)
                    elif self.oversubscribed or waited > SPIN_BEFORE_YIELD_S:
                        os.sched_yield()  # let a peer rank (or the watchdog thread) run
        finally:
            watchdog.waiting_since = outer

    # -- room in /dev/shm -----------------------------------------------------------------
    def room_for(self, nbytes: int, what: str, instead: str, reclaim: int = 0, say: bool = True) -> bool:
        """Whether a window of `nbytes` per rank fits in /dev/shm on this host, `reclaim` bytes
        per rank being freed first (collective over the host's ranks, who all get the same
        answer).  When it does not (and `say`), the host's first rank says once per `what` what
        happens `instead`."""
        try:
            st = os.statvfs(SHM_DIR)
            free = st.f_bavail * st.f_frsize
        except OSError:  # no /dev/shm to measure: MPICH put the window elsewhere
            free = -1
        least = self.comm.allreduce(free, op=MPI.MIN)
        need = (nbytes - reclaim) * self.size + SHM_HEADROOM
        if least < 0 or least >= need:
            return True
        if say and self.rank == 0 and what not in self.no_room_said:
            self.no_room_said.add(what)
            log(f"{SHM_DIR} has {least / 2**20:.0f} MB free; {what} of {nbytes / 2**20:.0f} MB per rank "
                f"({self.size} ranks on this host) does not fit, so {instead}. Give the job more shared "
                f"memory (e.g. docker run --shm-size, a larger {SHM_DIR} mount) or set DDL_SHM=0")
        return False

    # -- the data arena -------------------------------------------------------------------
    def ensure(self, nbytes: int) -> bool:
        """Grow every rank's arena to at least `nbytes` (collective: call with the same size);
        False, leaving the arena as it is, when /dev/shm has no room for it."""
        if nbytes <= self.capacity:
            return True
        capacity = max(MIN_ARENA, nbytes, 2 * self.capacity)
        what, instead = "an arena", "reductions that need it take the MPI path"
        if not self.room_for(capacity, what, instead, reclaim=self.capacity, say=capacity == nbytes):
            if capacity == nbytes or not self.room_for(nbytes, what, instead, reclaim=self.capacity):
                return False
            capacity = nbytes  # no room to double: just what this plan needs
        self._free_data()
        self.data_win = MPI.Win.Allocate_shared(capacity, 1, comm=self.comm)
        self.data_win.Lock_all(MPI.MODE_NOCHECK)
        self.arenas = [self._query(self.data_win, r, np.uint8) for r in range(self.size)]
        self.capacity = capacity
        self.generation += 1
        self.plans.clear()
        return True

    def _free_data(self) -> None:
        if self.data_win is not None:
            self.arenas = []
            self.data_win.Unlock_all()
            self.data_win.Free()
            self.data_win = None
            self.capacity = 0

    def free(self) -> None:
        """Release the windows (collective over the host's ranks)."""
        self._free_data()
        self.results.clear()
        if "shared_zeros" in self.heap.free():  # results still held by tensors are expected: quiet
            log("shared_zeros arrays are still in use after finalize; their shared memory stays "
                "mapped until the process exits")
        self.small_arenas, self.small_views = [], {}
        self.small_win.Unlock_all()
        self.small_win.Free()
        self.slots = []
        self.mine = None
        self.ctl_win.Unlock_all()
        self.ctl_win.Free()
        self.comm.Free()

    def compiled(self, refs: Sequence[TensorRef]) -> Optional["Compiled"]:
        """The plan for these tensors with every arena view it needs made once (cached); None
        when the arena cannot grow to hold them (no room in /dev/shm: every rank alike)."""
        key = tuple((r.numel, r.dtype) for r in refs)
        cached = self.plans.get(key)
        if cached is None or cached.generation != self.generation:
            shm_plan = plan(refs, self.size, self.rank)
            if not self.ensure(shm_plan.nbytes):
                return None
            if len(self.plans) > 256:
                self.plans.clear()
            cached = self.plans[key] = Compiled(shm_plan, self, [r.widened for r in refs])
        return cached

    # -- allreduce ------------------------------------------------------------------------
    @staticmethod
    def small_eligible(refs: Sequence[TensorRef]) -> bool:
        """Whether allreduce_small takes these tensors: one dtype, not widened, SMALL_BYTES at most."""
        if not refs or refs[0].widened:
            return False
        dtype, nbytes = refs[0].flat.dtype, 0
        for r in refs:
            if r.flat.dtype != dtype or r.widened:
                return False
            nbytes += r.flat.nbytes
        return nbytes <= SMALL_BYTES

    def allreduce_small(self, refs: Sequence[TensorRef], op: str, scale: Optional[float], digest: int,
                        timeline=None) -> bool:
        """Agree on `digest` and reduce `refs` (small_eligible) with that one barrier: in place, or
        into each ref's `out`.  Returns False, reducing nothing, when the ranks' digests differ.

        With an enabled timeline: PACK, ALLREDUCE (algorithm "shm-small", the barrier included)
        and UNPACK spans."""
        t0 = time.perf_counter()
        flats = [r.flat for r in refs]
        dtype = flats[0].dtype
        half = (self.epoch + 1) & 1  # the parity of the barrier below
        key = (half, dtype, tuple(f.size for f in flats))
        views = self.small_views.get(key)
        if views is None:
            views = self.small_views[key] = self._small_views(half, dtype, key[2])
        packed, total, parts = views
        np.concatenate(flats, out=packed[self.rank])
        t1 = time.perf_counter()
        if not self.barrier(digest):
            return False
        sum_in_rank_order(UFUNCS[op], packed, total)
        t2 = time.perf_counter()
        if scale is None:
            for r, part in zip(refs, parts):
                np.copyto(r.dst, part)
        else:  # divide on the way out (one pass less than dividing the sum first); a 0-d divisor of
            divisor = np.array(scale, dtype=dtype)  # the dtype: the same quotient, less per-call cost
            for r, part in zip(refs, parts):
                np.divide(part, divisor, out=r.dst)
        if timeline is not None and timeline.enabled:
            nbytes = total.nbytes
            timeline.span("PACK", TID_HOST, t0, t1, {"bytes": nbytes, "tensors": len(refs), "algorithm": "shm-small"})
            timeline.span("ALLREDUCE", TID_MPI, t1, t2, {"algorithm": "shm-small", "bytes": nbytes, "op": op,
                                                         "dtype": dtype.name})
            timeline.span("UNPACK", TID_HOST, t2, time.perf_counter(), {"bytes": nbytes, "algorithm": "shm-small"})
            timeline.tensors_reduced(ref_rows(refs), "SHM_ALLREDUCE", t1, t2)
        return True

    def _small_views(self, half: int, dtype: np.dtype, sizes: Tuple[int, ...]) -> tuple:
        """(every rank's packed buffer in small-arena half `half`, my sum, my sum cut per tensor)."""
        if len(self.small_views) > 256:
            self.small_views.clear()
        count = sum(sizes)
        packed = self.small_packed(half, dtype, count)
        total = self.small_sum[:count * dtype.itemsize].view(dtype)
        bounds = np.cumsum((0,) + sizes).tolist()
        return packed, total, tuple(total[a:b] for a, b in zip(bounds, bounds[1:]))

    def small_packed(self, half: int, dtype: np.dtype, count: int) -> Tuple[np.ndarray, ...]:
        """Every rank's first `count` elements of `dtype` in small-arena half `half` (where
        allreduce_small packs for a barrier of that parity; flat_allreduce.FlatAllreduce too)."""
        start = half * SMALL_BYTES
        return tuple(a[start:start + count * dtype.itemsize].view(dtype) for a in self.small_arenas)

    def allreduce(self, refs: Sequence[TensorRef], op: str, scale: Optional[float], timeline=None) -> bool:
        """Reduce `refs` across the host's ranks (call right after an agreement): in place, or into
        each ref's `out` when set (the source is then only read, and no extra copy is made).
        False, nothing reduced, when the arena has no room for them (every rank alike).

        With an enabled timeline: PACK (publishing the first round), ALLREDUCE (the rounds,
        algorithm "shm") and UNPACK (gathering the last round) spans.
        """
        c = self.compiled(refs)
        if c is None:
            return False
        if not c.rounds:
            return True
        t0 = time.perf_counter()
        ufunc = UFUNCS[op]
        flats = [r.flat for r in refs]  # read only: an out-of-place ref's results go to its `out`
        dsts = [r.dst for r in refs]
        _publish(c.rounds[0], flats, refs)
        t1 = time.perf_counter()
        self.barrier()
        # Round k: reduce my chunk k, publish chunk k+1, one barrier, gather the others' chunk k.
        # One barrier per round suffices: after it, peers read only what was written before it
        # (my reduced chunk k, my published chunk k+1) and nobody writes what is being read.
        t2 = t1
        last = len(c.rounds) - 1
        for k, r in enumerate(c.rounds):
            for i, a, b, acc, peers in r.reduce:
                base = acc if refs[i].widened else flats[i][a:b]
                for peer in peers:
                    ufunc(base, peer, out=acc)
                    base = acc
                store_result(refs[i], acc, dsts[i][a:b], scale)
            if k < last:
                _publish(c.rounds[k + 1], flats, refs)
            self.barrier()
            t2 = time.perf_counter()
            for i, a, b, src in r.gather:
                store_result(refs[i], src, dsts[i][a:b], scale)
        if timeline is not None and timeline.enabled:
            nbytes = sum(g.length * g.dtype.itemsize for g in c.plan.groups)
            timeline.span("PACK", TID_HOST, t0, t1, {"bytes": nbytes, "tensors": len(refs), "algorithm": "shm"})
            timeline.span("ALLREDUCE", TID_MPI, t1, t2, {"algorithm": "shm", "bytes": nbytes, "op": op,
                                                         "rounds": len(c.rounds),
                                                         "dtype": ",".join(g.dtype.name for g in c.plan.groups)})
            timeline.span("UNPACK", TID_HOST, t2, time.perf_counter(), {"bytes": nbytes, "algorithm": "shm"})
            timeline.tensors_reduced(ref_rows(refs), "SHM_ALLREDUCE", t1, t2)
        return True


@dataclass
class CompiledRound:
    publish: list  # (tensor, start, stop, my arena view): copy or widen into it
    reduce: list  # (tensor, start, stop, my arena view, peers' arena views)
    gather: list  # (tensor, start, stop, owner's arena view)


class Compiled:
    """A plan bound to the current arenas: per round, the arena views each step touches."""

    def __init__(self, shm_plan: ShmPlan, group: ShmGroup, widened: Sequence[bool]):
        self.plan = shm_plan
        self.generation = group.generation
        views = [[arena[g.byte_offset:g.byte_offset + g.length * g.dtype.itemsize].view(g.dtype)
                  for g in shm_plan.groups] for arena in group.arenas]
        me = group.rank
        peers = [r for r in range(group.size) if r != me]

        def view(rank: int, p: Piece) -> np.ndarray:
            return views[rank][p.group][p.offset:p.offset + p.stop - p.start]

        self.rounds: List[CompiledRound] = []
        for own, others in shm_plan.rounds:
            self.rounds.append(CompiledRound(
                [(p.tensor, p.start, p.stop, view(me, p)) for p in others]
                + [(p.tensor, p.start, p.stop, view(me, p)) for p in own if widened[p.tensor]],
                [(p.tensor, p.start, p.stop, view(me, p), tuple(view(r, p) for r in peers)) for p in own],
                [(p.tensor, p.start, p.stop, view(p.owner, p)) for p in others]))


def sum_in_rank_order(ufunc, packed: Sequence[np.ndarray], out: np.ndarray) -> None:
    """`out` = every rank's packed buffer combined in rank order (at least two): each rank that
    runs this gets the same bits (allreduce_small, flat_allreduce.FlatAllreduce)."""
    ufunc(packed[0], packed[1], out=out)
    for other in packed[2:]:
        ufunc(out, other, out=out)


def _publish(r: CompiledRound, flats: Sequence[np.ndarray], refs: Sequence[TensorRef]) -> None:
    """Copy (or widen) my tensors' part of the other ranks' chunks into my arena; widen my own."""
    for i, a, b, dst in r.publish:
        ref = refs[i]
        if ref.widened:
            widen(flats[i][a:b], ref.dtype, dst)
        else:
            np.copyto(dst, flats[i][a:b])


def open_group(world: MPI.Comm, one_node: bool, enabled: bool, watchdog,
               oversubscribed: bool) -> Optional[ShmGroup]:
    """The shared-memory group when the whole job is one node of one host, else None (collective).

    `one_node`: the job's grouping puts every rank on one node (False under DDL_EMULATE_NODES=K>1
    or a mode string with several nodes: emulated nodes must not share memory).  Every rank
    takes the same decision; if the windows cannot be allocated anywhere, nobody uses them.
    """
    if world.Get_size() == 1:
        return None
    host = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
    usable = bool(enabled and one_node and host.Get_size() == world.Get_size())
    if not world.allreduce(usable, op=MPI.LAND):
        host.Free()
        return None
    group, error = None, None
    try:
        group = ShmGroup(host, watchdog, oversubscribed)
    except Exception as exc:  # noqa: BLE001 - fall back to the MPI path on every rank
        error = exc
    if not world.allreduce(error is None, op=MPI.LAND):
        if group is not None:
            group.free()
        else:
            host.Free()
        return None
    return group
