"""The global set's negotiated allreduces on shared memory of their own (ddl_runtime/collectives/negotiated.py).

1. Native collectives and negotiated ones reached in different orders on different ranks (each
   rank rotates the order): native allreduce_n (shared-memory barriers), native bcast_n (an MPI
   wait), hvd.allreduce / grouped_allreduce, small (one barrier), large (result regions, arena).
   A rank waiting in a native op must run the negotiated op its peers wait in, or the job hangs.
2. The same negotiated requests through shared memory and through the MPI path (the controller's
   shared memory switched off on every rank at the same point) give the same bits: ops, scale
   factors, float16, integer averages, fresh and in-place outputs, a grouped mix of dtypes.
   Values are integers (exact in any summation order), with random floats too on two ranks.
Under DDL_EMULATE_NODES=2 there is no shared memory: both halves run on MPI (argument "mpi").
"""
import sys

import numpy as np
import torch

import ddl_runtime as ddl
import ddl_runtime.horovod.torch as hvd
from ddl_runtime.horovod.common.process_sets import controller_for

from checks import done, report


hvd.init()
R, N = hvd.rank(), hvd.size()
ctl = controller_for(hvd.global_process_set, "test")
expect_shm = sys.argv[1:] != ["mpi"]
report("stream_present", (ctl.shm is not None) == expect_shm, f"shm stream {ctl.shm!r}")

# -- 1. interleaving ------------------------------------------------------------------------------
SIZES = {"small": 256, "large": 1 << 20}
ORDERS = [("hvd", "grouped", "native", "bcast"), ("native", "hvd", "bcast", "grouped"),
          ("native", "bcast", "grouped", "hvd"), ("grouped", "native", "bcast", "hvd")]
for step in range(6):
    for label, n in SIZES.items():
        native = np.full(n, float(R + 1), dtype=np.float32)
        root = np.full(8, float(R), dtype=np.float64)
        mine = torch.full((n,), float(R + step), dtype=torch.float32)
        pair = [torch.full((n // 2,), float(R), dtype=torch.float16), torch.full((3,), R + 1, dtype=torch.int64)]
        actions = {
            "native": lambda: ddl.allreduce_n([native], op="sum", names=[f"native.{label}"]),
            "bcast": lambda: ddl.bcast_n([root], root=0, names=[f"bcast.{label}"]),
            "hvd": lambda: hvd.allreduce_async_(mine, op=hvd.Sum, name=f"mine.{label}.{step}"),
            "grouped": lambda: hvd.grouped_allreduce_async_(pair, op=hvd.Sum, name=f"pair.{label}.{step}"),
        }
        order = ORDERS[(R + step) % len(ORDERS)]  # native ones in program order, the negotiated ones anywhere
        handles = [actions[a]() for a in order]
        for a, h in zip(order, handles):
            if a in ("hvd", "grouped"):
                hvd.synchronize(h)
        total = N * (N + 1) / 2
        ok = (np.all(native == total) and np.all(root == 0.0)
              and torch.all(mine == N * (N - 1) / 2 + N * step).item()
              and torch.all(pair[0] == N * (N - 1) / 2).item() and torch.all(pair[1] == total).item())
        report(f"interleaved.{label}.{step}", ok, f"order {order}: native {native[:2]}, root {root[:2]}, "
               f"hvd {mine[:2]}, grouped {pair[0][:2]} {pair[1][:2]}")

# A rank that submits asynchronously and then blocks in a native call while its peers wait synchronously.
x = torch.ones(300_000)
if R == 0:
    h = hvd.allreduce_async_(x, op=hvd.Sum, name="async_then_native")
    ddl.allreduce_n([np.ones(4, np.float32)], names=["after"])
    hvd.synchronize(h)
else:
    hvd.allreduce_(x, op=hvd.Sum, name="async_then_native")
    ddl.allreduce_n([np.ones(4, np.float32)], names=["after"])
report("async_then_native", torch.all(x == N).item(), str(x[:3]))


# -- 2. bit-equality with the MPI path --------------------------------------------------------------
def inputs(seed_base, exact):
    g = np.random.default_rng(1000 + R + seed_base)
    cases = []
    for dtype in (np.float32, np.float64, np.float16):
        for n in (5, 300, 70_000, 300_000):
            v = g.integers(-8, 9, n) if exact else g.standard_normal(n)
            cases.append(v.astype(dtype))
    for dtype in (np.int32, np.int64):
        cases.append(g.integers(-1000, 1000, 1000).astype(dtype))
    return cases


RUNS = [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Min, 1.0, 1.0), (hvd.Max, 1.0, 1.0),
        (hvd.Average, 0.5, 3.0), (hvd.Sum, 0.25, 1.0)]


def run_all(tag, exact):
    out = []
    for c, arr in enumerate(inputs(0, exact)):
        for j, (op, pre, post) in enumerate(RUNS):
            t = torch.from_numpy(arr.copy())
            if j % 2:  # in place
                hvd.allreduce_(t, op=op, prescale_factor=pre, postscale_factor=post, name=f"{tag}.{c}.{j}")
                out.append(t)
            else:  # fresh output
                out.append(hvd.allreduce(t, op=op, prescale_factor=pre, postscale_factor=post,
                                         name=f"{tag}.{c}.{j}"))
    group = [torch.from_numpy(a.copy()) for a in inputs(7, exact)]
    out.extend(hvd.grouped_allreduce(group, op=hvd.Average, name=f"{tag}.grouped"))
    return out


for exact in ([True, False] if N == 2 else [True]):
    fast = run_all(f"fast.{exact}", exact)
    hvd.barrier()
    saved, ctl.shm = ctl.shm, None  # every rank here, nothing in flight: the MPI rounds and kernels
    slow = run_all(f"slow.{exact}", exact)
    hvd.barrier()
    ctl.shm = saved
    bad = [i for i, (a, b) in enumerate(zip(fast, slow))
           if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a.numpy().view(np.uint8),
                                                                            b.numpy().view(np.uint8))]
    report(f"bits_equal_mpi.{'exact' if exact else 'random'}", not bad and len(fast) == len(slow),
           f"{len(bad)} of {len(fast)} differ, first {bad[:3]}")

# The job goes on: native and negotiated calls after the switch back.
y = torch.full((1000,), 1.0)
hvd.allreduce_(y, op=hvd.Sum, name="after_switch")
report("after_switch", torch.all(y == N).item(), str(y[:3]))
hvd.shutdown()
done()
