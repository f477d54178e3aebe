"""Every collective against numpy references, across dtypes, shapes and ops.

Usage: check_collectives.py [torch] [quick]; rank 0 prints "SUMMARY [...]" (every rank's topology
and failures); the job exits 1 when any rank failed.  Every rank generates every rank's inputs (seeded), so the
reference is computed locally in float64.
"""
import json
import sys

import numpy as np

import ddl_runtime as ddl

FLAVOUR = "torch" if "torch" in sys.argv[1:] else "numpy"
QUICK = "quick" in sys.argv[1:]  # fewer dtypes per-tensor, two allreduce_n variants
if FLAVOUR == "torch":
    import torch
try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - keras pulls ml_dtypes in here
    BF16 = None

info = ddl.init()
R, N = ddl.rank(), ddl.size()
failures = []
DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64"]
SHAPES = [(), (0,), (1,), (7,), (3, 5), (1001,), (2, 3, 17), (140_001,)]  # 547 KB as float32: run with DDL_FUSION_MB=0.5 to chunk
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-12, "int32": 0, "int64": 0}


_cache = {}


def values(rank, shape, dtype, seed):
    """Multiples of 1/8 in [-16, 16): exact in every dtype, so sums are exact too (averages round)."""
    key = (rank, shape, dtype, seed)
    if key not in _cache:
        rng = np.random.default_rng(seed * 7919 + rank)
        v = rng.integers(-128, 128, size=shape, dtype=np.int16).astype(np.float64)
        _cache[key] = v if dtype.startswith("int") else v / 8
        if len(_cache) > 64:
            _cache.pop(next(iter(_cache)))
    return _cache[key]


def make(rank, shape, dtype, seed):
    v = values(rank, shape, dtype, seed)
    if FLAVOUR == "torch":
        return torch.tensor(v, dtype=getattr(torch, dtype)).reshape(shape)
    return np.array(v, dtype=BF16 if dtype == "bfloat16" else dtype)


def as64(x):
    if FLAVOUR == "torch":
        return x.to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64) if x.dtype != BF16 else x.astype(np.float32).astype(np.float64)


def rounded(v, dtype):
    """The reference as the tensor's dtype would hold it."""
    if dtype == "bfloat16":
        return v.astype(BF16).astype(np.float64) if BF16 else v
    if dtype.startswith("int"):
        return np.trunc(v)
    return v.astype(dtype).astype(np.float64)


def reference(shape, dtype, seed, op):
    inputs = [rounded(values(r, shape, dtype, seed), dtype) for r in range(N)]
    stack = np.stack(inputs) if inputs else None
    out = {"sum": stack.sum(0), "avg": stack.mean(0), "min": stack.min(0), "max": stack.max(0)}[op]
    return out


def check(label, got, shape, dtype, seed, op):
    ref = reference(shape, dtype, seed, op)
    g = as64(got)
    if g.shape != ref.shape:
        failures.append(f"{label}: shape {g.shape} != {ref.shape}")
        return
    tol = TOL[dtype]
    err = np.abs(g - ref) / np.maximum(1.0, np.abs(ref)) if g.size else np.zeros(0)
    if err.size and err.max() > tol:
        failures.append(f"{label}: max rel err {err.max():.3g} > {tol}")


# 1. allreduce, one tensor at a time, every op; results are in place
seed = 0
for dtype in (["float32", "int64"] if QUICK else DTYPES):
    for shape in SHAPES[:7]:
        for op in ("sum", "avg", "min", "max"):
            if op == "avg" and dtype.startswith("int"):
                continue
            seed += 1
            x = make(R, shape, dtype, seed)
            out = ddl.allreduce(x, op=op, name=f"t{seed}")
            if out is not x:
                failures.append(f"allreduce {dtype}{shape} {op}: result is not the input object")
            check(f"allreduce {dtype}{shape} {op}", x, shape, dtype, seed, op)

# 2. allreduce_n over a mixed list (all dtypes and shapes at once), sum and avg; also mpi=True and check
VARIANTS = [("sum", {}), ("avg", {}), ("sum", {"mpi": True}), ("avg", {"check": 1e-5})]
for op, kwargs in (VARIANTS[2:] if QUICK else VARIANTS):
    specs = [(shape, dtype) for dtype in DTYPES for shape in SHAPES
             if not (op == "avg" and dtype.startswith("int"))]
    base = seed
    tensors = [make(R, shape, dtype, base + i) for i, (shape, dtype) in enumerate(specs)]
    names = [f"p{i}.{dtype}" for i, (_, dtype) in enumerate(specs)]
    out = ddl.allreduce_n(tensors, op=op, names=names, **kwargs)
    if len(out) != len(tensors) or any(a is not b for a, b in zip(out, tensors)):
        failures.append(f"allreduce_n {op} {kwargs}: results are not the input objects")
    for i, (shape, dtype) in enumerate(specs):
        check(f"allreduce_n {op} {kwargs} {names[i]}{shape}", tensors[i], shape, dtype, base + i, op)
    seed += len(specs)

