"""ddlrun's options + the job's hosts -> ResourceRequest -> Layout -> the launch command.

The geometry is never worked out here: ``compile_layout`` places the ranks and
``launch_command`` spells the launcher line, exactly as for the job script.  This module only
decides how many nodes and ranks per node the request has, checks them against the hosts,
and puts the per-rank shim (``rankexec``) in front of the program.
"""
from __future__ import annotations

import os
import shutil
import sys
import zlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple

from ..errors import WmlError
from ..fabric.resolve import Applied, FabricEnv, fabric_for, rank_values
from ..launchers import LaunchContext, launch_command
from ..layout import Layout, compile_layout
from ..resources import ResourceRequest
from ..site.schema import SiteProfile
from .hosts import HostSet, discover_hosts, localhost, parse_host_option, read_hostfile
from .rankfile import host_file, hostfile_bytes, placement_file

if TYPE_CHECKING:
    from ..container.launch import ContainerLaunch
    from ..container.stage import ImageCopy

JOB_ID_VARS = ("LSB_JOBID", "SLURM_JOB_ID", "COBALT_JOBID", "PBS_JOBID", "WML_JOB_ID")
PORT_LOW, PORT_SPAN = 20000, 40000
SHIM_MODULE = "wmlce_tools.ddlrun.rankexec"

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
    restarts: Optional[int] = None       # --restarts N: relaunch after a lost node, a hang or a crash (heal.py)
    spare_nodes: int = 0                 # --spare-nodes K: nodes of the allocation kept out of the layout
    exclude: Tuple[str, ...] = ()        # nodes a restart leaves out (hosts; emulated: node<i>) (spares.py)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything about one launch, decided before anything runs."""

    site: SiteProfile
    hosts: HostSet                       # the hosts used, one per node (one host when emulated)
    node_hosts: Tuple[str, ...]          # host of each layout node
    layout: Layout
    mode: str
    mpi_flavor: Optional[str]            # mpiexec only
    launcher_exe: Optional[str]          # resolved path, None when not found (dry run)
    exports: Tuple[Tuple[str, str], ...]
    master_addr: str
    master_port: int
    output: str                          # the shim's --output: direct, lines or prefixed
    placement: Optional[str]             # rankfile / ERF text, when the launch needs one
    program: Tuple[str, ...]
    timeline: Optional[str]
    mpiargs: Tuple[str, ...]
    notes: Tuple[str, ...] = ()          # lines ddlrun says before launching (e.g. fitted)
    hostfile: Optional[str] = None       # host file text passed instead of a host list (rankfile.host_file)
    fabric: Optional[FabricEnv] = None   # the site's fabric for this launch (wmlce_tools/fabric)
    fabric_report: Tuple[Applied, ...] = ()   # each fabric variable's value and where it came from
    container: Optional["ContainerLaunch"] = None   # --container: each rank's shim runs in the image
    container_env: Tuple[Tuple[str, str], ...] = ()   # the environment the container's binds and PYTHONPATH are read from
    output_tags: Optional[str] = None    # Open MPI's --tag-output is given, its tags in this style (tagged.py)
    image_copy: Optional["ImageCopy"] = None   # the image file copied to each node's local storage first
    node_names: Tuple[str, ...] = ()     # each layout node's name where spares or failed nodes are left out (spares.py)
    left_out: Tuple[str, ...] = ()       # the allocation's hosts this launch does not use (srun --exclude)

    def node_name(self, node: int) -> str:
        """Layout node ``node``'s name: its host, or ``node<i>`` on emulated nodes."""
        if self.node_names:
            return self.node_names[node]
        return f"node{node}" if self.layout.emulated else self.node_hosts[node]

    def shim_argv(self, report: Optional[str] = None) -> List[str]:
        lay = self.layout
        # each node's GPU lists, spelled once per placement (a real machine's nodes share one)
        spelled: Dict[tuple, str] = {}
        node_lists = []
        for n in range(lay.nodes):
            slots = lay.node_slots(n)
            text = spelled.get(slots)
            if text is None:
                text = spelled[slots] = ";".join(",".join(map(str, self.device_ids(g))) for g, _, _ in slots)
            node_lists.append(text)
        if len(set(node_lists)) == 1:
            node_lists = node_lists[:1]
        # emulated nodes sharing the host's GPUs (--ranks-per-gpu) have GPUs though their node view has none
        binding = self.site.gpu_binding if lay.node_spec.gpus > 0 or any(gpus for p in lay.placements for gpus, _, _ in p) else "none"
        python = self.container.spec.python if self.container is not None else sys.executable
        argv = [python, "-m", SHIM_MODULE, "--size", str(lay.size),
                "--ranks-per-node", str(lay.ranks_per_node), "--binding", binding,
                "--gpus", "|".join(node_lists), "--gpu-env", self.site.gpu_env, "--mode", self.mode,
                "--master", f"{self.master_addr}:{self.master_port}"]
        if lay.emulated:
            argv += ["--emulate-nodes", str(lay.nodes)]
        if self.timeline:
            argv += ["--timeline", self.timeline]
        argv += ["--output", self.output]
        if report:
            argv += ["--report", report]
        return argv + ["--", *self.program]

    def device_ids(self, gpus) -> Tuple[int, ...]:
        """Layout GPU numbers -> the device ids the node's driver uses (``node.gpu_order``:
        Polaris gives local rank 0 GPU 3, the one closest to its cores)."""
        order = self.site.node.gpu_order
        return tuple(order[g] if g < len(order) else g for g in gpus)

    def launcher_env(self, base: Mapping[str, str]) -> Dict[str, str]:
        """The launcher's own environment: ``base`` plus the -x variables, so launchers that
        pass their environment on (srun, jsrun, MPICH) give ranks the same values as the
        explicit -x / -genv / -e flags do."""
        env = dict(base)
        env.update(self.exports)
        if self.container is not None:    # the runtime's own settings (APPTAINERENV_*), as the job script sets them
            env.update(self.container.host_env(env))
        return env

    def command(self, rankfile_path: Optional[str] = None, report: Optional[str] = None,
                hostfile_path: Optional[str] = None, edf_path: Optional[str] = None) -> List[str]:
        program, extra = self.shim_argv(report), list(self.mpiargs)
        if self.container is not None:
            from dataclasses import replace as _replace

            cont = _replace(self.container, edf_path=edf_path) if edf_path else self.container
            env = dict(self.container_env)
            program = cont.wrap(program, env, env.get("PYTHONPATH", ""))
            extra = [*cont.launcher_args(env), *extra]
        ctx = LaunchContext(site=self.site, hosts=list(self.node_hosts), mpi_flavor=self.mpi_flavor or "mpich",
                            env=dict(self.exports), extra_args=extra, rankfile=rankfile_path,
                            hostfile=hostfile_path, exclude=self.left_out)
        argv = launch_command(self.layout, ctx, program)
        if self.output_tags:       # Open MPI: each chunk of output names its rank (runner reassembles lines)
            argv[len(argv) - len(program):len(argv) - len(program)] = ["--tag-output"]
        if self.launcher_exe and self.site.launcher in ("mpiexec", "pals"):
            argv[0] = self.launcher_exe
        return argv


