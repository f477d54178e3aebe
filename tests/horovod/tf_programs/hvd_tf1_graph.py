"""Run on 2 ranks under `ddlrun --horovod`: horovod.tensorflow in TensorFlow 1 graph mode
(tf.compat.v1 sessions): broadcast_variables on a process set, DistributedOptimizer around a
tf.compat.v1.train optimizer, an allreduce on a process set removed after the graph was built.

Each check prints `OK <check>` or `FAIL <check>: <error>` (the checks are independent).
"""
import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

import horovod.tensorflow as hvd  # noqa: E402
from independent_checks import checker, solo_sets  # noqa: E402

r, sets = solo_sets(hvd)
mine = sets[r]


def _together(what):
    with tf.Graph().as_default(), tf.compat.v1.Session() as s:
        s.run(hvd.allreduce(tf.constant([0.0]), name=f"after {what}"))


check = checker(_together, around=lambda: tf.Graph().as_default())  # each check in a graph of its own


@check("tf.compat.v1: broadcast_variables on a process set is an op Session.run runs")
def _():
    v = tf.compat.v1.Variable([float(r + 1)] * 2)
    everyone = tf.compat.v1.Variable([float(r + 5)])
    op = hvd.broadcast_variables([v], root_rank=r, process_set=mine)
    op_all = hvd.broadcast_variables([everyone], root_rank=1)
    with tf.compat.v1.Session() as s:
        s.run(tf.compat.v1.global_variables_initializer())
        s.run(v.assign([7.0 + r, 8.0 + r]))
        s.run(op)
        np.testing.assert_allclose(s.run(v), [7.0 + r, 8.0 + r])
        s.run(op_all)
        np.testing.assert_allclose(s.run(everyone), [6.0])


@check("tf.compat.v1: DistributedOptimizer wraps a TensorFlow 1 optimizer (compute_gradients / apply_gradients)")
def _():
    w = tf.compat.v1.Variable([1.0, 1.0])
    loss = tf.reduce_sum(w * float(r + 1))  # gradient r + 1: averaged 1.5
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    assert isinstance(opt, tf.compat.v1.train.Optimizer), type(opt)
    pairs = opt.compute_gradients(loss, var_list=[w])
    train = opt.apply_gradients(pairs)
    momentum = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.1, 0.9), op=hvd.Sum)
    u = tf.compat.v1.Variable([2.0])
    step = momentum.minimize(tf.reduce_sum(u * float(r + 1)), var_list=[u])
    assert momentum.get_slot_names() == ["momentum"], momentum.get_slot_names()
    for kwargs, word in (({"backward_passes_per_step": 2}, "backward_passes_per_step=2"), ({"op": hvd.Adasum}, "Adasum"),
                         ({"op": hvd.Max}, "op=max")):
        try:
            hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), **kwargs)
        except ValueError as exc:  # what wml leaves out: one line, on every rank alike
            assert word in str(exc) and "\n" not in str(exc), exc
        else:
            raise AssertionError(f"{kwargs}: no error")
    with tf.compat.v1.Session() as s:
        s.run(tf.compat.v1.global_variables_initializer())
        np.testing.assert_allclose(s.run(pairs[0][0]), [1.5, 1.5])
        s.run(train)
        np.testing.assert_allclose(s.run(w), [1.0 - 0.15] * 2, rtol=1e-6)
        s.run(step)
        np.testing.assert_allclose(s.run(u), [2.0 - 0.3], rtol=1e-6)  # Sum: 1 + 2
        np.testing.assert_allclose(s.run(momentum.get_slot(u, "momentum")), [3.0])


@check("tf.compat.v1: DistributedOptimizer on a process set (a rank outside it keeps its own gradients)")
def _():
    w = tf.compat.v1.Variable([1.0])
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0), process_set=sets[0])
    train = opt.minimize(tf.reduce_sum(w * float(r + 1)))
    with tf.compat.v1.Session() as s:
        s.run(tf.compat.v1.global_variables_initializer())
        s.run(train)
        np.testing.assert_allclose(s.run(w), [1.0 - (r + 1)])


@check("tf.compat.v1: an allreduce on a removed process set raises InvalidArgumentError, one line")
def _():
    y = hvd.allreduce(tf.constant([1.0]), process_set=mine, name="on_removed")
    assert hvd.remove_process_set(sets[0]) and hvd.remove_process_set(sets[1])
    with tf.compat.v1.Session() as s:
        try:
            s.run(y)
        except tf.errors.InvalidArgumentError as exc:
            text = exc.message
            assert "is not registered" in text and "Traceback" not in text and "py_func" not in text.lower(), text
        else:
            raise AssertionError("no error")


hvd.shutdown()
