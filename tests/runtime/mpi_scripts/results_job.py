"""allreduce_n_fresh: out-of-place results that live in shared memory (ddl_runtime/transports/shm/results.py).

Rank 0 prints one SUMMARY line with every rank's failures and what it saw of the regions;
`results_job.py after_finalize` prints an AFTER line per rank with the sum of results kept
past finalize.
"""
import hashlib
import json
import sys
import time

import numpy as np
from mpi4py import MPI

import ddl_runtime as ddl
from ddl_runtime.state import runtime as _rt
from ddl_runtime.transports.shm import results as shm_results
from ddl_runtime.transports.shm.output_pool import packed_layout

ddl.init()
R, N = ddl.rank(), ddl.size()
rt = _rt.current()
mode = sys.argv[1]
failures = []
# odd sizes, so that the ranks' slices of the packed layout cut through tensors; 0-d and empty
SHAPES = [(3,), (), (1000, 37), (0,), (5, 1), (200_001,), (2, 3, 4), (70_003,)]


def in_heap(a):
    return rt.shm is not None and rt.shm.heap.locate(a.reshape(-1)) is not None


def sources(dtype, salt=0):
    out = []
    for i, s in enumerate(SHAPES):
        a = ((np.arange(int(np.prod(s))) * (i + 3) + salt) % 11 + R + 1).astype(dtype).reshape(s)
        a.setflags(write=False)
        out.append(a)
    return out


def expect(srcs, op):
    """The in-place path's results on copies (the reference)."""
    return ddl.allreduce_n([s.copy() for s in srcs], op=op, names=[f"ref.{i}" for i in range(len(srcs))])


def same_bits(label, arrays):
    bits = hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest()
    if MPI.COMM_WORLD.allgather(bits) != [bits] * N:
        failures.append(f"{label}: ranks hold different bits")


def check(label, srcs, op, flat, outs, want_heap=True):
    if len(outs) != len(srcs):
        failures.append(f"{label}: {len(outs)} results for {len(srcs)} sources")
        return
    offsets = packed_layout([s.size for s in srcs], srcs[0].dtype.itemsize)[0]
    for i, (s, o, w, at) in enumerate(zip(srcs, outs, expect(srcs, op), offsets)):
        if o.shape != s.shape or o.dtype != s.dtype:
            failures.append(f"{label} {i}: {o.dtype}{o.shape}, want {s.dtype}{s.shape}")
        elif not np.allclose(o, w, rtol=1e-6):
            failures.append(f"{label} {i}: {o.ravel()[:3]} vs in place {w.ravel()[:3]}")
        if o.size and not np.shares_memory(o, flat[at:at + o.size]):
            failures.append(f"{label} {i}: not the view of flat at offset {at}")
    if in_heap(flat) != want_heap:
        failures.append(f"{label}: results in shared memory: {in_heap(flat)}, expected {want_heap}")
    same_bits(label, outs)


def regions():
    return sum(len(v) for v in rt.shm.results.regions.values()) if rt.shm else 0


