"""The site profile schema: what a site YAML file may say, validated on load.

A new site is data, not code: copy a file from ``site_configs/``, change the numbers, and
``wml site validate FILE`` tells you, with file, line and key, what is wrong.  The JSON schema
(``wml site schema``) is generated from these types, so the documentation cannot drift.

The types are msgspec Structs: validation and JSON schema come from the library, and it
imports in milliseconds, which keeps ``wml render`` fast.
"""
from __future__ import annotations

from typing import Dict, List, Literal, Optional

import msgspec
from msgspec import Meta
from typing_extensions import Annotated

from .. import plugins
from ..walltime import parse_walltime
from .fabric import FabricSpec
from .container_schema import ContainerOptions

PositiveInt = Annotated[int, Meta(ge=1)]
NonNegativeInt = Annotated[int, Meta(ge=0)]



class _Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


def _check_walltime(value: Optional[str], what: str) -> None:
    if value is None:
        return
    try:
        parse_walltime(value)
    except Exception as e:  # WmlError carries the reason
        raise ValueError(f"{what}: {e}") from None


class NodeSpec(_Strict):
    """One compute node, as a job sees it (usable cores only: cores reserved for the system
    are left out, as on Summit where 1 core per socket is not schedulable)."""

    sockets: Annotated[PositiveInt, Meta(description="CPU sockets per node")]
    cores_per_socket: Annotated[PositiveInt, Meta(description="usable cores per socket")]
    threads_per_core: Annotated[int, Meta(ge=1, le=8, description="hardware threads per core (SMT levels available)")] = 1
    gpus_per_socket: Annotated[NonNegativeInt, Meta(description="GPUs attached to each socket")] = 0
    memory_gb: Annotated[Optional[Annotated[float, Meta(gt=0)]], Meta(description="memory per node in GB")] = None
    detect: Annotated[bool, Meta(description="detect cores and GPUs on this machine at load time (the local site)")] = False
    reserved_cores_per_socket: Annotated[NonNegativeInt, Meta(description="leading cores of each socket kept by the system and not counted in cores_per_socket (Aurora: cores 0 and 52); CPU bind lists skip them")] = 0
    gpu_order: Annotated[List[NonNegativeInt], Meta(description="device ids in the order local ranks take them (Polaris: [3, 2, 1, 0], as ALCF's set_affinity_gpu_polaris.sh); default 0, 1, 2, ...")] = []

    def __post_init__(self) -> None:
        if self.gpu_order and sorted(self.gpu_order) != list(range(self.sockets * self.gpus_per_socket)):
            raise ValueError(f"gpu_order {self.gpu_order} must list each of the node's {self.sockets * self.gpus_per_socket} GPU ids once")

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def gpus(self) -> int:
        return self.sockets * self.gpus_per_socket


class WalltimeBin(_Strict):
    """Walltime limit for jobs of up to ``max_nodes`` nodes (e.g. Summit's scheduling bins)."""

    max_nodes: PositiveInt
    max_walltime: Annotated[str, Meta(description="HH:MM or HH:MM:SS")]

    def __post_init__(self) -> None:
        _check_walltime(self.max_walltime, "max_walltime")


class QueueSpec(_Strict):
    """A queue (LSF, Cobalt) or partition (Slurm) and its limits."""

    max_nodes: PositiveInt
    max_walltime: Annotated[str, Meta(description="HH:MM or HH:MM:SS")]
    min_nodes: PositiveInt = 1
    min_walltime: Optional[str] = None
    default: bool = False
    walltime_bins: Annotated[List[WalltimeBin], Meta(description="smaller jobs may have shorter limits; the first bin whose max_nodes fits applies")] = []
    description: str = ""
    attrs: Annotated[Optional[str], Meta(description="Cobalt --attrs for jobs in this queue (Theta debug-flat-quad: mcdram=flat:numa=quad); default the site's")] = None
    interactive_only: Annotated[bool, Meta(description="only for interactive allocations (NERSC's interactive QOS): wml submit --interactive takes it when no -q is given, a batch job never")] = False
    preemptable: Annotated[bool, Meta(description="its jobs may be killed for others' (ALCF Polaris preemptable): wml never sends a job there without -q naming it")] = False

    def __post_init__(self) -> None:
        _check_walltime(self.max_walltime, "max_walltime")
        _check_walltime(self.min_walltime, "min_walltime")
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} is above max_nodes {self.max_nodes}")


