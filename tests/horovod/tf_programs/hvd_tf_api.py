"""Run on 2 ranks under `ddlrun --horovod`: horovod.tensorflow's API, checked on every rank.

Prints `OK <check>` per passed check; any failure raises (and the job ends non-zero).
"""
import sys
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 2, n


def ok(what):
    print(f"OK {what}", flush=True)


def close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


x = tf.fill([3], float(r + 1))
close(hvd.allreduce(x), [1.5] * 3)
close(hvd.allreduce(x, op=hvd.Sum), [3.0] * 3)
close(hvd.allreduce(x, op=hvd.Min), [1.0] * 3)
close(hvd.allreduce(x, op=hvd.Max), [2.0] * 3)
close(hvd.allreduce(x, op=hvd.Product), [2.0] * 3)
close(hvd.allreduce(x, average=False), [3.0] * 3)
close(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), [3.0] * 3)
assert hvd.allreduce(tf.constant([r + 1, 7], tf.int32), op=hvd.Sum).dtype == tf.int32
ok("allreduce ops")


@tf.function
def traced(t):
    return hvd.allreduce(t, op=hvd.Average, name="traced"), hvd.allgather(t[: r + 1], name="traced_gather")


for _ in range(2):  # the traced function runs its collectives every call
    avg, gathered = traced(x)
    close(avg, [1.5] * 3)
    close(gathered, [1.0, 2.0, 2.0])
ok("tf.function allreduce and allgather")

g = hvd.grouped_allreduce([tf.constant([float(r)]), tf.constant([[2.0 * r]], tf.float64)], op=hvd.Sum)
close(g[0], [1.0])
close(g[1], [[2.0]])
assert g[1].dtype == tf.float64
ok("grouped_allreduce")

third = tf.constant([1.0 / 3.0 + r], tf.float32)
c = hvd.allreduce(third, compression=hvd.Compression.fp16)
assert c.dtype == tf.float32, c.dtype
expected = np.float32(np.mean([np.float16(1.0 / 3.0), np.float16(1.0 / 3.0 + 1)], dtype=np.float32))
close(c, [np.float16(expected)], tol=1e-3)
assert float(c[0]) != float(hvd.allreduce(third)[0]), "fp16 compression did not round"
ok("fp16 compression")

rows = tf.reshape(tf.range((r + 1) * 2, dtype=tf.float32), [r + 1, 2]) + 10 * r
ga = hvd.allgather(rows)
assert ga.shape == (3, 2), ga.shape
close(ga, [[0, 1], [10, 11], [12, 13]])
gg = hvd.grouped_allgather([rows, tf.constant([r])])
close(gg[1], [0, 1])
ok("allgather with different first dims")

b = hvd.broadcast(tf.constant([float(r), 5.0]), root_rank=1)
close(b, [1.0, 5.0])
v = tf.Variable([float(r)] * 2)
hvd.broadcast_([v], root_rank=0)
close(v, [0.0, 0.0])
variables = [tf.Variable(tf.fill([2, 2], float(r))), tf.Variable(r + 3)]
hvd.broadcast_variables(variables, root_rank=1)
close(variables[0], np.ones((2, 2)))
assert int(variables[1].numpy()) == 4
ok("broadcast, broadcast_, broadcast_variables")

assert hvd.broadcast_object({"rank": r, "x": [1, 2]}, root_rank=1) == {"rank": 1, "x": [1, 2]}
assert hvd.allgather_object(("r", r)) == [("r", 0), ("r", 1)]
ok("broadcast_object, allgather_object")

send = tf.reshape(tf.range(3 * 2, dtype=tf.float32), [3, 2]) + 100 * r
splits = [1, 2] if r == 0 else [2, 1]
out, received = hvd.alltoall(send, splits=splits)
if r == 0:
    close(received, [1, 2])
    close(out, [[0, 1], [100, 101], [102, 103]])
else:
    close(received, [2, 1])
    close(out, [[2, 3], [4, 5], [104, 105]])
even = hvd.alltoall(tf.constant([[float(r)], [float(r) + 10]]))
close(even, [[0.0], [1.0]] if r == 0 else [[10.0], [11.0]])
ok("alltoall with splits")

rs = hvd.reducescatter(tf.reshape(tf.range(10, dtype=tf.float32), [5, 2]), op=hvd.Sum)
close(rs, np.arange(10, dtype=np.float32).reshape(5, 2)[:3] * 2 if r == 0
      else np.arange(10, dtype=np.float32).reshape(5, 2)[3:] * 2)
grs = hvd.grouped_reducescatter([tf.ones([2, 1]), tf.ones([4])], op=hvd.Average)
close(grs[0], [[1.0]])
close(grs[1], [1.0, 1.0])
ok("reducescatter, grouped_reducescatter")

w = tf.Variable([1.0, 2.0])
with tf.GradientTape() as tape:
    y = tf.reduce_sum(hvd.allreduce(w * float(r + 1), op=hvd.Sum))
close(tape.gradient(y, w), [2.0 * (r + 1)] * 2)  # upstream ones, summed over 2 ranks, times this rank's factor
with tf.GradientTape() as tape:
    y = tf.reduce_sum(hvd.allgather(tf.reshape(w, [1, 2])) * tf.constant([[1.0], [2.0]]))
