"""ddlrun's options + the job's hosts -> ResourceRequest -> Layout -> the launch plan -> the launch.

Nothing about the launch is worked out here: ``compile_layout`` places the ranks,
``build_launch`` (wmlce_tools/launch) makes the same plan the job script rendered, its one rule
decides each rank variable against the environment ddlrun runs in, and ``launch_argv`` assembles
the command.  This module only decides how many nodes and ranks per node the request has from the
allocation's hosts, checks them, and finds the launcher.
"""
from __future__ import annotations

import os
import shutil
import sys
import zlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple

from ..errors import WmlError
from ..launch.command import Where, launch_argv, once_per_node_argv, shim_argv
from ..rankenv import Decision
from ..launch.plan import LaunchOptions, LaunchPlan, build_launch
from ..layout import Layout, compile_layout
from ..resources import ResourceRequest
from ..site.schema import SiteProfile
from .hosts import HostSet, discover_hosts, localhost, parse_host_option, read_hostfile
from .rankfile import host_file, hostfile_bytes, placement_file

if TYPE_CHECKING:
    from ..container.launch import ContainerLaunch
    from ..container.stage import ImageCopy
    from .mps import GpuSharing

JOB_ID_VARS = ("LSB_JOBID", "SLURM_JOB_ID", "COBALT_JOBID", "PBS_JOBID", "WML_JOB_ID")
PORT_LOW, PORT_SPAN = 20000, 40000

LAUNCHER_HINTS = {
    "jsrun": "are you inside an LSF allocation on {site}? (bsub -Is or a batch job)",
    "srun": "are you inside a Slurm allocation on {site}? (salloc or sbatch)",
    "aprun": "are you on a MOM node inside a Cobalt job on {site}?",
    "pals": "are you inside a PBS job on {site}? (qsub -I or a batch job)",
    "mpiexec": "install an MPI (pip install mpich, or apt-get install openmpi-bin) or pass --mpiexec PATH",
}


@dataclass(frozen=True)
class DdlrunOptions:
    """The command line, parsed (``None``: not given)."""

    program: Tuple[str, ...]
    hosts: Optional[str] = None
    hostfile: Optional[str] = None
    np: Optional[int] = None
    ranks_per_node: Optional[int] = None
    gpus_per_rank: Optional[int] = None
    ranks_per_gpu: Optional[int] = None  # K consecutive local ranks share one GPU
    cores_per_rank: Optional[int] = None
    threads_per_core: Optional[int] = None
    gpu_binding: Optional[str] = None    # per-rank | local-rank; default the site's
    site: Optional[str] = None
    mode: Optional[str] = None
    emulate_nodes: Optional[int] = None
    exports: Tuple[str, ...] = ()        # -x NAME or NAME=VALUE
    mpiargs: Tuple[str, ...] = ()        # already split into words
    mpiexec: Optional[str] = None
    timeline: Optional[str] = None
    oversubscribe: bool = False
    prefix: bool = True
    check: bool = False
    dry_run: bool = False
    verbose: bool = False
    container: Optional[str] = None      # --container IMAGE (none: no container, not even the site's default)
    container_runtime: Optional[str] = None
    stage_image: Optional[str] = None    # --stage-image on|off (None: the site's container.stage)
    gpu_sharing: Optional[str] = None    # --gpu-sharing mps|time-slice (None: the site's; ddlrun/mps.py)
    restarts: Optional[int] = None       # --restarts N: relaunch after a lost node, a hang or a crash (heal.py)
    spare_nodes: int = 0                 # --spare-nodes K: nodes of the allocation kept out of the layout
    exclude: Tuple[str, ...] = ()        # nodes a restart leaves out (hosts; emulated: node<i>) (spares.py)
    own: Tuple[Tuple[str, str, str], ...] = ()   # (name, value, why): what ddlrun itself gives every rank (heal.py)


