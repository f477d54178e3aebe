"""Horovod's DistributedGradientTape and PartialDistributedGradientTape for TensorFlow 2
(eager, tf.function, and graph mode)."""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from ddl_runtime.core.stats import gradient_reduction
from ddl_runtime.errors import DDLInputError

from ..common.basics import Average, reduce_op, size
from ..common.local_gradients import LocalVariables, local_layer_variables
from ..common.process_sets import global_process_set
from ._keras3 import add_variable_ref
from .compression import Compression
from .mpi_ops import grouped_allreduce

add_variable_ref()  # Keras 3 variables get tf.Variable's ref(), which TF2 Horovod code keys dicts by


class DistributedGradientTape:
    """Wraps a tf.GradientTape: ``gradient()`` returns the gradients reduced over the ranks.

    ``hvd.DistributedGradientTape(tape, compression=..., op=hvd.Average, gradient_predivide_factor=...)``
    as in Horovod: all gradients go through one negotiated grouped allreduce; IndexedSlices
    become dense (Horovod's ``sparse_as_dense=True``); gradients that are None stay None.
    ``num_groups`` / ``groups`` only steer Horovod's fusion and change nothing here.
    ``register_local_source(var)`` keeps ``var``'s gradient on this rank (not reduced; divided
    by the process set's size when ``scale_local_gradients``), as Horovod >= 0.27 does.
    On a rank outside ``process_set``, ``gradient()`` returns this rank's own gradients, unreduced
    (as Horovod does).
    """

    def __init__(self, gradtape, device_dense='', device_sparse='', compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, scale_local_gradients=True):
        if not isinstance(gradtape, tf.GradientTape):
            raise DDLInputError(f"DistributedGradientTape: expected a tf.GradientTape, got {type(gradtape).__name__}")
        op_name = reduce_op(op, None, "DistributedGradientTape")
        if op_name not in ("average", "sum"):
            raise DDLInputError(f"DistributedGradientTape: op={op_name} is not supported; use hvd.Average or hvd.Sum")
        factor = float(gradient_predivide_factor)
        if factor != 1.0 and op_name != "average":
            raise DDLInputError("DistributedGradientTape: gradient_predivide_factor needs op=hvd.Average")
        if not factor > 0:
            raise DDLInputError(f"DistributedGradientTape: gradient_predivide_factor must be > 0, got {factor}")
        self._tape = gradtape
        self._op, self._factor = op, factor
        self._compression = compression or Compression.none
        self._process_set = process_set
        self._local = LocalVariables(scale_local_gradients)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tape, name)

    def register_local_source(self, source) -> None:
        """Horovod's API: ``source``'s gradient stays on this rank (not reduced over the ranks)."""
        self._local.register([source])

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        flat = tf.nest.flatten(grads)
        if not any(g is not None for g in flat):
            return grads
        members = size() if self._process_set is global_process_set else self._process_set.size()
        out = self._local.exchange(flat, tf.nest.flatten(sources), members, self._reduce)
        return tf.nest.pack_sequence_as(grads, out)

    def _reduce(self, grads, sources):
        if self._process_set.included() is False:  # Horovod: a rank outside the set keeps its own gradients
            return list(grads)
        dense = [tf.convert_to_tensor(g) for g in grads]
        with gradient_reduction():  # each run of it ends a step in this rank's record (core/stats.py)
            return grouped_allreduce(dense, op=self._op, compression=self._compression,
                                     prescale_factor=1.0 / self._factor, postscale_factor=self._factor,
                                     name="DistributedGradientTape", process_set=self._process_set)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None):
        """Horovod's API: ``gradient()`` split into ``(local, global)`` lists of (source, gradient)."""
        sources = list(sources)
        grads = self.gradient(target, sources, output_gradients=output_gradients)
        pairs = list(zip(sources, grads))
        return [p for p in pairs if p[0] in self._local], [p for p in pairs if p[0] not in self._local]


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """:class:`DistributedGradientTape` that keeps the gradients of ``local_layers``' (a Keras layer or
    a list of them) trainable variables on this rank (Horovod >= 0.27, model parallelism)."""
    local = local_layer_variables(local_layers, "PartialDistributedGradientTape")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set, scale_local_gradients)
    for var in local:
        tape.register_local_source(var)
    return tape
