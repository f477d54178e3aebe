"""Run on 2 ranks under `ddlrun --horovod`: horovod.tensorflow's error semantics and graph-mode naming.

Prints `OK <check>` per passed check; any failure raises (and the job ends non-zero).
The last check has rank 1 leave while rank 0 waits; rank 0 must be told within seconds.
"""
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
from ddl_runtime.errors import DDLInputError

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 2, n


def ok(what):
    print(f"OK {what}", flush=True)


def expect(exc_class, call, *words, within=15.0):
    t0 = time.monotonic()
    try:
        call()
    except exc_class as exc:
        msg = str(exc)
        for w in words:
            assert w in msg, (w, msg)
        assert time.monotonic() - t0 < within, f"took {time.monotonic() - t0:.1f} s: {msg}"
        return exc
    raise AssertionError(f"no {exc_class.__name__}")


def in_graph(build):
    """Build ops in a fresh tf.compat.v1 graph and run them in a session (Horovod's graph mode)."""
    with tf.Graph().as_default():
        fetches = build()
        with tf.compat.v1.Session() as sess:
            return sess.run(fetches)


# 1. Ranks that disagree: tf.errors.FailedPreconditionError on every rank, eagerly, in tf.function and in a graph
failed = tf.errors.FailedPreconditionError
expect(failed, lambda: hvd.allreduce(tf.zeros([2 + r]), name="shapes"), "shapes", "rank 0", "rank 1")
expect(failed, lambda: hvd.allreduce(tf.zeros([2], tf.int32 if r else tf.float32), name="dtypes"), "dtypes")
expect(failed, lambda: hvd.broadcast(tf.zeros([2]), root_rank=r, name="roots"), "root")
expect(failed, lambda: tf.function(lambda: hvd.allgather(tf.zeros([1, 1 + r]), name="tf_fn"))(), "tf_fn")
expect(failed, lambda: in_graph(lambda: hvd.allreduce(tf.zeros([3 + r]))), "allreduce")
try:  # user code catching the ddl_runtime class works as well
    hvd.allreduce(tf.zeros([2 + r]), name="shapes_again")
except hvd.HorovodMismatchError:
    pass
ok("mismatch: FailedPreconditionError on every rank (eager, tf.function, graph)")

# 2. A bad input on one rank only: that rank raises its own error, every other rank FailedPrecondition
bad = tf.constant(["text"]) if r == 1 else tf.ones([2])
if r == 1:
    expect(DDLInputError, lambda: hvd.allreduce(bad, name="one_rank_bad"), "string")
    expect(DDLInputError, lambda: hvd.allreduce(bad), "string")  # unnamed: numbered alike on both ranks
    expect(DDLInputError, lambda: hvd.broadcast(tf.ones([2]), root_rank=5, name="bad_root"), "root_rank 5")
else:
    expect(failed, lambda: hvd.allreduce(bad, name="one_rank_bad"), "one_rank_bad", "rank 1", "string")
    expect(failed, lambda: hvd.allreduce(bad), "rank 1", "string")
    expect(failed, lambda: hvd.broadcast(tf.ones([2]), root_rank=0, name="bad_root"), "bad_root", "rank 1")
close = np.testing.assert_allclose
close(hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="after"), [2.0, 2.0])  # the job goes on


def graph_with_one_bad_rank():
    if r == 1:
        try:
            hvd.allreduce(tf.constant(["text"]))
        except DDLInputError:
            return tf.constant(0.0)
        raise AssertionError("no error while building")
    return hvd.allreduce(tf.ones([2]))


if r == 1:
    in_graph(graph_with_one_bad_rank)
else:
    expect(failed, lambda: in_graph(graph_with_one_bad_rank), "rank 1", "string")
ok("one rank's bad input: an error on every rank, the job goes on")