@dataclass(frozen=True)
class Launch:
    """One launch on the allocation's hosts: the launch plan (``wmlce_tools/launch``, built by the
    same function as the job script's) and what only the allocation says: its hosts, the MPI
    found, the rendezvous, the placement files, and the environment the launch runs in, against
    which the plan's one rule decided each variable."""

    plan: LaunchPlan
    hosts: HostSet                       # the hosts used, one per node (one host when emulated)
    node_hosts: Tuple[str, ...]          # host of each layout node
    mode: str
    mpi_flavor: Optional[str]            # mpiexec only
    launcher_exe: Optional[str]          # resolved path, None when not found (dry run)
    decision: Decision                   # what the ranks get, each variable's value and source
    environ: Tuple[Tuple[str, str], ...]   # the environment the launch runs in
    master_addr: str
    master_port: int
    output: str                          # the shim's --output: direct, lines or prefixed
    placement: Optional[str]             # rankfile / ERF text, when the launch needs one
    timeline: Optional[str]
    mpiargs: Tuple[str, ...]
    notes: Tuple[str, ...] = ()          # lines ddlrun says before launching (e.g. fitted)
    hostfile: Optional[str] = None       # host file text passed instead of a host list (rankfile.host_file)
    output_tags: Optional[str] = None    # Open MPI's --tag-output is given, its tags in this style (tagged.py)
    image_copy: Optional["ImageCopy"] = None   # the image file copied to each node's local storage first
    gpu_sharing: Optional["GpuSharing"] = None   # ranks sharing a GPU: MPS or time-sliced (ddlrun/mps.py)
    node_names: Tuple[str, ...] = ()     # each layout node's name where spares or failed nodes are left out (spares.py)
    left_out: Tuple[str, ...] = ()       # the allocation's hosts this launch does not use (srun --exclude)

    def node_name(self, node: int) -> str:
        """Layout node ``node``'s name: its host, or ``node<i>`` on emulated nodes."""
        if self.node_names:
            return self.node_names[node]
        return f"node{node}" if self.layout.emulated else self.node_hosts[node]

    @property
    def site(self) -> SiteProfile:
        return self.plan.site

    @property
    def layout(self) -> Layout:
        return self.plan.layout

    @property
    def program(self) -> Tuple[str, ...]:
        return self.plan.program

    @property
    def container(self) -> Optional["ContainerLaunch"]:
        return self.plan.container

    @property
    def fabric(self):
        return self.plan.fabric

    def where(self, rankfile: Optional[str] = None, report: Optional[str] = None,
              hostfile: Optional[str] = None, edf: Optional[str] = None) -> Where:
        return Where(hosts=self.node_hosts, master=f"{self.master_addr}:{self.master_port}",
                     mpi_flavor=self.mpi_flavor or "mpich", launcher_exe=self.launcher_exe, rankfile=rankfile,
                     mode=self.mode,
                     hostfile=hostfile, edf=edf, output=self.output, report=report, timeline=self.timeline,
                     mpiargs=self.mpiargs, tag_output=bool(self.output_tags), environ=dict(self.environ),
                     exclude=self.left_out)

    def shim_argv(self, report: Optional[str] = None) -> List[str]:
        return shim_argv(self.plan, self.where(report=report))

    def launcher_env(self, base: Mapping[str, str]) -> Dict[str, str]:
        """The launcher's own environment: ``base`` with the decided variables (launchers that
        pass their environment on, srun, jsrun, MPICH, give ranks the same values as the explicit
        -x / -genv / -e flags do) and the container runtime's (APPTAINERENV_*)."""
        env = self.decision.launcher_env(base)
        if self.container is not None:
            env.update(self.container.host_env(self.decision))
        return env

    def command(self, rankfile_path: Optional[str] = None, report: Optional[str] = None,
                hostfile_path: Optional[str] = None, edf_path: Optional[str] = None) -> List[str]:
        return launch_argv(self.plan, self.decision, self.where(rankfile_path, report, hostfile_path, edf_path))

    def edf_text(self) -> Optional[str]:
        if self.container is None:
            return None
        return self.container.edf_text(self.decision, self.launcher_env(dict(self.environ)))

    def once_per_node(self, module_argv: List[str], gpus_per_rank: int = 0) -> List[str]:
        """``python -m MODULE ARGS`` once on every node of the job, through the site's launcher
        (``gpus_per_rank``: the GPUs its step holds)."""
        return once_per_node_argv(self.plan, self.where(), [sys.executable, "-m", *module_argv], self.decision,
                                  gpus_per_rank)


