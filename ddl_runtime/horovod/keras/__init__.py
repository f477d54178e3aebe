"""``horovod.keras`` on Keras 3 and ddl_runtime, for the TensorFlow and torch Keras backends.

Horovod wrapped tf.keras (Keras 2) and does not run with Keras 3; this is its API on Keras 3::

    import horovod.keras as hvd              # under ddlrun --horovod; or ddl_runtime.horovod.keras
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size()))
    model.compile(optimizer=opt, ...)
    model.fit(..., callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                              hvd.callbacks.MetricAverageCallback(),
                              hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.001 * hvd.size())])

``PartialDistributedOptimizer(opt, local_layers=[...])`` keeps the local layers' gradients on
each rank; ``backward_passes_per_step=N`` accumulates N passes locally before one reduction.

``horovod.tensorflow.keras`` is the same API and insists on the TensorFlow backend.
:func:`DistributedOptimizer` changes the optimizer's class (to a subclass of its own class with
the same name, so a saved model records the original optimizer) so that ``apply`` reduces the
gradients over all ranks first — inside ``model.fit``'s compiled step on TensorFlow
(``ddl_runtime.tensorflow``'s graph ops), eagerly on torch.  ``allreduce``, ``allgather``,
``broadcast`` and ``reducescatter`` take values (numbers, numpy arrays, tensors) and return
numpy arrays, as Horovod's Keras module does.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import keras

from ddl_runtime.horovod.common import *  # noqa: F401,F403  (init, rank, size, ..., Average, Sum, ...)
from ddl_runtime.horovod.timeline import start_timeline, stop_timeline  # noqa: F401

from . import callbacks, elastic  # noqa: F401
from ._optimizer import DistributedOptimizer, PartialDistributedOptimizer  # noqa: F401
from ._values import allgather, allreduce, broadcast, broadcast_global_variables, reducescatter  # noqa: F401
from .compression import Compression  # noqa: F401


def load_model(filepath: str, custom_optimizers: Optional[Sequence[type]] = None,
               custom_objects: Optional[Dict[str, Any]] = None, compression: Any = None) -> "keras.Model":
    """``keras.models.load_model`` whose optimizer comes back wrapped in :func:`DistributedOptimizer`.

    A model saved with a distributed optimizer records the original optimizer class (same name),
    so Keras restores it; the restored optimizer (with its state) is then made distributed,
    with ``compression`` (default ``Compression.none``).
    """
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or ():
        objects.setdefault(cls.__name__, cls)
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    if getattr(model, "optimizer", None) is not None:
        DistributedOptimizer(model.optimizer, compression=compression)
    return model


