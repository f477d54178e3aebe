"""Which ``ddlrun`` a job script (and ``--stage-env``'s broadcast) runs: wml's own, by absolute path."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import List


def ddlrun_exe() -> List[str]:
    """wml's own ``ddlrun``, by absolute path: the one beside this Python (the venv need not be
    on the job's PATH), else the one on PATH, else this Python running the module.  Never a
    bare ``ddlrun``: on Summit ``module load ibm-wml-ce`` puts IBM's ddlrun first on PATH."""
    beside = Path(sys.executable).parent / "ddlrun"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ddlrun")
    if found:
        return [os.path.abspath(found)]
    return [sys.executable, "-m", "wmlce_tools.ddlrun.cli"]
