"""Run on 2 ranks under `ddlrun --horovod`: hvd.init(process_sets=[...]) with a set listed twice, a
permutation of a set, and a set of every rank, as Horovod's test_process_sets_static does.

Prints `OK <check>` per passed check; any failure raises (and the job ends non-zero).
"""
import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd

from mpi4py import MPI

size = MPI.COMM_WORLD.Get_size()
me = MPI.COMM_WORLD.Get_rank()
first, second = hvd.ProcessSet([0]), hvd.ProcessSet(range(1, size) if me == 0 else reversed(range(1, size)))
everyone, again = hvd.ProcessSet(range(size - 1, -1, -1)), hvd.ProcessSet([0])
hvd.init(process_sets=[first, second, everyone, again])
r = hvd.rank()


def ok(what):
    print(f"OK {what}", flush=True)


assert (first.process_set_id, second.process_set_id) == (1, 2), (first, second)
assert everyone.process_set_id == 0 and everyone.ranks == list(range(size)), everyone  # the global set
assert again.process_set_id == first.process_set_id and again.ranks == [0], again      # the same set as `first`
assert second.ranks == list(range(1, size)), second
assert (first.included(), second.included(), again.included()) == (r == 0, r != 0, r == 0)
ok("static process sets: repeats and permutations name the same set")

mine = again if r == 0 else second
total = hvd.allreduce(tf.constant([float(r + 1)]), op=hvd.Sum, process_set=mine, name="static.sum")
np.testing.assert_allclose(total.numpy(), [float(r + 1)])
both = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, process_set=everyone, name="static.all")
np.testing.assert_allclose(both.numpy(), [float(size)])
ok("collectives on a repeated set and on the set of every rank")

try:
    hvd.add_process_set([0])
except ValueError as exc:
    assert "exists already" in str(exc) and "\n" not in str(exc), exc
else:
    raise AssertionError("add_process_set of an existing set: no error")
assert hvd.remove_process_set(again)
assert again.process_set_id is None and first.process_set_id is None, (first, again)  # every object naming it
assert not hvd.remove_process_set(first)
ok("add_process_set of an existing set is refused; removing a repeated set unregisters every object naming it")
hvd.shutdown()