def check_container_nodes(plan: LaunchPlan, per_node: Optional[bool] = None) -> None:
    """The container check before any rank starts: here, on ddlrun's node, when the job's nodes
    are this host; else once on every node through the site's launcher (one rank per node)
    (``per_node``: force one or the other)."""
    from ..container.check import check_container

    env = dict(plan.container_env)
    if per_node is None:
        per_node = len(set(plan.node_hosts)) > 1
    flavor = plan.mpi_flavor if plan.site.launcher == "mpiexec" else None    # the image's MPI must be its kin
    if not per_node:
        check_container(plan.container, plan.program, env, flavor)
        return
    from ..container.nodecheck import gather, payload

    gather(_once_per_node(plan, ["wmlce_tools.container.nodecheck", payload(plan.container, plan.program, flavor)]),
           plan.launcher_env(env), plan.node_hosts)


def _once_per_node(plan: LaunchPlan, module_argv: List[str]) -> List[str]:
    """``python -m MODULE ARGS`` once on every node of the job, through the site's launcher."""
    one = compile_layout(plan.site, ResourceRequest(nodes=plan.layout.nodes, ranks_per_node=1, gpus_per_rank=0))
    ctx = LaunchContext(site=plan.site, hosts=list(plan.node_hosts), mpi_flavor=plan.mpi_flavor or "mpich",
                        env=dict(plan.exports), extra_args=list(plan.mpiargs))
    argv = launch_command(one, ctx, [sys.executable, "-m", *module_argv])
    if plan.launcher_exe and plan.site.launcher in ("mpiexec", "pals"):
        argv[0] = plan.launcher_exe
    return argv


