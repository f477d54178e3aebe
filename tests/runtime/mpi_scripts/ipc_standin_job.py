"""The ipc transport's logic (ddl_runtime.transports.gpu.ipc.IpcGroup) through its CPU stand-in, real MPI ranks.

StandInBackend: slots in POSIX shared memory opened by every rank from the exchanged handles, a
worker thread as the stream (each piece of device work held back by a per-rank delay, so a
missing event wait reads a peer's slot too early), events as shared-memory counters.  Checked:
  * results of allreduce (sum/avg/min/max, five dtypes, several tensors, a non-contiguous one),
    bcast and allgather (first dims differ), bit-identical on every rank;
  * calls return before their work ran (the in-place tensor still holds the input), wait() gives
    the result; several calls in flight, waited in reverse order;
  * handles exchanged once for calls of one size, again only when a call needs a larger slot;
  * argv[1] == "fault": the last rank exits (os._exit) while the others enter a call: they raise
    one DDLError naming it (FAULT line) instead of waiting.
Rank 0 prints one SUMMARY line (or each surviving rank a FAULT line).
"""
import hashlib
import json
import os
import sys
import time

import torch
from mpi4py import MPI

from ddl_runtime.errors import DDLError
from ddl_runtime.transports.gpu.ipc import IpcGroup
from ddl_runtime.transports.gpu.ipc_standin import StandInBackend

comm = MPI.COMM_WORLD
R, N = comm.Get_rank(), comm.Get_size()
fault = sys.argv[1:] == ["fault"]
backend = StandInBackend(delay_s=0.002 * (R + 1))
grp = IpcGroup(comm, backend, what="ipc stand-in", stall_warning_s=5, stall_shutdown_s=30)
failures = []


def value(rank, n, dtype, shift=0):
    return (torch.arange(n, dtype=torch.float64) % 5 + rank + shift).to(dtype)


def expect(op, n, dtype, shift=0):
    vals = torch.stack([value(r, n, torch.float64, shift) for r in range(N)])
    out = {"sum": vals.sum(0), "avg": vals.sum(0) / N, "min": vals.min(0).values, "max": vals.max(0).values}[op]
    return out.to(dtype)


def check(label, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(f"{label}: got {got.flatten()[:5].tolist()}, want {want.flatten()[:5].tolist()}")


if fault:
    x = value(R, 1000, torch.float32)
    grp.allreduce([x], "sum").wait()
    comm.Barrier()
    if R == N - 1:
        backend.close()  # its shared memory's names go (peers keep their mappings, as a dead process's would)
        os._exit(3)
    time.sleep(0.5)
    start = time.monotonic()
    try:
        for _ in range(3):
            grp.allreduce([x], "sum").wait()
        print(f"NOFAULT rank {R}", flush=True)
    except DDLError as exc:
        print(f"FAULT rank {R} after {time.monotonic() - start:.2f} s: {exc}", flush=True)
    backend.close()
    os._exit(0)

# -- results, several dtypes and ops; returns before the work ran ---------------------------------------
hashes = []
for dtype in (torch.float32, torch.float64, torch.int64, torch.float16, torch.bfloat16):
    for op in ("sum", "avg", "min", "max"):
        if op == "avg" and not dtype.is_floating_point:
            continue
        a, b = value(R, 1000, dtype), value(R, 6, dtype, 1).reshape(2, 3)
        pending = grp.allreduce([a, b], op)
        if op == "sum" and dtype == torch.float32 and not torch.equal(a, value(R, 1000, dtype)):
            failures.append("allreduce: the call waited for its work (the input was already reduced on return)")
        got = pending.wait()
        check(f"allreduce {op} {dtype} a", got[0], expect(op, 1000, dtype))
        check(f"allreduce {op} {dtype} b", b, expect(op, 6, dtype, 1).reshape(2, 3))
        hashes.append(hashlib.sha1(a.view(torch.uint8).numpy().tobytes()).hexdigest())
if len(set(map(tuple, comm.allgather(hashes)))) != 1:
    failures.append("allreduce results differ in their bits between ranks")
exchanges = grp.exchanges
if exchanges != 1:
    failures.append(f"handles exchanged {exchanges} times for calls that fit one slot")

# a non-contiguous tensor
m = value(R, 12, torch.float32).reshape(3, 4).t()
grp.allreduce([m], "sum").wait()
check("allreduce non-contiguous", m, expect("sum", 12, torch.float32).reshape(3, 4).t())

# -- several in flight, waited in reverse order; slot reuse while peers still read --------------------------
pendings, ts = [], []
for k in range(4):
    t = value(R, 5000, torch.float32, k)
    ts.append(t)
    pendings.append(grp.allreduce([t], "sum"))
for k in reversed(range(4)):
    pendings[k].wait()
    check(f"in flight #{k}", ts[k], expect("sum", 5000, torch.float32, k))

# -- broadcast and allgather ---------------------------------------------------------------------------------
bs = [value(R, 7, torch.float32, 10), torch.full((3,), R % 2 == 0)]
grp.bcast(bs, root=N - 1).wait()
check("bcast f32", bs[0], value(N - 1, 7, torch.float32, 10))
check("bcast bool", bs[1], torch.full((3,), (N - 1) % 2 == 0))
mine = torch.full((R + 1, 2), float(R))
(got,) = grp.allgather(mine).wait()
check("allgather", got, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(N)]))
if grp.exchanges != exchanges:
    failures.append(f"handles exchanged again ({grp.exchanges}) for calls that fit the slot")

# -- a larger call grows every slot once ----------------------------------------------------------------------
big = value(R, 3 << 20, torch.float32)  # 12 MiB
grp.allreduce([big], "max").wait()
check("allreduce 12 MiB max", big, expect("max", 3 << 20, torch.float32))
grp.allreduce([big], "min").wait()
if grp.exchanges != exchanges + 1:
    failures.append(f"a larger call made {grp.exchanges - exchanges} exchanges, not 1")
opened = len(backend.opened)

grp.close()
backend.close()
report = comm.gather({"rank": R, "failures": failures, "exchanges": exchanges, "opened": opened}, root=0)
if R == 0:
    print("SUMMARY " + json.dumps(report), flush=True)