# 3. two async handles, started in order, waited in reverse
first = [make(R, (1000 + i,), "float32", seed + i) for i in range(5)]
second = [make(R, (77,), "float64", seed + 10), make(R, (2_000_000,), "float32", seed + 11)]
h1 = ddl.allreduce_n_async(first, op="avg", names=[f"a{i}" for i in range(5)])
h2 = ddl.allreduce_n_async(second, op="sum")
out2 = h2.wait()
out1 = h1.wait()
for i, t in enumerate(out1):
    check(f"async avg a{i}", t, (1000 + i,), "float32", seed + i, "avg")
check("async sum 0", out2[0], (77,), "float64", seed + 10, "sum")
check("async sum 1", out2[1], (2_000_000,), "float32", seed + 11, "sum")
seed += 20
# async handles interleaved with blocking collectives (buckets of h3 stay in flight meanwhile)
third = [make(R, (150_000,), "float32", seed), make(R, (33,), "bfloat16", seed + 1)]
h3 = ddl.allreduce_n_async(third, op="sum", names=["big", "small16"])
mid = [make(R, (1000,), "float64", seed + 2)]
ddl.allreduce_n(mid, op="avg", names=["mid"])
b = make(R, (9,), "int64", seed + 3)
ddl.bcast(b, root=0, name="mid.b")
small = make(R, (4,), "float32", seed + 5)
ddl.allreduce(small, op="max", name="small.max")  # latency path while h3's buckets may be in flight
h4 = ddl.allreduce_n_async([make(R, (5,), "int32", seed + 4)], op="sum", names=["late"])
late = h4.wait()[0]
h3.wait()
check("interleaved async big", third[0], (150_000,), "float32", seed, "sum")
check("interleaved async bf16", third[1], (33,), "bfloat16", seed + 1, "sum")
check("interleaved sync avg", mid[0], (1000,), "float64", seed + 2, "avg")
check("interleaved async late", late, (5,), "int32", seed + 4, "sum")
check("interleaved small max", small, (4,), "float32", seed + 5, "max")
if not np.array_equal(as64(b), rounded(values(0, (9,), "int64", seed + 3), "int64")):
    failures.append("interleaved bcast")
seed += 10

# 4. bcast / bcast_n from the last rank
root = N - 1
for dtype in (["bfloat16", "int32"] if QUICK else DTYPES):
    x = make(R, (3, 4), dtype, seed)
    if ddl.bcast(x, root=root, name="b") is not x:
        failures.append("bcast: result is not the input object")
    expect = rounded(values(root, (3, 4), dtype, seed), dtype)
    if not np.array_equal(as64(x), expect):
        failures.append(f"bcast {dtype}: differs from root's data")
    seed += 1
xs = [make(R, s, "float32", seed + i) for i, s in enumerate([(5,), (0,), (100_000,)])]
ddl.bcast_n(xs, root=root)
for i, (x, s) in enumerate(zip(xs, [(5,), (0,), (100_000,)])):
    if not np.array_equal(as64(x), rounded(values(root, s, "float32", seed + i), "float32")):
        failures.append(f"bcast_n tensor {i}: differs from root's data")
seed += 3
if ddl.bcast_object({"r": R} if R == root else None, root=root) != {"r": root}:
    failures.append("bcast_object: wrong object")

# 5. allgather: first dims differ per rank
for dtype in (["float16", "int64"] if QUICK else DTYPES):
    x = make(R, (R + 1, 3), dtype, seed)
    g = ddl.allgather(x, name="g")
    expect = np.concatenate([rounded(values(r, (r + 1, 3), dtype, seed), dtype) for r in range(N)])
    if type(g) is not type(x) or not np.array_equal(as64(g), expect):
        failures.append(f"allgather {dtype}: wrong result")
    seed += 1
g = ddl.allgather(make(R, (), "float32", seed))
if tuple(g.shape) != (N,):
    failures.append(f"allgather 0-d: shape {tuple(g.shape)}")

# 6. numbers, shard, scale_lr, barrier
if ddl.allreduce(R + 1.5, op="sum") != sum(r + 1.5 for r in range(N)):
    failures.append("allreduce of a float")
if ddl.allreduce(R, op="max") != N - 1:
    failures.append("allreduce of an int")
data = list(range(23))
if ddl.shard(data) != list(np.array_split(np.array(data), N)[R]):
    failures.append("shard(list)")
arr = np.arange(23 * 2).reshape(23, 2)
if not np.array_equal(ddl.shard(arr), np.array_split(arr, N)[R]):
    failures.append("shard(array)")
if ddl.scale_lr(0.1) != 0.1 * N:
    failures.append("scale_lr")
ddl.barrier()
if ddl.allreduce_n([]) != [] or ddl.allreduce_n_async([]).wait() != []:
    failures.append("allreduce_n of an empty list")

t = ddl.topology_info()
mine = {"rank": R, "size": N, "local_rank": ddl.local_rank(), "local_size": ddl.local_size(),
        "cross_rank": ddl.cross_rank(), "cross_size": ddl.cross_size(), "algorithm": ddl.algorithm(),
        "source": t.source, "info": list(info), "failures": failures}
ddl.finalize()
# one summary line from rank 0 (lines printed by several ranks can interleave)
from mpi4py import MPI  # noqa: E402

summary = MPI.COMM_WORLD.gather(mine, root=0)
if R == 0:
    sys.stdout.write("SUMMARY " + json.dumps(summary) + "\n")
    sys.stdout.flush()
sys.exit(1 if MPI.COMM_WORLD.allreduce(len(failures)) else 0)
