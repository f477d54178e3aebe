"""The collectives.  Each one validates locally, then agrees on its signature, then moves data.

Order inside every call: (1) local validation, raising DDLInputError before any
communication; (2) the watchdog records the collective; (3) the signature agreement on
the control communicator, raising DDLMismatchError on every rank when ranks disagree;
(4) the data movement through the engine.  Results are written in place into the
caller's tensors (allgather returns a new one; allreduce_n_into writes into given outputs).
Each public collective (and `_agree`, which others call directly) counts its time as
communication in this rank's record, and the agreement carries the rank's arrival
(core/stats.py: `collective`, `RunStats.arrival`).
"""
from __future__ import annotations

import math
import operator
import sys
import time
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from mpi4py import MPI

from ..core import stats as _stats
from ..core.stats import collective
from ..state import runtime as _rt
from ..engine.algorithms import MPI_OPS, MPI_TYPES, split_counts
from ..engine.buffers import FLOAT_DTYPES, SUPPORTED_DTYPES, TensorRef, as_tensor, is_torch_tensor, new_like
from ..transports.gpu.devices import DEVICES, device_problem
from ..engine.fusion import plan_buckets
from ..transports.shm.output_pool import RESULTS, packed_layout
from ..engine.refcache import RefCache
from ..errors import DDLError, DDLInputError
from ..engine.engine import Handle
from ..engine.signature import agreed, agreement_buffer, digest, raise_mismatch, with_device_problem
from ..timeline import TID_MPI

REDUCE_OPS = ("sum", "avg", "min", "max")
SMALL_BYTES = 64 * 1024  # single tensors up to this size skip the bucket engine (flat algorithm)
REDUCE_N_OPS = ("sum", "avg")


# -- helpers ------------------------------------------------------------------------------
def _check_op(op: Any, allowed: Sequence[str], what: str) -> str:
    if not isinstance(op, str) or op not in allowed:
        raise DDLInputError(f"{what}: op {op!r} is not one of {', '.join(allowed)}")
    return op


def _check_avg(op: str, refs: Sequence[TensorRef], what: str) -> None:
    if op == "avg":
        for ref in refs:
            if ref.dtype not in FLOAT_DTYPES:
                raise DDLInputError(
                    f"{what}: op 'avg' needs floating-point tensors; tensor '{ref.name}' is {ref.dtype} (use op='sum')")


def _entry(ref: TensorRef, shape=None):
    """A tensor's part of a signature; the device is part of it (CPU and GPU take different paths)."""
    dtype = ref.dtype if ref.device == "cpu" else f"{ref.dtype}@{ref.device}"
    return (ref.name, dtype, tuple(ref.shape if shape is None else shape))


def _names(tensors: Sequence[Any], names: Optional[Sequence[str]], what: str) -> List[str]:
    if names is None:
        return [f"tensor.{i}" for i in range(len(tensors))]
    names = [str(n) for n in names]
    if len(names) != len(tensors):
        raise DDLInputError(f"{what}: {len(names)} names for {len(tensors)} tensors")
    seen = set()
    for n in names:
        if n in seen:
            raise DDLInputError(f"{what}: duplicate tensor name '{n}'")
        seen.add(n)
    return names


def _as_list(tensors: Any, what: str) -> list:
    if not isinstance(tensors, (list, tuple)):
        raise DDLInputError(f"{what}: expected a list of tensors, got {type(tensors).__name__}")
    return list(tensors)


@collective
def _agree(rt: "_rt.Runtime", what: str, signature) -> None:
    """Record the collective and make sure every rank calls the same one with the same tensors."""
    rt.watchdog.start(what)
    if rt.shm is not None:  # one host: the digest rides on a shared-memory barrier
        if not rt.shm.barrier(digest(signature)):
            raise_mismatch(f"{what} (collective #{rt.watchdog.seq})", rt.control.allgather(signature))
        return
    record = _stats.CURRENT                       # the arrival rides on the agreement (core/stats.py)
    arrival = record.arrival() if record is not None else 0
    buf = agreement_buffer(signature, arrival)
    rt.engine.wait_request(rt.control.Iallreduce(MPI.IN_PLACE, [buf, MPI.INT64_T], MPI.MAX))
    if not agreed(buf):
        raise_mismatch(f"{what} (collective #{rt.watchdog.seq})", rt.control.allgather(signature))
    if record is not None:
        record.arrived(arrival, int(buf[2]))


