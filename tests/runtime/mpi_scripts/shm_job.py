"""The shared-memory path of a one-host job: values, fallbacks, segment hygiene.

`shm_job.py values`: rank-dependent tensors of every dtype through allreduce_n / allreduce /
allreduce_n_async, each result compared with the MPI path (mpi=True) or the exact value; a
mismatch still raises on every rank; then the arena grows.  Rank 0 prints one SUMMARY line
with every rank's verdict, whether it used shared memory, and the files behind its mappings.
`shm_job.py crash`: after one shared-memory allreduce, rank 1 dies while rank 0 waits for it
in the next one; rank 0 prints the files behind its mappings first (the test checks they are gone).
"""
import hashlib
import json
import sys
import time

import ml_dtypes
import numpy as np
from mpi4py import MPI

import ddl_runtime as ddl
from ddl_runtime.state import runtime as _rt

ddl.init()
R, N = ddl.rank(), ddl.size()
rt = _rt.current()
mode = sys.argv[1]


def backing_files():
    """The file behind every mapping of the shared windows ('' = anonymous)."""
    shm = rt.shm
    if shm is None:
        return []
    arrays = list(shm.arenas) + list(shm.slots) + list(shm.small_arenas)
    maps = [line.split() for line in open("/proc/self/maps")]
    files = []
    for arr in arrays:
        addr = arr.__array_interface__["data"][0]
        for fields in maps:
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= addr < hi:
                files.append(" ".join(fields[5:]))
    return files


failures = []


def check(name, got, want):
    if not np.array_equal(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)):
        failures.append(f"{name}: got {np.asarray(got).ravel()[:4]}, want {np.asarray(want).ravel()[:4]}")


def same_as_mpi_path(label, ts, op):
    """allreduce_n of `ts` (in place) agrees with the MPI path on copies, with the same bits on every rank."""
    dtype = ts[0].dtype
    ref = [t.copy() for t in ts]
    names = [f"{label}.{dtype.name}.{i}" for i in range(len(ts))]
    got = ddl.allreduce_n(ts, op=op, names=names)
    ddl.allreduce_n(ref, op=op, mpi=True, names=names)
    for name, a, b in zip(names, got, ref):
        if not np.allclose(a, b, rtol=1e-6 if dtype == np.float32 else 1e-12):
            failures.append(f"{label} {op} {name}: {a.ravel()[:3]} vs mpi=True {b.ravel()[:3]}")
    bits = [hashlib.sha256(t.tobytes()).hexdigest() for t in ts]
    if MPI.COMM_WORLD.allgather(bits) != [bits] * N:
        failures.append(f"{label} {op} {dtype.name}: ranks hold different bits")


