"""Name-negotiated collectives (Horovod's model): ranks may submit in different orders.

A rank submits a request (an allreduce of named tensors, a broadcast, a join...) and gets
a `Handle` at once.  Requests are matched across the ranks of a process set by name, not by
call order: ranks exchange the descriptors of newly submitted requests in *rounds* (one
non-blocking allgather of a fixed slot per rank on the set's negotiation communicator, a
second one only when a rank's descriptors do not fit), and every rank keeps the
same table of who announced what.  A request whose name every rank (joined ranks aside)
has announced is *ready*; ready requests run in table order, identical on every rank, so
the data collectives (kernels.py, on a second communicator) match up.  Descriptors that
disagree (dtype, shape, op, root, splits, the collective itself) fail the request on every
rank with one line naming the tensor and which ranks passed what.

There is no background thread: rounds and data transfers progress whenever a rank is in
`progress()` (every submit, poll and wait).  A wait names the ranks that have not submitted
the tensor after the stall-warning time, and gives up after the stall-shutdown time.
"""
from __future__ import annotations

import math
import os
import pickle
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from mpi4py import MPI

from . import adasum
from ..engine import kernels
from ..core import log as _log
from ..core.stats import collective
from ..errors import DDLError, DDLInputError, DDLMismatchError
from ..transports.shm.output_pool import RESULTS
from .response_cache import CAPACITY, PER_ROUND, ResponseCache
from ..timeline import TID_API, TID_MPI

SLOT_BYTES = 1024  # per rank and round; longer descriptor lists follow in a second allgather
HEADER = 16  # a slot: pickled bytes, cached ids (int64 each), then the pickled descriptors
YIELD_AFTER_S = 50e-6
REFUSAL_FLUSH_S = 1.0  # at shutdown, how long a pending refusal may wait for its round to complete
REFUSAL_SETTLE_S = 0.5  # how long a refusal waits for the peers' side of the name before returning
DEPARTED_GRACE_S = 1.0  # a peer that finalized this long ago while we still wait will never come


@dataclass
class Request:
    """What a rank submitted: one collective over one or more tensors (a group)."""

    kind: str
    name: str
    params: tuple  # kind-specific: (op, prescale, postscale) / (root,) / () ...
    tensors: List[Tuple[str, str, tuple]]  # (tensor name, dtype, shape) as announced
    inputs: List[Optional[np.ndarray]] = field(default_factory=list)
    outputs: List[Optional[np.ndarray]] = field(default_factory=list)
    extra: Any = None  # alltoall: the splits (rows sent to each rank)
    error: Optional[str] = None  # a rank-local bad input: announced so that every rank fails, not just this one
    device: str = "cpu"  # where the caller's tensors live ("cpu", "cuda"): ranks must agree, as on dtypes.
    # Off the CPU the caller scales (pre/postscale, the average's division) on the device in the
    # tensor's dtype, as Horovod's GPU build does; the engine only combines (engine_params)
    allocate: Optional[Callable[[int, tuple], np.ndarray]] = None  # allgather/alltoall: output i of a shape
    # (None: new host memory); horovod.torch's host staging hands out pooled pinned buffers

    @property
    def key(self) -> str:
        """What ranks match on: the collective and the name (an allreduce and a broadcast may share a name)."""
        return f"{self.kind}.{self.name}"

    def descriptor(self) -> tuple:
        return (self.kind, self.name, self.params, tuple(self.tensors), self.extra, self.error, self.device)


def engine_params(desc: tuple) -> tuple:
    """The (op, prescale, postscale) the engine applies to a reduction's descriptor: as announced
    for host tensors; for device tensors only the combination (their caller scales on the device)."""
    params = desc[2]
    if len(desc) < 7 or desc[6] == "cpu":
        return params
    return ("sum" if params[0] == "average" else params[0], 1.0, 1.0)


class Handle:
    """An in-flight request: done(), wait() -> result or raises the request's error."""

    def __init__(self, controller: "Controller", request: Request):
        self.controller = controller
        self.request = request
        self.submitted = time.perf_counter()
        self.finished = False
        self.error: Optional[BaseException] = None
        self.result: Any = None
        self._pending_data = 0

    @collective
    def done(self) -> bool:
        """Whether it had finished when asked (never blocks).  A call that finds it unfinished
        drives the engine, so a later call may find it done, as Horovod's poll reads a status its
        background thread sets rather than completing the operation inside the call that asks
        (code that submits and polls at once sees an asynchronous operation, as under Horovod)."""
        if self.finished:
            return True
        self.controller.progress()
        return False

    @collective
    def wait(self, timeout: Optional[float] = None) -> Any:
        self.controller.wait_for(self, timeout)
        if self.error is not None:
            raise self.error
        return self.result


@dataclass
class _Entry:
    """The table's view of one name: each rank's descriptor and the round it arrived in."""

    descs: Dict[int, tuple] = field(default_factory=dict)