class QosSpec(_Strict):
    """A Slurm quality of service a job may ask for beside its partition (``--qos``; OLCF
    Frontier's debug QOS), with its limits where the centre's page gives them."""

    max_nodes: Optional[PositiveInt] = None
    max_walltime: Annotated[Optional[str], Meta(description="HH:MM or HH:MM:SS")] = None
    description: str = ""
    chains: Annotated[bool, Meta(description="whether job chains (wml submit --chain) may use it (Frontier's debug: no)")] = True
    docs: Annotated[List[str], Meta(description="the centre's page for this QOS")] = []

    def __post_init__(self) -> None:
        _check_walltime(self.max_walltime, "max_walltime")


class DetectSpec(_Strict):
    """How ``wml site detect`` recognises this site: any hostname pattern matching, or all of
    the environment patterns matching (when there are any)."""

    hostnames: Annotated[List[str], Meta(description="fnmatch patterns for the login/batch host name")] = []
    environment: Annotated[Dict[str, str], Meta(description="variable -> fnmatch pattern, all must match (e.g. LMOD_SYSTEM_NAME: summit)")] = {}


class LauncherOptions(_Strict):
    """How the site's launcher is driven."""

    bind: Annotated[Optional[str], Meta(description="jsrun -b / srun --cpu-bind / aprun -cc value; default per launcher")] = None
    cuda_aware_mpi: Annotated[bool, Meta(description='jsrun --smpiargs="-gpu" (CUDA-aware Spectrum MPI)')] = False
    srun_mpi: Annotated[Optional[str], Meta(description="srun --mpi=<plugin> (e.g. pmi2, pmix)")] = None
    gpu_bind: Annotated[Optional[str], Meta(description="srun --gpu-bind=<value> (Frontier: closest) where every rank owns its GPUs; left off when ranks share a GPU (--ranks-per-gpu), which ddlrun binds")] = None
    extra_args: Annotated[List[str], Meta(description="appended to every launch line")] = []


class PbsOptions(_Strict):
    """PBS Pro resources every job of the site asks for (ALCF: ``-l select=N:system=polaris``,
    ``-l place=scatter``, ``-l filesystems=home:eagle``)."""

    select: Annotated[List[str], Meta(description="chunk resources appended to select=N (e.g. system=polaris)")] = []
    place: Annotated[str, Meta(description="-l place= (scatter: one chunk per node)")] = "scatter"
    filesystems: Annotated[Optional[str], Meta(description="-l filesystems= (ALCF: the file systems the job needs, e.g. home:eagle)")] = None


class SlurmOptions(_Strict):
    """Site-specific sbatch needs (NERSC Perlmutter: ``-C gpu``, ``-q regular``)."""

    constraint: Annotated[Optional[str], Meta(description="#SBATCH --constraint (Perlmutter: gpu)")] = None
    queue_option: Annotated[Literal["partition", "qos"], Meta(description="whether --queue names a partition or a QOS (Perlmutter: qos)")] = "partition"


class ChainOptions(_Strict):
    """How a run longer than one walltime (``wml submit --chain N``) is warned on this site.
    Slurm (``#SBATCH --signal=B:USR1@<s>``) and LSF (``#BSUB -wa USR1 -wt <min>``) can send a
    signal before the walltime; PBS Pro, Cobalt and the local site cannot, so the job script's
    own timer sends it.  A site whose scheduler ignores the warning (an LSF queue configured
    without it) says ``scheduler_warning: false`` and gets the timer too."""

    scheduler_warning: Annotated[Optional[bool], Meta(description="the scheduler sends the stop signal before the walltime (default: yes for Slurm and LSF, no for PBS Pro, Cobalt and local, whose job script keeps its own timer)")] = None
    signal_margin: Annotated[str, Meta(description="default --signal-margin: how long before the walltime the ranks are told to checkpoint and stop (minutes, HH:MM:SS or seconds as 90s)")] = "0:05:00"

    def __post_init__(self) -> None:
        from ..walltime import parse_duration_s

        try:
            parse_duration_s(self.signal_margin, "signal_margin")
        except Exception as e:  # WmlError carries the reason
            raise ValueError(str(e)) from None


