"""Keras fit on every rank (ddl_runtime.keras: DDLCallback, DDLGlobalVariablesCallback) in which
one rank's data loader is slow, for `wml report`.

    keras_slow.py BATCHES SLOW_RANK [BASE_MS SLOW_MS]      (KERAS_BACKEND set by the caller)

Before each batch every rank sleeps BASE_MS (default 20), SLOW_RANK SLOW_MS (default 70): the
time a data loader takes before the forward pass (a callback's on_train_batch_begin, so it runs
in the fit loop, in Python, every batch).  Sleeping, not spinning: the same on a loaded machine.
"""
import sys
import time

import numpy as np

import ddl_runtime.keras as ddl
import keras

batches, slow_rank = int(sys.argv[1]), int(sys.argv[2])
base_s = float(sys.argv[3]) / 1e3 if len(sys.argv) > 3 else 0.020
slow_s = float(sys.argv[4]) / 1e3 if len(sys.argv) > 4 else 0.070
BATCH = 16


class Loader(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        time.sleep(slow_s if ddl.rank() == slow_rank else base_s)


keras.utils.set_random_seed(1)
rng = np.random.default_rng(ddl.rank())
x = rng.standard_normal((batches * BATCH, 16)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0,
          callbacks=[ddl.DDLCallback(), Loader(), ddl.DDLGlobalVariablesCallback()])