class Controller:
    """Negotiation and execution for one process set (its ranks as a communicator)."""

    def __init__(self, comm: MPI.Comm, global_ranks: Sequence[int], fusion_bytes: int,
                 stall_warning_s: float, stall_shutdown_s: Optional[float], timeline=None, set_id: int = 0,
                 cache_capacity: Optional[int] = None):
        self.neg = comm.Dup()
        self.data = comm.Dup()
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.global_ranks = list(global_ranks)
        self.set_id = set_id
        self.fusion_bytes = fusion_bytes
        self.stall_warning_s = stall_warning_s
        self.stall_shutdown_s = stall_shutdown_s
        self.timeline = timeline
        self.local: Dict[str, Handle] = {}        # names this rank has in flight
        self.unannounced: List[Handle] = []
        self.table: "OrderedDict[str, _Entry]" = OrderedDict()
        self.joined: Dict[int, int] = {}           # set rank -> round it joined in
        self.round = 0
        self._round_state: Optional[tuple] = None   # (phase, request, buffers...)
        self.in_flight: List[Tuple[kernels.InFlight, List[Handle]]] = []
        self.noname: Dict[str, int] = {}
        # descriptors that ran: announced by id (response_cache.py).  Every rank must number them
        # alike, so the set agrees on the smallest capacity asked for (DDL_RESPONSE_CACHE, 0: off).
        capacity = CAPACITY if cache_capacity is None else cache_capacity
        self.cache = ResponseCache(self.neg.allreduce(capacity, op=MPI.MIN))
        self.closed = False
        self.broken: Optional[str] = None  # why no collective of this set can complete any more
        self.lock = threading.RLock()
        self.progress_all: Callable[[], None] = self.progress  # the registry makes waits progress every set
        # Ranks of the whole job (global numbers) that have finalized or exited, from the runtime's
        # watchdog: none of them will ever submit again.  The registry wires this up.
        self.departed: Callable[[], Sequence[int]] = lambda: ()

    # -- submitting -----------------------------------------------------------------------
    def auto_name(self, kind: str) -> str:
        n = self.noname.get(kind, 0)
        self.noname[kind] = n + 1
        return f"noname.{n}"

    @collective
    def submit(self, request: Request) -> Handle:
        with self.lock:
            return self._submit(request)

    def _submit(self, request: Request) -> Handle:
        if self.closed:
            raise DDLError(f"{request.kind} '{request.name}': the process set was removed or shut down")
        if self.broken:
            raise DDLError(f"{request.kind} '{request.name}': {self.broken}")
        if request.key in self.local:
            raise DDLInputError(
                f"{request.kind} '{request.name}': a collective with this name is still in flight on this rank; "
                "names must be unique among outstanding operations")
        handle = Handle(self, request)
        self.local[request.key] = handle
        self.unannounced.append(handle)
        self._submitting = True  # negotiate, but leave blocking shared-memory work to polls and waits
        try:
            self._progress()
        finally:
            self._submitting = False
        return handle

    # -- progress -------------------------------------------------------------------------
    def progress(self) -> None:
        """One non-blocking step: finish completed transfers, advance the negotiation round."""
        with self.lock:  # autograd may run hooks (and so submit) on another thread
            self._progress()

    def _progress(self) -> None:
        self._test_transfers()
        for _ in range(4):  # a few rounds per call when they complete at once
            if self._round_state is None:
                if not self._needs_round():
                    break
                self._start_round()
            if not self._advance_round():
                break
            self._test_transfers()  # what the round just started may be done already

    def _test_transfers(self) -> None:
        if not self.in_flight:
            return
        still = []
        for flight, handles in self.in_flight:
            if flight.test():
                self._span(flight)
                for h in handles:
                    h._pending_data -= 1
                    if h._pending_data == 0:
                        self._complete(h)
            else:
                still.append((flight, handles))
        self.in_flight = still

    def _needs_round(self) -> bool:
        if self.unannounced:
            return True
        return any(not h.finished and h._pending_data == 0 and h.request.key in self.table
                   for h in self.local.values())

    def _start_round(self) -> None:
        """Post this round's allgather: a fixed slot per rank (the cached requests' ids, the others'
        descriptors when they fit; on one host the cached small allreduces' data beside it)."""
        if self.timeline is not None and self.timeline.enabled:
            self.timeline.cycle_start()  # Horovod's timeline: CYCLE_START (HOROVOD_TIMELINE_MARK_CYCLES)
        news, ids, at = [], [], 0
        data = self.shm.rounds.next_data() if self.shm is not None else None
        cache = self.cache
        for h in self.unannounced:
            req = h.request
            desc = req.descriptor()
            key = cache.key(desc)
            if key is None or len(ids) == PER_ROUND:
                news.append(desc)
                continue
            carry = cache.carry(key)
            if data is not None and carry is not None and at + carry[2] <= len(data):
                self.shm.pack(req.inputs, carry, data[at:])
                at += carry[2]
                ids.append(2 * key + 1)
            else:
                ids.append(2 * key)
        self.unannounced = []
        payload = pickle.dumps(news, protocol=pickle.HIGHEST_PROTOCOL) if news else b""
        slot = np.zeros(SLOT_BYTES, dtype=np.uint8)
        head = slot[:HEADER + 8 * len(ids)].view(np.int64)
        head[0], head[1] = len(payload), len(ids)
        head[2:] = ids
        if head.nbytes + len(payload) <= SLOT_BYTES:
            slot[head.nbytes:head.nbytes + len(payload)] = np.frombuffer(payload, dtype=np.uint8)
        slots = np.empty((self.size, SLOT_BYTES), dtype=np.uint8)
        if self.shm is not None:  # one host: the same exchange through shared memory
            req = self.shm.rounds.start(slot, slots)
        else:
            req = self.neg.Iallgather([slot, MPI.BYTE], [slots, MPI.BYTE])
        self._round_state = ("slots", req, payload, slots, None)

    def _advance_round(self) -> bool:
        state = self._round_state
        if state[0] == "slots":
            _, req, payload, slots, _ = state
            if not req.Test():
                return False
            heads = [slots[r, :HEADER].view(np.int64) for r in range(self.size)]
            lengths = [int(h[0]) for h in heads]
            spilled = [n if HEADER + 8 * int(h[1]) + n > SLOT_BYTES else 0 for n, h in zip(lengths, heads)]
            req, gathered = MPI.REQUEST_NULL, None
            if any(spilled):  # every rank sees the same lengths, so all take this branch together
                gathered = np.empty(sum(spilled), dtype=np.uint8)
                mine = np.frombuffer(payload, dtype=np.uint8) if spilled[self.rank] else np.empty(0, np.uint8)
                displs = np.concatenate(([0], np.cumsum(spilled)[:-1])).astype(int).tolist()
                req = self.neg.Iallgatherv([mine, MPI.BYTE], [gathered, (spilled, displs), MPI.BYTE])
            state = self._round_state = ("spilled", req, (lengths, spilled), slots, gathered)
        _, req, (lengths, spilled), slots, gathered = state
        if req != MPI.REQUEST_NULL and not req.Test():
            return False
        self._round_state = None
        self.round += 1
        offset = 0
        cached = []
        for r in range(self.size):
            n_ids = int(slots[r, 8:16].view(np.int64)[0])
            start = HEADER + 8 * n_ids
            cached.append(slots[r, HEADER:start].view(np.int64).tolist())
            if spilled[r]:
                raw = gathered[offset:offset + spilled[r]].tobytes()
                offset += spilled[r]
            elif lengths[r]:
                raw = slots[r, start:start + lengths[r]].tobytes()
            else:
                continue
            for desc in pickle.loads(raw):
                self._announce(r, desc)
        if any(cached):
            self._announce_cached(cached)
        self._run_ready()
        return True

    def _announce_cached(self, cached: List[List[int]]) -> None:
        """The round's cached announcements.  An allreduce that every rank announced here (no rank
        joined, not in the table) needs no table: its descriptor ran alike on every rank before, so
        there is nothing to check.  With every rank's data in the round it is reduced from the
        round's rows at once; with nobody's it is posted at once, in rank 0's order (every rank
        reads the same slots, so the same order).  The rest join the table."""
        cache = self.cache
        where: Dict[int, List[Optional[int]]] = {}  # key -> each rank's data offset (None: no data)
        seen: Dict[int, int] = {}                  # key -> how many ranks announced it
        for r, ids in enumerate(cached):
            at = 0
            for v in ids:
                key = v >> 1
                offsets = where.setdefault(key, [None] * self.size)
                seen[key] = seen.get(key, 0) + 1
                if v & 1:
                    offsets[r] = at
                    at += cache.carry(key)[2]
        direct: List[tuple] = []
        for r, ids in enumerate(cached):
            for v in ids:
                key = v >> 1
                offsets = where[key]
                desc = cache.descriptor(key)
                if seen[key] < self.size or self.joined or f"allreduce.{desc[1]}" in self.table:
                    self._announce(r, desc)
                elif None not in offsets:
                    if r == 0:
                        self._run_carried(desc, cache.carry(key), offsets)
                elif offsets.count(None) == self.size:
                    if r == 0:
                        direct.append(desc)
                else:  # some ranks carried its data and some could not: the table decides
                    self._announce(r, desc)
        if direct:
            fused: "OrderedDict[tuple, list]" = OrderedDict()
            for desc in direct:
                handle = self.local.get(f"allreduce.{desc[1]}")
                if handle is not None:
                    self._negotiated(handle)
                self._fuse(fused, handle, desc)
            self._post_fused(fused)

    def _run_carried(self, desc: tuple, carry: tuple, offsets: List[int]) -> None:
        handle = self.local.get(f"allreduce.{desc[1]}")
        if handle is None:  # this rank gave up waiting for it (stall shutdown) after announcing it
            return
        self._negotiated(handle)
        t0 = time.perf_counter()
        req = handle.request
        results = self.shm.reduce_carried(carry, offsets, desc[2][0], req.outputs)
        for i, (result, (_, _, shape)) in enumerate(zip(results, desc[3])):
            if req.outputs[i] is None:
                req.outputs[i] = result.reshape(shape)
        tl = self.timeline
        if tl is not None and tl.enabled:
            t1 = time.perf_counter()
            tl.span("ALLREDUCE", TID_MPI, t0, t1, {"tensors": ",".join(t[0] for t in desc[3][:8]),
                                                   "process_set": self.set_id, "algorithm": "cached"})
            tl.tensors_activity("allreduce", [t[0] for t in desc[3]], "SHM_ALLREDUCE", t0, t1)
        self._complete(handle)

    def _announce(self, r: int, desc: tuple) -> None:
        kind, key = desc[0], f"{desc[0]}.{desc[1]}"
        if kind == "join":
            self.joined[r] = self.round
        entry = self.table.get(key)
        if entry is None:
            entry = self.table[key] = _Entry()
        entry.descs[r] = desc

    # -- readiness and validation ------------------------------------------------------------
    def _run_ready(self) -> None:
        ready = []
        for key, entry in list(self.table.items()):
            name = next(iter(entry.descs.values()))[1]
            kinds = {d[0] for d in entry.descs.values()}
            if kinds == {"join"}:
                if len(entry.descs) == self.size:
                    ready.append((key, entry, None))
                continue
            missing = [r for r in range(self.size) if r not in entry.descs]
            if not missing:
                ready.append((key, entry, self._check(name, entry)))
            elif all(r in self.joined for r in missing):
                err = self._check(name, entry)
                if err is None and kinds != {"allreduce"}:
                    err = (f"{next(iter(kinds))} '{name}': {_ranks([self.global_ranks[r] for r in missing])} "
                           "called join(); only allreduce can run while ranks have joined")
                ready.append((key, entry, err))
        fused: "OrderedDict[tuple, list]" = OrderedDict()
        for key, entry, err in ready:
            del self.table[key]
            handle = self.local.get(key)
            if handle is not None:
                self._negotiated(handle)
            if err is not None:
                if handle is not None:
                    self._fail(handle, DDLMismatchError(err))
                continue
            desc = next(iter(entry.descs.values()))
            kind = desc[0]
            if kind == "join":
                last_round = max(self.joined.values())
                last = max(r for r, rnd in self.joined.items() if rnd == last_round)
                self.joined.clear()
                if handle is not None:
                    handle.result = self.global_ranks[last]
                    self._complete(handle)
                continue
            if kind == "barrier":
                if handle is not None:
                    self._complete(handle)
                continue
            if kind == "allreduce":
                if len(entry.descs) == self.size and all(d == desc for d in entry.descs.values()):
                    self.cache.learn(desc)
                self._fuse(fused, handle, desc)
                continue
            self._post(kind, desc, entry, handle)
        self._post_fused(fused)

    def _fuse(self, fused: "OrderedDict[tuple, list]", handle: Optional[Handle], desc: tuple) -> None:
        """Add a negotiated allreduce's tensors to the groups fused per dtype and op (a group may mix
        dtypes); a group over the fusion size is posted as it fills (shared memory: any size)."""
        params = engine_params(desc)
        for i, tensor in enumerate(desc[3]):
            key = (tensor[1], params)
            group = fused.setdefault(key, [])
            if self.shm is not None and self.shm.takes(tensor[1], params[0]):
                group.append((handle, i, tensor))
                continue
            nbytes = sum(_nbytes(t) for _, _, t in group)
            if group and nbytes + _nbytes(tensor) > self.fusion_bytes:
                self._post_allreduce(key, group)
                group = fused[key] = []
            group.append((handle, i, tensor))

    def _post_fused(self, fused: "OrderedDict[tuple, list]") -> None:
        for key, group in fused.items():
            if group:
                self._post_allreduce(key, group)

    def _check(self, name: str, entry: _Entry) -> Optional[str]:
        descs = entry.descs
        first = next(iter(descs.values()))
        kind = first[0]
        what = f"{kind} '{name}'"
        bad = {r: d[5] for r, d in descs.items() if len(d) > 5 and d[5]}
        if bad:
            return f"{what}: " + "; ".join(f"rank {self.global_ranks[r]} refused its input: {msg}"
                                          for r, msg in sorted(bad.items()))
        if len({d[6] if len(d) > 6 else "cpu" for d in descs.values()}) > 1:
            return (f"{what}: mismatched CPU/GPU device selection, ranks pass tensors on different devices: "
                    + _sides(descs, lambda d: d[6] if len(d) > 6 else "cpu", self.global_ranks))
        if len({d[2] for d in descs.values()}) > 1:
            label = {"allreduce": "op/scale factors", "reducescatter": "op/scale factors",
                     "broadcast": "root rank"}.get(kind, "arguments")
            return f"{what}: ranks disagree on the {label}: " + _sides(descs, lambda d: _params(kind, d[2]),
                                                                        self.global_ranks)
        if len({len(d[3]) for d in descs.values()}) > 1:
            return f"{what}: ranks pass different numbers of tensors: " + _sides(
                descs, lambda d: len(d[3]), self.global_ranks)
        for i in range(len(first[3])):
            tname = first[3][i][0]
            label = f"{kind} '{tname}'"
            if len({d[3][i][1] for d in descs.values()}) > 1:
                return f"{label}: ranks pass different dtypes: " + _sides(descs, lambda d: d[3][i][1], self.global_ranks)
            if kind in ("allgather", "alltoall"):
                if len({len(d[3][i][2]) for d in descs.values()}) > 1 or len({d[3][i][2][1:] for d in descs.values()}) > 1:
                    return (f"{label}: ranks pass tensors whose shapes differ beyond the first dimension: "
                            + _sides(descs, lambda d: list(d[3][i][2]), self.global_ranks))
            elif len({d[3][i][2] for d in descs.values()}) > 1:
                return f"{label}: ranks pass different shapes: " + _sides(descs, lambda d: list(d[3][i][2]),
                                                                           self.global_ranks)
        return None

    # -- execution ----------------------------------------------------------------------------
    # the global set on one host: allreduces in shared memory (a negotiated.NegotiatedShm, set by
    # process_sets.py; not imported here: negotiated.py builds on this module's slots)
    shm: Optional[Any] = None
    _submitting = False

    def _post_allreduce(self, key, group) -> None:
        """Start one fused allreduce group.  An output of None (TensorFlow's out-of-place results)
        is memory this rank picks: a shared result region on the shared-memory path, else pooled."""
        if "@" in key[0]:  # device tensors (horovod.torch on the NCCL transport)
            self._post_allreduce_device(key, group)
            return
        dtype, (op, prescale, postscale) = np.dtype(key[0]), key[1]
        inputs, outputs, counts, handles, names = [], [], [], [], []
        for handle, i, (tname, _, shape) in group:
            counts.append(math.prod(shape))
            names.append(tname)
            if handle is not None:
                inputs.append(handle.request.inputs[i])
                outputs.append(handle.request.outputs[i])
                if handle not in handles:
                    handles.append(handle)
            else:  # a joined rank contributes zeros
                inputs.append(None)
                outputs.append(None)
        if op == "adasum":
            self._track(_AdasumFlight(self, group, handles, (inputs, outputs, dtype, counts, prescale, postscale)),
                        handles, names)
            return
        if self.shm is not None and self.shm.takes(key[0], op):
            # a transfer that runs (blocking, in shared memory) when first tested outside a submit;
            # transfers are tested in the order posted, i.e. in table order, alike on every rank
            self._track(_ShmFlight(self, group, handles, (inputs, outputs, dtype, counts, names, op, prescale,
                                                         postscale)), handles, names)
            return
        self._post_allreduce_mpi(group, inputs, outputs, dtype, counts, names, handles, op, prescale, postscale)

    def _post_allreduce_mpi(self, group, inputs, outputs, dtype, counts, names, handles, op, prescale,
                            postscale) -> None:
        _take_outputs(group, outputs, dtype)
        divisor = self.size if op == "average" else 1
        flight = kernels.post_allreduce(self.data, inputs, outputs, dtype, counts, op, prescale, postscale,
                                        divisor, label="ALLREDUCE")
        self._track(flight, handles, names)

    def _post_allreduce_device(self, key, group) -> None:
        """A fused group of device tensors ("<dtype>@<device>"), in the negotiated order: reduced on the
        device through the job's device route (gpu/nccl.py, or gpu/ipc.py where every rank is on one
        GPU), no host copy.  Outputs of None get
        the input's values in a new tensor; a joined rank contributes zeros on its device."""
        from ..state import runtime
        from ..transports import gpu
        from ..transports.gpu import nccl
        from ..transports.gpu.transport import decided
        from . import negotiated_device
        torch = sys.modules["torch"]
        op, prescale, postscale = key[1]
        rt = runtime.current()
        tensors, handles, names = [], [], []
        for handle, i, (tname, dtype, shape) in group:
            names.append(tname)
            if handle is None:
                kind, _, device = dtype.partition("@")
                where = torch.device(device, rt.gpu.index) if device == "cuda" else torch.device(device)
                tensors.append(torch.zeros(shape, dtype=getattr(torch, kind), device=where))
                continue
            req = handle.request
            with torch.no_grad():
                if req.outputs[i] is None:
                    req.outputs[i] = req.inputs[i].detach().clone()
                elif req.outputs[i].data_ptr() != req.inputs[i].data_ptr():
                    req.outputs[i].copy_(req.inputs[i])
            tensors.append(req.outputs[i])
            if handle not in handles:
                handles.append(handle)
        with torch.no_grad():
            if prescale != 1.0:
                for t in tensors:
                    t.mul_(prescale)
            chosen = decided(rt)
            if chosen is not None and chosen.name == "ipc":
                pending = gpu.device_allreduce_start(rt, tensors, {"average": "avg"}.get(op, op), comm=self.data)
            else:   # NCCL: the group of the request's process set (negotiated_device.group_of)
                device = group[0][2][1].partition("@")[2]  # "<dtype>@<device>", one device per fused group
                pending = nccl.allreduce_start(negotiated_device.group_of(self, device), tensors, {"average": "avg"}.get(op, op),
                                               self.size, [])

        def finish() -> None:
            with torch.no_grad():
                pending.wait()
                if postscale != 1.0:
                    for t in tensors:
                        t.mul_(postscale)
        flight = negotiated_device.DeviceFlight([], finish, label="ALLREDUCE")
        flight.pending = pending
        self._track(flight, handles, names)

    def _post(self, kind: str, desc: tuple, entry: _Entry, handle: Optional[Handle]) -> None:
        if handle is None:
            return  # only allreduce runs on ranks that do not hold the tensor (joined); checked above
        req = handle.request
        names = [t[0] for t in req.tensors]
        if req.tensors and "@" in req.tensors[0][1]:  # device tensors (horovod.torch on the NCCL transport)
            from . import negotiated_device
            self._track(negotiated_device.post(self, kind, entry, handle), [handle], names)
            return
        flights = []
        if kind == "allgather":
            handle.result = []
            for i, (_, _, shape) in enumerate(req.tensors):
                rows = [int(entry.descs[r][3][i][2][0]) for r in range(self.size)]
                src = req.inputs[i]
                req.outputs[i] = _output(req, i, (sum(rows),) + tuple(src.shape[1:]), src.dtype)
                handle.result.append(rows)
                flights.append(kernels.post_allgather(self.data, src, req.outputs[i], rows, "ALLGATHER"))
        elif kind == "broadcast":
            root = self.global_ranks.index(req.params[0])
            for i in range(len(req.tensors)):
                flights.append(kernels.post_bcast(self.data, req.outputs[i], root, "BROADCAST"))
        elif kind == "alltoall":
            recv = [int(entry.descs[r][4][self.rank]) for r in range(self.size)]
            handle.result = recv
            out_shape = (sum(recv),) + tuple(req.tensors[0][2][1:])
            out = _output(req, 0, out_shape, req.inputs[0].dtype)
            req.outputs = [out]
            flights.append(kernels.post_alltoall(self.data, req.inputs[0], out, req.extra, recv, "ALLTOALL"))
        elif kind == "reducescatter":
            op, prescale, postscale = engine_params(desc)
            divisor = self.size if op == "average" else 1
            for i, (_, _, shape) in enumerate(req.tensors):
                rows = kernels.scatter_rows(shape[0], self.size)
                flights.append(kernels.post_reducescatter(self.data, req.inputs[i], req.outputs[i], rows, op,
                                                          prescale, postscale, divisor, "REDUCESCATTER"))
        for flight in flights:
            self._track(flight, [handle], names)

    def _track(self, flight: kernels.InFlight, handles: List[Handle], names: List[str]) -> None:
        flight.started = time.perf_counter()
        flight.label = f"{flight.label}|{','.join(names[:8])}"
        flight.names = names
        for h in handles:
            h._pending_data += 1
        self.in_flight.append((flight, handles))

    def _span(self, flight: kernels.InFlight) -> None:
        tl = self.timeline
        if tl is not None and tl.enabled:
            label, _, names = flight.label.partition("|")
            now = time.perf_counter()
            tl.span(label, TID_MPI, flight.started, now, {"tensors": names, "process_set": self.set_id})
            where = "SHM" if isinstance(flight, _ShmFlight) else "MPI"
            tl.tensors_activity(label.lower(), flight.names, f"{where}_{label}", flight.started, now)
            tl.flush()

    def _negotiated(self, handle: Handle) -> None:
        """Timeline: NEGOTIATE_<KIND> from submission until every rank had submitted (Horovod's name)."""
        tl = self.timeline
        if tl is not None and tl.enabled:
            req = handle.request
            now = time.perf_counter()
            tl.span(f"NEGOTIATE_{req.kind.upper()}", TID_API, handle.submitted, now,
                    {"name": req.name, "process_set": self.set_id})
            tl.tensors_negotiated(req.kind, req.tensors, handle.submitted, now)

    def _complete(self, handle: Handle) -> None:
        handle.finished = True
        if self.timeline is not None and self.timeline.enabled:
            self.timeline.tensors_done(handle.request.kind, handle.request.tensors)
        self.local.pop(handle.request.key, None)

    def _fail(self, handle: Handle, error: BaseException) -> None:
        handle.error = error
        self._complete(handle)

    # -- waiting ------------------------------------------------------------------------------
    def wait_for(self, handle: Handle, timeout: Optional[float] = None) -> None:
        """Progress every process set until `handle` finishes; a line every stall-warning period."""
        start = time.monotonic()
        warned_at = start
        limit = timeout if timeout is not None else self.stall_shutdown_s
        spins = 0
        gone_since: Optional[float] = None
        while True:
            self.progress_all()
            if handle.finished:
                return
            spins += 1
            if spins & 15:
                continue
            now = time.monotonic()
            waited = now - start
            if now - warned_at >= self.stall_warning_s:
                warned_at = now
                _log.log(f"{self._stall_line(handle)} for {waited:.0f} s")
            gone = self._departed_peers()
            if gone:
                gone_since = gone_since if gone_since is not None else now
                if now - gone_since >= DEPARTED_GRACE_S:  # a transfer the peer finished just before leaving completes
                    self.broken = (f"{_ranks(gone)} shut down (finalize or exit): no collective of process set "
                                   f"{self.set_id} can complete any more")
                    self._give_up(handle, DDLError(f"{handle.request.kind} '{handle.request.name}': {_ranks(gone)} "
                                                   "shut down (finalize or exit) without taking part in it"))
            if limit is not None and waited >= limit:
                line = self._stall_line(handle)
                if handle._pending_data:  # its transfer stays posted: later ones on this channel would pair wrongly
                    self.broken = (f"{handle.request.kind} '{handle.request.name}' was abandoned in mid-transfer "
                                   f"after {waited:.0f} s; process set {self.set_id} cannot be used any more")
                self._give_up(handle, DDLError(f"{line} for {waited:.0f} s; giving up"))
            if waited > 1.0:
                time.sleep(0.0005)  # a long wait: stop burning a core
            elif waited > YIELD_AFTER_S:
                os.sched_yield()  # let a peer rank (or this rank's other threads) run

    def _give_up(self, handle: Handle, error: BaseException) -> None:
        with self.lock:
            if handle in self.unannounced:
                self.unannounced.remove(handle)
            self._fail(handle, error)  # the name is free again on this rank
        raise error

    def _departed_peers(self) -> List[int]:
        """Members of this set (global ranks) that have finalized or exited."""
        me = self.global_ranks[self.rank]
        return sorted(r for r in self.departed() if r in self.global_ranks and r != me)

    def _stall_line(self, handle: Handle) -> str:
        req = handle.request
        entry = self.table.get(req.key)
        if entry is None:
            if handle._pending_data:
                return f"{req.kind} '{req.name}': waiting for the transfer to finish"
            others = [r for r in self.global_ranks if r != self.global_ranks[self.rank]]
            return (f"{req.kind} '{req.name}': waiting for {_ranks(others)} to take part in negotiation "
                    f"(round {self.round + 1}; some have not called into Horovod since)")
        missing = [self.global_ranks[r] for r in range(self.size) if r not in entry.descs and r not in self.joined]
        return f"{req.kind} '{req.name}': waiting for {_ranks(missing)} to submit it"

    def refuse(self, kind: str, name: str, error: str) -> None:
        """Announce that this rank cannot take part in `kind` `name` (a bad input here), so that every
        rank's request of that name fails with `error` instead of waiting for this one.  Does not wait."""
        with self.lock:
            if self.closed or self.broken or f"{kind}.{name}" in self.local:
                return
            handle = self._submit(Request(kind, name, (), [], error=error))
        # Usually the peers have submitted (or refused) it already: settle it now, so that the name
        # is free again on this rank when the program goes on.
        deadline = time.monotonic() + REFUSAL_SETTLE_S
        while not handle.finished and not self.broken and time.monotonic() < deadline:
            self.progress_all()
            time.sleep(0.0002)

    def close(self) -> None:
        # A refusal announced just before shutdown: give its round a moment to reach the peers.
        deadline = time.monotonic() + REFUSAL_FLUSH_S
        while not self.broken and any(h.request.error and not h.finished for h in self.local.values()) \
                and (self.unannounced or self._round_state is not None) and time.monotonic() < deadline:
            self.progress()
            time.sleep(0.0005)
        self.closed = True
        for comm in (self.neg, self.data):
            try:
                comm.Free()
            except MPI.Exception:
                pass




