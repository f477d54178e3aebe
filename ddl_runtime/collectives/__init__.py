"""The collectives: DDL's operations and Horovod's negotiated ones, on the running job.

* ops.py: ddl_runtime's API (init, allreduce_n, bcast, allgather, ...; `import ddl_runtime`
  re-exports it lazily).
* flat_allreduce.py: `FlatAllreduce`, one flat bucket reduced step after step.
* negotiation.py: `Controller`, Horovod's name-negotiated requests (rounds, fusion, join);
  negotiated.py: its shared-memory path on one host; response_cache.py: repeats by id.
* process_sets.py: process sets and their controllers; adasum.py: Horovod's Adasum.
* basics.py, crossrank.py: rank and size, and cross-rank checks, for the framework modules.

May import: the runtime state, the transports, the engine, ddl_runtime.core,
ddl_runtime.errors, ddl_runtime.timeline, and `ddl_runtime` itself (whose lazy names are
ops.py's).  Not checkpoint/, the frameworks or the APIs (docs/ARCHITECTURE.md, pyproject.toml).
"""
