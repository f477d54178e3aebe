"""The TF2 custom training step the Horovod TensorFlow benchmarks time (``benchmarks/`` is on sys.path).

An MLP 512-1024-512-10 (1.1 M parameters in 6 tensors), batch 32, SGD, in a ``tf.function``:
forward, ``tf.GradientTape``, the gradient exchange of ``wrap(tape).gradient``, the update.
"""
from __future__ import annotations

import os
from typing import Callable

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

X = np.random.RandomState(0).randn(32, 512).astype("float32")
Y = np.random.RandomState(1).randint(0, 10, 32)


def mlp() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input(shape=(512,)), keras.layers.Dense(1024, activation="relu"),
                             keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])


def tape_step(wrap: Callable) -> Callable[[], object]:
    """One training step of the MLP whose gradients come from ``wrap(tape).gradient``."""
    model = mlp()
    opt = keras.optimizers.SGD(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    xs, ys = tf.constant(X), tf.constant(Y)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(ys, model(xs, training=True))
        grads = wrap(tape).gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step
