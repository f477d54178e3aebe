"""``horovod.tensorflow`` on ddl_runtime (TensorFlow 2, eager and ``tf.function``).

    import horovod.tensorflow as hvd        # under ddlrun --horovod; or ddl_runtime.horovod.tensorflow
    hvd.init()
    with tf.GradientTape() as tape:
        loss = ...
    tape = hvd.DistributedGradientTape(tape, compression=hvd.Compression.fp16)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)

Collectives: :mod:`.mpi_ops` (the negotiated engine horovod.torch uses too).  Keras 3:
``horovod.tensorflow.keras``.  In ``tf.compat.v1`` graph mode ``broadcast_global_variables`` and
``BroadcastGlobalVariablesHook`` broadcast the graph's global variables, and ``DistributedOptimizer``
wraps TensorFlow 1 optimizers (``tf.compat.v1.train.Optimizer``).
"""
from ddl_runtime.errors import DDLInputError as _DDLInputError

from ..common import *  # noqa: F401,F403  (init, shutdown, rank, size, ..., Average, Sum, ProcessSet, ...)
from ..timeline import start_timeline, stop_timeline  # noqa: F401
from .compression import Compression  # noqa: F401
from .functions import allgather_object, broadcast_object, broadcast_object_fn, broadcast_variables  # noqa: F401
from .gradient_tape import DistributedGradientTape, PartialDistributedGradientTape  # noqa: F401
from . import elastic  # noqa: F401  (hvd.elastic: State objects and run; no elastic driver)
from .mpi_ops import (allgather, allreduce, alltoall, barrier, broadcast, broadcast_, grouped_allgather,  # noqa: F401
                      grouped_allreduce, grouped_reducescatter, join, local_rank_op, local_size_op,
                      process_set_included_op, rank_op, reducescatter, size_op)
from .errors import HorovodMismatchError, HorovodShutdownError  # noqa: F401
from .util import _executing_eagerly  # noqa: F401
from .naming import reserve_graph_threads as _reserve_graph_threads

_reserve_graph_threads()


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,  # noqa: F405
                         num_groups=0, groups=None, process_set=global_process_set,  # noqa: F405
                         scale_local_gradients=True):
    """The optimizer, reducing its gradients over the ranks: a TensorFlow 1
    ``tf.compat.v1.train.Optimizer`` (compute_gradients / apply_gradients, see legacy_optimizer.py)
    or a Keras 3 optimizer (see horovod.tensorflow.keras).
    """
    import keras
    import tensorflow as tf

    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        from .legacy_optimizer import legacy_distributed_optimizer

        return legacy_distributed_optimizer(optimizer, name, use_locking, compression, sparse_as_dense,
                                            backward_passes_per_step, op, gradient_predivide_factor, process_set,
                                            scale_local_gradients)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise _DDLInputError(f"DistributedOptimizer: a {type(optimizer).__name__} is neither a TensorFlow 1 "
                             "(tf.compat.v1.train) nor a Keras 3 optimizer")
    from ddl_runtime.horovod.keras import DistributedOptimizer as _keras_distributed

    return _keras_distributed(optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
                              compression=compression, sparse_as_dense=sparse_as_dense,
                              gradient_predivide_factor=gradient_predivide_factor, op=op,
                              backward_passes_per_step=backward_passes_per_step,
                              average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
                              groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)


def broadcast_global_variables(root_rank):
    """TensorFlow 1 graph mode: an op that assigns `root_rank`'s values to every global variable
    (``tf.compat.v1.global_variables()``).  Eagerly there is no such collection (Horovod refuses too)."""
    import tensorflow as tf

    if tf.executing_eagerly():
        raise _DDLInputError("broadcast_global_variables() needs TensorFlow 1 graph mode; eagerly use "
                             "hvd.broadcast_variables(model.variables, root_rank) (or the Keras "
                             "BroadcastGlobalVariablesCallback)")
    return tf.group(*broadcast_(tf.compat.v1.global_variables(), root_rank, name="broadcast_global_variables"))


def _session_run_hook():
    import tensorflow as tf

    class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
        """A tf.compat.v1 SessionRunHook (MonitoredTrainingSession) that broadcasts every global variable
        from `root_rank` once the session exists: the same start on every rank."""

        def __init__(self, root_rank, device=''):
            super().__init__()
            self.root_rank = root_rank
            self.bcast_op = None

        def begin(self):
            if self.bcast_op is None or self.bcast_op.graph is not tf.compat.v1.get_default_graph():
                self.bcast_op = broadcast_global_variables(self.root_rank)

        def after_create_session(self, session, coord):
            session.run(self.bcast_op)

    return BroadcastGlobalVariablesHook


BroadcastGlobalVariablesHook = _session_run_hook()
