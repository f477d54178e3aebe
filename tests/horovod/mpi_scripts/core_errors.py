"""Errors Horovod reports, raised on every rank with one line naming the tensor and the ranks (2+ ranks)."""
import time

import torch

import ddl_runtime.horovod.torch as hvd
from ddl_runtime.errors import DDLMismatchError

from checks import done, report


def expect(name, exc_types, fn, *needles):
    t0 = time.monotonic()
    try:
        fn()
    except exc_types as exc:
        text = str(exc)
        missing = [n for n in needles if n not in text]
        one_line = "\n" not in text
        fast = time.monotonic() - t0 < 30
        report(name, not missing and one_line and fast,
               f"message {text!r} lacks {missing}" if missing else f"multi-line or slow: {text!r}")
        return
    except Exception as exc:  # noqa: BLE001
        report(name, False, f"raised {type(exc).__name__}: {exc}")
        return
    report(name, False, "did not raise")


expect("rank_before_init", ValueError, hvd.rank, "hvd.init()")
hvd.init()
R, N = hvd.rank(), hvd.size()

expect("shape_mismatch", DDLMismatchError, lambda: hvd.allreduce(torch.ones(3 + R), name="w"),
       "allreduce 'w'", "shape", "rank 0: [3]", "rank 1: [4]")
expect("dtype_mismatch", RuntimeError,
       lambda: hvd.allreduce(torch.ones(3, dtype=torch.float32 if R else torch.float64), name="d"),
       "'d'", "dtype", "rank 0: float64", "rank 1: float32")
expect("op_mismatch", RuntimeError, lambda: hvd.allreduce(torch.ones(3), name="o", op=hvd.Sum if R else hvd.Max),
       "'o'", "op", "rank 0: max", "rank 1: sum")
expect("root_mismatch", RuntimeError, lambda: hvd.broadcast(torch.ones(2), root_rank=min(R, 1), name="r"),
       "broadcast 'r'", "root", "rank 0: root 0", "rank 1: root 1")
expect("allgather_mismatch", RuntimeError, lambda: hvd.allgather(torch.ones(2, 3 + R), name="g"),
       "allgather 'g'", "first dimension", "rank 0: [2, 3]")
expect("grouped_count_mismatch", RuntimeError,
       lambda: hvd.grouped_allreduce([torch.ones(2)] * (1 + (R == 1)), name="grp"), "'grp'", "numbers of tensors")
expect("splits_count", ValueError, lambda: hvd.alltoall(torch.ones(4), torch.tensor([4] * (N + 1), dtype=torch.int32)),
       f"{N + 1} splits for {N} ranks")
expect("splits_sum", ValueError, lambda: hvd.alltoall(torch.ones(4), torch.tensor([5] + [0] * (N - 1), dtype=torch.int32)),
       "add up to 5", "first dimension is 4")
expect("splits_dtype", ValueError, lambda: hvd.alltoall(torch.ones(4), torch.ones(N)), "torch.int32")
expect("equal_split", ValueError, lambda: hvd.alltoall(torch.ones(N + 1)), "not a multiple")
expect("adasum", ValueError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum),
       "op=Adasum supports float16, float32 and float64")
expect("reducescatter_scalar", ValueError, lambda: hvd.reducescatter(torch.tensor(1.0)), "scalar")
expect("root_out_of_range", ValueError, lambda: hvd.broadcast(torch.ones(1), root_rank=N), f"root_rank {N}")
expect("not_a_tensor", ValueError, lambda: hvd.allreduce([1, 2]), "torch.Tensor")


def duplicate():
    h = hvd.allreduce_async(torch.ones(2), name="dup")
    expect("duplicate_name", ValueError, lambda: hvd.allreduce_async(torch.ones(2), name="dup"),
           "allreduce 'dup'", "in flight")
    return h


# Ranks submit in different orders around a barrier, as Horovod's own test does.
handle = duplicate() if R == 0 else None
hvd.barrier()
if R != 0:
    handle = duplicate()
out = hvd.synchronize(handle)
report("duplicate_then_completes", torch.equal(out, torch.ones(2)), str(out))

odd = hvd.add_process_set([r for r in range(N) if r % 2])
if R % 2 == 0:
    expect("not_in_process_set", ValueError, lambda: hvd.allreduce(torch.ones(1), process_set=odd),
           f"rank {R} is not in process set")
hvd.remove_process_set(odd)
report("usable_after_errors", torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N))))
done()