STAGE_TIMEOUT_S = 1800.0


def stage_image_nodes(plan: LaunchPlan, release: bool = False, per_node: Optional[bool] = None) -> None:
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

    argv = _once_per_node(plan, ["wmlce_tools.container.stage", "release" if release else "stage", stage.payload(c)])
    gather(argv, plan.launcher_env(dict(plan.container_env)), plan.node_hosts,
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


def _stats_export(items: Tuple[str, ...], env: Mapping[str, str]) -> Tuple[Tuple[str, str], ...]:
    """DDL_STATS_DIR for every rank, whatever the launcher passes on: where the runtime writes
    each rank's record (the job script's $WML_JOB_DIR/stats; a sweep's trial sets its own)."""
    from ddl_runtime.core.jobenv import stats_dir

    where = stats_dir(env)
    if where is None or any(item.partition("=")[0] == "DDL_STATS_DIR" for item in items):
        return ()
    return (("DDL_STATS_DIR", where),)


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


def build_plan(opts: DdlrunOptions, env: Mapping[str, str] = os.environ) -> LaunchPlan:
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
    # DDL_STATS_DIR: the ranks find it from $WML_JOB_DIR where the launcher passes the environment on
    # (srun, jsrun, aprun, PALS, MPICH's mpiexec); Open MPI's passes only what -x names
    stats = _stats_export(opts.exports, env) if site.launcher == "mpiexec" and flavor == "openmpi" else ()
    exports = _exports(opts.exports, env) + stats
    from ..container.launch import container_launch, with_fabric

    container = with_fabric(container_launch(site, opts.container, opts.container_runtime, os.getcwd(),
                                             pass_env=[k for k, _ in exports]), site, layout.nodes)
    image_copy, note = None, None
    if container is not None:      # an image file copied to each node's local storage before the ranks
        import dataclasses

        from ..container.stage import plan_copy

        job = next((env[v] for v in JOB_ID_VARS if env.get(v)), None) or f"pid{os.getpid()}"
        image_copy = plan_copy(site, container, opts.stage_image, env, job)
        if image_copy is not None:
            container = dataclasses.replace(container, image=str(image_copy.target(env)))
            note = f"the image {image_copy.source} is copied to {container.image} on each node before any rank starts"
    fabric = fabric_for(site, layout.nodes, container=container is not None)
    fabric_report: Tuple[Applied, ...] = ()
    if fabric is not None:     # every rank gets the site's fabric; a variable set here or given by -x wins
        extra, fabric_report = rank_values(fabric, env, dict(exports))
        exports = (*exports, *extra)
    _check_program(opts.program, container is not None)
    node_hosts = tuple(hosts.hosts[0] for _ in range(nodes)) if layout.emulated else hosts.hosts
    if opts.timeline:
        check_output_file(opts.timeline, "--timeline")
    timeline = os.path.abspath(opts.timeline) if opts.timeline else None
    whole_job = hosts.source == "PBS_NODEFILE" and len(hosts.hosts) == len(job_hosts.hosts)
    hostfile = host_file(site.launcher, flavor or "mpich", layout, node_hosts, hostfile_bytes(env), whole_job)
    output = "direct" if layout.size == 1 else ("prefixed" if opts.prefix else "lines")
    return LaunchPlan(site=site, hosts=hosts, node_hosts=node_hosts, layout=layout, mode=mode,
                      mpi_flavor=flavor, launcher_exe=exe, exports=exports,
                      master_addr=node_hosts[0], master_port=master_port(env), output=output,
                      output_tags=tags if output != "direct" else None,
                      placement=placement_file(site.launcher, flavor, layout, node_hosts),
                      program=opts.program, timeline=timeline, mpiargs=opts.mpiargs,
                      notes=tuple(n for n in (fitted, note) if n), hostfile=hostfile, image_copy=image_copy,
                      fabric=fabric, fabric_report=fabric_report, container=container,
                      node_names=node_names, left_out=left_out,
                      container_env=tuple({**env, **dict(exports)}.items()) if container is not None else ())
