"""The one place that assembles a launcher's command line from a launch plan: the rank shim in
front of the program, the container around the shim, the launcher in front of that, with the
variables the decision gives the ranks.  ddlrun runs it with the job's hosts; the job script
shows it with placeholders for what only the allocation knows (its hosts, the rendezvous port).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..launchers import LaunchContext, launch_command
from ..rankenv import Decision
from .plan import SHIM_MODULE, LaunchPlan

#: what the job script's promised line says in place of what the allocation decides
MASTER_PLACEHOLDER = "<node 0>:<port from the job id>"


@dataclass(frozen=True)
class Where:
    """Where a launch runs: what the allocation and ddlrun decide (or the job script's placeholders)."""

    hosts: Optional[Sequence[str]] = None     # one per layout node (None: the launcher finds them)
    master: str = MASTER_PLACEHOLDER           # MASTER_ADDR:MASTER_PORT
    mpi_flavor: str = "mpich"                  # mpiexec only
    launcher_exe: Optional[str] = None         # the mpiexec found (mpiexec and PALS)
    rankfile: Optional[str] = None             # Open MPI rankfile / jsrun ERF path
    hostfile: Optional[str] = None             # mpiexec host file path
    edf: Optional[str] = None                  # the Container Engine's EDF path
    mode: Optional[str] = None                 # ddlrun --mode (default: the layout's)
    output: str = "prefixed"                   # the shim's --output: direct, lines or prefixed
    report: Optional[str] = None               # the shim's --report token
    timeline: Optional[str] = None
    mpiargs: Tuple[str, ...] = ()
    tag_output: bool = False                   # Open MPI's --tag-output before the program
    environ: Mapping[str, str] = ()            # the environment the launch runs in (pass values)
    exclude: Tuple[str, ...] = ()              # the allocation's hosts this launch leaves out (srun --exclude)


def device_ids(plan: LaunchPlan, gpus) -> Tuple[int, ...]:
    """Layout GPU numbers -> the device ids the node's driver uses (``node.gpu_order``: Polaris
    gives local rank 0 GPU 3, the one closest to its cores)."""
    order = plan.site.node.gpu_order
    return tuple(order[g] if g < len(order) else g for g in gpus)


def shim_argv(plan: LaunchPlan, where: Where) -> List[str]:
    """The per-rank shim and the program: what every rank runs (inside the container, if any)."""
    lay = plan.layout
    # each node's GPU lists, spelled once per placement (a real machine's nodes share one)
    spelled: Dict[tuple, str] = {}
    node_lists = []
    for n in range(lay.nodes):
        slots = lay.node_slots(n)
        text = spelled.get(slots)
        if text is None:
            text = spelled[slots] = ";".join(",".join(map(str, device_ids(plan, g))) for g, _, _ in slots)
        node_lists.append(text)
    if len(set(node_lists)) == 1:
        node_lists = node_lists[:1]
    # emulated nodes sharing the host's GPUs (--ranks-per-gpu) have GPUs though their node view has none
    has_gpus = lay.node_spec.gpus > 0 or any(gpus for p in lay.placements for gpus, _, _ in p)
    binding = plan.site.gpu_binding if has_gpus else "none"
    argv = [plan.python, "-m", SHIM_MODULE, "--size", str(lay.size),
            "--ranks-per-node", str(lay.ranks_per_node), "--binding", binding,
            "--gpus", "|".join(node_lists), "--gpu-env", plan.site.gpu_env, "--mode", where.mode or lay.mode,
            "--master", where.master]
    if lay.emulated:
        argv += ["--emulate-nodes", str(lay.nodes)]
    if where.timeline:
        argv += ["--timeline", where.timeline]
    argv += ["--output", where.output]
    if where.report:
        argv += ["--report", where.report]
    return argv + ["--", *plan.program]


def rank_variables(plan: LaunchPlan, decision: Decision, where: Where) -> Dict[str, str]:
    """The variables the launcher's own flags give every rank (``-x``, ``--env``, ``-genv``,
    ``aprun -e``): the decision's; under Open MPI, which passes nothing it is not told, also the
    job's variables of wml's contract that are set (the run record's directory, a sweep's
    parameters)."""
    env = dict(decision.rank)
    if plan.site.launcher == "mpiexec" and where.mpi_flavor == "openmpi":
        environ = dict(where.environ)
        for name in decision.names:
            if name not in env and name in environ:
                env[name] = environ[name]
    return env


def launch_argv(plan: LaunchPlan, decision: Decision, where: Where) -> List[str]:
    """The launcher's command line: the one assembly (module docstring)."""
    program = shim_argv(plan, where)
    extra = list(where.mpiargs)
    cont = plan.container
    if cont is not None:
        if where.edf:
            cont = replace(cont, edf_path=where.edf)
        env = decision.launcher_env(where.environ)     # binds' and PYTHONPATH's $VARIABLES
        program = cont.wrap(program, decision, env)
        extra = [*cont.launcher_args(decision, env), *extra]
    return _assemble(plan, plan.layout, decision, where, program, extra,
                     rankfile=where.rankfile, hostfile=where.hostfile, tag_output=where.tag_output)


def once_per_node_argv(plan: LaunchPlan, where: Where, argv: Sequence[str], decision: Decision,
                       gpus_per_rank: int = 0) -> List[str]:
    """``argv`` once on every node of the launch, through the site's launcher (the container
    check, staging an image, CUDA MPS): one rank per node holding ``gpus_per_rank`` GPUs."""
    from ..layout import compile_layout
    from ..resources import ResourceRequest

    one = compile_layout(plan.site, ResourceRequest(nodes=plan.layout.nodes, ranks_per_node=1,
                                                    gpus_per_rank=gpus_per_rank))
    return _assemble(plan, one, decision, where, list(argv), list(where.mpiargs))


def _assemble(plan: LaunchPlan, layout, decision: Decision, where: Where, program: List[str], extra: List[str],
              rankfile: Optional[str] = None, hostfile: Optional[str] = None, tag_output: bool = False) -> List[str]:
    ctx = LaunchContext(site=plan.site, hosts=list(where.hosts) if where.hosts is not None else None,
                        mpi_flavor=where.mpi_flavor, env=rank_variables(plan, decision, where), extra_args=extra,
                        rankfile=rankfile, hostfile=hostfile, exclude=tuple(where.exclude))
    argv = launch_command(layout, ctx, program)
    if tag_output:       # Open MPI: each chunk of output names its rank (ddlrun reassembles lines)
        argv[len(argv) - len(program):len(argv) - len(program)] = ["--tag-output"]
    if where.launcher_exe and plan.site.launcher in ("mpiexec", "pals"):
        argv[0] = where.launcher_exe
    return argv
