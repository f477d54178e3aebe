"""Horovod's DistributedGradientTape for TensorFlow 2 (eager and tf.function)."""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from ddl_runtime.errors import DDLInputError

from ..common.basics import Average, reduce_op
from ..common.process_sets import global_process_set
from .compression import Compression
from .mpi_ops import grouped_allreduce


class DistributedGradientTape:
    """Wraps a tf.GradientTape: ``gradient()`` returns the gradients reduced over the ranks.

    ``hvd.DistributedGradientTape(tape, compression=..., op=hvd.Average, gradient_predivide_factor=...)``
    as in Horovod: all gradients go through one negotiated grouped allreduce; IndexedSlices
    become dense (Horovod's ``sparse_as_dense=True``); gradients that are None stay None.
    ``num_groups`` / ``groups`` only steer Horovod's fusion and change nothing here.
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

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tape, name)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        flat = tf.nest.flatten(grads)
        present = [i for i, g in enumerate(flat) if g is not None]
        if not present:
            return grads
        dense = [tf.convert_to_tensor(flat[i]) for i in present]
        reduced = grouped_allreduce(dense, op=self._op, compression=self._compression,
                                    prescale_factor=1.0 / self._factor, postscale_factor=self._factor,
                                    name="DistributedGradientTape", process_set=self._process_set)
        out = list(flat)
        for i, r in zip(present, reduced):
            out[i] = r
        return tf.nest.pack_sequence_as(grads, out)
