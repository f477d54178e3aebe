"""Where the ``horovod`` alias package lives, for jobs that ask for it.

``ddlrun --horovod`` (or ``WML_HOROVOD=1``, or ``wml submit --horovod``) puts :data:`SHIM_DIR`
first on every rank's ``PYTHONPATH``.  That directory holds one tiny package, ``horovod``, whose
modules are ``ddl_runtime.horovod``'s (``horovod.torch`` *is* ``ddl_runtime.horovod.torch``), so
a Horovod script runs unchanged.  Without it nothing named ``horovod`` is importable from
ddl_runtime, and a real Horovod installation is never shadowed.

Launching some other way (srun, mpiexec)::

    export PYTHONPATH="$(python -m ddl_runtime.horovod.shim)${PYTHONPATH:+:$PYTHONPATH}"
"""
import os

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim")

if __name__ == "__main__":
    print(SHIM_DIR)