def check_container_nodes(plan: Launch, per_node: Optional[bool] = None) -> None:
    """The container check before any rank starts: here, on ddlrun's node, when the job's nodes
    are this host; else once on every node through the site's launcher (one rank per node)
    (``per_node``: force one or the other)."""
    from ..container.check import check_container

    env = plan.launcher_env(dict(plan.environ))
    if per_node is None:
        per_node = len(set(plan.node_hosts)) > 1
    flavor = plan.mpi_flavor if plan.site.launcher == "mpiexec" else None    # the image's MPI must be its kin
    if not per_node:
        check_container(plan.container, plan.program, env, flavor, plan.decision)
        return
    from ..container.nodecheck import gather, payload

    gather(plan.once_per_node(["wmlce_tools.container.nodecheck",
                               payload(plan.container, plan.program, flavor, plan.decision)]),
           env, plan.node_hosts)


def _once_per_node(plan: "Launch", module_argv: List[str], gpus_per_rank: int = 0) -> List[str]:
    """``python -m MODULE ARGS`` once on every node of the job (``gpus_per_rank``: the GPUs its
    step holds: CUDA MPS's daemon must see the node's)."""
    return plan.once_per_node(module_argv, gpus_per_rank)


STAGE_TIMEOUT_S = 1800.0


def stage_image_nodes(plan: Launch, release: bool = False, per_node: Optional[bool] = None) -> None:
    """Copy the image file to every node's local storage (``release``: end the job's use of the
    copies): here when the job's nodes are this host, else once per node through the launcher;
    one WmlError naming the first node that failed."""
    from ..container import stage

    c = plan.image_copy
    if per_node is None:
        per_node = len(set(plan.node_hosts)) > 1
    if not per_node:
        (stage.release_here if release else stage.stage_here)(c)
        return
    from ..container.nodecheck import gather

    argv = plan.once_per_node(["wmlce_tools.container.stage", "release" if release else "stage", stage.payload(c)])
    gather(argv, plan.launcher_env(dict(plan.environ)), plan.node_hosts,
           what=f"{'removing' if release else 'copying'} the image {c.source}", timeout_s=STAGE_TIMEOUT_S)


