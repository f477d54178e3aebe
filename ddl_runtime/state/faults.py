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