class StageEnvOptions(_Strict):
    """Where ``--stage-env`` copies the job's environment on each node, and what the job must
    ask the scheduler for to get that place."""

    place: Annotated[str, Meta(min_length=2, pattern=r"^(/|\$)", description="node-local directory: $VARIABLES are expanded on each node (/mnt/bb/$USER), {node} is the node's name (emulated nodes sharing one host)")]
    default: Annotated[Literal["off", "on", "auto"], Meta(description="what --env does without --stage-env/--no-stage-env: off, on, or auto (stage; on failure use the shared env, one warning line)")] = "off"
    alloc_flags: Annotated[Optional[str], Meta(description="LSF -alloc_flags word the place needs (Summit: NVME)")] = None
    constraint: Annotated[Optional[str], Meta(description="#SBATCH --constraint the place needs (Frontier: nvme)")] = None
    attrs: Annotated[Optional[str], Meta(description="Cobalt --attrs the place needs (Theta: ssds=required:ssd_size=128)")] = None
    docs: Annotated[List[str], Meta(description="the centre's page for the place")] = []


class GpuSharingOptions(_Strict):
    """How ranks that share a GPU (``--ranks-per-gpu K``, K > 1) run on it here: under NVIDIA's
    Multi-Process Service (one control daemon per node) or time-sliced, and the centre's page
    (``--gpu-sharing mps|time-slice`` overrides ``default``)."""

    default: Annotated[Literal["mps", "time-slice"], Meta(description="mps: ranks sharing a GPU run under CUDA MPS (ALCF Polaris, OLCF Summit); time-slice: no MPS, the GPU switches between their contexts")]
    docs: Annotated[List[str], Meta(min_length=1, description="the centre's page on several ranks per GPU")]
    checked: Annotated[str, Meta(pattern=r"^\d{4}-\d{2}-\d{2}$", description="when the page was read (YYYY-MM-DD)")]
    started_by: Annotated[str, Meta(min_length=1, description="who starts MPS: ddlrun (nvidia-cuda-mps-control -d once per node before the ranks, stopped after them, as Polaris's page does), or the words for the scheduler that does (Summit: 'LSF, for -alloc_flags gpumps')")] = "ddlrun"
    exclusive_process: Annotated[bool, Meta(description="the GPUs are in EXCLUSIVE_PROCESS mode (Summit): ranks sharing one need MPS, --gpu-sharing time-slice is refused")] = False


class MpiInEnv(_Strict):
    """How the site's MPI gets into a user's Python environment (``wml env create --site S``),
    and how ``wml env verify --site S`` recognises it.  ``external``: conda-forge's placeholder
    MPI package from the ``conda-forge/label/mpi-external`` label, pinned to the version the
    site's MPI is ABI-compatible with, so the solver is satisfied and the site's library is the
    one loaded at run time.  ``build``: mpi4py compiled against the site's compiler wrapper
    (``MPICC="cc -shared" pip install --no-binary=mpi4py mpi4py``, OLCF's recipe)."""

    method: Annotated[Literal["external", "build"], Meta(description="external: conda-forge's mpi-external label; build: mpi4py built with the site's MPI compiler wrapper")]
    library: Annotated[str, Meta(min_length=1, description="substring of the path of the MPI library mpi4py must load (libmpi_cray, /opt/cray/pe/mpich)")]
    mpi: Annotated[Literal["mpich", "openmpi"], Meta(description="the MPI family the site's library is ABI-compatible with")] = "mpich"
    version: Annotated[Optional[str], Meta(description="the MPICH / Open MPI version to pin the external package to (a conda version spec: 3.4.*)")] = None
    channel: Annotated[str, Meta(description="channel holding the external placeholder packages")] = "conda-forge/label/mpi-external"
    mpicc: Annotated[str, Meta(description="MPICC for the mpi4py build (Cray: cc -shared)")] = "mpicc"
    modules: Annotated[List[str], Meta(description="modules loaded before building (PrgEnv-gnu, cray-mpich)")] = []
    docs: Annotated[List[str], Meta(description="the centre's page for the route")] = []

    def __post_init__(self) -> None:
        if self.method == "external" and not self.version:
            raise ValueError("mpi_in_env: method external needs the version of the site's MPI to pin to")


