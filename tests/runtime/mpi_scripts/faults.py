"""Fault scenarios, chosen by argv[1]; rank 1 misbehaves after one good collective.

raise: rank 1 raises.  raise-before-init: rank 1 raises before init (the others wait in it).  exit: rank 1 calls sys.exit(3).  kill: rank 1 os._exit(4).
sigkill: rank 1 is killed by SIGKILL.  sleep S: rank 1 sleeps S seconds before the next
collective.  mismatch: rank 2 passes a longer tensor.  mismatch-op: rank 0 broadcasts
while the others reduce.  Afterwards every rank runs one more allreduce_n and prints "done".
"""
import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

import ddl_runtime as ddl

what = sys.argv[1]
if what == "raise-before-init" and MPI.COMM_WORLD.Get_rank() == 1:
    raise ImportError("a module rank 1 lacks")  # the other ranks are inside init() by now
ddl.init()
r = ddl.rank()
a = np.ones(1000, np.float32)
ddl.allreduce(a, name="warmup")
if r == 1:
    if what == "raise":
        raise ValueError("boom on purpose")
    if what == "exit":
        sys.exit(3)
    if what == "kill":
        os._exit(4)
    if what == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "sleep":
        time.sleep(float(sys.argv[2]))
if what == "mismatch":
    try:
        ddl.allreduce_n([np.ones(3 + (r == 2)), np.ones(2)], names=["layer.w", "layer.b"])
    except ddl.DDLMismatchError as exc:
        sys.stdout.write(f"MISMATCH rank={r}: {exc}\n")
if what == "mismatch-op":
    try:
        if r == 0:
            ddl.bcast(np.ones(3), root=0, name="w")
        else:
            ddl.allreduce(np.ones(3), name="w")
    except ddl.DDLMismatchError as exc:
        sys.stdout.write(f"MISMATCH rank={r}: {exc}\n")
ddl.allreduce_n([a, a.copy()], names=["x", "y"])
sys.stdout.write(f"done rank={r}\n")
