"""init/shutdown, ranks and sizes, the *_built/*_enabled queries and the reduction ops.

These follow horovod.common.basics: `init()` is idempotent and collective; rank(), size()
and friends raise ValueError before init (Horovod's message says to call hvd.init()).
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ...errors import DDLInputError

if TYPE_CHECKING:
    from ...state.runtime import Runtime


def _rt():
    from ...state import runtime  # imports mpi4py: only when the job is asked about

    return runtime

# Reduction ops, as Horovod numbers them.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
OP_NAMES = {Average: "average", Sum: "sum", Min: "min", Max: "max", Product: "product"}


def reduce_op(op, average, what: str) -> str:
    """Horovod's (average=, op=) pair -> the runtime's op name; Adasum is refused here (horovod.torch
    takes it before calling this: see torch/mpi_ops.py)."""
    if op is not None and average is not None:
        raise DDLInputError(f"{what}: the 'average' argument is deprecated and cannot be combined with 'op'")
    if op is None:
        op = Sum if average is False else Average
    if op == Adasum:
        raise DDLInputError(f"{what}: op=Adasum is not supported by ddl_runtime's TensorFlow/Keras Horovod "
                            "layer (horovod.torch has it); use op=hvd.Average or hvd.Sum")
    name = OP_NAMES.get(op)
    if name is None:
        raise DDLInputError(f"{what}: unknown op {op!r}; use hvd.Average, Sum, Min, Max or Product")
    return name


def init(comm=None, process_sets=None) -> None:
    """Start the runtime (MPI, communicators) on every rank; further calls do nothing.

    `comm` may be None or MPI.COMM_WORLD; `process_sets` a list of ProcessSet objects to
    register now (or "dynamic", accepted for compatibility: sets can always be added later).
    """
    from mpi4py import MPI

    if comm is not None and comm is not MPI.COMM_WORLD:
        raise DDLInputError("hvd.init(comm=...): only the whole job (None or MPI.COMM_WORLD) is supported")
    first = _rt().get() is None
    if first:  # HOROVOD_* settings -> DDL_* (read by the runtime as it starts); see horovod/environment.py
        from .. import environment as _environment
        _environment.apply()
    _rt().init()
    if first:  # notices on rank 0, HOROVOD_TIMELINE
        _environment.after_init()
    from . import process_sets as _sets
    _sets._start(process_sets)


def shutdown() -> None:
    """Finish and free the runtime's communicators (MPI itself stays up, as under Horovod with MPI)."""
    from . import process_sets as _sets
    _sets._stop()
    _rt().finalize()


def is_initialized() -> bool:
    runtime = sys.modules.get("ddl_runtime.state.runtime")
    return runtime is not None and runtime.get() is not None


def _current() -> "Runtime":
    rt = _rt().get()
    if rt is None:
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    return rt


def rank() -> int:
    return _current().rank


def size() -> int:
    return _current().size


def local_rank() -> int:
    return _current().topology.local_rank


def local_size() -> int:
    return _current().topology.local_size


def cross_rank() -> int:
    return _current().topology.cross_rank


def cross_size() -> int:
    return _current().topology.cross_size


def is_homogeneous() -> bool:
    """True when every node runs the same number of ranks."""
    t = _current().topology
    return t.local_size * t.cross_size == size()


def mpi_threads_supported() -> bool:
    _current()
    from mpi4py import MPI
    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


def mpi_enabled() -> bool:
    return True


def mpi_built() -> bool:
    return True


def gloo_enabled() -> bool:
    return False


def gloo_built() -> bool:
    return False


def nccl_built() -> int:
    """0: collectives run over MPI (GPU tensors are staged through host memory)."""
    return 0


def ddl_built() -> bool:
    """False: IBM's DDL library is not linked (ddl_runtime is what replaces it)."""
    return False


def ccl_built() -> bool:
    return False


def cuda_built() -> bool:
    return False


def rocm_built() -> bool:
    return False


__all__ = ["Average", "Sum", "Adasum", "Min", "Max", "Product", "init", "shutdown", "is_initialized",
           "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size", "is_homogeneous",
           "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built", "nccl_built",
           "ddl_built", "ccl_built", "cuda_built", "rocm_built"]