class JobDefaults(_Strict):
    """What a job on this site gets when its options do not say (a user's own copy of the
    profile on WML_SITE_PATH sets them: ``defaults: {account: m1234}``)."""

    account: Annotated[Optional[str], Meta(description="-A/--account (-P/--project) for every job that gives none")] = None
    restarts: Annotated[Optional[NonNegativeInt], Meta(description="--restarts for every job and ddlrun that gives none: how often a run is relaunched in its allocation after a lost node, a hang or a crash")] = None


class SweepOptions(_Strict):
    """How ``wml sweep`` runs many trials here: as the scheduler's job array (one job per trial,
    ``--max-running`` at once) or packed into one allocation (the trials placed on its nodes and
    GPUs, K at a time), and the centre's page behind the choice (its per-user job limits, or
    its example of several runs in one job)."""

    default: Annotated[Literal["array", "packed"], Meta(description="array: the scheduler's job array (Slurm, LSF, PBS Pro); packed: one allocation running the trials (Cobalt has no arrays; the local site; sites that limit the jobs a user may queue)")] = "array"
    array_limit: Annotated[Optional[PositiveInt], Meta(description="most trials in one array (Slurm MaxArraySize - 1, LSF MAX_JOB_ARRAY_SIZE, the centre's queued-jobs limit); a larger sweep is refused with a pointer to --pack")] = None
    docs: Annotated[List[str], Meta(description="the centre's page on per-user job limits / several runs in one job")] = []