if mode == "values":
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        for op in ("sum", "avg") if np.dtype(dtype).kind == "f" else ("sum",):
            srcs = sources(dtype)
            before = [s.copy() for s in srcs]
            flat, outs = ddl.allreduce_n_fresh(srcs, op=op, names=[f"{np.dtype(dtype).name}.{i}" for i in range(8)])
            check(f"{np.dtype(dtype).name} {op}", srcs, op, flat, outs, want_heap=rt.shm is not None)
            for s, b in zip(srcs, before):
                if not np.array_equal(s, b):
                    failures.append(f"{np.dtype(dtype).name} {op}: a source changed")
    # a dropped call's region is taken again; results still alive are never written over
    srcs = sources(np.float32)
    flat, outs = ddl.allreduce_n_fresh(srcs)
    address, count = flat.ctypes.data, regions()
    del flat, outs
    flat, outs = ddl.allreduce_n_fresh(srcs)
    reused = flat.ctypes.data == address and regions() == count
    kept_flat, kept = flat, [o.copy() for o in outs]
    flat2, outs2 = ddl.allreduce_n_fresh(sources(np.float32, salt=5))
    if np.shares_memory(flat2, kept_flat):
        failures.append("a second call wrote into results that are still alive")
    for o, k in zip(outs, kept):
        if not np.array_equal(o, k):
            failures.append("results still alive changed after a later call")
            break
    check("second region", sources(np.float32, salt=5), "sum", flat2, outs2, want_heap=rt.shm is not None)
    del flat, outs, kept_flat, flat2, outs2
    # ranks that let go of their results at different moments, at uneven speeds
    rng = np.random.RandomState(7 + R)
    held = []
    for i in range(30):
        srcs = sources(np.float32, salt=i)
        if rng.rand() < 0.5:
            time.sleep(rng.rand() * 3e-3)
        flat, outs = ddl.allreduce_n_fresh(srcs, op="avg", names=[f"step.{j}" for j in range(8)])
        want = expect(srcs, "avg")
        if not all(np.allclose(o, w, rtol=1e-6) for o, w in zip(outs, want)):
            failures.append(f"uneven step {i}: wrong results")
        held.append((flat, outs, [w.copy() for w in want]))
        while len(held) > rng.randint(0, 4):  # each rank keeps 0-3 earlier results alive
            held.pop(rng.randint(0, len(held)))
        for f, o, w in held:
            if not all(np.allclose(a, b, rtol=1e-6) for a, b in zip(o, w)):
                failures.append(f"uneven step {i}: results kept from an earlier step changed")
                break
    counts = MPI.COMM_WORLD.allgather(regions())
    if len(set(counts)) != 1:
        failures.append(f"ranks hold different region lists: {counts}")
    held.clear()
    # a mismatch raises on every rank, and the next call still works
    try:
        ddl.allreduce_n_fresh([np.ones(100_000 + R, np.float32)], names=["odd"])
        failures.append("different shapes: no mismatch error")
    except ddl.DDLMismatchError as exc:
        if "odd" not in str(exc):
            failures.append(f"mismatch message does not name the tensor: {exc}")
    srcs = sources(np.float64)
    flat, outs = ddl.allreduce_n_fresh(srcs, op="avg")
    check("after a mismatch", srcs, "avg", flat, outs, want_heap=rt.shm is not None)
    # small calls and mixed dtypes take the pooled private path, with the same values
    small = [np.full(100, R + 1.0, np.float32), np.full(7, R + 2.0, np.float32)]
    flat, outs = ddl.allreduce_n_fresh(small)
    check("small", small, "sum", flat, outs, want_heap=False)
    flat, outs = ddl.allreduce_n_fresh([np.full(300_000, R + 1.0), np.full(5, R + 1, np.int64)])
    if flat is not None or outs[0][0] != sum(range(1, N + 1)) or outs[1].dtype != np.int64:
        failures.append(f"mixed dtypes: flat {flat is not None}, {outs[0][:2]}, {outs[1].dtype}")
    # past RESULT_BYTES a call that needs a new region reduces into private memory, alike everywhere
    keep = [ddl.allreduce_n_fresh(sources(np.float32, salt=40))]
    shm_results.RESULT_BYTES = 0
    srcs = [np.full(300_001 + i, R + 1.0, np.float32) for i in range(3)]  # a layout without regions
    flat, outs = ddl.allreduce_n_fresh(srcs)
    check("no room", srcs, "sum", flat, outs, want_heap=False)
    for bad in (["x"], [np.ones(3, np.float32)]):
        try:
            ddl.allreduce_n_fresh(bad, op="max")
            failures.append(f"op max with {bad!r}: accepted")
        except ddl.DDLInputError:
            pass
    mine = {"rank": R, "shm": rt.shm is not None, "regions": regions(), "failures": failures}
    summary = MPI.COMM_WORLD.gather(mine, root=0)
    if R == 0:
        sys.stdout.write("SUMMARY " + json.dumps(summary) + "\n")
elif mode == "after_finalize":
    flat, outs = ddl.allreduce_n_fresh([np.full(400_000, R + 1.0, np.float32)])
    heap = rt.shm.heap
    ddl.finalize()
    sys.stdout.write(f"AFTER {R} {float(outs[0].sum())} {len(heap.kept)}\n")
