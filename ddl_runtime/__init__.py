"""ddl_runtime: wml's distributed deep-learning runtime (IBM DDL's operations over mpi4py).

    import ddl_runtime as ddl
    ddl.init()
    grads = ddl.allreduce_n(grads, op="avg", names=names)

Importing this package does not start MPI or import torch: the collectives load on first
use, and `ddl_runtime.core.jobenv` works without MPI at all.
"""
from .state import faults as _faults
from .state import hooks as _hooks
from .lms import wmlce as _lms_names
from .errors import DDLError, DDLInputError, DDLMismatchError

_faults.install()  # an uncaught exception on any rank aborts the whole MPI job (see faults.py)
_lms_names.install_when_imported()  # WML CE's torch.cuda.set_enabled_lms & co. (ddl_runtime.lms.wmlce)


def _install_stop_handler() -> None:
    from .checkpoint import stop  # not at import: the runtime runs this at init (state/hooks.py)

    stop.install()  # the handler for $WML_STOP_SIGNAL (checkpoint/protocol.py), when it is set


_hooks.at_init(_install_stop_handler)

_OPS = (
    "init", "finalize", "is_initialized", "JobInfo",
    "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size", "local_gpuid",
    "topology_info", "algorithm",
    "barrier", "bcast", "bcast_n", "bcast_object", "allreduce", "allreduce_n", "allreduce_n_into",
    "allreduce_n_fresh", "allreduce_n_async",
    "allgather", "shard", "scale_lr", "shared_zeros",
)

__all__ = ["DDLError", "DDLInputError", "DDLMismatchError", *_OPS]


def __getattr__(name):
    if name in _OPS:
        from .collectives import ops
        value = getattr(ops, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ddl_runtime' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_OPS))
