"""Keras 3 on TensorFlow: what TensorFlow 2 Horovod code expects of a Keras variable.

tf.keras (Keras 2) model weights were ``tf.Variable``s, and TensorFlow 2 code (Horovod's own
tests and examples among it) keys dicts and sets by ``var.ref()``.  Keras 3 variables wrap a
``tf.Variable`` (``var.value``) and have no ``ref()``; ``horovod.tensorflow`` gives them one,
returning the wrapped variable's reference (stable, hashable, ``.deref()`` gives the
``tf.Variable``).  Only when Keras runs on TensorFlow, and only when Keras itself lacks it.
"""
from __future__ import annotations

import os
import sys


def add_variable_ref() -> None:
    if "keras" not in sys.modules and os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        return  # Keras will run on another backend: its variables are not TensorFlow's
    import keras

    if keras.backend.backend() != "tensorflow" or hasattr(keras.Variable, "ref"):
        return
    keras.Variable.ref = lambda self: self.value.ref()
