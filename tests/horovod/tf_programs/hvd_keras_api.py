"""Run on 2 ranks under `ddlrun --horovod`: Horovod's Keras API on Keras 3, checked on every rank.

argv[1]: the module to test as `hvd` (horovod.tensorflow.keras or horovod.keras); the Keras
backend comes from KERAS_BACKEND.  Prints `OK <check>` per passed check; a failure raises.
"""
import importlib
import os
import sys
import tempfile

import numpy as np

hvd = importlib.import_module(sys.argv[1])
import keras  # noqa: E402

import ddl_runtime  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 2
print(f"backend {keras.backend.backend()}", flush=True)


def ok(what):
    print(f"OK {what}", flush=True)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=tol, atol=tol)


def flat_weights(model):
    return np.concatenate([np.asarray(w, dtype=np.float64).reshape(-1) for w in model.get_weights()])


def identical_everywhere(model):
    everyone = hvd.allgather(flat_weights(model)[None, :])
    return float(np.abs(everyone - everyone[0]).max())


def dense_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])


rng = np.random.RandomState(0)
x = rng.randn(16, 3).astype("float32")
y = rng.randn(16, 1).astype("float32")
half = slice(8 * r, 8 * r + 8)

# -- DistributedOptimizer: 2 ranks x half batch == 1 rank x full batch --------------------------
reference = dense_model(1)
reference.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
reference.train_on_batch(x, y)
for compression, tol in ((hvd.Compression.none, 1e-5), (hvd.Compression.fp16, 2e-3)):
    model = dense_model(1)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), compression=compression)
    assert type(opt).__name__ == "SGD" and isinstance(opt, keras.optimizers.SGD)
    model.compile(optimizer=opt, loss="mse")
    model.train_on_batch(x[half], y[half])
    close(flat_weights(model), flat_weights(reference), tol)
summed = dense_model(1)
summed.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05), op=hvd.Sum), loss="mse")
summed.train_on_batch(x[half], y[half])
close(flat_weights(summed), flat_weights(reference))
ok("DistributedOptimizer == full batch (none, fp16, op=Sum)")

# -- model.fit from different seeds: BroadcastGlobalVariablesCallback makes ranks identical ------
for with_broadcast in (True, False):
    model = dense_model(100 + r)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
    cbs = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if with_broadcast else []
    model.fit(x[half], y[half], batch_size=4, epochs=2, verbose=0, callbacks=cbs)
    divergence = identical_everywhere(model)
    if with_broadcast:
        assert divergence == 0.0, divergence
        opt_vars = hvd.allgather(np.concatenate([np.asarray(v, np.float64).reshape(-1)
                                                 for v in model.optimizer.variables])[None, :])
        assert float(np.abs(opt_vars - opt_vars[0]).max()) == 0.0
    else:
        assert divergence > 0.0, "weights agree without the broadcast: the check cannot fail"
ok("BroadcastGlobalVariablesCallback in model.fit (weights and optimizer state)")


# -- TensorFlow: a step compiled with XLA gets XLA turned off (the allreduce cannot run inside it)
if keras.backend.backend() == "tensorflow":
    model = dense_model(5)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse", jit_compile=True)
    assert model.jit_compile is True
    model.fit(x[half], y[half], batch_size=8, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert model.jit_compile is False
    assert identical_everywhere(model) == 0.0
    ok("jit_compile=True: XLA off for the train step")


# -- MetricAverageCallback -------------------------------------------------------------------------
class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs, self.lrs = [], []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(dict(logs))

    def on_train_batch_begin(self, batch, logs=None):
        self.lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))


before, after = Recorder(), Recorder()
model = dense_model(7)
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse", metrics=["mae"])
model.fit(x[half] * (r + 1), y[half], batch_size=4, epochs=2, verbose=0,
          callbacks=[before, hvd.callbacks.MetricAverageCallback(), after])
for b, a in zip(before.epochs, after.epochs):
    for key in ("loss", "mae"):
        mean = hvd.allreduce(np.array([b[key]], dtype=np.float64), op=hvd.Average)[0]
        close(a[key], mean, 1e-6)
        assert hvd.allgather(np.array([a[key]]))[0] == hvd.allgather(np.array([a[key]]))[1]
    assert b["loss"] != a["loss"]  # the ranks' own losses differ (different data)
ok("MetricAverageCallback")

# -- learning-rate callbacks ---------------------------------------------------------------------
steps = 4  # 16 samples / batch 4
rec = Recorder()
model = dense_model(3)
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.2, momentum=0.9)), loss="mse")
model.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False,
          callbacks=[hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.2, warmup_epochs=2), rec])
expected = [0.2 / n * ((e + b / steps + 1 / steps) * (n - 1) / 2 + 1) for e in range(2) for b in range(steps)]
close(rec.lrs[:8], expected, 1e-6)
close(rec.lrs[8:], [0.2] * steps, 1e-6)
assert rec.epochs[-1]["lr"] == rec.lrs[-1] or abs(rec.epochs[-1]["lr"] - 0.2) < 1e-6
rec = Recorder()
model = dense_model(3)
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.3)), loss="mse")
model.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False,
          callbacks=[hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=0.5, start_epoch=1), rec])
