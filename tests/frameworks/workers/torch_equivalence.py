"""Run under mpiexec -n 2: gradient averaging must equal one process with the global batch.

Every rank trains the digits CNN with DistributedOptimizer on its own half of each global
batch; rank 0 also trains a plain (single-process) copy on the whole global batch.  Written
to --out (by rank 0): the parameters of every variant, and each rank's own copy.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
import train_digits  # noqa: E402

import ddl_runtime  # noqa: E402
import ddl_runtime.torch as ddl  # noqa: E402


def params_vector(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=16, help="per-rank batch b")
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ddl.init()
    rank, size = ddl.rank(), ddl.size()
    x, y, _, _ = train_digits.load_data()
    b, B = args.batch, args.batch * size

    def make(seed_offset):
        torch.manual_seed(1234 + seed_offset)
        return train_digits.DigitsNet()

    def sgd(model, lr=0.05):
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)

    # Variant A: default buckets, one backward per step.  Different seeds per rank on purpose.
    model_a = make(rank)
    opt_a = ddl.DistributedOptimizer(sgd(model_a), named_parameters=model_a.named_parameters())
    ddl.broadcast_parameters(model_a.state_dict(), root_rank=0)
    ddl.broadcast_optimizer_state(opt_a, root_rank=0)
    # Variant B: tiny buckets (several reductions in flight during backward) and gradient
    # accumulation over two half-batches.
    model_b = make(rank + 100)
    opt_b = ddl.DistributedOptimizer(sgd(model_b), named_parameters=model_b.named_parameters(),
                                     backward_passes_per_step=2, bucket_mb=0.004)
    with torch.no_grad():  # B starts where A starts
        for pb, pa in zip(model_b.parameters(), model_a.parameters()):
            pb.copy_(pa)
    nb = len(opt_b._ddl_buckets)
    # Variant C, the negative control: op="sum" must NOT match the reference.
    model_c = make(rank + 200)
    opt_c = ddl.DistributedOptimizer(sgd(model_c), named_parameters=model_c.named_parameters(), op="sum")
    with torch.no_grad():
        for pc, pa in zip(model_c.parameters(), model_a.parameters()):
            pc.copy_(pa)

    # Variant D: gradients in shared memory (gradient_as_bucket_view), several buckets; steps
    # alternate zero_grad() (fresh gradients copied in) and zero_grad(set_to_none=False) (kept in
    # place); must match the reference like A.
    model_d = make(rank + 300)
    opt_d = ddl.DistributedOptimizer(sgd(model_d), named_parameters=model_d.named_parameters(),
                                     bucket_mb=0.05, gradient_as_bucket_view=True)
    with torch.no_grad():
        for pd, pa in zip(model_d.parameters(), model_a.parameters()):
            pd.copy_(pa)
    # Variant E: A with flat buckets off (DDL_FLAT_BUCKETS=0: a tensor at a time, the path every
    # large or GPU bucket takes); A reduces its small CPU bucket as one flat tensor.  Same sums
    # and divides per element: E must match A bit for bit.
    os.environ["DDL_FLAT_BUCKETS"] = "0"
    model_e = make(rank + 400)
    opt_e = ddl.DistributedOptimizer(sgd(model_e), named_parameters=model_e.named_parameters())
    del os.environ["DDL_FLAT_BUCKETS"]
    with torch.no_grad():
        for pe, pa in zip(model_e.parameters(), model_a.parameters()):
            pe.copy_(pa)
    flat_a = all(bk.flat is not None for bk in opt_a._ddl_buckets + opt_b._ddl_buckets)
    flat_e = any(bk.flat is not None for bk in opt_e._ddl_buckets + opt_d._ddl_buckets)
    from ddl_runtime.state import runtime as _rt
    heap = _rt.current().shm.heap if _rt.current().shm is not None else None
    in_heap, grad_ptrs = [], set()

    # Reference: one process, global batch B (rank 0 only, no communication).
    ref = make(0)
    ref_opt = sgd(ref)
    with torch.no_grad():
        for pr, pa in zip(ref.parameters(), model_a.parameters()):
            pr.copy_(pa)

    for step in range(args.steps):
        lo = step * B
        mine = slice(lo + rank * b, lo + (rank + 1) * b)
        xb, yb = x[mine], y[mine]

        opt_a.zero_grad()
        F.cross_entropy(model_a(xb), yb).backward()
        opt_a.step()

        opt_b.zero_grad()
        half = b // 2
        for part in (slice(0, half), slice(half, b)):
            (F.cross_entropy(model_b(xb[part]), yb[part]) * 0.5).backward()
        opt_b.step()

        opt_c.zero_grad()
        F.cross_entropy(model_c(xb), yb).backward()
        opt_c.step()

        opt_e.zero_grad()
        F.cross_entropy(model_e(xb), yb).backward()
        opt_e.step()

        opt_d.zero_grad(set_to_none=step % 2 == 1)
        F.cross_entropy(model_d(xb), yb).backward()
        opt_d.step()
        in_heap.append(heap is not None and all(heap.locate(p.grad.numpy().reshape(-1)) is not None
                                                for p in model_d.parameters()))
        grad_ptrs.add(tuple(p.grad.data_ptr() for p in model_d.parameters()))

        if rank == 0:
            ref_opt.zero_grad()
            F.cross_entropy(ref(x[lo:lo + B]), y[lo:lo + B]).backward()
            ref_opt.step()

    own_a = np.asarray(ddl_runtime.allgather(params_vector(model_a)[None, :]))
    own_b = np.asarray(ddl_runtime.allgather(params_vector(model_b)[None, :]))
    own_c = np.asarray(ddl_runtime.allgather(params_vector(model_c)[None, :]))
    own_d = np.asarray(ddl_runtime.allgather(params_vector(model_d)[None, :]))
    own_e = np.asarray(ddl_runtime.allgather(params_vector(model_e)[None, :]))
    if rank == 0:
        np.savez(args.out, a=own_a, b=own_b, c=own_c, d=own_d, e=own_e, flat_a=flat_a, flat_e=flat_e, d_in_heap=np.array(in_heap),
                 d_same_grads=len(grad_ptrs) == 1, d_buckets=len(opt_d._ddl_buckets), ref=params_vector(ref), buckets_b=nb, size=size,
                 start=params_vector(make(0)))
    print(f"rank {rank}: done, {nb} buckets in variant B", flush=True)


if __name__ == "__main__":
    main()