def _reduce_small(rt: "_rt.Runtime", refs: Sequence[TensorRef], op: str, what: str, signature) -> bool:
    """On one host, a small reduction agrees and moves its data with one shared-memory barrier
    (ShmGroup.allreduce_small); True when it ran.  A mismatch raises as _agree does."""
    shm = rt.shm
    if shm is None or not shm.small_eligible(refs):
        return False
    rt.watchdog.start(what)
    if not shm.allreduce_small(refs, op, float(rt.size) if op == "avg" else None, digest(signature), rt.timeline):
        raise_mismatch(f"{what} (collective #{rt.watchdog.seq})", rt.control.allgather(signature))
    return True


def _reduce_heap(rt: "_rt.Runtime", refs: Sequence[TensorRef], op: str, what: str, signature) -> bool:
    """On one host, tensors that all live in the shared heap (shared_zeros) are reduced where they
    lie (SharedHeap.allreduce); True when it ran.  Their heap offsets join the signature."""
    shm = rt.shm
    if shm is None:
        return False
    locs = shm.heap.locate_all(refs)
    if locs is None:
        return False
    signature = (signature[0] + (("shared", locs),), signature[1])
    rt.watchdog.start(what)
    if not shm.heap.allreduce(refs, locs, op, float(rt.size) if op == "avg" else None, digest(signature),
                              rt.timeline):
        raise_mismatch(f"{what} (collective #{rt.watchdog.seq})", rt.control.allgather(signature))
    return True


def _describe(kind: str, refs: Sequence[TensorRef]) -> str:
    if not refs:
        return f"{kind}[0 tensors]"
    if len(refs) == 1:
        return f"{kind}['{refs[0].name}']"
    return f"{kind}[{len(refs)} tensors, first '{refs[0].name}']"


def _on_device(refs: Sequence[TensorRef]) -> bool:
    """True when any tensor is off the CPU: the call takes the device path (ddl_runtime.transports.gpu).
    A device other than cpu/cuda/xpu (meta, mps, ...) is refused here, before any communication."""
    for ref in refs:
        if ref.device not in DEVICES:
            raise DDLInputError(f"tensor '{ref.name}' is on device '{ref.device}'; only {', '.join(DEVICES)} tensors "
                                "are supported")
    return any(ref.device != "cpu" for ref in refs)


def _agree_devices(rt: "_rt.Runtime", what: str, signature, refs: Sequence[TensorRef], gpu_index: Optional[int]) -> None:
    """_agree for a call with device tensors, and where they are agreed with it: a CUDA tensor on a
    rank without a GPU (gpu_index None), on a GPU other than `gpu_index`, or a group that mixes
    devices raises DDLInputError naming the tensor on every rank (the problem rides in the
    signature, so a sound call costs nothing more)."""
    problem = device_problem(refs, gpu_index)
    if problem is not None:
        signature = with_device_problem(signature, problem)
    _agree(rt, what, signature)
    if problem is not None:  # every rank has a problem (else _agree raised it): each names its own
        raise DDLInputError(f"{what}: rank {rt.rank}: {problem}")


def _device_start(rt: "_rt.Runtime", refs: Sequence[TensorRef], op: str, what: str, signature, results: list,
                  asynchronous: bool = False):
    """A reduction of device tensors (into their `out` tensors when set); returns its handle.
    `asynchronous`: the caller waits later (allreduce_n_async), so the host transport may overlap."""
    from ..transports import gpu
    _agree_devices(rt, what, signature, refs, gpu.state(rt).index)
    targets = []
    for ref in refs:
        if ref.out is not None:
            ref.out.copy_(ref.obj)
        targets.append(ref.obj if ref.out is None else ref.out)

    def reduce_host(hosts: list) -> None:
        host_refs = [as_tensor(h, ref.name) for h, ref in zip(hosts, refs)]
        _reduce(rt, host_refs, op, rt.algorithms.hierarchical).wait()
    return gpu.allreduce_start(rt, refs, targets, op, results, reduce_host, what, asynchronous)


