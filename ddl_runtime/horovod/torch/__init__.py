"""`import ddl_runtime.horovod.torch as hvd` (or, under `ddlrun --horovod`, `import horovod.torch as hvd`).

Horovod's torch API on ddl_runtime: basics and process sets (..common), the collectives
(mpi_ops), DistributedOptimizer (optimizer), broadcast_parameters / broadcast_optimizer_state /
broadcast_object / allgather_object (functions), SyncBatchNorm and Compression.
"""
from ..common.basics import (Adasum, Average, Max, Min, Product, Sum, ccl_built, cross_rank,  # noqa: F401
                             cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init, is_homogeneous,
                             is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                             nccl_built, rank, rocm_built, shutdown, size)
from ..common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from ..common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                   remove_process_set)
from .compression import Compression  # noqa: F401
from .functions import allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters  # noqa: F401
from .mpi_ops import (allgather, allgather_async, allreduce, allreduce_, allreduce_async,  # noqa: F401
                      allreduce_async_, alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
                      broadcast_async_, grouped_allgather, grouped_allgather_async, grouped_allreduce,
                      grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                      grouped_reducescatter_async, join, poll, reducescatter, reducescatter_async,
                      sparse_allreduce_async, synchronize)
from ..timeline import start_timeline, stop_timeline  # noqa: F401
from .optimizer import DistributedOptimizer  # noqa: F401
from .sync_batch_norm import SyncBatchNorm  # noqa: F401
from . import elastic  # noqa: F401,E402  (hvd.elastic: State objects and run; no elastic driver)
from ..timeline import start_timeline, stop_timeline  # noqa: F401
