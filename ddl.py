"""WML CE compatibility: scripts written for IBM DDL (`import ddl; ddl.size(); ddl.rank()`) run unchanged.

Everything is `ddl_runtime`'s API.  The difference: WML CE's `ddl` was ready as soon as it
was imported, so here the first call of any operation initializes the runtime
(`ddl_runtime.init()` is idempotent).  Importing `ddl` starts nothing (no MPI, torch or
keras); `ddl.DDLCallback` and `ddl.DDLGlobalVariablesCallback` load keras on first access.
"""
import functools as _functools

import ddl_runtime as _runtime
from ddl_runtime import DDLError, DDLInputError, DDLMismatchError  # noqa: F401

_AUTO_INIT = (
    "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size", "local_gpuid",
    "topology_info", "algorithm", "barrier", "bcast", "bcast_n", "bcast_object",
    "allreduce", "allreduce_n", "allreduce_n_async", "allgather", "shard", "scale_lr",
)
_PLAIN = ("init", "finalize", "is_initialized")
_KERAS = ("DDLCallback", "DDLGlobalVariablesCallback")

__all__ = ["DDLError", "DDLInputError", "DDLMismatchError", *_PLAIN, *_AUTO_INIT, *_KERAS]


def _auto_init(name):
    target = getattr(_runtime, name)

    @_functools.wraps(target)
    def call(*args, **kwargs):
        if not _runtime.is_initialized():
            _runtime.init()
        return target(*args, **kwargs)

    return call


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