class JobInfo(NamedTuple):
    """What DDL's init returned: unpacks as (rank, size, local_rank, local_size, local_gpuid)."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    local_gpuid: Optional[int]


def init() -> JobInfo:
    """Initialize (idempotent): MPI, the node grouping, communicators, GPU choice, fault handlers."""
    rt = _rt.init()
    t = rt.topology
    return JobInfo(rt.rank, rt.size, t.local_rank, t.local_size, rt.local_gpuid)


def finalize() -> None:
    """Finish in-flight work, tell the other ranks, free communicators (MPI itself stays up)."""
    _rt.finalize()


# -- queries ------------------------------------------------------------------------------
def rank() -> int:
    return _rt.current().rank


def size() -> int:
    return _rt.current().size


def local_rank() -> int:
    return _rt.current().topology.local_rank


def local_size() -> int:
    return _rt.current().topology.local_size


def cross_rank() -> int:
    return _rt.current().topology.cross_rank


def cross_size() -> int:
    return _rt.current().topology.cross_size


def local_gpuid() -> Optional[int]:
    """This rank's GPU (CUDA index as this process sees it), or None when the job has no GPUs."""
    return _rt.current().local_gpuid


def is_initialized() -> bool:
    return _rt.get() is not None


def topology_info() -> "_rt.Topology":
    """How ranks are grouped: local/cross ranks, level sizes and where the grouping came from."""
    return _rt.current().topology


def algorithm() -> str:
    """'hierarchical' when the job spans more than one level of the hierarchy, else 'flat'."""
    return "hierarchical" if _rt.current().algorithms.hierarchical else "flat"


# -- collectives --------------------------------------------------------------------------
@collective
def barrier() -> None:
    rt = _rt.current()
    rt.timeline.begin("BARRIER")
    _agree(rt, "barrier", (("barrier",), ()))  # the agreement is itself a barrier
    rt.timeline.end("BARRIER")


@collective
def allreduce(x: Any, op: str = "sum", name: Optional[str] = None) -> Any:
    """Reduce `x` across ranks in place and return it (a Python number returns a new number)."""
    rt = _rt.current()
    name = name or "tensor"
    _check_op(op, REDUCE_OPS, f"allreduce('{name}')")
    ref = as_tensor(x, name, allow_scalar=True)
    _check_avg(op, [ref], "allreduce")
    if _on_device([ref]):
        _device_start(rt, [ref], op, _describe("allreduce", [ref]), (("allreduce", op), (_entry(ref),)), []).wait()
        return x
    what = _describe("allreduce", [ref])
    rt.timeline.begin("allreduce", {"op": op, "tensor": name})
    signature = (("allreduce", op), (_entry(ref),))
    if not _reduce_small(rt, [ref], op, what, signature):
        _agree(rt, what, signature)
        if rt.size == 1 or rt.shm is not None:
            _reduce(rt, [ref], op, False).wait()  # done on return, unless /dev/shm had no room: MPI
        elif ref.nbytes <= SMALL_BYTES and not ref.widened:
            # latency-bound: one flat allreduce on the tensor itself, no bucket machinery.  Its own
            # communicator keeps it out of the order of buckets still in flight (which differs by rank).
            buf = ref.flat
            rt.engine.wait_request(rt.small.Iallreduce(MPI.IN_PLACE, [buf, MPI_TYPES[buf.dtype]], MPI_OPS[op]))
            if op == "avg":
                np.divide(buf, rt.size, out=buf)
        else:
            _reduce(rt, [ref], op, rt.algorithms.hierarchical).wait()
    rt.timeline.end("allreduce")
    if ref.kind == "scalar":
        return ref.flat[0].item()
    return x


