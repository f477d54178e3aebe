"""A short job with DDL_TIMELINE set: allreduce_n (packed + in place), bcast, allgather, barrier.

With argv[1] == "crash", rank 1 raises after the collectives (the timeline is left unclosed).
"""
import sys

import numpy as np

import ddl_runtime as ddl

ddl.init()
r = ddl.rank()
tensors = [np.full(n, r, np.float32) for n in (10, 1000, 300_000)]  # DDL_FUSION_MB=1: one packed bucket, one in place
for _ in range(2):
    ddl.allreduce_n(tensors, op="avg", names=["a", "b", "c"])
ddl.bcast(np.zeros(100), root=0, name="w0")
ddl.allgather(np.ones((2, 3)), name="stats")
ddl.barrier()
if len(sys.argv) > 1 and sys.argv[1] == "crash" and r == 1:
    raise RuntimeError("crash after the collectives")
ddl.finalize()
