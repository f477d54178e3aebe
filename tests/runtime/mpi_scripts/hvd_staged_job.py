"""horovod.torch's host-staged route on CPU (2+ real MPI ranks, no GPU needed).

CUDA tensors on the host transport pass through the runtime's host staging (ddl_runtime.transports.gpu.host:
a pinned pool and side-stream copies); here mpi_ops._staging hands out a Staging with plain host
memory and immediate copies (host.HostCopies, as gpu_transport_job.py drives it), so CPU tensors
take that very route through the public API: allreduce (sync, async, in place, grouped, scaled),
allgather (first dims differ), broadcast (root and receivers), reducescatter and alltoall.
Async handles are in flight at once and synchronized in reverse order: each holds its own
buffers until its result was copied back; a second round of the same calls makes no new buffer,
and the first round's results do not change (they are not pool memory).  Rank 0 prints one
SUMMARY line.
"""
import json

import torch
from mpi4py import MPI

import ddl_runtime.horovod.torch as hvd
from ddl_runtime.transports.gpu import host
from ddl_runtime.horovod.torch import mpi_ops

hvd.init()
R, N = hvd.rank(), hvd.size()
failures = []
staging = host.Staging(host.PinnedPool(host.cpu_allocator), host.HostCopies())
mpi_ops._staging = lambda tensors: staging  # CPU tensors take the CUDA tensors' host-staged route


def value(rank, n, dtype, shift=0):
    return (torch.arange(n, dtype=torch.float64) % 5 + rank + shift).to(dtype)


def total(n, shift=0):
    return sum(value(r, n, torch.float64, shift) for r in range(N))


def check(label, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(f"{label}: got {got.flatten()[:6].tolist()} {got.dtype} {tuple(got.shape)}, "
                        f"want {want.flatten()[:6].tolist()} {want.dtype} {tuple(want.shape)}")


def one_round(tag):
    """Every staged collective once; returns (results to re-check later, their expected values)."""
    kept = []
    # three async allreduces of one shape and dtype in flight at once, plus a grouped one and an in-place one
    handles = [hvd.allreduce_async(value(R, 8, torch.float32, k), op=hvd.Sum, name=f"{tag}.a{k}") for k in range(3)]
    if tag == "r1" and staging.pool.allocations != 3:
        failures.append(f"3 allreduces in flight share buffers: the pool made {staging.pool.allocations}, not 3")
    group = [value(R, 6, torch.float32), value(R, 4, torch.bfloat16, 1), value(R, 3, torch.int64, 2)]
    hg = hvd.grouped_allreduce_async(group, op=hvd.Sum, name=f"{tag}.g")
    inplace = value(R, 5, torch.float64)
    hi = hvd.allreduce_async_(inplace, op=hvd.Average, name=f"{tag}.i")
    got_i = hvd.synchronize(hi)
    if got_i is not inplace:
        failures.append(f"{tag}: allreduce_async_ returned a new tensor, not its input")
    check(f"{tag} allreduce_async_ average", inplace, total(5) / N)
    for g, t, shift in zip(hvd.synchronize(hg), group, (0, 1, 2)):
        check(f"{tag} grouped {t.dtype}", g, total(t.numel(), shift).to(t.dtype))
        check(f"{tag} grouped input {t.dtype} unchanged", t, value(R, t.numel(), t.dtype, shift))
    for k in reversed(range(3)):
        got = hvd.synchronize(handles[k])
        want = total(8, k).to(torch.float32)
        check(f"{tag} allreduce_async #{k}", got, want)
        kept.append((got, want))
    # sync, scaled, float16 and a 2-d shape
    t = value(R, 6, torch.float16).reshape(2, 3)
    got = hvd.allreduce(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0, name=f"{tag}.s")
    check(f"{tag} allreduce scaled", got, (total(6) * 2).to(torch.float16).reshape(2, 3))
    kept.append((got, got.clone()))
    pair = [value(R, 3, torch.float32), value(R, 2, torch.int32, 1)]
    hvd.grouped_allreduce_(pair, op=hvd.Max, name=f"{tag}.gi")
    check(f"{tag} grouped_allreduce_ max", pair[0], value(N - 1, 3, torch.float32))
    check(f"{tag} grouped_allreduce_ max int", pair[1], value(N - 1, 2, torch.int32, 1))
    # allgather: rank r gives r + 1 rows
    mine = torch.full((R + 1, 2), float(R), dtype=torch.bfloat16)
    got = hvd.allgather(mine, name=f"{tag}.ag")
    want = torch.cat([torch.full((r + 1, 2), float(r), dtype=torch.bfloat16) for r in range(N)])
    check(f"{tag} allgather", got, want)
    kept.append((got, want))
    # broadcast from the last rank: the others receive into pooled memory
    root = N - 1
    b = value(R, 4, torch.float32, 10)
    got = hvd.broadcast(b, root_rank=root, name=f"{tag}.b")
    check(f"{tag} broadcast", got, value(root, 4, torch.float32, 10))
    check(f"{tag} broadcast input unchanged", b, value(R, 4, torch.float32, 10))
    kept.append((got, got.clone()))
    hvd.broadcast_(b, root_rank=root, name=f"{tag}.b_")
    check(f"{tag} broadcast_", b, value(root, 4, torch.float32, 10))
    # reducescatter of 2N + 1 rows: the first rank gets one more
    rows = 2 * N + 1
    x = value(R, rows * 2, torch.float32).reshape(rows, 2)
    got = hvd.reducescatter(x, op=hvd.Sum, name=f"{tag}.rs")
    start = sum(2 + (1 if r == 0 else 0) for r in range(R))
    mine_rows = 2 + (1 if R == 0 else 0)
    check(f"{tag} reducescatter", got, total(rows * 2).to(torch.float32).reshape(rows, 2)[start:start + mine_rows])
    # alltoall: rank r sends k + 1 rows to rank k
    splits = torch.tensor([k + 1 for k in range(N)], dtype=torch.int32)
    send = torch.cat([torch.full((k + 1, 3), float(R * 10 + k)) for k in range(N)])
    got, received = hvd.alltoall(send, splits=splits, name=f"{tag}.aa")
    check(f"{tag} alltoall", got, torch.cat([torch.full((R + 1, 3), float(r * 10 + R)) for r in range(N)]))
    check(f"{tag} alltoall received", received, torch.full((N,), R + 1, dtype=torch.int32))
    return kept


first = one_round("r1")
made = staging.pool.allocations
second = one_round("r2")
if staging.pool.allocations != made:
    failures.append(f"the pool made {staging.pool.allocations - made} more buffers for a second round of the same calls")
for i, (got, want) in enumerate(first):
    check(f"round 1 result #{i} after round 2", got, want)
if made == 0:
    failures.append("nothing went through the host staging")

report = MPI.COMM_WORLD.gather({"rank": R, "failures": failures, "allocations": made}, root=0)
if R == 0:
    print("SUMMARY " + json.dumps(report), flush=True)
hvd.shutdown()
