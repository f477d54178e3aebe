"""2 ranks, each its own data, DistributedOptimizer (ddl_runtime.torch's or horovod.torch's) with
LMS on (host copies standing in for the device; swapping and recomputing) and off: prints
``RESULT <case> ok`` or ``RESULT <case> FAIL why`` per rank."""
import sys

import torch
from mpi4py import MPI

sys.path.insert(0, __file__.rsplit("/workers/", 1)[0])
from lms_helpers import MB, batches, make_model  # noqa: E402

import ddl_runtime.lms as lms  # noqa: E402
from ddl_runtime.lms.transfer import HostStandIn  # noqa: E402

flavour = sys.argv[1]
if flavour == "horovod":
    import ddl_runtime.horovod.torch as hvd
    hvd.init()
    wrap, rank = hvd.DistributedOptimizer, hvd.rank()
else:
    import ddl_runtime as ddl
    import ddl_runtime.torch as dt
    ddl.init()
    wrap, rank = dt.DistributedOptimizer, ddl.rank()


def run(budget=None, bandwidth=1e12):
    model = make_model()
    opt = wrap(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), named_parameters=model.named_parameters())
    session = None
    if budget:
        session = lms.enable(model, budget=budget, size=1024, transfer=HostStandIn(bandwidth_Bps=bandwidth),
                             prefetch_bytes=MB)
    torch.manual_seed(1 + rank)
    for x, y in batches(4, seed=10 + rank):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()], session


def report(case, ok, why=""):
    print(f"RESULT {case} {'ok' if ok else 'FAIL ' + why}", flush=True)


plain, _ = run()
for case, bandwidth in (("swap", 1e12), ("recompute", 1e3)):
    params, session = run(4 * MB, bandwidth)
    moved = session.stats().swapped_bytes if case == "swap" else session.stats().recomputed_bytes
    gathered = MPI.COMM_WORLD.allgather([p.numpy() for p in params])
    same_ranks = all((a == b).all() for a, b in zip(gathered[0], gathered[1]))
    same_plain = all(torch.equal(a, b) for a, b in zip(params, plain))
    report(case, moved > 0 and same_ranks and same_plain, f"moved={moved} ranks_equal={same_ranks} "
                                                          f"equal_to_no_lms={same_plain}")
