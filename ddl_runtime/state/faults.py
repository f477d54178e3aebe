"""An uncaught exception on any rank ends the whole MPI job, printed once with its rank.

Installed when ddl_runtime is imported, so a rank that fails between `import ddl_runtime` and
`init()` (while the others wait inside init) also takes the job down.  It acts only when MPI
is initialized, not finalized, and the job has more than one rank; otherwise Python's
previous hook runs as usual (also in processes forked from a rank, e.g. data loader workers).
Importing this module does not import mpi4py.
"""
from __future__ import annotations

import os
import sys
import traceback

_installed = False
_pid = os.getpid()  # forked children (DataLoader workers) must never abort the MPI job


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        _record(kind, value, tb)
        mpi = sys.modules.get("mpi4py.MPI")
        if (os.getpid() != _pid or mpi is None or not mpi.Is_initialized() or mpi.Is_finalized()
                or mpi.COMM_WORLD.Get_size() == 1):
            previous(kind, value, tb)
            return
        text = "".join(traceback.format_exception(kind, value, tb))
        summary = f"{kind.__name__}: {value}".splitlines()[0] if str(value) else kind.__name__
        from . import runtime  # imports mpi4py, which is loaded already

        runtime.abort_job(f"uncaught exception: {summary}", detail=text)

    sys.excepthook = excepthook


def _record(kind, value, tb) -> None:
    """Under ddlrun --restarts ($DDL_HEARTBEAT_DIR): the exception, where and at which step, for
    ddlrun (core/heartbeat.py), so that the same one at the same step after a restart ends the run."""
    directory = os.environ.get("DDL_HEARTBEAT_DIR")
    if not directory or os.getpid() != _pid or kind in (KeyboardInterrupt, SystemExit):
        return
    try:
        from ..core.heartbeat import write_error

        rt = None
        if "mpi4py.MPI" in sys.modules:      # never import mpi4py here
            from . import runtime

            rt = runtime.get()
        rank = rt.rank if rt is not None else int(os.environ.get("RANK", "0") or 0)
        step = rt.stats.step_base + rt.stats.steps if rt is not None else None
        frames = traceback.extract_tb(tb)
        where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "?"
        write_error(os.path.abspath(directory), rank, kind.__name__, str(value), where,
                    "".join(traceback.format_exception(kind, value, tb)), step)
    except Exception:  # noqa: BLE001 - the exception itself is what must be reported
        pass
