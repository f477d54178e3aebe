"""Horovod 0.28's static process sets and unknown process set ids on horovod.torch (2 ranks).

hvd.init(process_sets=[...]) with a set listed twice, or the global set listed, is a ValueError
on every rank (test_process_sets_static); a collective on a ProcessSet whose id was never
registered is a ValueError, as is one on a rank outside a registered set (torch's Horovod raises
ValueError for both); horovod.keras (torch backend) refuses such a set in DistributedOptimizer.
"""
import os

import torch

import ddl_runtime.horovod.torch as hvd
from mpi4py import MPI

from checks import done, report

size, me = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()


def rest():
    """Ranks 1..size-1; rank 1 lists them in another order (a permutation names the same set)."""
    return hvd.ProcessSet(range(1, size) if me == 0 else reversed(range(1, size)))


def value_error(call, text):
    """'' when call() raises a one-line ValueError with `text`, else why not."""
    try:
        call()
    except ValueError as exc:
        return "" if text in str(exc) and "\n" not in str(exc) else f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - reported
        return f"{type(exc).__name__}: {exc}"
    return "no error"


listed = [hvd.ProcessSet([0]), rest(), hvd.ProcessSet(range(size - 1, -1, -1)), hvd.ProcessSet([0])]
for label, sets in (("both", listed), ("global", listed[:3]), ("repeat", listed[:2] + listed[3:])):
    why = value_error(lambda: hvd.init(process_sets=sets), "is a duplicate of")
    report(f"duplicates_refused_{label}", not why and all(ps.process_set_id is None for ps in sets),
           why or str([str(ps) for ps in sets]))

first, second = hvd.ProcessSet([0]), rest()
hvd.init(process_sets=[first, second])
report("reinit_ids", (first.process_set_id, second.process_set_id) == (1, 2) and second.ranks == list(range(1, size)),
       f"{first} {second}")
report("global_set", hvd.global_process_set.process_set_id == 0 and hvd.global_process_set.ranks == list(range(size)),
       str(hvd.global_process_set))
mine, other = (first, second) if me == 0 else (second, first)
out = hvd.allreduce(torch.full((2,), float(me + 1)), op=hvd.Sum, process_set=mine, name="static.sum")
report("collective_in_set", torch.equal(out, torch.full((2,), float(me + 1))), str(out))

fake, fake_all = hvd.ProcessSet([0]), hvd.ProcessSet(range(size))
fake.process_set_id = fake_all.process_set_id = 10  # Horovod's test: "you should not do this"
t = torch.ones(4)
calls = {"allreduce": lambda ps: hvd.allreduce(t, process_set=ps),
         "allreduce_": lambda ps: hvd.allreduce_(t.clone(), process_set=ps),
         "grouped_allreduce": lambda ps: hvd.grouped_allreduce([t], process_set=ps),
         "allgather": lambda ps: hvd.allgather(t, process_set=ps),
         "broadcast": lambda ps: hvd.broadcast(t, 0, process_set=ps),
         "alltoall": lambda ps: hvd.alltoall(t, process_set=ps),
         "reducescatter": lambda ps: hvd.reducescatter(t, process_set=ps),
         "barrier": lambda ps: hvd.barrier(process_set=ps)}
for what, call in calls.items():
    why = value_error(lambda: call(fake), "process set 10 does not exist")
    report(f"unknown_id_{what}", not why, why)
model = torch.nn.Linear(2, 1)
why = value_error(lambda: hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                                   named_parameters=model.named_parameters(), process_set=fake),
                  "process set 10 does not exist")
report("optimizer_unknown_id", not why, why)  # on rank 1 too, which is not in the set's ranks
report("unknown_id_size", not value_error(fake.size, "process set 10 does not exist"), value_error(fake.size, ""))
why = value_error(lambda: hvd.allreduce(t, process_set=other), "is not in process set")
report("non_member_value_error", not why, why)

os.environ["KERAS_BACKEND"] = "torch"
import keras  # noqa: E402
import ddl_runtime.horovod.keras as hvd_keras  # noqa: E402

why = value_error(lambda: hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1), process_set=fake_all),
                  "process set 10 does not exist")
report("keras_unknown_id", not why, why)

stale = hvd.ProcessSet([0])
stale.process_set_id = first.process_set_id
report("remove", hvd.remove_process_set(first))
why = value_error(lambda: hvd.allreduce(t, process_set=first), "is not registered")
report("removed_set", not why, why)
why = value_error(lambda: hvd.allreduce(t, process_set=stale), "process set 1 does not exist")
report("removed_id", not why, why)
MPI.COMM_WORLD.Barrier()
hvd.shutdown()
done()
