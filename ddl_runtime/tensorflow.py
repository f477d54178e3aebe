# The public face of ddl_runtime's TensorFlow integration (its description: __doc__ below, from
# frameworks/tensorflow.py, which holds the collectives on tf tensors).  This module sits above
# ddl_runtime.keras, which builds on those collectives: DistributedOptimizer is Keras' (issue 37,
# docs/ARCHITECTURE.md "Layers").
from typing import Any

from .frameworks.tensorflow import *  # noqa: F401,F403
from .frameworks.tensorflow import Handle, __all__ as _collectives, __doc__  # noqa: F401

__all__ = [*_collectives, "DistributedOptimizer"]


def DistributedOptimizer(optimizer: Any, op: str = "avg") -> Any:
    """A Keras optimizer that averages gradients over ranks before every update (see ddl_runtime.keras)."""
    from . import keras as _keras

    return _keras.DistributedOptimizer(optimizer, op=op)