@collective
def allreduce_n(tensors: Sequence[Any], op: str = "sum", mpi: bool = False, check: float = 0.0,
                names: Optional[Sequence[str]] = None) -> list:
    """Reduce a list of tensors in one fused, topology-aware call; returns the list (in place).

    mpi=True uses one flat MPI_Allreduce per bucket (the baseline).  check=tol also runs the
    flat baseline on a copy and raises DDLError naming the first tensor whose results differ
    by more than tol * max(1, |baseline|).
    """
    refs, op, what = _prepare_n(tensors, op, names, "allreduce_n")
    _reduce_n(refs, op, mpi, check, what)
    return list(tensors)


@collective
def allreduce_n_into(tensors: Sequence[Any], outputs: Sequence[np.ndarray], op: str = "sum", mpi: bool = False,
                     check: float = 0.0, names: Optional[Sequence[str]] = None) -> list:
    """allreduce_n out of place: `tensors` (numpy arrays, may be read-only) are only read, and the
    results go into `outputs` (writable C-contiguous numpy arrays, one per tensor, same dtype and
    shape); returns `outputs`.  Costs no extra copy on the shared-memory path (the reduction reads
    the sources and writes the outputs) nor for fused small tensors (packed from the sources,
    unpacked into the outputs); a tensor reduced where it lies on the MPI path is copied into its
    output first.  Same agreement, mismatch errors, stall diagnostics and timeline as allreduce_n.
    """
    what = "allreduce_n"
    tensors, outputs = _as_list(tensors, what), _as_list(outputs, what)
    if len(outputs) != len(tensors):
        raise DDLInputError(f"{what}: {len(outputs)} outputs for {len(tensors)} tensors")
    refs = _sources(tensors, op, names, what)
    for ref, t, o in zip(refs, tensors, outputs):
        dst = as_tensor(o, ref.name)
        if ref.device != "cpu":  # a CUDA source: its output is a tensor on the same device
            if dst.kind != "torch" or o.dtype != t.dtype or o.shape != t.shape or o.device != t.device:
                raise DDLInputError(f"{what}: output for tensor '{ref.name}' must be a torch tensor of dtype "
                                    f"{t.dtype} and shape {tuple(t.shape)} on {t.device}")
            ref.out = o
            continue
        if dst.kind != "numpy" or o.dtype != t.dtype or o.shape != t.shape:
            raise DDLInputError(f"{what}: output for tensor '{ref.name}' must be a numpy array of dtype "
                                f"{t.dtype} and shape {t.shape}")
        ref.out = dst.flat
    _reduce_n(refs, op, mpi, check, _describe(what, refs))
    return list(outputs)


@collective
def allreduce_n_fresh(tensors: Sequence[Any], op: str = "sum", mpi: bool = False, check: float = 0.0,
                      names: Optional[Sequence[str]] = None) -> Tuple[Optional[np.ndarray], list]:
    """allreduce_n out of place into memory the runtime picks; returns (flat, results).

    `tensors` (numpy arrays, may be read-only) are only read.  When they share one dtype the
    results are views of the 1-D array `flat` at output_pool.packed_layout offsets (a framework
    can hand over that one buffer); else flat is None.  The memory is reused once nothing refers
    to any result of the call.  On one host with shared memory, results of more than 256 KB in
    float32/float64/int32/int64 live in shared memory and the peers write them there
    (shm/results.py): no copy out, about the cost of the in-place path.  Same agreement,
    mismatch errors, stall diagnostics and timeline as allreduce_n.
    """
    what = "allreduce_n"
    tensors = _as_list(tensors, what)
    refs = _sources(tensors, op, names, what)
    described = _describe(what, refs)
    tol = _mode(mpi, check, described)
    rt = _rt.current()
    if _on_device(refs):
        flat, outs = _fresh_on_device(refs, tensors)
        _reduce_n(refs, op, mpi, check, described)
        return flat, outs
    key = None
    if rt.shm is not None and not mpi and tol == 0:
        key = rt.shm.results.layout_key(refs)
    if key is None:
        flat, outs = _fresh(refs, tensors)
        _reduce_n(refs, op, mpi, check, described)
        return flat, outs
    signature = (("allreduce_n", op, mpi, tol, "shared results"), tuple(_entry(r) for r in refs))
    rt.timeline.begin("allreduce_n", {"op": op, "tensors": len(refs), "mpi": mpi})
    rt.watchdog.start(described)
    flat = rt.shm.results.allreduce(refs, key, op, float(rt.size) if op == "avg" else None, digest(signature),
                                    rt.timeline)
    if flat is False:
        raise_mismatch(f"{described} (collective #{rt.watchdog.seq})", rt.control.allgather(signature))
    if flat is None:  # agreed, but no shared memory left for results: reduce into private memory
        flat, outs = _fresh(refs, tensors)
        _reduce(rt, refs, op, hierarchical=False).wait()  # shm=True: the arena, else MPI
    else:
        outs = _cut(flat, tensors)
    rt.timeline.end("allreduce_n")
    return flat, outs


