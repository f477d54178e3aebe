"""A tensor one rank never submits: the waiting rank names it and the missing rank, then gives up."""
import sys
import time

import torch

import ddl_runtime.horovod.torch as hvd
from ddl_runtime.errors import DDLError

hvd.init()
R = hvd.rank()
ok = True
if R == 0:
    t0 = time.monotonic()
    try:
        hvd.allreduce(torch.ones(2), name="lonely")
        print("FAIL stall: the allreduce returned", flush=True)
        ok = False
    except DDLError as exc:
        print(f"OK stall {time.monotonic() - t0:.1f}s: {exc}", flush=True)
    out = hvd.allreduce(torch.ones(2), name="other", op=hvd.Sum)
else:
    h = hvd.allreduce_async(torch.ones(2), name="other", op=hvd.Sum)
    while not hvd.poll(h):  # keeps negotiating, never waits: no stall of its own
        time.sleep(0.01)
    out = hvd.synchronize(h)
print("OK other" if torch.equal(out, torch.full((2,), 2.0)) else f"FAIL other: {out}", flush=True)
print("DONE", flush=True)
sys.exit(0 if ok else 1)