class _BlockingFlight(kernels.InFlight):
    """An allreduce group that runs, blocking, when first tested outside a submit (its subclass's
    `run(controller)`); transfers are tested in the order posted, alike on every rank, so the
    peers meet in the same one."""

    LABEL = "ALLREDUCE"

    def __init__(self, controller: Controller, group: list, handles: list, args: tuple):
        super().__init__([], lambda: None, self.LABEL)
        self.controller, self.group, self.handles, self.args = controller, group, handles, args

    def test(self) -> bool:
        if self.done or self.controller._submitting:
            return self.done
        self.started = time.perf_counter()
        self.run(self.controller)
        self.done = True
        return True


class _ShmFlight(_BlockingFlight):
    """An allreduce group for the global set's shared memory (collectives/negotiated.py)."""

    def run(self, ctl: Controller) -> None:
        results = ctl.shm.allreduce(*self.args)
        if results is None:  # no room in shared memory (every rank alike): MPI, here and now
            try:
                _mpi_fallback(ctl, self.group, *self.args)
            except DDLError as exc:  # the group's requests fail with it (the set is broken: see _wait_mpi)
                for h in self.handles:
                    h.error = h.error or exc
            return
        for (handle, i, (_, _, shape)), result in zip(self.group, results):
            if handle is not None and handle.request.outputs[i] is None:
                handle.request.outputs[i] = result.reshape(shape)


