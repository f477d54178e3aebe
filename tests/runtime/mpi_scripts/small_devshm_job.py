"""A one-host job whose /dev/shm is too small for its big buffers (run under a small tmpfs):
every path that would grow shared memory falls back, with the right values, instead of dying of
SIGBUS.  Horovod's negotiated allreduce falls back to MPI too: right values, and a large tensor is
reduced where it lies (an in-place call allocates nothing of its size).  Prints one SUMMARY line
(rank 0) with every rank's findings."""
import json
import os
import tracemalloc

import numpy as np
from mpi4py import MPI

import ddl_runtime
from ddl_runtime.state import runtime as _rt
from ddl_runtime.transports.shm import group as shm_module

ddl_runtime.init()
rt = _rt.current()
r, n = ddl_runtime.rank(), ddl_runtime.size()
failures = []
BIG = 8 << 20  # float32 elements: 32 MB per rank, more than the test's /dev/shm holds for 2 ranks


def expect(what, got, want):
    if not np.array_equal(got, want):
        failures.append(f"{what}: got {got[:3]} ... want {want[:3]} ...")


# the arena cannot grow: the MPI path reduces
x = np.full(BIG, r + 1, np.float32)
ddl_runtime.allreduce_n([x], op="sum")
expect("arena fallback", x, np.full(BIG, n * (n + 1) / 2, np.float32))
arena_after_big = rt.shm.capacity

# one tensor through allreduce: reduced when the call returns (it returned before the MPI path ran)
x1 = np.full(BIG, r + 1, np.float32)
ddl_runtime.allreduce(x1, name="big.single")
expect("allreduce fallback, on return", x1, np.full(BIG, n * (n + 1) / 2, np.float32))

# shared_zeros: ordinary memory, reduced right
g = ddl_runtime.shared_zeros(BIG, np.float32)
g[:] = r + 1
in_heap = rt.shm.heap.locate(g) is not None
ddl_runtime.allreduce_n([g], op="avg")
expect("shared_zeros fallback", g, np.full(BIG, (n + 1) / 2, np.float32))

# out-of-place results: private memory
src = np.full(BIG, r + 1.0, np.float32)
flat, outs = ddl_runtime.allreduce_n_fresh([src], op="sum")
expect("results fallback", outs[0], np.full(BIG, n * (n + 1) / 2, np.float32))
expect("results source untouched", src, np.full(BIG, r + 1.0, np.float32))
results_in_heap = rt.shm.heap.locate(outs[0].reshape(-1)) is not None

# what fits still goes through shared memory: a 2 MB arena, a small heap array
y = np.full(1 << 19, r + 1, np.float32)
ddl_runtime.allreduce_n([y], op="sum")
expect("small arena", y, np.full(1 << 19, n * (n + 1) / 2, np.float32))
# no room to double the arena, room for what the call needs: the arena grows to just that
st = os.statvfs(shm_module.SHM_DIR)
free = MPI.COMM_WORLD.allreduce(st.f_bavail * st.f_frsize, op=MPI.MIN)
cur = rt.shm.capacity
spare = (free - shm_module.SHM_HEADROOM) // n  # per rank, beyond the current arena
grow_to = (cur + spare - (512 << 10)) // 4 * 4  # fits exactly; doubling it later will not
z = np.full(grow_to // 4, r + 1, np.float32)
ddl_runtime.allreduce_n([z], op="sum")
expect("arena grown to fit", z, np.full(grow_to // 4, n * (n + 1) / 2, np.float32))
before_exact = rt.shm.capacity
w = np.full((before_exact + (256 << 10)) // 4, r + 1, np.float32)
ddl_runtime.allreduce_n([w], op="sum")
expect("arena grown exactly", w, np.full(w.size, n * (n + 1) / 2, np.float32))
exact_growth = (before_exact, rt.shm.capacity, w.nbytes)

h = ddl_runtime.shared_zeros(1024, np.float32)
h[:] = r
ddl_runtime.allreduce_n([h], op="sum")
expect("small heap array", h, np.full(1024, n * (n - 1) / 2, np.float32))

# horovod.torch's negotiated allreduce: no room for its shared memory either, so MPI within the flight
import torch  # noqa: E402
import ddl_runtime.horovod.torch as hvd  # noqa: E402

hvd.init()
t = torch.full((BIG,), float(r + 1))
got = hvd.allreduce(t, op=hvd.Average, name="hvd.big")
expect("hvd.allreduce average fallback", got.numpy(), np.full(BIG, (n + 1) / 2, np.float32))
expect("hvd.allreduce input untouched", t.numpy(), np.full(BIG, r + 1, np.float32))
group = [torch.full((BIG // 2,), float(r + 1)), torch.arange(1000, dtype=torch.float16) % 7 + r,
         torch.full((300_000,), r + 1, dtype=torch.int64), torch.full((5,), float(r))]
outs = hvd.grouped_allreduce(group, op=hvd.Sum, name="hvd.group")
expect("hvd grouped big float32", outs[0].numpy(), np.full(BIG // 2, n * (n + 1) / 2, np.float32))
expect("hvd grouped float16", outs[1].numpy(), ((np.arange(1000) % 7) * n + n * (n - 1) / 2).astype(np.float16))
expect("hvd grouped int64", outs[2].numpy(), np.full(300_000, n * (n + 1) // 2, np.int64))
expect("hvd grouped small", outs[3].numpy(), np.full(5, n * (n - 1) / 2, np.float32))
inplace = torch.full((BIG,), float(r + 1))
hvd.allreduce_(inplace, op=hvd.Sum, name="hvd.inplace")  # warm: plans, pools
inplace.fill_(float(r + 1))
tracemalloc.start()
hvd.allreduce_(inplace, op=hvd.Sum, name="hvd.inplace")
hvd_inplace_peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
expect("hvd.allreduce_ in place", inplace.numpy(), np.full(BIG, n * (n + 1) / 2, np.float32))

mine = {"rank": r, "failures": failures, "hvd_inplace_peak": hvd_inplace_peak, "arena_after_big": arena_after_big, "arena_now": rt.shm.capacity,
        "big_shared_zeros_in_heap": in_heap, "results_in_heap": results_in_heap,
        "small_shared_zeros_in_heap": rt.shm.heap.locate(h) is not None, "exact_growth": exact_growth}
everyone = MPI.COMM_WORLD.allgather(mine)
if r == 0:
    print("SUMMARY " + json.dumps(everyone), flush=True)
ddl_runtime.finalize()