close([rec.lrs[0], rec.lrs[steps], rec.lrs[2 * steps]], [0.3, 0.1, 0.05], 1e-6)
ok("LearningRateWarmupCallback, LearningRateScheduleCallback")

# -- load_model: the optimizer comes back distributed ----------------------------------------------
model = dense_model(11)
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
model.fit(x[half], y[half], batch_size=8, epochs=1, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
path = ddl_runtime.bcast_object(os.path.join(tempfile.mkdtemp(), "model.keras") if r == 0 else None)
if r == 0:
    model.save(path)
ddl_runtime.barrier()
loaded = hvd.load_model(path)
assert type(loaded.optimizer).__name__ == "SGD"
loaded.train_on_batch(x[half], y[half])
assert identical_everywhere(loaded) == 0.0
model.train_on_batch(x[half], y[half])
close(flat_weights(loaded), flat_weights(model))
ok("load_model")

# -- backward_passes_per_step: Horovod's arithmetic ----------------------------------------------
# y = x.W + b with mse: grad W = 2/B X^T e, grad b = 2/B sum(e); every rank its own batches.
def linear_model():
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1, kernel_initializer="ones",
                                                                          bias_initializer="zeros")])
    return model


def mse_grads(w, b, xb, yb):
    e = xb @ w + b - yb
    return 2.0 / len(xb) * xb.T @ e, 2.0 / len(xb) * e.sum(axis=0)


batches = [(rng.randn(4, 3).astype("float32"), rng.randn(4, 1).astype("float32")) for _ in range(2 * 4)]
mine = [batches[2 * s + r] for s in range(4)]  # step s: rank r trains on batch 2s + r
lr, passes = 0.1, 2
expected = {}
for average in (False, True):
    model = linear_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr), backward_passes_per_step=passes,
                                   average_aggregated_gradients=average)
    model.compile(optimizer=opt, loss="mse")
    w, b = np.ones((3, 1)), np.zeros(1)
    acc_w, acc_b = np.zeros_like(w), np.zeros_like(b)
    for s in range(4):
        model.train_on_batch(*mine[s])
        for rr in range(n):  # the sum over passes of the mean over ranks, at the cycle's weights
            gw, gb = mse_grads(w, b, *batches[2 * s + rr])
            acc_w, acc_b = acc_w + gw / n, acc_b + gb / n
        if (s + 1) % passes == 0:
            scale = lr / passes if average else lr
            w, b = w - scale * acc_w, b - scale * acc_b
            acc_w, acc_b = np.zeros_like(w), np.zeros_like(b)
        close(model.layers[0].kernel, w, 1e-5)  # unchanged on the steps that only accumulate
        close(model.layers[0].bias, b, 1e-5)
        assert int(keras.ops.convert_to_numpy(opt.iterations)) == s + 1  # counts every pass, as Horovod's
    assert identical_everywhere(model) == 0.0
    expected[average] = (w, b)
model = linear_model()  # and through model.fit's compiled step: 4 steps of 4 samples, 2 updates
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(lr), backward_passes_per_step=passes), loss="mse")
model.fit(np.concatenate([m[0] for m in mine]), np.concatenate([m[1] for m in mine]), batch_size=4, epochs=1,
          shuffle=False, verbose=0)
close(model.layers[0].kernel, expected[False][0], 1e-5)
close(model.layers[0].bias, expected[False][1], 1e-5)
ok("backward_passes_per_step == local sums reduced every N steps (sum, average, iterations, fit)")


# -- PartialDistributedOptimizer: the local layer's gradient stays on its rank -----------------------
def two_path_model(seed):
    keras.utils.set_random_seed(seed)
    inp = keras.Input(shape=(3,))
    local = keras.layers.Dense(1, use_bias=False, name="local")
    shared = keras.layers.Dense(1, name="shared")
    return keras.Model(inp, keras.layers.Add()([local(inp), shared(inp)])), local, shared


xb, yb = mine[0]
for scale_local in (True, False):
    model, local, shared = two_path_model(20 + r)  # different weights on each rank
    shared.set_weights([np.ones((3, 1)), np.zeros(1)])
    wl = np.asarray(keras.ops.convert_to_numpy(local.kernel), np.float64)
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(lr), local_layers=[local],
                                          scale_local_gradients=scale_local)
    model.compile(optimizer=opt, loss="mse")
    model.train_on_batch(xb, yb)
    e_mine = xb @ (wl + 1.0) - yb
    g_mine = 2.0 / len(xb) * xb.T @ e_mine
    everyone = hvd.allgather(np.concatenate([g_mine.reshape(-1), [2.0 / len(xb) * e_mine.sum()]])[None, :])
    close(local.kernel, wl - lr * g_mine / (n if scale_local else 1), 1e-5)
    close(shared.kernel, 1.0 - lr * everyone[:, :3].mean(axis=0).reshape(3, 1), 1e-5)
    close(shared.bias, -lr * everyone[:, 3].mean(axis=0).reshape(1), 1e-5)
    assert np.abs(hvd.allgather(np.asarray(keras.ops.convert_to_numpy(local.kernel))[None])).std(axis=0).max() > 0
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr))
model, local, shared = two_path_model(30)
for v in local.trainable_weights:
    opt.register_local_var(v)
