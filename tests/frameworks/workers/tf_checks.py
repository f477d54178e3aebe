"""Run under `ddlrun -n 2`: ddl_runtime.tensorflow, eagerly and inside tf.function, in one launch.

TensorFlow takes seconds to import, so one job runs every check and each rank writes what it
saw to <out>/rank<R>.json; the test asserts on those records (nothing is judged here).
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ddl_runtime.tensorflow as dtf  # noqa: E402


def _threading_settable():
    """Importing ddl_runtime.tensorflow must not start TensorFlow's runtime: a script still sets
    its thread pools after the imports (TensorFlow refuses once the eager context exists)."""
    try:
        tf.config.threading.set_inter_op_parallelism_threads(0)
        return True
    except RuntimeError as exc:
        return str(exc)


threading_settable = _threading_settable()
DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64"]
out_dir = sys.argv[1]
rec = {}


def err(fn):
    """Run fn; the error it raised as {type, message, seconds, ...} (or None when it did not raise)."""
    t0 = time.monotonic()
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - recorded for the test to judge
        last = dtf.take_error()
        return {"type": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - t0,
                "is_ddl_input": isinstance(exc, dtf.DDLInputError),
                "is_ddl_mismatch": isinstance(exc, dtf.DDLMismatchError),
                "is_tf_op_error": isinstance(exc, tf.errors.OpError),
                "last_error_type": type(last).__name__ if last else None,
                "last_error": str(last) if last else None}
    return None


def values(ts):
    return [{"dtype": t.dtype.name, "shape": list(t.shape), "values": np.asarray(t.numpy(), np.float64).tolist()}
            for t in ts]


# -- before init: a clear input error, nothing sent ----------------------------------------
rec["before_init"] = err(lambda: dtf.allreduce(tf.ones([2])))
rec["before_init_rank"] = err(dtf.rank)
dtf.init()
r, n = dtf.rank(), dtf.size()
rec["rank"], rec["size"] = r, n
rec["threading_settable_after_import"] = threading_settable


# -- allreduce_n: every dtype, 0-d and empty, eagerly and inside tf.function ---------------
def inputs():
    ts = [tf.cast(tf.reshape(tf.range(6), [2, 3]) * (r + 1), d) for d in DTYPES]
    ts += [tf.cast(r + 2, d) for d in DTYPES]             # 0-d
    ts += [tf.zeros([0, 4], d) for d in DTYPES]           # empty
    return ts


names = [f"{kind}.{d}" for kind in ("matrix", "scalar", "empty") for d in DTYPES]
rec["eager_sum"] = values(dtf.allreduce_n(inputs(), op="sum", names=names))


@tf.function
def graph_sum(ts):
    return dtf.allreduce_n(ts, op="sum", names=names)


rec["graph_sum"] = values(graph_sum(inputs()))
floats = [t for t in inputs() if t.dtype.is_floating]


@tf.function
def graph_avg(ts):
    return dtf.allreduce_n(ts, op="avg")


rec["graph_avg"] = values(graph_avg(floats))
# AutoGraph must leave ddl_runtime alone: the function tf.numpy_function runs at every step
# would otherwise route each of its calls through converted_call (ms per step).
import inspect  # noqa: E402

import ddl_runtime  # noqa: E402

_engine_fresh, autograph_frames = ddl_runtime.allreduce_n_fresh, []


def _spy(*a, **k):
    autograph_frames.append(any("__autograph_generated" in f.filename for f in inspect.stack(0)))
    return _engine_fresh(*a, **k)


ddl_runtime.allreduce_n_fresh = _spy
rec["graph_autograph_sum"] = values(tf.function(lambda ts: dtf.allreduce_n(ts, op="sum"))(inputs()[:6]))
ddl_runtime.allreduce_n_fresh = _engine_fresh
rec["autograph_frames_in_engine"] = autograph_frames
# large results of one host's ranks live in shared memory, which the peers write (shm/results.py)
from ddl_runtime.state import runtime as _ddl_rt  # noqa: E402

# (a size that is a multiple of 16 floats: TensorFlow's tf.slice aliases only such pieces)
big = [tf.fill([300_000], float(r + 1)), tf.reshape(tf.range(70_016, dtype=tf.float32), [1, 70_016])]


def _shared(t):
    shm = _ddl_rt.current().shm
    return shm is not None and shm.heap.locate(t._numpy().reshape(-1)) is not None


for how, fn in (("eager", lambda ts: dtf.allreduce_n(ts, op="avg")),
                ("graph", tf.function(lambda ts: dtf.allreduce_n(ts, op="avg")))):
    got = fn(big)
    rec[f"{how}_big_results"] = {"shared": [_shared(t) for t in got], "first": float(got[0][0]),
                                 "last": float(got[0][-1]), "row": float(got[1][0, 70_015]),
                                 "shapes": [list(t.shape) for t in got]}
# one dtype, static shapes: the graph gets one flat output and cuts it (tf.slice + reshape)
one_dtype = [tf.reshape(tf.range(15, dtype=tf.float32), [3, 5]) * (r + 1), tf.constant(2.0 * (r + 1)),
             tf.zeros([0, 4]), tf.fill([7], float(r + 1))]
rec["graph_one_dtype"] = values(tf.function(lambda ts: dtf.allreduce_n(ts, op="sum"))(one_dtype))
rec["graph_static_shapes"] = [list(t.shape) for t in graph_sum.get_concrete_function(inputs()).structured_outputs]

# single-tensor ops, both ways
x = tf.constant([1.0, 5.0, -2.0]) * (r + 1) - 3.0 * r    # rank0 [1,5,-2], rank1 [-1,7,-7]


@tf.function
def graph_misc(x):
    return (dtf.allreduce(x, op="min"), dtf.allreduce(x, op="max"), dtf.allreduce(x, op="avg"),
            dtf.bcast(x, root=1), dtf.allgather(tf.fill([r + 1, 2], float(r))),
            dtf.allreduce_n_async([x], op="sum").wait()[0])


def eager_misc(x):
    h = dtf.allreduce_n_async([x], op="sum")
    return (dtf.allreduce(x, op="min"), dtf.allreduce(x, op="max"), dtf.allreduce(x, op="avg"),
            dtf.bcast(x, root=1), dtf.allgather(tf.fill([r + 1, 2], float(r))), h.wait()[0])


rec["eager_misc"] = values(eager_misc(x))
rec["graph_misc"] = values(graph_misc(x))
rec["input_after"] = x.numpy().tolist()  # results are new tensors: the input is left alone
v = tf.Variable([float(r), 10.0 + r])
dtf.broadcast_variables([v], root_rank=1)
rec["broadcast_variables"] = v.numpy().tolist()
rec["variable_allreduce"] = values([dtf.allreduce(v, op="sum")])
# WML CE's `import ddl` takes TensorFlow tensors as its TF operator did
import ddl  # noqa: E402

u = tf.Variable([float(r)])
ddl.broadcast_variables([u], root_rank=1)
rec["ddl_module"] = values([ddl.allreduce(tf.constant([1.0 + r]), op="sum"),
                            ddl.allreduce_n([tf.constant([1, 2]) * (r + 1)], op="sum")[0], u.value()])

# -- gradients through the collectives ------------------------------------------------------
w = tf.Variable([1.0, 2.0, 3.0])
with tf.GradientTape(persistent=True) as tape:
    s = dtf.allreduce(w * (r + 1), op="sum")
    a = dtf.allreduce(w * (r + 1), op="avg")
    g = dtf.allgather(w[:r + 1] * 2.0)
    s_n = dtf.allreduce_n([w * (r + 1)], op="sum")[0]
    loss_s, loss_a, loss_g = tf.reduce_sum(s * s), tf.reduce_sum(a * a), tf.reduce_sum(g * g)
    loss_n = tf.reduce_sum(s_n * s_n)
rec["grad_sum"] = tape.gradient(loss_s, w).numpy().tolist()
rec["grad_allreduce_n"] = tape.gradient(loss_n, w).numpy().tolist()
rec["grad_avg"] = tape.gradient(loss_a, w).numpy().tolist()
rec["grad_allgather"] = tape.gradient(loss_g, w).numpy().tolist()


# -- DistributedGradientTape: 2 ranks x half batch == 1 rank x full batch ------------------
rng = np.random.RandomState(0)
X = rng.randn(32, 4).astype(np.float32)
Y = rng.randint(0, 3, 32)
start = [rng.randn(4, 8).astype(np.float32) * 0.5, np.zeros(8, np.float32), rng.randn(8, 3).astype(np.float32) * 0.5]


def loss_fn(params, x, y):
    h = tf.nn.relu(x @ params[0] + params[1])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h @ params[2]))


def local_grads(params, x, y):
    with tf.GradientTape() as t:
        loss = loss_fn(params, x, y)
    return t.gradient(loss, params)


def dist_grads(params, x, y):
    with tf.GradientTape() as t:
        loss = loss_fn(params, x, y)
    return dtf.DistributedGradientTape(t).gradient(loss, params)


half = slice(r * 16, (r + 1) * 16)
params = [tf.Variable(p, name=f"p{i}") for i, p in enumerate(start)]
full = [g.numpy() for g in local_grads(params, X, Y)]
mine = [g.numpy() for g in local_grads(params, X[half], Y[half])]
eager = [g.numpy() for g in dist_grads(params, X[half], Y[half])]
graph = [g.numpy() for g in tf.function(dist_grads)(params, X[half], Y[half])]
rec["tape_eager_diff"] = max(float(np.abs(a - b).max()) for a, b in zip(eager, full))
rec["tape_graph_diff"] = max(float(np.abs(a - b).max()) for a, b in zip(graph, full))
rec["tape_unreduced_diff"] = max(float(np.abs(a - b).max()) for a, b in zip(mine, full))  # the control


@tf.function
def sgd_step(params, x, y):
    grads = dist_grads(params, x, y)
    for p, g in zip(params, grads):
        p.assign_sub(0.5 * g)


ref = [tf.Variable(p) for p in start]
for _ in range(5):
    sgd_step(params, X[half], Y[half])
    for p, g in zip(ref, local_grads(ref, X, Y)):
        p.assign_sub(0.5 * g)
rec["sgd_diff"] = max(float(np.abs(p.numpy() - q.numpy()).max()) for p, q in zip(params, ref))
rec["sgd_moved"] = max(float(np.abs(p.numpy() - s0).max()) for p, s0 in zip(params, start))


# -- ranks that disagree: DDLMismatchError on every rank, naming the tensor ----------------
def mismatch_cases():
    shape = tf.ones([3 if r == 0 else 4])
    dtype = tf.ones([3], tf.float32 if r == 0 else tf.float64)
    return {
        "shape": (lambda t: dtf.allreduce_n([t], names=["layer/kernel"]), shape),
        "dtype": (lambda t: dtf.allreduce_n([t], names=["layer/kernel"]), dtype),
        "name": (lambda t: dtf.allreduce_n([t], names=["layer/kernel" if r == 0 else "layer/bias"]),
                 tf.ones([3])),
    }


for case, (fn, t) in mismatch_cases().items():
    rec[f"mismatch_eager_{case}"] = err(lambda: fn(t))
    rec[f"mismatch_graph_{case}"] = err(lambda: tf.function(fn)(t))
try:  # leave a DDL error pending (not taken): an unrelated TensorFlow error must stay itself
    tf.function(mismatch_cases()["name"][0])(tf.ones([3]))
except dtf.DDLMismatchError:
    pass
rec["unrelated_while_pending"] = err(tf.function(lambda: tf.debugging.assert_equal(1, 2)))
rec["after_mismatch"] = values([dtf.allreduce(tf.constant([1.0, 2.0]), op="sum")])

# -- bad input: DDLInputError, one line, before anything is sent ---------------------------
bad = {
    "non_tensor": lambda: dtf.allreduce([1.0, 2.0]),
    "numpy": lambda: dtf.allreduce_n([np.ones(3, np.float32)]),
    "ragged_list": lambda: dtf.allreduce_n([tf.ones([2]), [[1.0, 2.0], [3.0]]]),
    "ragged_tensor": lambda: dtf.allreduce(tf.ragged.constant([[1.0, 2.0], [3.0]])),
    "dtype_int8": lambda: dtf.allreduce(tf.ones([2], tf.int8)),
    "dtype_bool": lambda: dtf.bcast(tf.constant([True])),
    "avg_int": lambda: dtf.allreduce_n([tf.ones([2], tf.int32)], op="avg"),
    "bad_op": lambda: dtf.allreduce(tf.ones([2]), op="prod"),
    "bad_root": lambda: dtf.bcast(tf.ones([2]), root=5),
    "not_a_list": lambda: dtf.allreduce_n(tf.ones([2])),
    "tape": lambda: dtf.DistributedGradientTape(object()),
    "graph_non_tensor": tf.function(tf.autograph.experimental.do_not_convert(
        lambda: dtf.allreduce_n([tf.ones([2]), "x"]))),
}
if r == 1:  # only one rank errs: the other must not be left waiting (nothing was sent)
    bad["one_rank_only"] = lambda: dtf.allreduce(tf.ones([2], tf.uint8))
for case, fn in bad.items():
    rec[f"bad_{case}"] = err(fn)
rec["xla"] = err(tf.function(tf.autograph.experimental.do_not_convert(lambda: dtf.allreduce_n([tf.ones([2])])),
                             jit_compile=True))
rec["after_bad"] = values([dtf.allreduce(tf.constant([1.0, 2.0]), op="sum")])

with open(os.path.join(out_dir, f"rank{r}.json"), "w") as fh:
    json.dump(rec, fh)
print(f"rank {r}: done", flush=True)
