"""hvd.DistributedOptimizer around a TensorFlow 1 optimizer (``tf.compat.v1.train.Optimizer``).

As Horovod's: ``compute_gradients()`` returns the wrapped optimizer's gradients reduced over the
ranks of the process set (one grouped allreduce; tf.IndexedSlices gathered unless
``sparse_as_dense``); ``apply_gradients()``, ``get_slot()``, ``get_slot_names()`` and
``variables()`` are the wrapped optimizer's.  ``minimize()`` (Optimizer's own) goes through both.
A rank outside the process set gets its own gradients.  Graph mode (``tf.compat.v1`` sessions)
and eagerly.
"""
from __future__ import annotations

import tensorflow as tf

from ddl_runtime.errors import DDLInputError

from ddl_runtime.core.stats import gradient_reduction

from ..common.basics import Adasum, reduce_op
from ..common.local_gradients import LocalVariables
from ..common.process_sets import check_known, global_process_set
from .compression import Compression
from .mpi_ops import grouped_allreduce


class _DistributedOptimizer(tf.compat.v1.train.Optimizer):
    """A tf.compat.v1.train.Optimizer whose gradients are reduced over the ranks before they are applied."""

    def __init__(self, optimizer, name=None, use_locking=False, compression=Compression.none,
                 sparse_as_dense=False, op=None, gradient_predivide_factor=1.0, process_set=global_process_set,
                 scale_local_gradients=True):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}", use_locking=use_locking)
        self._optimizer = optimizer
        self._compression = compression or Compression.none
        self._sparse_as_dense = bool(sparse_as_dense)
        self._op = op
        self._factor = float(gradient_predivide_factor)
        self.process_set = process_set
        self._local = LocalVariables(scale_local_gradients)

    def register_local_var(self, var) -> None:
        """``var``'s gradient stays on this rank (not reduced; divided by the set's size when scaling)."""
        self._local.register([var])

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (gradient, variable) pairs, gradients reduced over the ranks."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = [list(t) for t in zip(*pairs)]
        if self._sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        check_known(self.process_set, "DistributedOptimizer")  # on every rank, in the set or not
        if self.process_set.included() is not False:  # outside the set: this rank's own gradients
            grads = self._local.exchange(grads, variables, self.process_set.size(), self._reduce)
        return list(zip(grads, variables))

    def _reduce(self, grads, variables):
        with gradient_reduction():  # each run of it ends a step in this rank's record (core/stats.py)
            return grouped_allreduce(grads, op=self._op, compression=self._compression,
                                     prescale_factor=1.0 / self._factor, postscale_factor=self._factor,
                                     process_set=self.process_set)  # unnamed: named from the graph (naming.py)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def legacy_distributed_optimizer(optimizer, name, use_locking, compression, sparse_as_dense, backward_passes_per_step,
                                 op, gradient_predivide_factor, process_set, scale_local_gradients):
    """Horovod's checks, then the wrapper (one clear line for what wml does not do)."""
    what = "DistributedOptimizer"
    if op == Adasum:
        raise DDLInputError(f"{what}: op=Adasum is not supported by wml (use hvd.Average or hvd.Sum)")
    op_name = reduce_op(op, None, what)
    if op_name not in ("average", "sum"):
        raise DDLInputError(f"{what}: op={op_name} is not supported for gradients; use hvd.Average or hvd.Sum")
    if float(gradient_predivide_factor) != 1.0 and op_name != "average":
        raise DDLInputError(f"{what}: gradient_predivide_factor needs op=hvd.Average")
    if int(backward_passes_per_step) != 1:
        raise DDLInputError(f"{what}: backward_passes_per_step={backward_passes_per_step} is not supported for a "
                            "TensorFlow 1 optimizer by wml (aggregate in the training loop, or use a Keras 3 "
                            "optimizer)")
    return _DistributedOptimizer(optimizer, name=name, use_locking=use_locking, compression=compression,
                                 sparse_as_dense=sparse_as_dense, op=op,
                                 gradient_predivide_factor=gradient_predivide_factor, process_set=process_set,
                                 scale_local_gradients=scale_local_gradients)