def _sources(tensors: list, op: Any, names: Optional[Sequence[str]], what: str) -> List[TensorRef]:
    """Refs of out-of-place sources: numpy arrays, only read."""
    _check_op(op, REDUCE_N_OPS, what)
    names = _names(tensors, names, what)
    refs = []
    for t, n in zip(tensors, names):
        if not isinstance(t, np.ndarray) and not (is_torch_tensor(t) and t.device.type in DEVICES[1:]):
            raise DDLInputError(f"{what}: tensor '{n}' is a {type(t).__name__}; out of place takes numpy arrays "
                                "or GPU tensors (cuda, xpu)")
        refs.append(as_tensor(t, n, writable=False))
    _check_avg(op, refs, what)
    return refs


def _fresh_on_device(refs: List[TensorRef], tensors: list) -> Tuple[Any, list]:
    """New outputs for CUDA sources, on their device: views of one flat tensor when they share a
    dtype (and a device), else one tensor each; set as the refs' `out`."""
    torch = sys.modules["torch"]
    flat = None
    if all(map(is_torch_tensor, tensors)) and len({(t.dtype, t.device) for t in tensors}) == 1:
        flat = torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device=tensors[0].device)
        outs, offset = [], 0
        for t in tensors:
            outs.append(flat[offset:offset + t.numel()].view(t.shape))
            offset += t.numel()
    else:
        outs = [torch.empty_like(t) if is_torch_tensor(t) else np.empty_like(t) for t in tensors]
    for ref, out in zip(refs, outs):
        ref.out = out
    return flat, outs


