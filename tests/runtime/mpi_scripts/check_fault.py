"""allreduce_n(check=tol) with a fault injected into the non-baseline result on rank 0 only.

The comparison must catch it and every rank must raise the same DDLError naming the tensor
(the verdict is agreed across ranks), then carry on in step.  Rank 0 prints one SUMMARY line.
"""
import json
import sys

import numpy as np
from mpi4py import MPI

import ddl_runtime as ddl
from ddl_runtime.collectives import ops

ddl.init()
R = ddl.rank()
real_reduce = ops._reduce
calls = []


def faulty_reduce(rt, refs, op, hierarchical, results=None, **kwargs):
    handle = real_reduce(rt, refs, op, hierarchical, results, **kwargs)
    calls.append(hierarchical)
    if len(calls) == 2 and R == 0:  # the second run is the one checked against the baseline
        handle.wait()
        refs[1].flat[3] += 0.5
    return handle


ops._reduce = faulty_reduce
tensors = [np.ones(10, np.float32), np.ones(100, np.float32), np.ones(7, np.float64)]
outcome = {"rank": R}
try:
    ddl.allreduce_n(tensors, op="sum", check=1e-3, names=["w.ok", "w.bad", "w.ok2"])
    outcome["error"] = None
except ddl.DDLError as exc:
    outcome["error"] = str(exc)
ops._reduce = real_reduce
x = np.ones(3)
ddl.allreduce_n([x], check=1e-6, names=["after"])  # still in step, and a clean check passes
outcome["after_ok"] = bool((x == ddl.size()).all())
outcome["calls"] = calls
summary = MPI.COMM_WORLD.gather(outcome, root=0)
if R == 0:
    sys.stdout.write("SUMMARY " + json.dumps(summary) + "\n")
