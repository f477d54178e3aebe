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

# -- value collectives and errors ------------------------------------------------------------------
close(hvd.allreduce(np.array([1.0 + r])), [1.5])
close(hvd.allreduce([1.0 + r], op=hvd.Sum), [3.0])
close(hvd.allgather(np.array([[r]])), [[0], [1]])
close(hvd.broadcast(np.array([r + 5.0]), root_rank=1), [6.0])
close(hvd.reducescatter(np.arange(4.0).reshape(2, 2), op=hvd.Sum), [np.arange(4.0).reshape(2, 2)[r] * 2])
for kwargs, word in (({"op": hvd.Adasum}, "Adasum"), ({"backward_passes_per_step": 2}, "backward_passes_per_step"),
                     ({"op": hvd.Max}, "max")):
    try:
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), **kwargs)
    except ValueError as exc:
        assert word in str(exc), exc
    else:
        raise AssertionError(f"{kwargs}: no error")
ok("value collectives, DistributedOptimizer bad arguments")
