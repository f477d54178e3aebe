"""The engine: how a list of tensors becomes reductions, independent of who carries the bytes.

* buffers.py: `TensorRef` (numpy / torch CPU / CUDA tensors seen as one kind), dtypes, widening.
* fusion.py: bucket plans (DDL_FUSION_MB); refcache.py: tensors seen before, by identity.
* algorithms.py: the topology-aware reduction algorithms and their MPI ops and types.
* kernels.py: the in-place sums, scaling and row scatters the collectives run.
* signature.py: the digest every rank agrees on before a collective, and mismatch errors.
* engine.py: `Engine` and `Handle`, the ordered in-flight reductions over MPI.

May import: ddl_runtime.core, ddl_runtime.errors, ddl_runtime.timeline.  Not the transports,
the runtime state or anything above (the layers: docs/ARCHITECTURE.md, pyproject.toml).
"""