FALLBACK_CHUNK_BYTES = 4 << 20  # MPICH reduces 64 MB in 4 MB pieces one after another in half the time of one call
IN_PLACE_BYTES = 1 << 20  # a tensor this large (not widened) is reduced where its output lies, not packed
_fallback_buffers: "OrderedDict[tuple, np.ndarray]" = OrderedDict()  # reused across calls: fresh memory faults


def _mpi_fallback(ctl: "Controller", group, inputs, outputs, dtype, counts, names, op, prescale, postscale) -> None:
    """A shared-memory allreduce group that found no room in /dev/shm (every rank alike), reduced through
    MPI within the blocking flight, so in the same order on every rank, in FALLBACK_CHUNK_BYTES pieces
    one after the other: a large tensor where its output lies (copied there first unless in place),
    the others packed into one buffer reused across calls.  Which tensor goes which way follows from the
    group's dtype and counts only, so alike on every rank.  (Posting the group as one non-blocking
    Iallreduce on a new buffer, as other groups are, took 2.3x the native engine's MPI path at 64 MB.)"""
    _take_outputs(group, outputs, dtype)
    wide = kernels.reduce_dtype(dtype)
    divisor = ctl.size if op == "average" else 1
    what = f"allreduce '{group[0][2][0]}'" + (f" (+{len(group) - 1} fused)" if len(group) > 1 else "")
    alone = [wide == dtype and n * wide.itemsize >= IN_PLACE_BYTES for n in counts]
    for src, out, n, own in zip(inputs, outputs, counts, alone):
        if own:
            target = out.reshape(-1) if out is not None else np.zeros(n, dtype=dtype)  # a joined rank: zeros
            if src is not None and (prescale != 1.0 or not np.may_share_memory(src, target)):
                kernels.prescaled(src.reshape(-1), prescale, target)
            _reduce_chunks(ctl, target, op, what)
            _finish_in_place(target, divisor, postscale)
    packed = [n if not own else 0 for n, own in zip(counts, alone)]
    total = int(sum(packed))
    if not total:
        return
    key = (wide.str, total)
    buf = _fallback_buffers.pop(key, None)
    if buf is None:
        buf = np.empty(total, dtype=wide)
        while len(_fallback_buffers) >= 4:
            _fallback_buffers.popitem(last=False)
    _fallback_buffers[key] = buf
    offsets = np.concatenate(([0], np.cumsum(packed))).astype(int)
    for src, lo, hi in zip(inputs, offsets[:-1], offsets[1:]):
        if hi > lo:
            if src is None:
                buf[lo:hi] = 0  # a joined rank contributes zeros
            else:
                kernels.prescaled(src.reshape(-1), prescale, buf[lo:hi])
    _reduce_chunks(ctl, buf, op, what)
    for out, lo, hi in zip(outputs, offsets[:-1], offsets[1:]):
        if out is not None and hi > lo:
            kernels.finished(buf[lo:hi], divisor, postscale, out.reshape(-1))


