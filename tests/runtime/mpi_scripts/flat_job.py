"""FlatAllreduce (ddl_runtime/collectives/flat_allreduce.py) on real MPI ranks.

values:  every dtype/op/size reduced 5 times with other collectives in between: the result has
         the bits allreduce_n gives for the same data on every rank and stays until the next
         buffer() (other collectives leave it alone), and buffer() is this rank's slot in the
         shared-memory arena exactly when the job has one and the bucket fits; a peer that
         reduces the same tensor through allreduce_n_async takes part correctly.
mismatch: rank 0 and the others reduce differently named buckets: DDLMismatchError on every rank
         naming both, then the job carries on.
misuse:  start() without buffer(), and with a collective between buffer() and start(): DDLError
         (on the arena; a private buffer may be reduced any time).
stall:   rank 1 sleeps before start(): the stall line names it and the bucket; all go on after.
exit, kill: rank 1 leaves (sys.exit(3) / os._exit(4)) after one round; the others, waiting in
         the next, end the job.
Rank 0 prints one SUMMARY line with every rank's failures and what it saw.
"""
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import ddl_runtime as ddl
from ddl_runtime.state import runtime as _rt
from ddl_runtime.errors import DDLError, DDLMismatchError
from ddl_runtime.collectives.flat_allreduce import FlatAllreduce
from ddl_runtime.transports.shm.group import SMALL_BYTES

ddl.init()
R, N = ddl.rank(), ddl.size()
rt = _rt.current()
mode = sys.argv[1]
failures = []
info = {}


def same_bits(label, a):
    if MPI.COMM_WORLD.allgather(a.tobytes()) != [a.tobytes()] * N:
        failures.append(f"{label}: ranks hold different bits")


def values_for(dtype, count, salt):
    x = (np.arange(count, dtype=np.float64) * 0.37 + salt * 1.3 + R * 2.1)
    if np.dtype(dtype).kind == "f":
        return (np.sin(x) * 1000).astype(dtype)  # not exactly representable sums: the order matters
    return (x * 7).astype(dtype) % 1000


def in_arena(a):
    return rt.shm is not None and np.shares_memory(a, rt.shm.small_arenas[rt.shm.rank])


if mode == "values":
    arena_seen = {}
    cases = [(np.float32, "avg", 1), (np.float32, "avg", 38_290), (np.float64, "sum", 1001),
             (np.int64, "sum", 5000), (np.int32, "sum", 77), (np.float32, "avg", SMALL_BYTES // 4),
             (np.float32, "avg", SMALL_BYTES // 4 + 1), (np.float64, "avg", 100_000)]
    for ci, (dtype, op, count) in enumerate(cases):
        red = FlatAllreduce(count, dtype, f"bucket.{ci}", op=op)
        fits = count * np.dtype(dtype).itemsize <= SMALL_BYTES
        for it in range(5):
            label = f"{np.dtype(dtype).name} {op} x{count} #{it}"
            data = values_for(dtype, count, salt=it + ci)
            buf = red.buffer()
            if buf.shape != (count,) or buf.dtype != np.dtype(dtype):
                failures.append(f"{label}: buffer {buf.dtype}{buf.shape}")
                break
            arena_seen[label] = in_arena(buf)
            if in_arena(buf) != (fits and rt.shm is not None):
                failures.append(f"{label}: buffer in the arena: {in_arena(buf)}, fits: {fits}")
            buf[:] = data
            out = red.start().wait()
            want = ddl.allreduce_n([data.copy()], op=op, names=[f"ref.{ci}"])[0]
            if not np.array_equal(out, want):
                failures.append(f"{label}: {out[:3]} vs allreduce_n {want[:3]}")
            same_bits(label, out)
            if it % 2:  # other collectives between rounds move the arena's barrier parity, and
                kept = out.copy()  # leave the result alone until the next buffer()
                ddl.barrier()
                ddl.allreduce(np.ones(3), op="sum")
                ddl.allreduce_n([values_for(dtype, count, salt=99)], op=op, names=[f"other.{ci}"])
                if not np.array_equal(out, kept):
                    failures.append(f"{label}: the result changed before the next buffer()")
    # a peer reducing the same tensor through allreduce_n_async takes part correctly
    count, name = 1234, "bucket.mixed"
    data = values_for(np.float32, count, salt=9)
    want = ddl.allreduce_n([data.copy()], op="avg", names=["ref.mixed"])[0]
    if R == 0:
        red = FlatAllreduce(count, np.float32, name, op="avg")
        red.buffer()[:] = data
        got = red.start().wait()
    else:
        got = ddl.allreduce_n_async([data.copy()], op="avg", names=[name]).wait()[0]
    if not np.array_equal(got, want):
        failures.append(f"mixed: {got[:3]} vs {want[:3]}")
    info["arena"] = sorted({k.split(" #")[0] for k, v in arena_seen.items() if v})

elif mode == "mismatch":
    red = FlatAllreduce(100, np.float32, "bucket.a" if R == 0 else "bucket.b", op="avg")
    red.buffer()[:] = 1
    try:
        red.start().wait()
        failures.append("no mismatch raised")
    except DDLMismatchError as e:
        info["mismatch"] = str(e)
    ok = ddl.allreduce(np.ones(2), op="sum")
    if not np.array_equal(ok, np.full(2, float(N))):
        failures.append(f"after the mismatch: {ok}")

elif mode == "misuse":  # on the arena (the test runs it on one host)
    red = FlatAllreduce(10, np.float64, "bucket.m", op="sum")
    for label, between in (("no buffer()", None), ("barrier in between", ddl.barrier)):
        try:
            if between is not None:
                red.buffer()
                between()
            red.start()
            failures.append(f"{label}: start() went ahead")
        except DDLError as e:
            info.setdefault("misuse", []).append(f"{label}: {e}")
    red.buffer()[:] = R
    out = red.start().wait()
    if not np.array_equal(out, np.full(10, float(sum(range(N))))):
        failures.append(f"after misuse: {out}")

elif mode == "stall":
    red = FlatAllreduce(64, np.float32, "bucket.slow", op="avg")
    red.buffer()[:] = 1
    if R == 1:
        time.sleep(float(sys.argv[2]))
    info["reduced"] = red.start().wait().tolist() == [1.0] * 64

elif mode in ("exit", "kill"):  # rank 1 leaves after one good round while the others wait
    red = FlatAllreduce(64, np.float32, "bucket.left", op="avg")
    for round_ in range(2):
        if round_ == 1 and R == 1:
            if mode == "exit":
                sys.exit(3)
            os._exit(4)
        red.buffer()[:] = R
        red.start().wait()
    print(f"NOT REACHED rank={R}", flush=True)

summary = MPI.COMM_WORLD.gather({"rank": R, "failures": failures, "shm": rt.shm is not None, **info})
if R == 0:
    print("SUMMARY " + json.dumps(summary), flush=True)
ddl.finalize()
