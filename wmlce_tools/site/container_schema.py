"""The ``container:`` section of a site profile: which container runtimes the centre offers,
and for each the flags, binds, environment and modules its page gives for running one
container per rank (``wml submit --container IMAGE``, ``ddlrun --container IMAGE``).

Each runtime names the centre's page it came from and the date it was checked, as the
profile's launch lines do.  What the runtimes do with these fields (how each wraps one rank's
command) is in ``wmlce_tools/container/launch.py``.
"""
from __future__ import annotations

import re
from typing import Dict, List, Literal, Optional

import msgspec
from msgspec import Meta
from typing_extensions import Annotated

RuntimeName = Literal["apptainer", "singularity", "shifter", "podman-hpc", "pyxis",
                      "container-engine", "charliecloud", "podman"]

BIND = re.compile(r"^(/|\$)[^:,]*(:/[^:,]*)?(:ro)?$")


class _Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


class ContainerRuntime(_Strict, kw_only=True):
    """One runtime as the centre documents it for a multi-node MPI/NCCL job."""

    flags: Annotated[List[str], Meta(description="flags of every rank's container (apptainer exec --rocm, podman-hpc run --mpi --gpu, srun --container-* for pyxis)")] = []
    binds: Annotated[List[str], Meta(description="host paths bound into every rank's container: SRC, SRC:DST or SRC:DST:ro ($VARIABLES expand on the node)")] = []
    env: Annotated[Dict[str, str], Meta(description="variables set on the host before the launch (APPTAINERENV_LD_LIBRARY_PATH: ...); $VARIABLES expand in the job")] = {}
    modules: Annotated[List[str], Meta(description="modules loaded before the launch (Frontier: olcf-container-tools, apptainer-enable-mpi, apptainer-enable-gpu)")] = []
    module_use: Annotated[List[str], Meta(description="module use PATH before those modules (Polaris: the spack tree that has apptainer)")] = []
    runtime_modules: Annotated[List[str], Meta(description="Shifter's own modules: --module=a,b on each rank and #SBATCH --module (Perlmutter: gpu, nccl-plugin)")] = []
    annotations: Annotated[Dict[str, str], Meta(description="CSCS Container Engine: the EDF's [annotations] (com.hooks.aws_ofi_nccl.enabled: 'true')")] = {}
    python: Annotated[str, Meta(description="the image's python, which runs wml's rank shim and a .py program")] = "python3"
    wml_dir: Annotated[str, Meta(pattern=r"^/", description="where wml's pure-Python packages (wmlce_tools, ddl_runtime) are bound read-only in the image; put on PYTHONPATH")] = "/opt/wml"
    bind_wml: Annotated[bool, Meta(description="bind wml into the image (false: the site's images carry wml themselves)")] = True
    docs: Annotated[List[str], Meta(min_length=1, description="the centre's page(s) these settings come from")]
    checked: Annotated[str, Meta(pattern=r"^\d{4}-\d{2}-\d{2}$", description="the date the page was checked (YYYY-MM-DD)")]

    def __post_init__(self) -> None:
        for b in self.binds:
            if not BIND.match(b):
                raise ValueError(f"bind {b!r}: expected SRC, SRC:DST or SRC:DST:ro with absolute paths")


class ContainerOptions(_Strict, kw_only=True):
    """The runtimes a site offers; ``runtime`` is the one ``--container`` uses unless
    ``--container-runtime`` names another."""

    runtime: Annotated[RuntimeName, Meta(description="the default runtime (one of runtimes)")]
    runtimes: Annotated[Dict[RuntimeName, ContainerRuntime], Meta(description="each runtime the centre documents")]
    image: Annotated[Optional[str], Meta(description="the site's default image: every job runs in it unless --container names another or none")] = None
    image_forms: Annotated[Optional[str], Meta(description="how an image is named here (shown in errors)")] = None
    stage: Annotated[bool, Meta(description="copy an image file (.sif, SquashFS) to the node-local place of stage_env once per node before any rank starts (ddlrun --stage-image on|off overrides)")] = False

    def __post_init__(self) -> None:
        if self.runtime not in self.runtimes:
            raise ValueError(f"runtime {self.runtime!r} is not among runtimes ({', '.join(self.runtimes) or 'none'})")
