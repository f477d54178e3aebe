"""``horovod.tensorflow.util``: the helper Horovod's own code and tests use to tell eager from graph mode."""
from __future__ import annotations


def _executing_eagerly() -> bool:
    """True outside a tf.function / tf.compat.v1 graph (TensorFlow 2's default)."""
    import tensorflow as tf

    return tf.executing_eagerly()
