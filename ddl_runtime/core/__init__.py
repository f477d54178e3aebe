"""The job's description and diagnostics, without MPI: the bottom room of ddl_runtime.

* jobenv.py: `JobEnvironment`, every DDL_* setting and the launcher's variables read once
  (ddlrun's per-rank shim uses it before any MPI exists).
* topology.py: the grouping of ranks (DDL_OPTIONS modes, levels).
* watchdog.py: the stall inspector (DDL_STALL_WARNING_S / DDL_STALL_SHUTDOWN_S).
* log.py: one-line diagnostics prefixed with the rank.
* stats.py: each rank's record (steps, step and collective time, the wait for the last rank
  measured from the arrivals its agreements carry, bytes, the last steps one by one), written to
  DDL_STATS_DIR for `wml report`; `collective` wraps the collectives of the rooms above (their time
  is communication); rooms above add sections (LMS) by name.
* heartbeat.py: under `ddlrun --restarts` (DDL_HEARTBEAT_DIR), each rank's heartbeat for ddlrun's
  hang detection: a small file at most once a second, the steps in a shared mapping, the Python
  stack dumped by faulthandler past the rank's limit, an uncaught exception with its step.

Beside this room, at the package's top because users reach them by those names:
errors.py (the exception types, printed as ddl_runtime.errors.DDLInputError) and timeline.py
(`python -m ddl_runtime.timeline merge`).

May import: the standard library, numpy, ddl_runtime.errors and ddl_runtime.timeline.
Never mpi4py, a framework or another room (the layers: docs/ARCHITECTURE.md, pyproject.toml).
"""
