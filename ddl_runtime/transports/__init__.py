"""The transports: how bytes move between the ranks beside MPI.

* shm/: one host's shared memory (the windows, the arena, shared tensors and results).
* gpu/: GPU tensors (NCCL/RCCL, xccl for XPU, host staging, CUDA-aware MPI).

May import: the engine (its TensorRef, algorithms, kernels), ddl_runtime.core,
ddl_runtime.errors, ddl_runtime.timeline.  Not the runtime state or the collectives: what a
transport needs from them is handed to it (the layers: docs/ARCHITECTURE.md, pyproject.toml).
"""