def check_output_file(path: str, what: str) -> None:
    """A file the ranks will write (a timeline): its directory exists and is writable, and the
    path is not a directory; checked on the launch node, before any rank starts."""
    full = os.path.abspath(path)
    parent = os.path.dirname(full)
    if os.path.isdir(full):
        raise WmlError(f"{what} {path}: is a directory; give a file name")
    if not os.path.isdir(parent):
        raise WmlError(f"{what} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise WmlError(f"{what} {path}: directory {parent} is not writable")


def master_port(env: Mapping[str, str]) -> int:
    """A port in 20000-59999 derived from the job id (else this process id), so that
    concurrent jobs on shared nodes pick different ports."""
    job = next((env[v] for v in JOB_ID_VARS if env.get(v)), None) or f"pid{os.getpid()}"
    if env.get("WML_TRIAL"):      # a sweep's trials packed into one job run side by side
        job += f"-trial{env['WML_TRIAL']}"
    if env.get("WML_ATTEMPT", "1") != "1":     # a restart (heal.py): not the port the last attempt's ranks held
        job += f"-attempt{env['WML_ATTEMPT']}"
    return PORT_LOW + zlib.crc32(job.encode()) % PORT_SPAN


def _hosts(opts: DdlrunOptions, site: SiteProfile, env: Mapping[str, str]) -> HostSet:
    if opts.hosts and opts.hostfile:
        raise WmlError("give either -H or --hostfile, not both")
    if opts.hosts:
        return parse_host_option(opts.hosts)
    if opts.hostfile:
        return read_hostfile(opts.hostfile)
    if site.scheduler == "local":
        return localhost()
    return discover_hosts(env)


def _exports(items: Tuple[str, ...], env: Mapping[str, str]) -> Tuple[Tuple[str, str], ...]:
    from ..resources import ENV_NAME

    out: Dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not ENV_NAME.match(key):
            raise WmlError(f"-x {item!r}: {key!r} is not a valid environment variable name")
        if not eq:
            if key not in env:
                raise WmlError(f"-x {key}: {key} is not set here; use -x {key}=VALUE")
            value = env[key]
        out[key] = value
    return tuple(out.items())


def _check_mode(text: Optional[str], layout: Layout) -> str:
    if text is None:
        return layout.mode
    from ddl_runtime.errors import DDLInputError
    from ddl_runtime.core.topology import parse_mode

    try:
        mode = parse_mode(text, source="--mode")
    except DDLInputError as e:
        raise WmlError(str(e)) from None
    if mode.ranks_per_node != layout.ranks_per_node or mode.world_size != layout.size:
        raise WmlError(f"--mode {text}: {mode.ranks_per_node} ranks per node, {mode.world_size} ranks in all, "
                       f"but the job has {layout.ranks_per_node} per node, {layout.size} in all "
                       f"(expected e.g. {layout.mode})")
    return str(mode)


def _nodes_and_rpn(opts: DdlrunOptions, hosts: HostSet) -> Tuple[int, Optional[int], HostSet]:
    rpn = opts.ranks_per_node
    if opts.emulate_nodes is not None:
        if opts.emulate_nodes < 1:
            raise WmlError(f"--emulate-nodes must be >= 1, got {opts.emulate_nodes}")
        if len(hosts.hosts) != 1:
            raise WmlError(f"--emulate-nodes runs on one host, but {hosts.source} names {len(hosts.hosts)}")
        nodes = opts.emulate_nodes
        if opts.np is not None:
            if opts.np % nodes:
                raise WmlError(f"-n {opts.np} is not a multiple of --emulate-nodes {nodes}")
            if rpn is not None and rpn * nodes != opts.np:
                raise WmlError(f"-n {opts.np} is not --ranks-per-node {rpn} x --emulate-nodes {nodes}")
            rpn = opts.np // nodes
        return nodes, rpn, hosts
    if opts.np is None:
        return len(hosts.hosts), rpn, hosts
    if rpn is not None:
        if opts.np % rpn:
            raise WmlError(f"-n {opts.np} is not a multiple of --ranks-per-node {rpn}")
        nodes = opts.np // rpn
        if nodes > len(hosts.hosts):
            raise WmlError(f"-n {opts.np} at {rpn} per node needs {nodes} hosts, but {hosts.source} "
                           f"has {len(hosts.hosts)}")
        return nodes, rpn, hosts.first(nodes)
    n_hosts = len(hosts.hosts)
    if opts.np % n_hosts:
        raise WmlError(f"-n {opts.np} is not a multiple of the {n_hosts} hosts ({hosts.source}); "
                       f"give -n as a multiple of {n_hosts}, or --ranks-per-node")
    return n_hosts, opts.np // n_hosts, hosts


def _fit_to_slots(site: SiteProfile, req: ResourceRequest, layout: Layout, hosts: HostSet,
                  opts: DdlrunOptions) -> Tuple[Layout, Optional[str]]:
    """When the user asked for no rank count (neither -n nor --ranks-per-node) and the site's
    default ranks per node exceed the slots the allocation gives a host (Slurm's
    SLURM_TASKS_PER_NODE, LSF's hostfile, a hostfile's slots=N), place as many ranks per node
    as every host has slots for; GPUs per rank follow from the fewer ranks.  Returns the
    layout and the line that says so (None when nothing changed).  An explicit request that
    does not fit stays an error (``_check_slots``)."""
    if opts.np is not None or opts.ranks_per_node is not None or opts.oversubscribe or layout.emulated:
        return layout, None
    known = [s for s in hosts.slots if s is not None]
    if not known or layout.ranks_per_node <= min(known):
        return layout, None
    rpn = min(known)
    fitted = compile_layout(site, replace(req, ranks_per_node=rpn))
    slots = f"{rpn} slot(s) per node" if len(set(known)) == 1 else f"at least {rpn} slot(s) on every node"
    source = "SLURM_TASKS_PER_NODE" if hosts.source == "SLURM_JOB_NODELIST" else hosts.source
    gpus = f", {fitted.gpus_per_rank} GPU(s) per rank" if fitted.node_spec.gpus else ""
    return fitted, (f"fitted to the allocation: {fitted.size} ranks, {rpn} per node on {fitted.nodes} node(s)"
                    f"{gpus} ({source} gives {slots}; {site.name} places {layout.ranks_per_node} per node); "
                    f"-n or --ranks-per-node chooses")


def _check_slots(layout: Layout, hosts: HostSet, oversubscribe: bool) -> None:
    if oversubscribe:
        return
    per_host = layout.size if layout.emulated else layout.ranks_per_node
    for host, slots in zip(hosts.hosts, hosts.slots):
        if slots is not None and per_host > slots:
            raise WmlError(f"{per_host} ranks on {host}, which has {slots} slot(s) ({hosts.source}); "
                           f"pass --oversubscribe to allow it")


def _check_program(program: Tuple[str, ...], in_container: bool = False) -> None:
    if not program:
        raise WmlError("no program given: ddlrun [OPTIONS] [--] PROGRAM [ARGS]...")
    prog = program[0]
    if in_container and "/" not in prog:     # found on the image's PATH (checked there before the launch)
        return
    if shutil.which(prog) is not None:
        return
    if "/" in prog:
        if os.path.isfile(prog):
            raise WmlError(f"program {prog} is not executable (chmod +x it, or run it with python)")
        raise WmlError(f"program not found: {prog}")
    raise WmlError(f"program not found: {prog!r} is not on PATH")


def _launcher(site: SiteProfile, opts: DdlrunOptions,
              env: Mapping[str, str]) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """(resolved launcher path or None, MPI flavor for mpiexec, Open MPI's tag style)."""
    name = "mpiexec" if site.launcher == "pals" else site.launcher   # PALS's launcher is mpiexec
    if site.launcher == "mpiexec":
        name = opts.mpiexec or env.get("WML_MPIEXEC") or "mpiexec"
    exe = shutil.which(name)
    if exe is None:
        if opts.dry_run:
            return None, "mpich" if site.launcher == "mpiexec" else None, None
        hint = LAUNCHER_HINTS[site.launcher].format(site=site.name)
        raise WmlError(f"{name} not found: {hint}")
    if site.launcher != "mpiexec":
        return exe, None, None
    from ..launchers.mpiexec import detect_flavor, version_text
    from .tagged import tag_style

    text = version_text(exe) or ""
    flavor = detect_flavor(exe, text=text)
    if flavor is None:
        raise WmlError(f"{exe} --version names neither MPICH nor Open MPI; pass --mpiexec with one of them")
    return exe, flavor, tag_style(text) if flavor == "openmpi" else None


def build_plan(opts: DdlrunOptions, env: Mapping[str, str] = os.environ) -> Launch:
    """Validate everything; raise WmlError naming the first problem."""
    from ..site.registry import choose_site

    site = choose_site(opts.site, env)
    if opts.gpu_binding and opts.gpu_binding != site.gpu_binding:
        from ..site.schema import replace

        site = replace(site, gpu_binding=opts.gpu_binding)
    hosts = _hosts(opts, site, env)
    if site.scheduler == "local" and len(hosts.hosts) > 1:
        raise WmlError(f"the local site runs on this machine only, but {hosts.source} names "
                       f"{len(hosts.hosts)} hosts; use --emulate-nodes K to emulate nodes here, "
                       f"or a site profile (--site) for your cluster")
    job_hosts = hosts
    from .spares import usable_hosts

    hosts, left_out, node_names = usable_hosts(hosts, opts, site.launcher)
    nodes, rpn, hosts = _nodes_and_rpn(opts, hosts)
    req = ResourceRequest(nodes=nodes, ranks_per_node=rpn, gpus_per_rank=opts.gpus_per_rank,
                          ranks_per_gpu=opts.ranks_per_gpu, cores_per_rank=opts.cores_per_rank, threads_per_core=opts.threads_per_core)
    layout = compile_layout(site, req)
    layout, fitted = _fit_to_slots(site, req, layout, hosts, opts)
    if (opts.emulate_nodes or 1) > 1 and not layout.emulated:
        raise WmlError(f"--emulate-nodes needs a site without a scheduler (like 'local'); {site.name} "
                       f"uses {site.scheduler}, whose nodes are real")
    if opts.np is not None and layout.size != opts.np:  # pragma: no cover - guarded above
        raise WmlError(f"-n {opts.np}: the layout has {layout.size} ranks")
    _check_slots(layout, hosts, opts.oversubscribe)
    mode = _check_mode(opts.mode, layout)
    exe, flavor, tags = _launcher(site, opts, env)
    exports = _exports(opts.exports, env)
    import dataclasses

    from .mps import plan_sharing     # ranks sharing a GPU: CUDA MPS's directory for every rank

    job_id = next((env[v] for v in JOB_ID_VARS if env.get(v)), None)
    sharing = plan_sharing(site, layout, opts.gpu_sharing, env, job_id or "", per_node=len(set(hosts.hosts)) > 1)
    lopts = LaunchOptions(program=opts.program, given=exports, container=opts.container,
                          container_runtime=opts.container_runtime, workdir=os.getcwd(), record_dir=env.get("WML_JOB_DIR"),
                          own=(*opts.own, *((k, v, "CUDA MPS for ranks sharing a GPU (ddlrun starts it)")
                                            for k, v in (sharing.exports if sharing is not None else ()))))
    launch = build_launch(site, layout, lopts)
    container = launch.container
    plugin = launch.fabric.plugin_expected if container is not None and launch.fabric is not None else None
    if plugin is not None:     # its directory bound in and first on the library path inside (found here)
        from ..fabric.probe import find_plugin

        found = find_plugin(plugin.library, plugin.paths, launch.decide(env).launcher_env(env))
        if found is not None:
            launch = build_launch(site, layout, dataclasses.replace(lopts, plugin_dir=os.path.dirname(found)))
            container = launch.container
    image_copy, note = None, None
    if container is not None:      # an image file copied to each node's local storage before the ranks
        from ..container.stage import plan_copy

        job = next((env[v] for v in JOB_ID_VARS if env.get(v)), None) or f"pid{os.getpid()}"
        image_copy = plan_copy(site, container, opts.stage_image, env, job)
        if image_copy is not None:
            container = dataclasses.replace(container, image=str(image_copy.target(env)))
            launch = dataclasses.replace(launch, container=container)
            note = f"the image {image_copy.source} is copied to {container.image} on each node before any rank starts"
    _check_program(opts.program, container is not None)
    node_hosts = tuple(hosts.hosts[0] for _ in range(nodes)) if layout.emulated else hosts.hosts
    if opts.timeline:
        check_output_file(opts.timeline, "--timeline")
    timeline = os.path.abspath(opts.timeline) if opts.timeline else None
    whole_job = hosts.source == "PBS_NODEFILE" and len(hosts.hosts) == len(job_hosts.hosts)
    hostfile = host_file(site.launcher, flavor or "mpich", layout, node_hosts, hostfile_bytes(env), whole_job)
    output = "direct" if layout.size == 1 else ("prefixed" if opts.prefix else "lines")
    return Launch(plan=launch, hosts=hosts, node_hosts=node_hosts, mode=mode, mpi_flavor=flavor, launcher_exe=exe,
                  decision=launch.decide(env), environ=tuple(env.items()),
                  master_addr=node_hosts[0], master_port=master_port(env), output=output,
                  output_tags=tags if output != "direct" else None,
                  placement=placement_file(site.launcher, flavor, layout, node_hosts),
                  timeline=timeline, mpiargs=opts.mpiargs,
                  notes=tuple(n for n in (fitted, note) if n), hostfile=hostfile, image_copy=image_copy,
                  gpu_sharing=sharing, node_names=node_names, left_out=left_out)