assert local.kernel in opt._hvd.local and shared.kernel not in opt._hvd.local
ok("PartialDistributedOptimizer, register_local_var (local gradient / size, shared averaged)")

# -- BroadcastGlobalVariablesCallback(local_variables=...): local weights and their slots stay --------
model, local, shared = two_path_model(40 + r)
model.compile(optimizer=hvd.PartialDistributedOptimizer(keras.optimizers.Adam(0.01), local_layers=local), loss="mse")
model.fit(xb, yb, batch_size=4, epochs=1, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=local.trainable_weights)])


def spread(values):
    everyone = hvd.allgather(np.concatenate([np.asarray(keras.ops.convert_to_numpy(v), np.float64).reshape(-1)
                                             for v in values])[None, :])
    return float(np.abs(everyone - everyone[0]).max())


local_slots = [v for v in model.optimizer.variables if "local" in v.name and v.name != "learning_rate"]
shared_slots = [v for v in model.optimizer.variables if "shared" in v.name]
assert len(local_slots) == 2 and len(shared_slots) == 4, [v.name for v in model.optimizer.variables]
assert spread(shared.trainable_weights) == 0.0 and spread(shared_slots) == 0.0
assert spread(local.trainable_weights) > 0.0, "the local kernel was broadcast"
assert spread(local_slots) > 0.0, "the local kernel's Adam moments were broadcast"
ok("BroadcastGlobalVariablesCallback(local_variables=...): local weights and their optimizer slots stay")

# -- Keras 2 spellings Keras 3 removed: one line naming the Keras 3 one ------------------------------
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
assert not hasattr(opt, "lr")
for attr, word in (("lr", "optimizer.learning_rate"), ("get_gradients", "DistributedGradientTape")):
    try:
        getattr(opt, attr)
    except AttributeError as exc:
        assert word in str(exc) and "Keras 3" in str(exc) and "\n" not in str(exc), exc
    else:
        raise AssertionError(f"opt.{attr}: no error")
bad_optimizers = [(keras.optimizers.SGD, "keras.optimizers.SGD(learning_rate=0.01)")]
if keras.backend.backend() == "tensorflow":
    import tensorflow as tf
    bad_optimizers += [(tf.compat.v1.train.GradientDescentOptimizer(0.1), "keras.optimizers.SGD(learning_rate="),
                       (tf.compat.v1.train.MomentumOptimizer(0.1, 0.9), "keras.optimizers.SGD(learning_rate=..., "
                                                                          "momentum=...)")]
for bad, word in bad_optimizers:
    try:
        hvd.DistributedOptimizer(bad)
    except ValueError as exc:
        assert word in str(exc), exc
    else:
        raise AssertionError(f"{bad}: no error")
ok("Keras 2 spellings: opt.lr, opt.get_gradients, TF1 / class optimizers name the Keras 3 spelling")

# -- value collectives and errors ------------------------------------------------------------------
close(hvd.allreduce(np.array([1.0 + r])), [1.5])
close(hvd.allreduce([1.0 + r], op=hvd.Sum), [3.0])
close(hvd.allgather(np.array([[r]])), [[0], [1]])
close(hvd.broadcast(np.array([r + 5.0]), root_rank=1), [6.0])
close(hvd.reducescatter(np.arange(4.0).reshape(2, 2), op=hvd.Sum), [np.arange(4.0).reshape(2, 2)[r] * 2])
for kwargs, word in (({"op": hvd.Adasum}, "Adasum"), ({"backward_passes_per_step": 0}, "backward_passes_per_step"),
                     ({"op": hvd.Max}, "max"), ({"local_layers": [object()]}, "keras.layers.Layer"),
                     ({"backward_passes_per_step": 2, "accumulate": 2}, "gradient_accumulation_steps")):
    kwargs = dict(kwargs)
    try:
        hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1, gradient_accumulation_steps=kwargs.pop(
            "accumulate", None)), **kwargs)
    except ValueError as exc:
        assert word in str(exc), exc
    else:
        raise AssertionError(f"{kwargs}: no error")
try:
    hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[1.0])
except ValueError as exc:
    assert "local_variables" in str(exc), exc
else:
    raise AssertionError("local_variables=[1.0]: no error")
ok("value collectives, DistributedOptimizer bad arguments")

# -- a local layer on one rank only: a one-line mismatch error on every rank, no hang (last: the job is spent)
model, local, shared = two_path_model(50)
only_rank0 = [local] if r == 0 else []
model.compile(optimizer=hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=only_rank0), loss="mse")
try:
    model.fit(xb, yb, batch_size=4, epochs=1, verbose=0, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
except Exception as exc:  # noqa: BLE001 - the engine's DDLMismatchError
    assert type(exc).__name__ == "DDLMismatchError" and "local/kernel" in str(exc) and "\n" not in str(exc), exc
else:
    raise AssertionError("local_layers on rank 0 only: no error")
ok("local_layers on one rank only: one-line mismatch error on every rank")
