"""``horovod.tensorflow.keras`` on Keras 3 with the TensorFlow backend.

The same API as :mod:`ddl_runtime.horovod.keras` (DistributedOptimizer, the callbacks,
load_model, value collectives), with Horovod's TensorFlow ``Compression``; it insists on the
TensorFlow Keras backend (importing it sets ``KERAS_BACKEND=tensorflow`` when Keras has not
been imported yet and the variable is unset).  Use ``horovod.keras`` for the torch backend.
"""
import os
import sys

if "keras" not in sys.modules:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402

from ddl_runtime.errors import DDLInputError  # noqa: E402

if keras.backend.backend() != "tensorflow":
    raise DDLInputError(f"horovod.tensorflow.keras needs the TensorFlow Keras backend, but Keras runs on "
                        f"{keras.backend.backend()!r} (KERAS_BACKEND); use horovod.keras for other backends")

from ddl_runtime.horovod.keras import *  # noqa: E402,F401,F403
from ddl_runtime.horovod.keras import DistributedOptimizer, PartialDistributedOptimizer, load_model  # noqa: E402,F401
from ddl_runtime.horovod.tensorflow.compression import Compression  # noqa: E402,F401

from . import callbacks, elastic  # noqa: E402,F401
