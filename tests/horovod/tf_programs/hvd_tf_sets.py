"""Run on 2 ranks under `ddlrun --horovod`: horovod.tensorflow's collectives on process sets
[0] and [1] (eagerly), as Horovod 0.28 defines them; and the timeline (HOROVOD_TIMELINE).

Each check prints `OK <check>` or `FAIL <check>: <error>` (the checks are independent).
"""
import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
from independent_checks import checker, solo_sets

r, sets = solo_sets(hvd)
mine = sets[r]


def _together(what):
    hvd.allreduce(tf.constant([0.0]), name=f"after {what}")


check = checker(_together)


@check("broadcast on a process set: root_rank is the root's rank in the job")
def _():
    t = tf.constant([float(r + 10)] * 3)
    np.testing.assert_allclose(hvd.broadcast(t, root_rank=r, process_set=mine).numpy(), [r + 10.0] * 3)
    x = tf.Variable([float(r)] * 2)
    with tf.GradientTape() as tape:
        y = hvd.broadcast(x, root_rank=r, process_set=mine, name="bgrad")
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, 1.0])  # this rank is the root
    try:
        hvd.broadcast(t, root_rank=1 - r, process_set=mine, name="outside")
    except tf.errors.InvalidArgumentError as exc:
        assert f"root_rank {1 - r} is not a rank of the process set ([{r}])" in str(exc), exc
    else:
        raise AssertionError("a root outside the set: no error")


@check("broadcast_variables and broadcast_object on a process set: global root rank")
def _():
    v = tf.Variable([float(r + 1)])
    hvd.broadcast_variables([v], root_rank=r, process_set=mine)
    np.testing.assert_allclose(v.numpy(), [r + 1.0])
    obj = hvd.broadcast_object({"from": r}, root_rank=r, process_set=mine)
    assert obj == {"from": r}, obj


@check("DistributedGradientTape on a rank outside its process set returns the rank's own gradients")
def _():
    w = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * float(r + 1))
    tape = hvd.DistributedGradientTape(tape, process_set=sets[0])
    grads = tape.gradient(loss, [w])
    np.testing.assert_allclose(grads[0].numpy(), [r + 1.0, r + 1.0])


@check("timeline rows")
def _():
    hvd.allreduce(tf.constant([1.0, 2.0]), name="test_allreduce")
    hvd.broadcast(tf.constant([3], tf.int32), root_rank=0, name="test_broadcast")


hvd.shutdown()
