"""Where the LMS start-up shim lives, for jobs that ask for it.

``ddlrun --lms`` (or ``WML_LMS=1``, or ``wml submit --lms``) puts :data:`SHIM_DIR` first on every
rank's ``PYTHONPATH``.  It holds a ``sitecustomize`` that Python runs at start-up: it installs
WML CE's ``torch.cuda.set_enabled_lms`` and its twins when the script imports torch (and WML
CE's TensorFlow switch, which says in one line that wml's LMS is for torch), then runs the
``sitecustomize`` it hides, if there is one; and ``tensorflow_large_model_support`` (WML CE's
TensorFlow LMS package), whose ``LMS`` says the same.  A script needs no wml import.

Launching some other way (srun, mpiexec)::

    export WML_LMS=1 PYTHONPATH="$(python -m ddl_runtime.lms.shim)${PYTHONPATH:+:$PYTHONPATH}"
"""
import os

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim")

if __name__ == "__main__":
    print(SHIM_DIR)