def _fresh(refs: List[TensorRef], tensors: list) -> Tuple[Optional[np.ndarray], list]:
    """Pooled outputs for the out-of-place sources `tensors` (set as their refs' `out`): views of
    one packed flat buffer when they share a dtype."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) == 1:
        dtype = dtypes.pop()
        flat = RESULTS.take((packed_layout([t.size for t in tensors], dtype.itemsize)[1],), dtype)
        outs = _cut(flat, tensors)
    else:
        flat, outs = None, RESULTS.take_like(tensors)
    for r, o in zip(refs, outs):
        r.out = as_tensor(o, r.name).flat
    return flat, outs


def _cut(flat: np.ndarray, tensors: list) -> list:
    """The results of `tensors` as views of `flat` (packed_layout)."""
    offsets = packed_layout([t.size for t in tensors], flat.dtype.itemsize)[0]
    return [flat[o:o + t.size].reshape(t.shape) for o, t in zip(offsets, tensors)]


def _mode(mpi: Any, check: Any, what: str) -> float:
    """The `mpi=` and `check=` arguments checked; returns the tolerance."""
    if not isinstance(mpi, bool):
        raise DDLInputError(f"{what}: mpi must be True or False, got {mpi!r}")
    try:
        tol = float(check)
    except (TypeError, ValueError):
        raise DDLInputError(f"{what}: check must be a tolerance (float), got {check!r}") from None
    if not tol >= 0:
        raise DDLInputError(f"{what}: check must be 0 (off) or a positive tolerance, got {check!r}")
    return tol


def _reduce_n(refs: List[TensorRef], op: str, mpi: Any, check: Any, what: str) -> None:
    rt = _rt.current()
    tol = _mode(mpi, check, what)
    signature = (("allreduce_n", op, mpi, tol), tuple(_entry(r) for r in refs))
    if _on_device(refs):
        _device_start(rt, refs, op, what, signature, []).wait()
        return
    rt.timeline.begin("allreduce_n", {"op": op, "tensors": len(refs), "mpi": mpi})
    if not mpi and tol == 0 and (_reduce_heap(rt, refs, op, what, signature)
                                 or _reduce_small(rt, refs, op, what, signature)):
        rt.timeline.end("allreduce_n")
        return
    _agree(rt, what, signature)
    hierarchical = rt.algorithms.hierarchical and not mpi
    if tol > 0:
        baseline = [TensorRef(r.obj, r.name, r.dtype, r.shape, r.flat.copy(), "numpy") for r in refs]
        _reduce(rt, baseline, op, False, shm=False).wait()
        _reduce(rt, refs, op, hierarchical, shm=True).wait()
        _compare(rt, what, refs, baseline, tol)
    else:
        _reduce(rt, refs, op, hierarchical, shm=not mpi).wait()
    rt.timeline.end("allreduce_n")


@collective
def allreduce_n_async(tensors: Sequence[Any], op: str = "avg", names: Optional[Sequence[str]] = None):
    """Start reducing a list of tensors; returns a handle whose wait() returns the list.

    Reductions progress whenever any ddl_runtime call runs (including handle.done()), so a
    training loop can start a bucket of gradients and keep computing.  Handles must be
    started in the same order on every rank; waiting may happen in any order.
    """
    rt = _rt.current()
    refs, op, what = _prepare_n(tensors, op, names, "allreduce_n_async")
    signature = (("allreduce_n_async", op), tuple(_entry(r) for r in refs))
    if _on_device(refs):
        return _device_start(rt, refs, op, what, signature, list(tensors), asynchronous=True)
    rt.timeline.begin("allreduce_n_async", {"op": op, "tensors": len(refs)})
    if _reduce_heap(rt, refs, op, what, signature) or _reduce_small(rt, refs, op, what, signature):
        # one host, tensors in the shared heap or small: done before it returns
        rt.timeline.end("allreduce_n_async")
        return Handle(rt.engine, list(tensors), 0)
    _agree(rt, what, signature)
    rt.timeline.end("allreduce_n_async")
    return _reduce(rt, refs, op, rt.algorithms.hierarchical, results=list(tensors))


_validated = RefCache()  # small lists passed again unchanged skip re-validation (refcache.py)


def _prepare_n(tensors, op, names, what):
    tensors = _as_list(tensors, what)
    if names is not None:
        names = list(names)
    try:
        key = (what, op, tuple(map(id, tensors)), None if names is None else tuple(names))
        hit = _validated.get(key, tensors)
    except TypeError:  # unhashable names: validated (and refused) below
        key, hit = None, None
    if hit is not None:
        return hit[0], op, hit[1]
    _check_op(op, REDUCE_N_OPS, what)
    names = _names(tensors, names, what)
    refs = [as_tensor(t, n) for t, n in zip(tensors, names)]
    _check_avg(op, refs, what)
    described = _describe(what, refs)
    if key is not None:
        _validated.put(key, tensors, refs, described)
    return refs, op, described


def _reduce(rt, refs: Sequence[TensorRef], op: str, hierarchical: bool, results: Optional[list] = None,
            shm: bool = True):
    """Start reducing `refs`; shm=False keeps a one-host job on the MPI path (mpi=True, check=)."""
    if results is None:
        results = [r.obj for r in refs]
    if rt.size == 1:  # the reduction is the identity (avg divides by 1)
        for r in refs:
            if r.out is not None:
                np.copyto(r.out, r.flat)
        return Handle(rt.engine, results, 0)
    if shm and rt.shm is not None and rt.shm.allreduce(refs, op, float(rt.size) if op == "avg" else None,
                                                       rt.timeline):
        return Handle(rt.engine, results, 0)  # else no room in /dev/shm for the arena: the MPI path
    key = (tuple((r.numel, r.dtype) for r in refs), rt.fusion_bytes)
    specs = rt.plans.get(key)
    if specs is None:
        specs = plan_buckets(refs, rt.fusion_bytes)
        if len(rt.plans) > 256:
            rt.plans.clear()
        rt.plans[key] = specs
    scale = float(rt.size) if op == "avg" else None
    return rt.engine.submit(specs, refs, op, scale, "hierarchical" if hierarchical else "flat", results)


def _compare(rt, what: str, refs, baseline, tol: float) -> None:
    bad, detail = len(refs), ""
    for i, (ref, base) in enumerate(zip(refs, baseline)):
        a, b = _as_float64(ref), _as_float64(base)
        if a.size == 0:
            continue
        err = np.abs(a - b) / np.maximum(1.0, np.abs(b))
        worst = float(np.nanmax(err)) if err.size else 0.0
        if worst > tol or np.isnan(err).any() != np.isnan(b).any():
            bad, detail = i, f"{worst:.3g}"
            break
    verdict = np.array([bad], dtype=np.int64)
    rt.engine.wait_request(rt.control.Iallreduce(MPI.IN_PLACE, [verdict, MPI.INT64_T], MPI.MIN))
    first = int(verdict[0])
    if first < len(refs):
        here = f" (relative difference {detail} here)" if first == bad else ""
        raise DDLError(f"{what}: check failed: tensor '{refs[first].name}' differs from the "
                       f"MPI_Allreduce baseline by more than {tol:g}{here}")


def _as_float64(ref: TensorRef) -> np.ndarray:
    if ref.dtype == "bfloat16":
        return (ref.dst.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return ref.dst.astype(np.float64)


def bcast(x: Any, root: int = 0, name: Optional[str] = None) -> Any:
    """Broadcast `x` from `root` into `x` on every other rank (in place); returns x."""
    return bcast_n([x], root=root, names=[name or "tensor"])[0]


@collective
def bcast_n(tensors: Sequence[Any], root: int = 0, names: Optional[Sequence[str]] = None) -> list:
    """Broadcast a list of tensors from `root` (all in flight at once); returns the list."""
    rt = _rt.current()
    what = "bcast"
    tensors = _as_list(tensors, what)
    _check_root(rt, root, what)
    names = _names(tensors, names, what)
    refs = [as_tensor(t, n, writable=rt.rank != root) for t, n in zip(tensors, names)]
    what = _describe("bcast", refs)
    signature = (("bcast", root), tuple(_entry(r) for r in refs))
    if _on_device(refs):
        from ..transports import gpu
        _agree_devices(rt, what, signature, refs, gpu.state(rt).index)
        gpu.bcast(rt, refs, root, lambda hosts: _bcast_refs(rt, [as_tensor(h, r.name) for h, r in zip(hosts, refs)],
                                                            root))
        return list(tensors)
    rt.timeline.begin("bcast", {"root": root, "tensors": len(refs)})
    _agree(rt, what, signature)
    _bcast_refs(rt, refs, root)
    rt.timeline.end("bcast")
    return list(tensors)


def _bcast_refs(rt, refs: Sequence[TensorRef], root: int) -> None:
    """The data movement of bcast_n (host memory), after the agreement."""
    t0 = _now()
    requests = [rt.control.Ibcast([r.flat.view(np.uint8), MPI.BYTE], root=root) for r in refs if r.numel]
    rt.engine.wait_requests(requests)
    if rt.timeline.enabled:
        rt.timeline.span("BCAST", TID_MPI, t0, _now(), {"bytes": sum(r.nbytes for r in refs), "root": root})


@collective
def bcast_object(obj: Any, root: int = 0) -> Any:
    """Broadcast a picklable Python object from `root`; returns root's object on every rank."""
    rt = _rt.current()
    _check_root(rt, root, "bcast_object")
    _agree(rt, "bcast_object", (("bcast_object", root), ()))
    return rt.control.bcast(obj, root=root)


