"""Every rank makes the same bad calls; each must raise DDLInputError before any communication.

Proof that nothing was communicated: after all bad calls, a real allreduce_n still pairs up
correctly (a half-started collective would desynchronize it or mismatch its signature), and
the watchdog's collective counter did not move.  Rank 0 prints one SUMMARY line.
"""
import json
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

import ddl_runtime as ddl
from ddl_runtime.state import runtime

ddl.init()
R, N = ddl.rank(), ddl.size()
ro = np.ones(4, np.float32)
ro.setflags(write=False)
good = np.ones(3, np.float32)

CASES = {
    "non-contiguous": lambda: ddl.allreduce(np.ones((4, 4), np.float32)[:, ::2], name="w.strided"),
    "read-only": lambda: ddl.allreduce_n([good, ro], names=["ok", "w.readonly"]),
    "unsupported-dtype": lambda: ddl.allreduce_n([np.ones(3, np.uint8)], names=["w.uint8"]),
    "complex-dtype": lambda: ddl.allreduce(np.ones(3, np.complex64), name="w.complex"),
    "duplicate-names": lambda: ddl.allreduce_n([good, good.copy()], names=["w", "w"]),
    "names-length": lambda: ddl.allreduce_n([good], names=["a", "b"]),
    "bad-op": lambda: ddl.allreduce(good, op="prod"),
    "bad-op-n": lambda: ddl.allreduce_n([good], op="max"),
    "avg-int": lambda: ddl.allreduce_n([np.ones(2, np.int32)], op="avg", names=["steps"]),
    "bad-check": lambda: ddl.allreduce_n([good], check=-1.0),
    "bad-mpi": lambda: ddl.allreduce_n([good], mpi="yes"),
    "not-a-list": lambda: ddl.allreduce_n(good),
    "not-a-tensor": lambda: ddl.allreduce_n([[1.0, 2.0]], names=["pylist"]),
    "bad-root": lambda: ddl.bcast(good, root=N),
    "bcast-readonly": lambda: ddl.bcast(ro, root=(R + 1) % N if N > 1 else 1),
    "torch-non-contiguous": lambda: ddl.allreduce(torch.ones(4, 3).t(), name="w.t"),
    "torch-meta-device": lambda: ddl.allreduce_n([torch.ones(3, device="meta")], names=["w.meta"]),
    "torch-bool": lambda: ddl.allreduce(torch.ones(3, dtype=torch.bool), name="mask"),
}
results = {}
seq_before = runtime.current().watchdog.seq
for label, call in CASES.items():
    start = time.perf_counter()
    try:
        call()
        results[label] = {"error": None}
    except ddl.DDLInputError as exc:
        results[label] = {"error": str(exc), "type": type(exc).__name__, "value_error": isinstance(exc, ValueError),
                          "ms": (time.perf_counter() - start) * 1e3}
    except Exception as exc:  # noqa: BLE001 - reported as a wrong error type
        results[label] = {"error": str(exc), "type": type(exc).__name__}
seq_after = runtime.current().watchdog.seq
x = np.full(6, R + 1.0)
ddl.allreduce_n([x], names=["after"])
summary = MPI.COMM_WORLD.gather({"rank": R, "results": results, "collectives_started": seq_after - seq_before,
                                 "after_ok": bool(np.all(x == N * (N + 1) / 2))}, root=0)
if R == 0:
    sys.stdout.write("SUMMARY " + json.dumps(summary) + "\n")
