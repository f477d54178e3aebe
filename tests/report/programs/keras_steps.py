"""Keras and TensorFlow training on every rank, each way the runtime's record counts steps.

    keras_steps.py        (KERAS_BACKEND set by the caller: tensorflow or torch)

Each phase prints `[<rank>] PHASE <name> <steps> <bytes>`: the record's step count and bytes
reduced after it (RunStats in this process; the files are written at finalize).  Phases:
ddl_runtime.keras fit (DDLCallback + DDLGlobalVariablesCallback), Horovod's Keras fit
(DistributedOptimizer + BroadcastGlobalVariablesCallback + MetricAverageCallback: two
callbacks, one count), and on TensorFlow a tf.function loop with ddl_runtime's
DistributedGradientTape and one with Horovod's.
"""
import sys

import numpy as np

import ddl_runtime.keras as ddl
import keras
from ddl_runtime.state import runtime

ddl.init()
stats = runtime.current().stats
BATCHES, BATCH = 3, 8


def model():
    keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)])
    return m


def phase(name):
    sys.stdout.write(f"[{ddl.rank()}] PHASE {name} {stats.steps} {stats.bytes_reduced}\n")   # one write
    sys.stdout.flush()


rng = np.random.default_rng(ddl.rank())
x = rng.standard_normal((BATCHES * BATCH, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)

m = model()
m.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
m.fit(x, y, batch_size=BATCH, epochs=2, verbose=0,
      callbacks=[ddl.DDLCallback(), ddl.DDLGlobalVariablesCallback()])
phase("ddl-keras-fit")

import ddl_runtime.horovod.keras as hvd  # noqa: E402

hvd.init()
m = model()
m.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
m.fit(x, y, batch_size=BATCH, epochs=1, verbose=0,
      callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()])
phase("hvd-keras-fit")

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf

    import ddl_runtime.horovod.tensorflow as hvd_tf
    import ddl_runtime.tensorflow as ddl_tf

    for name, tape_of in (("ddl-tf-tape", ddl_tf.DistributedGradientTape), ("hvd-tf-tape", hvd_tf.DistributedGradientTape)):
        m = model()
        opt = keras.optimizers.SGD(0.01)

        @tf.function
        def train_step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((m(xb) - yb) ** 2)
            grads = tape_of(tape).gradient(loss, m.trainable_variables)
            opt.apply_gradients(zip(grads, m.trainable_variables))
            return loss

        for b in range(BATCHES + 1):
            i = b % BATCHES
            train_step(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH])
        phase(name)
