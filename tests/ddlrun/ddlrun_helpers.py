"""Shared by the ddlrun tests (imported as a plain module: test directories are not packages)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
SHOW_ENV = HERE / "programs" / "show_env.py"

FAKE_GPU_SITE = """\
name: {name}
description: this machine pretending to have {gpus} GPUs (tests only)
scheduler: local
launcher: mpiexec
platform: linux-64
node: {{sockets: 1, cores_per_socket: 2, threads_per_core: 1, gpus_per_socket: {gpus}}}
total_nodes: 8
gpu_binding: {binding}
"""

OPENMPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
               # one host: keep Open MPI off the network interfaces of the test machine
               "OMPI_MCA_btl": "self,vader", "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def ranks(self) -> List[Dict[str, str]]:
        """The JSON lines show_env.py printed, one per rank, sorted by RANK."""
        out = []
        for line in self.stdout.splitlines():
            if "ENV " in line:
                out.append(json.loads(line.split("ENV ", 1)[1]))
        return sorted(out, key=lambda d: int(d["RANK"]))

    @property
    def error_lines(self) -> List[str]:
        return [l for l in self.stderr.splitlines() if l.strip()]




def openmpi_mpiexec() -> str | None:
    """Debian's Open MPI launcher, whatever else is on PATH (pip's MPICH usually is)."""
    for cand in ("/usr/bin/mpiexec.openmpi", "/usr/bin/mpirun.openmpi"):
        if os.path.exists(cand):
            return cand
    return None
