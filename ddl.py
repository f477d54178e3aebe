"""WML CE compatibility: scripts written for IBM DDL (`import ddl; ddl.size(); ddl.rank()`) run unchanged.

Everything is `ddl_runtime`'s API.  The difference: WML CE's `ddl` was ready as soon as it
was imported, so here the first call of any operation initializes the runtime
(`ddl_runtime.init()` is idempotent).  Importing `ddl` starts nothing (no MPI, torch,
TensorFlow or keras); `ddl.DDLCallback`, `ddl.DDLGlobalVariablesCallback`, `ddl.WalltimeCheckpoint`,
`ddl.weights_max_divergence` load keras (whichever backend it runs on) on first access.

As WML CE's TensorFlow operator did, the collectives take `tf.Tensor` / `tf.Variable` too
(eagerly and inside `tf.function`; they then return new tensors, see `ddl_runtime.tensorflow`);
`ddl.DistributedOptimizer` and `ddl.broadcast_variables` take Keras optimizers and variables,
torch optimizers (`ddl_runtime.torch`) and tf.Variables.
"""
import functools as _functools
import sys as _sys

import ddl_runtime as _runtime
from ddl_runtime import DDLError, DDLInputError, DDLMismatchError  # noqa: F401

_AUTO_INIT = (
    "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size", "local_gpuid",
    "topology_info", "algorithm", "barrier", "bcast", "bcast_n", "bcast_object",
    "allreduce", "allreduce_n", "allreduce_n_async", "allgather", "shard", "scale_lr",
)
_PLAIN = ("init", "finalize", "is_initialized")
_KERAS = ("DDLCallback", "DDLGlobalVariablesCallback", "WalltimeCheckpoint", "weights_max_divergence")
_DISPATCH = ("DistributedOptimizer", "broadcast_variables")
# collectives that, given TensorFlow tensors, run through ddl_runtime.tensorflow
_TF_OPS = ("allreduce", "allreduce_n", "allreduce_n_async", "bcast", "bcast_n", "allgather")

__all__ = ["DDLError", "DDLInputError", "DDLMismatchError", *_PLAIN, *_AUTO_INIT, *_KERAS, *_DISPATCH]


def _is_tf(x):
    tf = _sys.modules.get("tensorflow")
    if tf is None:
        return False
    if isinstance(x, (list, tuple)):
        return bool(x) and _is_tf(x[0])
    return isinstance(x, (tf.Tensor, tf.Variable))


def _auto_init(name):
    target = getattr(_runtime, name)

    @_functools.wraps(target)
    def call(*args, **kwargs):
        if not _runtime.is_initialized():
            _runtime.init()
        if name in _TF_OPS and args and _is_tf(args[0]):
            from ddl_runtime import tensorflow as _tf
            return getattr(_tf, name)(*args, **kwargs)
        return target(*args, **kwargs)

    return call


def DistributedOptimizer(optimizer, *args, **kwargs):
    """Gradients averaged over ranks: a torch optimizer (ddl_runtime.torch) or a Keras one (ddl_runtime.keras)."""
    torch = _sys.modules.get("torch")
    if torch is not None and isinstance(optimizer, torch.optim.Optimizer):
        from ddl_runtime import torch as _torch
        return _torch.DistributedOptimizer(optimizer, *args, **kwargs)
    from ddl_runtime import keras as _keras
    return _keras.DistributedOptimizer(optimizer, *args, **kwargs)


def broadcast_variables(variables, root_rank=0):
    """The root's values into Keras variables (ddl_runtime.keras) or tf.Variables (ddl_runtime.tensorflow)."""
    variables = list(variables)
    tf = _sys.modules.get("tensorflow")
    keras = _sys.modules.get("keras")
    if tf is not None and variables and all(isinstance(v, tf.Variable) for v in variables) and not (
            keras is not None and any(isinstance(v, keras.Variable) for v in variables)):
        if not _runtime.is_initialized():
            _runtime.init()
        from ddl_runtime import tensorflow as _tf
        return _tf.broadcast_variables(variables, root_rank=root_rank)
    from ddl_runtime import keras as _keras
    return _keras.broadcast_variables(variables, root_rank=root_rank)


def __getattr__(name):
    if name in _AUTO_INIT:
        value = _auto_init(name)
    elif name in _PLAIN:
        value = getattr(_runtime, name)
    elif name in _KERAS:
        from ddl_runtime import keras as _keras
        value = getattr(_keras, name)
    else:
        raise AttributeError(f"module 'ddl' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