def _reduce_chunks(ctl: "Controller", flat: np.ndarray, op: str, what: str) -> None:
    step = max(1, FALLBACK_CHUNK_BYTES // flat.itemsize)
    mpi_op = kernels.REDUCE_MPI_OPS[op]
    for a in range(0, flat.size, step):
        _wait_mpi(ctl, ctl.data.Iallreduce(MPI.IN_PLACE, flat[a:a + step], mpi_op), what)


def _finish_in_place(flat: np.ndarray, divisor: int, postscale: float) -> None:
    """kernels.finished with the output its own buffer, without the copy onto itself."""
    if divisor == 1 and postscale == 1.0:
        return
    if flat.dtype.kind in "iub":
        kernels.finished(flat, divisor, postscale, flat)  # through float64, truncated: a copy anyway
        return
    if divisor != 1:
        np.divide(flat, flat.dtype.type(divisor), out=flat)
    if postscale != 1.0:
        np.multiply(flat, flat.dtype.type(postscale), out=flat)


def _wait_mpi(ctl: "Controller", request: MPI.Request, what: str) -> None:
    """Until `request` completes, as _Patience says."""
    patience = _Patience(ctl, what)
    others = _ranks([r for r in ctl.global_ranks if r != ctl.global_ranks[ctl.rank]])
    while not request.Test():
        patience.tick(f"{others} to reduce it through MPI")


class _Patience:
    """A blocking flight's wait, one tick per poll: a line every stall-warning period naming who it waits
    for; a peer that shut down, or DDL_STALL_SHUTDOWN_S, is a DDLError that marks the set broken; the
    CPU is given back between polls."""

    def __init__(self, ctl: "Controller", what: str):
        self.ctl, self.what = ctl, what
        self.start = self.warned = time.monotonic()
        self.gone_since: Optional[float] = None

    def tick(self, waiting_for: str) -> None:
        ctl, what = self.ctl, self.what
        now = time.monotonic()
        waited = now - self.start
        if now - self.warned >= ctl.stall_warning_s:
            self.warned = now
            _log.log(f"{what}: waiting for {waiting_for} for {waited:.0f} s")
        gone = ctl._departed_peers()
        if gone:
            self.gone_since = self.gone_since or now
            if now - self.gone_since >= DEPARTED_GRACE_S:
                ctl.broken = f"{what} was abandoned in mid-transfer: {_ranks(gone)} shut down"
                raise DDLError(f"{what}: {_ranks(gone)} shut down (finalize or exit) without taking part in it")
        if ctl.stall_shutdown_s is not None and waited >= ctl.stall_shutdown_s:
            ctl.broken = f"{what} was abandoned in mid-transfer after {waited:.0f} s"
            raise DDLError(f"{what}: still waiting for {waiting_for} after {waited:.0f} s; giving up")
        if waited > 1.0:
            time.sleep(0.0005)
        else:
            os.sched_yield()


class _AdasumFlight(_BlockingFlight):
    """An Adasum group (adasum.py): point-to-point exchanges with the peers."""

    LABEL = "ADASUM"

    def run(self, ctl: Controller) -> None:
        inputs, outputs, dtype, counts, prescale, postscale = self.args
        _take_outputs(self.group, outputs, dtype)
        outs = [o if o is not None else np.empty(n, dtype=dtype) for o, n in zip(outputs, counts)]
        what = f"allreduce '{self.group[0][2][0]}' (Adasum" + (f", +{len(self.group) - 1} fused)" if len(self.group) > 1
                                                             else ")")
        patience = _Patience(ctl, what)

        def idle(peer: int) -> None:  # a peer busy elsewhere is named; one that shut down never sends its half
            patience.tick(f"rank {ctl.global_ranks[peer]} to exchange its half")

        try:
            adasum.allreduce(ctl.data, inputs, outs, dtype, counts, prescale, postscale, idle)
        except DDLError as exc:  # the group's requests fail with it (this set is broken: see idle)
            for h in self.handles:
                h.error = h.error or exc


def _take_outputs(group, outputs: list, dtype) -> None:
    """An allreduce group's outputs the callers left to us (None), taken from the results pool and
    handed to their requests too; a joined rank's entries (no handle) stay None."""
    for j, (handle, i, (_, _, shape)) in enumerate(group):
        if handle is not None and outputs[j] is None:
            outputs[j] = handle.request.outputs[i] = RESULTS.take(tuple(shape), dtype)


def _output(req: Request, i: int, shape: tuple, dtype) -> np.ndarray:
    """Output i of an allgather or alltoall, once its shape is known: the request's memory, else new."""
    return req.allocate(i, shape) if req.allocate is not None else np.empty(shape, dtype=dtype)


def _nbytes(t: tuple) -> int:
    dtype = t[1].partition("@")[0]  # device tensors are announced "<dtype>@<device>" (torch's names)
    return math.prod(t[2]) * (2 if dtype == "bfloat16" else np.dtype(dtype).itemsize)


def _params(kind: str, params: tuple) -> str:
    if kind in ("allreduce", "reducescatter"):
        op, pre, post = params
        return op + (f" prescale {pre:g}" if pre != 1.0 else "") + (f" postscale {post:g}" if post != 1.0 else "")
    if kind == "broadcast":
        return f"root {params[0]}"
    return repr(params)


def _sides(descs: Dict[int, tuple], key: Callable[[tuple], Any], global_ranks: Sequence[int]) -> str:
    groups: Dict[Any, List[int]] = {}
    for r in sorted(descs):
        groups.setdefault(str(key(descs[r])), []).append(global_ranks[r])
    return "; ".join(f"{_ranks(rs)}: {v}" for v, rs in groups.items())


def _ranks(ranks: Sequence[int]) -> str:
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"{word} {','.join(map(str, ranks))}"
