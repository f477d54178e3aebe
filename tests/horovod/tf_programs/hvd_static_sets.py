"""Run on 2 ranks under `ddlrun --horovod`: Horovod 0.28's static process sets (its
test_process_sets_static: a set listed twice, or the global set listed, is a ValueError; a
permutation of a set's ranks names the same set) and a process set whose id was never
registered (its test_horovod_allreduce_process_set_id_error: ValueError, while a rank outside a
registered set gets InvalidArgumentError), on horovod.tensorflow and horovod.tensorflow.keras.

Each check prints `OK <check>` or `FAIL <check>: <error>` on every rank (the checks are independent).
"""
import numpy as np
import tensorflow as tf
from mpi4py import MPI

import horovod.tensorflow as hvd
from independent_checks import checker

size, me = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()
assert size == 2, size
check = checker(lambda what: MPI.COMM_WORLD.Barrier())


def rest():
    """Ranks 1..size-1; rank 1 lists them in another order (a permutation names the same set)."""
    return hvd.ProcessSet(range(1, size) if me == 0 else reversed(range(1, size)))


def raises(call, error, text, one_line=True):
    """`call()` raises `error` with `text` (one line, except where a tf.function's tracing adds
    the user code's lines, as it does to Horovod's errors)."""
    try:
        call()
    except error as exc:
        assert text in str(exc) and ("\n" not in str(exc) or not one_line), exc
        return exc
    raise AssertionError(f"no {error.__name__}")


@check("hvd.init with a set listed twice or the global set listed: ValueError on every rank, nothing registered")
def _():
    listed = [hvd.ProcessSet([0]), rest(), hvd.ProcessSet(range(size - 1, -1, -1)), hvd.ProcessSet([0])]
    for sets in (listed, listed[:3], listed[:2] + listed[3:]):
        raises(lambda: hvd.init(process_sets=sets), ValueError, "is a duplicate of")
        assert all(ps.process_set_id is None for ps in sets), sets


first, second = hvd.ProcessSet([0]), rest()


@check("then hvd.init(process_sets=[[0], [1..]]) succeeds: ids 1 and 2, the global set keeps id 0 and all ranks")
def _():
    hvd.init(process_sets=[first, second])
    assert (first.process_set_id, second.process_set_id) == (1, 2), (first, second)
    assert second.ranks == list(range(1, size)), second
    assert hvd.global_process_set.process_set_id == 0, hvd.global_process_set
    assert hvd.global_process_set.ranks == list(range(size)), hvd.global_process_set.ranks
    mine = first if me == 0 else second
    total = hvd.allreduce(tf.constant([float(me + 1)]), op=hvd.Sum, process_set=mine, name="static.sum")
    np.testing.assert_allclose(total.numpy(), [float(me + 1)])


fake, fake_all = hvd.ProcessSet([0]), hvd.ProcessSet(range(size))
fake.process_set_id = fake_all.process_set_id = 10  # Horovod's test: "you should not do this"
t = tf.ones(4)


def collectives(ps):
    return {"allreduce": lambda: hvd.allreduce(t, process_set=ps),
            "grouped_allreduce": lambda: hvd.grouped_allreduce([t], process_set=ps),
            "allgather": lambda: hvd.allgather(t, process_set=ps),
            "broadcast": lambda: hvd.broadcast(t, 0, process_set=ps),
            "alltoall": lambda: hvd.alltoall(t, process_set=ps),
            "reducescatter": lambda: hvd.reducescatter(t, process_set=ps)}


def value_error_not_invalid_argument(call, text):
    for run, one_line in ((call, True), (tf.function(call), False)):  # eagerly; as a graph's op is made
        exc = raises(run, ValueError, text, one_line)
        assert not isinstance(exc, tf.errors.InvalidArgumentError), repr(exc)


@check("a collective on a process set id never registered: ValueError (not InvalidArgumentError), eager and graph")
def _():
    for what, call in collectives(fake).items():
        try:
            value_error_not_invalid_argument(call, "process set 10 does not exist")
        except AssertionError as exc:
            raise AssertionError(f"{what}: {exc}") from None
    raises(fake.size, ValueError, "process set 10 does not exist")  # Horovod's size() asks the core


@check("DistributedGradientTape, tf.compat.v1 DistributedOptimizer on an id never registered: ValueError on every rank")
def _():
    w = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * 2.0)
    raises(lambda: hvd.DistributedGradientTape(tape, process_set=fake).gradient(loss, [w]), ValueError,
           "process set 10 does not exist")
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0), process_set=fake)
    raises(lambda: opt.compute_gradients(lambda: tf.reduce_sum(w * 2.0), var_list=[w]), ValueError,
           "process set 10 does not exist")  # rank 1 too, which is not in the set's ranks


@check("an allreduce on a registered set this rank is not in: InvalidArgumentError, eager and graph")
def _():
    other = second if me == 0 else first
    raises(lambda: hvd.allreduce(t, process_set=other), tf.errors.InvalidArgumentError, "is not in process set")
    raises(tf.function(lambda: hvd.allreduce(t, process_set=other)), tf.errors.InvalidArgumentError,
           "is not in process set", one_line=False)


@check("Keras: DistributedOptimizer on a process set id never registered raises ValueError")
def _():
    import keras
    import horovod.tensorflow.keras as hvd_keras
    raises(lambda: hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1), process_set=fake_all), ValueError,
           "process set 10 does not exist")


@check("a collective on a removed process set: ValueError when the op is made, as Horovod")
def _():
    stale = hvd.ProcessSet([0])
    stale.process_set_id = first.process_set_id
    assert hvd.remove_process_set(first) and first.process_set_id is None
    value_error_not_invalid_argument(lambda: hvd.allreduce(t, process_set=first), "is not registered")
    value_error_not_invalid_argument(lambda: hvd.allreduce(t, process_set=stale), "process set 1 does not exist")


hvd.shutdown()
