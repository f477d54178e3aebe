"""horovod.tensorflow.util: the one helper Horovod scripts and tests import from it."""
import tensorflow as tf


def _executing_eagerly() -> bool:
    """True eagerly, False while a graph (tf.function, a tf.compat.v1 session's graph) is being built."""
    return tf.executing_eagerly()