@collective
def allgather(x: Any, name: Optional[str] = None) -> Any:
    """Concatenate every rank's `x` along the first axis (first dims may differ); returns a new tensor."""
    rt = _rt.current()
    name = name or "tensor"
    ref = as_tensor(x, name, writable=False)
    shape = ref.shape if ref.shape else (1,)
    what = _describe("allgather", [ref])
    signature = (("allgather",), (_entry(ref, ("*",) + tuple(shape[1:])),))
    if _on_device([ref]):
        from ..transports import gpu
        _agree_devices(rt, what, signature, [ref], gpu.state(rt).index)
        return gpu.allgather(rt, ref, lambda host: _gather(rt, as_tensor(host, name, writable=False)))
    rt.timeline.begin("allgather", {"tensor": name})
    _agree(rt, what, signature)
    out = _gather(rt, ref)
    rt.timeline.end("allgather")
    return out


def _gather(rt, ref: TensorRef) -> Any:
    """The data movement of allgather (host memory), after the agreement; a new tensor of ref's kind."""
    shape = ref.shape if ref.shape else (1,)
    counts = np.zeros(rt.size, dtype=np.int64)
    mine = np.array([shape[0]], dtype=np.int64)
    rt.engine.wait_request(rt.control.Iallgather([mine, MPI.INT64_T], [counts, MPI.INT64_T]))
    row = int(np.prod(shape[1:], dtype=np.int64)) * ref.flat.itemsize
    out = np.empty(int(counts.sum()) * row // ref.flat.itemsize, dtype=ref.flat.dtype)
    byte_counts = (counts * row).tolist()
    displs = np.concatenate(([0], np.cumsum(byte_counts)[:-1])).tolist()
    t0 = _now()
    request = rt.control.Iallgatherv([ref.flat.view(np.uint8), MPI.BYTE],
                                     [out.view(np.uint8), (byte_counts, displs), MPI.BYTE])
    rt.engine.wait_request(request)
    if rt.timeline.enabled:
        rt.timeline.span("ALLGATHER", TID_MPI, t0, _now(), {"bytes": int(out.nbytes)})
    return new_like(ref, out, (int(counts.sum()),) + tuple(shape[1:]))


@collective
def shared_zeros(shape: Any, dtype: Any = np.float32) -> np.ndarray:
    """A zeroed numpy array in shared memory, for buffers reduced every step (e.g. gradients).

    Collective: every rank calls it with the same shape and dtype, in the same order.  In a
    one-host job, allreduce_n / allreduce_n_async of tensors that all come from here (or are
    views of them: torch.from_numpy) reduce in place without copying into an arena, about half
    the memory traffic.  The memory is kept until finalize.  In any other job this is np.zeros.
    """
    rt = _rt.current()
    try:
        dt = np.dtype(dtype)
        dims = (operator.index(shape),) if np.isscalar(shape) else tuple(operator.index(d) for d in shape)
    except (TypeError, ValueError):
        raise DDLInputError(f"shared_zeros: shape {shape!r} / dtype {dtype!r} is not a shape and a numpy dtype") from None
    if dt.name not in SUPPORTED_DTYPES or any(d < 0 for d in dims):
        raise DDLInputError(f"shared_zeros: need a shape of non-negative ints and one of {', '.join(SUPPORTED_DTYPES)}; "
                            f"got {dims} {dt.name}")
    _agree(rt, f"shared_zeros({dims}, {dt.name})", (("shared_zeros", dt.name, dims), ()))
    if rt.shm is None:
        return np.zeros(dims, dt)
    nbytes = math.prod(dims) * dt.itemsize
    root = rt.shm.heap.allocate(nbytes)
    if root is None:  # no room in /dev/shm (every rank alike; said once): ordinary memory
        return np.zeros(dims, dt)
    return root[:nbytes].view(dt).reshape(dims)


def _check_root(rt, root: Any, what: str) -> None:
    if not isinstance(root, (int, np.integer)) or isinstance(root, bool) or not 0 <= root < rt.size:
        raise DDLInputError(f"{what}: root {root!r} is not a rank of this job (0..{rt.size - 1})")


def _now() -> float:
    return time.perf_counter()


# -- data-parallel helpers ----------------------------------------------------------------
def shard(data: Any) -> Any:
    """This rank's part of `data`, as np.array_split(data, size())[rank()] (lists stay lists)."""
    rt = _rt.current()
    counts = split_counts(len(data), rt.size)
    start = sum(counts[:rt.rank])
    return data[start:start + counts[rt.rank]]


def scale_lr(lr: float) -> float:
    """The learning rate scaled linearly with the number of ranks."""
    return lr * _rt.current().size
