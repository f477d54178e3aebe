"""The running job's state: the one `Runtime` (MPI communicators, engine, transports, watchdog,
timeline wired together at init) and what hangs on it.

* runtime.py: `Runtime`, `init()` / `current()` / `finalize()`, abort_job.
* faults.py: an uncaught exception on any rank ends the whole MPI job (installed at import).
* hooks.py: what rooms above ask the runtime to run at init (they register; it cannot import them).

May import: the transports, the engine, ddl_runtime.core, ddl_runtime.errors,
ddl_runtime.timeline.  Not the collectives or anything above: they register in hooks.py
(the layers: docs/ARCHITECTURE.md, pyproject.toml).
"""