if mode == "values":
    total = sum(range(1, N + 1))
    shapes = [(3,), (1000, 37), (0,), (5, 1), (200_001,), (2, 3, 4)]
    dtypes = [np.float32, np.float64, np.int32, np.int64, np.float16, np.dtype(ml_dtypes.bfloat16)]
    for op in ("sum", "avg"):
        for dtype in dtypes:
            if op == "avg" and np.dtype(dtype).kind == "i":
                continue
            ts = [(np.arange(int(np.prod(s))) % 7 + R + 1).astype(dtype).reshape(s) for s in shapes]
            ref = [t.copy() for t in ts]
            names = [f"{np.dtype(dtype).name}.{i}" for i in range(len(ts))]
            out = ddl.allreduce_n(ts, op=op, names=names)
            ddl.allreduce_n(ref, op=op, mpi=True, names=names)
            for name, a, b in zip(names, out, ref):
                check(f"{op} {name} vs mpi=True", a.astype(np.float64), b.astype(np.float64))
    # out of place (allreduce_n_into): read-only sources stay as they were, results land in the
    # given outputs and equal the in-place path's, for fused small tensors and large ones alike
    for op in ("sum", "avg"):
        srcs = [(np.arange(int(np.prod(s))) % 5 + R + 1).astype(np.float32).reshape(s) for s in shapes]
        before = [a.copy() for a in srcs]
        for a in srcs:
            a.setflags(write=False)
        outs = [np.full(a.shape, -1, np.float32) for a in srcs]
        names = [f"into.{op}.{i}" for i in range(len(srcs))]
        got = ddl.allreduce_n_into(srcs, outs, op=op, names=names)
        if any(g is not o for g, o in zip(got, outs)):
            failures.append(f"allreduce_n_into {op}: did not return the given outputs")
        want = ddl.allreduce_n([b.copy() for b in before], op=op, names=names)
        for name, src, b, o, w in zip(names, srcs, before, outs, want):
            check(f"allreduce_n_into {name} source untouched", src, b)
            check(f"allreduce_n_into {name} vs in place", o, w)
    try:
        ddl.allreduce_n_into([np.ones(3, np.float32)], [np.ones(4, np.float32)], names=["bad"])
        failures.append("allreduce_n_into: wrong output shape accepted")
    except ddl.DDLInputError as exc:
        if "shape (3,)" not in str(exc):
            failures.append(f"allreduce_n_into shape message: {exc}")
    # exact values (integers survive every path): the sum of rank+1
    x = np.full(10, R + 1, np.int64)
    check("allreduce_n int64 exact", ddl.allreduce_n([x])[0], np.full(10, total))
    check("allreduce max", ddl.allreduce(np.array([R, -R], np.float64), op="max"), [N - 1, 0])
    check("allreduce min", ddl.allreduce(np.array([R, -R], np.int32), op="min"), [0, -(N - 1)])
    check("allreduce scalar avg", [ddl.allreduce(float(R), op="avg")], [sum(range(N)) / N])
    h = ddl.allreduce_n_async([np.full(4, R + 1.0, np.float32)], op="avg", names=["async"])
    check("allreduce_n_async", h.wait()[0], np.full(4, total / N))
    check("check= passes", ddl.allreduce_n([np.full(3, R + 1.0)], check=1e-6, names=["c"])[0], np.full(3, total))
    try:  # a mismatch is still named, on every rank
        ddl.allreduce_n([np.zeros(4 + R, np.float32)], names=["w"])
        failures.append("no mismatch error")
    except ddl.DDLMismatchError as exc:
        if "tensor 'w' differs across ranks" not in str(exc):
            failures.append(f"mismatch message: {exc}")
    try:  # different collectives on different ranks
        if R == 0:
            ddl.barrier()
        else:
            ddl.allreduce_n([np.zeros(2)], names=["v"])
        failures.append("no mismatch error for different collectives")
    except ddl.DDLMismatchError as exc:
        if "ranks call different collectives" not in str(exc):
            failures.append(f"mismatch message: {exc}")
    # Small reductions (one dtype, <= 256 KB): packed, agreed and reduced with one barrier.
    # Same values as the MPI path, every op, in place and out of place, empty tensors included;
    # and the same bits on every rank (each rank sums all ranks' buffers in rank order).
    small_shapes = [(3,), (0,), (40, 37), (1,), (2, 3, 4)]
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        for op in ("sum", "avg") if np.dtype(dtype).kind == "f" else ("sum",):
            ts = [((np.arange(int(np.prod(s))) * 0.37 + R * 1.1) % 9).astype(dtype).reshape(s) for s in small_shapes]
            same_as_mpi_path("small", ts, op)
    for op, want in (("min", [0, -(N - 1)]), ("max", [N - 1, 0])):
        check(f"small allreduce {op}", ddl.allreduce(np.array([R, -R], np.float32), op=op), want)
    srcs = [np.full(s, R + 1.0, np.float32) for s in small_shapes]
    for a in srcs:
        a.setflags(write=False)
    outs = [np.zeros(s, np.float32) for s in small_shapes]
    ddl.allreduce_n_into(srcs, outs, op="avg", names=[f"into.small.{i}" for i in range(len(srcs))])
    for i, (a, o) in enumerate(zip(srcs, outs)):
        check(f"small into {i} source untouched", a, np.full(a.shape, R + 1.0))
        check(f"small into {i}", o, np.full(o.shape, total / N))
    # The two halves of the small arena alternate by barrier: ranks running at different speeds,
    # small calls mixed with large ones and with a mismatch, every result still exact.
    rng = np.random.RandomState(R)
    for i in range(300):
        if rng.rand() < 0.3:
            time.sleep(rng.rand() * 2e-4)
        if i % 50 == 25:
            check(f"mixed large {i}", ddl.allreduce_n([np.full(100_000, i + R, np.float64)], names=["L"])[0][:2],
                  [N * i + sum(range(N))] * 2)
        if i == 150:
            try:
                ddl.allreduce_n([np.zeros(3 + R, np.float32)], names=["m"])
                failures.append("small: no mismatch error")
            except ddl.DDLMismatchError:
                pass
        got = ddl.allreduce_n([np.full(7, i * (R + 1), np.int64), np.full(5, -i, np.int64)], names=["a", "b"])
        check(f"alternating {i}", np.concatenate(got), [i * total] * 7 + [-i * N] * 5)
    small_used = bool(rt.shm and rt.shm.small_views)
    # Tensors in the shared heap (shared_zeros) are reduced where they lie: same values as the
    # MPI path, same bits on every rank, views of them too; mixed with ordinary arrays the usual
    # path runs; ranks disagreeing on where their tensors live get a mismatch, not wrong sums.
    heap_shapes = [(3,), (1000, 37), (0,), (200_001,), (2, 3, 4)]
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        for op in ("sum", "avg") if np.dtype(dtype).kind == "f" else ("sum",):
            hs = [ddl.shared_zeros(s, dtype) for s in heap_shapes]
            if any(h.any() or h.shape != s or h.dtype != dtype for h, s in zip(hs, heap_shapes)):
                failures.append(f"shared_zeros {np.dtype(dtype).name}: not zeroed arrays of that shape")
            for i, h in enumerate(hs):
                h[...] = ((np.arange(h.size) * 0.37 + R * 1.1 + i) % 9).astype(dtype).reshape(h.shape)
            same_as_mpi_path("heap", hs, op)
    heap_used = bool(rt.shm and rt.shm.heap.views)
    g = ddl.shared_zeros((4, 5), np.float32)
    views = [g[1:3], g[3]]  # views of heap arrays are found in the heap as well
    views[0][...] = R + 1.0
    views[1][...] = R + 2.0
    ddl.allreduce_n(views, op="sum", names=["rows", "row3"])
    check("heap views", [g[0, 0], g[1, 4], g[2, 0], g[3, 4]], [0.0, total, total, total + N])
    plain = np.full(3, R + 1.0, np.float32)
    mixed = ddl.allreduce_n([ddl.shared_zeros(3, np.float32) + 0, plain, g], names=["copy", "plain", "g"])
    check("heap mixed with plain arrays", mixed[1], np.full(3, float(total)))
    h = ddl.shared_zeros(5, np.float64)
    h[...] = R + 1.0
    check("heap allreduce_n_async", ddl.allreduce_n_async([h], op="avg", names=["h"]).wait()[0],
          np.full(5, total / N))
    try:  # rank 0's tensor lives in the heap, the others' do not (only a one-host job has a heap)
        ddl.allreduce_n([h if R == 0 else np.ones(5)], names=["where"])
        if rt.shm is not None:
            failures.append("heap vs plain: no mismatch error")
    except ddl.DDLMismatchError as exc:
        if "ranks call different collectives" not in str(exc):
            failures.append(f"heap vs plain mismatch message: {exc}")
    try:
        ddl.shared_zeros((3 + R,), np.float32)
        failures.append("shared_zeros with different shapes: no mismatch error")
    except ddl.DDLMismatchError:
        pass
    for bad in ((-1,), ("x", 2), (2.5,), "3"):
        try:
            ddl.shared_zeros(bad)
            failures.append(f"shared_zeros{bad}: accepted")
        except ddl.DDLInputError:
            pass
    # more than one segment (64 MB each), and a rank that changes its tensors the moment the
    # call returns (as zero_grad does) while a slower peer may still be finishing
    big = [ddl.shared_zeros(6_000_000, np.float32) for _ in range(3)]
    rng = np.random.RandomState(10 + R)
    for i in range(20):
        for b in big:
            b[...] = i + R
        if rng.rand() < 0.5:
            time.sleep(rng.rand() * 2e-3)
        ddl.allreduce_n(big, names=["b0", "b1", "b2"])
        check(f"heap segments, call {i}", [b[j] for b in big for j in (0, 2_999_999, 3_000_000, 5_999_999)],
              [N * i + sum(range(N))] * 12)
        for b in big:
            b[...] = -1.0
    heap_segments = len(rt.shm.heap.segments) if rt.shm else 0
    capacity = rt.shm.capacity if rt.shm else 0
    big = np.full(6_000_000, R + 1.0, np.float32)  # 24 MB: the arena grows, collectively
    check("after growth", ddl.allreduce_n([big], names=["big"])[0][::1_000_000], np.full(6, float(total)))
    mine = {"rank": R, "shm": rt.shm is not None, "small": small_used, "heap": heap_used,
            "heap_segments": heap_segments, "grew": bool(rt.shm and rt.shm.capacity > capacity),
            "files": backing_files(), "algorithm": ddl.algorithm(), "failures": failures}
    summary = MPI.COMM_WORLD.gather(mine, root=0)
    if R == 0:
        sys.stdout.write("SUMMARY " + json.dumps(summary) + "\n")
elif mode == "heap_after_finalize":
    # gradients kept past finalize (e.g. to save them) stay readable: their window is not unmapped
    kept = ddl.shared_zeros(1000, np.float32)
    kept[...] = R + 1.0
    ddl.allreduce_n([kept], names=["kept"])
    gone = ddl.shared_zeros(70_000_000 // 4, np.float32)  # a second window, nothing keeps it
    del gone
    heap = rt.shm.heap
    ddl.finalize()
    sys.stdout.write(f"AFTER {R} {float(kept.sum())} {len(heap.kept)} {len(heap.segments)}\n")
elif mode == "crash":
    ddl.allreduce_n([np.ones(300_000, np.float32)], names=["g"])
    if R == 0:
        sys.stdout.write("FILES " + json.dumps(backing_files()) + "\n")
        sys.stdout.flush()
    ddl.barrier()
    if R == 1:
        raise RuntimeError("rank 1 fails on purpose")
    ddl.allreduce_n([np.ones(300_000, np.float32)], names=["g"])
    sys.stdout.write("NOT REACHED\n")