# 3. Graph mode: independent collectives, whatever order TensorFlow's executor runs them in
def independent():
    xs = [tf.fill([5], float(i + 10 * r)) for i in range(6)]
    return ([hvd.allreduce(x, op=hvd.Sum) for x in xs] + [hvd.broadcast(x, root_rank=1) for x in xs[:3]]
            + [hvd.allgather(tf.reshape(x, [1, 5])) for x in xs[3:]])


with tf.Graph().as_default():
    fetches = independent()
    with tf.compat.v1.Session() as sess:
        for _ in range(40):
            values = sess.run(fetches)
for i in range(6):
    close(values[i], [2 * i + 10.0] * 5)
for i in range(3):
    close(values[6 + i], [i + 10.0] * 5)
for i in range(3):
    close(values[9 + i], [[i + 3.0] * 5, [i + 13.0] * 5])


@tf.function
def step(x):
    return [hvd.allreduce(x * k, op=hvd.Sum) for k in range(1, 5)]


for _ in range(10):
    outs = step(tf.fill([3], float(r + 1)))
close(outs[3], [12.0] * 3)
ok("graph mode: independent collectives named from the graph, run 40 times")

# 4. Horovod's extras
assert int(hvd.rank_op().numpy()) == r and int(hvd.size_op().numpy()) == 2
assert int(hvd.local_rank_op().numpy()) == hvd.local_rank() and int(hvd.local_size_op().numpy()) == hvd.local_size()
assert in_graph(lambda: hvd.rank_op()) == r
assert hvd._executing_eagerly()
close(hvd.allreduce(tf.constant([1, 2], tf.uint16), op=hvd.Sum), [2, 4])
close(hvd.allgather(tf.constant([[r]], tf.uint16)), [[0], [1]])
assert hvd.allgather(tf.constant([True])).dtype == tf.bool
ok("rank_op, size_op, local ops, uint16 and bool")

# 5. TensorFlow 1 graph mode: ref variables, broadcast_, broadcast_global_variables, gradients that a
#    graph would prune on one rank only (broadcast's gradient is zero off the root)
from tensorflow.python.ops.ref_variable import RefVariable  # noqa: E402

with tf.Graph().as_default():
    ref = RefVariable(tf.fill([3], float(r + 1)))
    res = tf.Variable(tf.fill([2], float(10 * r)))
    done, = hvd.broadcast_([ref], root_rank=1)
    everything = hvd.broadcast_global_variables(root_rank=0)
    x = tf.constant([1.0, 2.0]) * float(r + 1)
    grad = tf.gradients(hvd.broadcast(x, root_rank=0), x)[0]
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        close(sess.run(done), [2.0] * 3)
        close(sess.run(ref), [2.0] * 3)
        sess.run(tf.compat.v1.assign(ref, tf.fill([3], float(r + 5))))
        sess.run(everything)  # rank 0's values of every global variable
        close(sess.run(ref), [5.0] * 3)
        close(sess.run(res), [0.0, 0.0])
        close(sess.run(grad), [1.0, 1.0] if r == 0 else [0.0, 0.0])
try:
    hvd.broadcast_global_variables(0)
    raise AssertionError("eager broadcast_global_variables did not refuse")
except RuntimeError as exc:
    assert "broadcast_variables" in str(exc), exc
ok("TF1 graph mode: ref variables, broadcast_, broadcast_global_variables, broadcast gradient")

# 6. A rank that leaves ends the others' waits within seconds, naming it
if r == 1:
    print("rank 1 leaves", flush=True)
else:
    exc = expect(tf.errors.UnknownError, lambda: hvd.allreduce(tf.ones([2]), name="after_rank1_left"),
                 "after_rank1_left", "rank 1", "shut down", within=15)
    assert isinstance(exc, hvd.HorovodInternalError), type(exc)
    expect(tf.errors.UnknownError, lambda: hvd.allreduce(tf.ones([2]), name="later"), "rank 1", within=2)
    ok("a rank that left ends the others' waits, naming it")