close(tape.gradient(y, w), [[1.0, 1.0], [2.0, 2.0]][r])  # Horovod: this rank's rows of the averaged gradient
ok("gradients through allreduce and allgather")

# DistributedGradientTape: 2 ranks x half the batch == 1 rank x the whole batch (mean loss)
rng = np.random.RandomState(0)
data = rng.randn(8, 3).astype("float32")
target = rng.randn(8, 1).astype("float32")
kernel = tf.Variable(rng.randn(3, 1).astype("float32"))


def loss_fn(xb, yb):
    return tf.reduce_mean((tf.matmul(xb, kernel) - yb) ** 2)


with tf.GradientTape() as full_tape:
    full = loss_fn(data, target)
expected_grad = full_tape.gradient(full, kernel).numpy()
half = slice(4 * r, 4 * r + 4)


@tf.function
def dist_grad(xb, yb):
    with tf.GradientTape() as t:
        loss = loss_fn(xb, yb)
    return hvd.DistributedGradientTape(t).gradient(loss, [kernel])[0]


with hvd.DistributedGradientTape(tf.GradientTape()) as tape:
    loss = loss_fn(data[half], target[half])
close(tape.gradient(loss, kernel), expected_grad, tol=1e-5)
close(dist_grad(data[half], target[half]), expected_grad, tol=1e-5)
with tf.GradientTape() as t:
    loss = loss_fn(data[half], target[half])
fp16 = hvd.DistributedGradientTape(t, compression=hvd.Compression.fp16,
                                   gradient_predivide_factor=2.0).gradient(loss, kernel)
close(fp16, expected_grad, tol=1e-2)
ok("DistributedGradientTape equivalence (eager, tf.function, fp16 + predivide)")

# PartialDistributedGradientTape: the local layer's gradient stays this rank's (divided by size), the rest averaged
import keras  # noqa: E402

local_layer, shared_layer = keras.layers.Dense(1, use_bias=False), keras.layers.Dense(1, use_bias=False)
local_layer.build((None, 3))
shared_layer.build((None, 3))
local_layer.kernel.assign(tf.fill([3, 1], float(r + 1)))
shared_layer.kernel.assign(tf.fill([3, 1], float(r + 1)))
xb = tf.constant(data[half])
for scale in (True, False):
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(local_layer(xb)) + tf.reduce_sum(shared_layer(xb) ** 2)
    grads = t.gradient(loss, [local_layer.kernel, shared_layer.kernel])
    tape = hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=[local_layer],
                                              scale_local_gradients=scale)
    with tape:
        loss = tf.reduce_sum(local_layer(xb)) + tf.reduce_sum(shared_layer(xb) ** 2)
    local_grad, shared_grad = tape.gradient(loss, [local_layer.kernel, shared_layer.kernel])
    close(local_grad, grads[0] / (n if scale else 1))
    close(shared_grad, hvd.allreduce(grads[1], op=hvd.Average), tol=1e-5)
    assert float(tf.reduce_max(tf.abs(shared_grad - grads[1]))) > 0  # ranks' shared gradients differ
with hvd.PartialDistributedGradientTape(tf.GradientTape(persistent=True), local_layers=local_layer) as tape:
    loss = tf.reduce_sum(local_layer(xb)) + tf.reduce_sum(shared_layer(xb) ** 2)
local_pairs, global_pairs = tape.get_local_and_global_gradients(loss, [local_layer.kernel, shared_layer.kernel])
assert [v is local_layer.kernel for v, _ in local_pairs] == [True], local_pairs
assert [v is shared_layer.kernel for v, _ in global_pairs] == [True], global_pairs
try:
    hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=[tf.Variable(1.0)])
except ValueError as exc:
    assert "keras.layers.Layer" in str(exc), exc
else:
    raise AssertionError("local_layers=[tf.Variable]: no error")
ok("PartialDistributedGradientTape (local / size, shared averaged, get_local_and_global_gradients)")

# join: rank 0 joins early and contributes zeros to rank 1's allreduce
if r == 0:
    last = hvd.join()
else:
    time.sleep(0.3)
    extra = hvd.allreduce(tf.constant([4.0]), op=hvd.Sum, name="after_join")
    close(extra, [4.0])
    last = hvd.join()
assert last == 1, last
hvd.barrier()
ok("join, barrier")

# errors: clear, on every rank, naming the tensor
for bad, call in [
    ("adasum", lambda: hvd.allreduce(x, op=hvd.Adasum)),
    ("splits", lambda: hvd.alltoall(send, splits=[1, 1])),
]:
    try:
        call()
    except ValueError as exc:
        assert "Adasum" in str(exc) or "splits" in str(exc), exc
    else:
        raise AssertionError(f"{bad}: no error")
t0 = time.monotonic()
try:
    hvd.allreduce(tf.zeros([2 + r]), name="shape_mismatch")
except Exception as exc:  # noqa: BLE001 - the engine's DDLMismatchError
    msg = str(exc)
    assert "shape_mismatch" in msg and "0" in msg and "1" in msg, msg
    assert time.monotonic() - t0 < 30
else:
    raise AssertionError("ranks with different shapes did not fail")
ok("errors: Adasum, bad splits, shape mismatch")
hvd.barrier()
sys.exit(0)