class SiteProfile(_Strict):
    """A machine wml knows how to run jobs on."""

    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    scheduler: Annotated[str, Meta(description="wml's own (lsf, cobalt, slurm, pbs, local) or one a package installed beside wml adds (entry point group wml.schedulers)")]
    launcher: Annotated[str, Meta(description="wml's own (jsrun, aprun, srun, mpiexec, pals) or one a package installed beside wml adds (entry point group wml.launchers)")]
    platform: Literal["linux-64", "linux-ppc64le", "linux-aarch64", "osx-64", "osx-arm64"]
    node: NodeSpec
    total_nodes: Annotated[PositiveInt, Meta(description="nodes in the machine")]
    description: str = ""
    nodes_per_rack: Optional[PositiveInt] = None
    default_threads_per_core: Annotated[Optional[PositiveInt], Meta(description="SMT level a job gets by default (Summit: smt4); default node.threads_per_core")] = None
    queues: Dict[str, QueueSpec] = {}
    qos: Annotated[Dict[str, QosSpec], Meta(description="Slurm QOSes a job may ask for with --qos beside its partition (-q); none listed: --qos goes to sbatch as given")] = {}
    gpu_binding: Annotated[Literal["per-rank", "local-rank"], Meta(description="per-rank: each rank sees only its GPUs (CUDA_VISIBLE_DEVICES); "
                      "local-rank: all GPUs visible, the runtime picks by local rank")] = "per-rank"
    modules: Annotated[List[str], Meta(description="modules loaded in every job script")] = []
    python_module: Annotated[Optional[str], Meta(description="the module whose python a job runs when it has no --env and no env was active at submit (Summit: ibm-wml-ce), when the job loads it (modules, --module); none: such a job is refused")] = None
    environment: Annotated[Dict[str, str], Meta(description="variables exported in every job")] = {}
    alloc_flags: Annotated[Optional[str], Meta(description="LSF #BSUB -alloc_flags (e.g. smt4)")] = None
    attrs: Annotated[Optional[str], Meta(description="Cobalt --attrs (e.g. mcdram=cache:numa=quad)")] = None
    project_required: Annotated[bool, Meta(description="refuse to render a job without --project (OLCF rejects jobs without -P)")] = False
    launcher_options: LauncherOptions = LauncherOptions()
    gpu_sharing: Annotated[Optional[GpuSharingOptions], Meta(description="ranks sharing a GPU (--ranks-per-gpu): CUDA MPS or time-sliced, with the page (none: time-sliced unless --gpu-sharing mps)")] = None
    gpu_env: Annotated[Literal["CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"], Meta(description="variable that narrows a rank to its GPUs with per-rank binding (Frontier: ROCR_VISIBLE_DEVICES, Aurora: ZE_AFFINITY_MASK)")] = "CUDA_VISIBLE_DEVICES"
    pbs: PbsOptions = PbsOptions()
    slurm: SlurmOptions = SlurmOptions()
    chain: ChainOptions = ChainOptions()
    detect: DetectSpec = DetectSpec()
    stage_env: Annotated[Optional[StageEnvOptions], Meta(description="node-local storage for --stage-env (none: the site cannot stage)")] = None
    defaults: JobDefaults = JobDefaults()
    sweep: SweepOptions = SweepOptions()
    fabric: Annotated[Optional[FabricSpec], Meta(description="the job's communication environment: modules and variables of the GPU collective library per case, each with its page (wmlce_tools/site/fabric.py)")] = None
    container: Annotated[Optional[ContainerOptions], Meta(description="container runtimes for --container IMAGE (none: the site runs no containers)")] = None
    mpi_in_env: Annotated[Optional[MpiInEnv], Meta(description="how wml env create --site puts the site's MPI into an environment, and the library wml env verify --site expects")] = None
    docs: Annotated[List[str], Meta(description="where the facts in this profile come from")] = []

    def __post_init__(self) -> None:
        for kind, name in (("scheduler", self.scheduler), ("launcher", self.launcher)):
            if not plugins.known(kind, name):
                raise ValueError(f"{kind}: {plugins.unknown_message(kind, name)}")
        if self.scheduler != "local" and not self.queues:
            raise ValueError("a batch site needs at least one queue")
        if self.gpu_sharing is not None and self.gpu_sharing.default == "mps" and self.gpu_env != "CUDA_VISIBLE_DEVICES":
            raise ValueError(f"gpu_sharing: CUDA MPS is NVIDIA's; GPUs named by {self.gpu_env} are not")
        if self.qos and (self.scheduler != "slurm" or self.slurm.queue_option == "qos"):
            raise ValueError("qos: is for a Slurm site whose queues are partitions (slurm.queue_option: partition)")
        defaults = [n for n, q in self.queues.items() if q.default]
        if len(defaults) > 1:
            raise ValueError(f"more than one default queue: {', '.join(defaults)}")
        for qname, q in self.queues.items():
            if q.max_nodes > self.total_nodes:
                raise ValueError(f"queue {qname!r} allows {q.max_nodes} nodes but the machine has {self.total_nodes}")
        if self.default_threads_per_core and self.default_threads_per_core > self.node.threads_per_core:
            raise ValueError("default_threads_per_core is above node.threads_per_core")

    @property
    def default_queue(self) -> Optional[str]:
        for n, q in self.queues.items():
            if q.default:
                return n
        return next(iter(self.queues), None)

    @property
    def scheduler_warns(self) -> bool:
        """Whether the scheduler itself signals a chained job before its walltime."""
        if self.chain.scheduler_warning is not None:
            return self.chain.scheduler_warning and self.scheduler in ("slurm", "lsf")
        return self.scheduler in ("slurm", "lsf")

    @property
    def smt(self) -> int:
        return self.default_threads_per_core or self.node.threads_per_core


def replace(obj, **changes):
    """A copy of a (frozen) profile part with some fields changed."""
    return msgspec.structs.replace(obj, **changes)


def to_builtins(obj) -> dict:
    return msgspec.to_builtins(obj)


def json_schema() -> dict:
    """The site file's JSON schema; ``scheduler`` and ``launcher`` list the names known here
    (wml's own and the installed plugins')."""
    schema = msgspec.json.schema(SiteProfile)
    props = schema["$defs"]["SiteProfile"]["properties"]
    for kind in ("scheduler", "launcher"):
        props[kind]["enum"] = plugins.names(kind)
    return schema
