"""Build a job: (SiteProfile, ResourceRequest, program argv) -> validated JobPlan -> script text.

Everything is checked here, before anything is written: the site limits, the layout, the
program, every value that becomes a directive.  Rendering is pure (no files, no processes)
so ``wml render`` and ``wml submit --dry-run`` stay fast.

The job-script layer (beside `jobs`): may import `chain`, `stage`, `sweeps`, `ddlrun`,
`schedulers`, `launchers`, `env`, `layout`, `site` and the foundation; never `jobs`, `runs`,
`options`, `api` or `cli`.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import jinja2

from ._version import __version__
from .cache import cache_dir
from .ddlrun.exe import ddlrun_exe
from .ddlrun.spares import allocation_nodes, check_job, job_argv
from .errors import WmlError
from .launch.command import Where, launch_argv
from .launch.plan import LaunchOptions, LaunchPlan, build_launch
from .launchers import LaunchContext, launch_command
from .layout import Layout, choose_queue, compile_layout, idle_gpu_warning
from .quoting import check_directive_value, check_job_name, check_module, comment, sh_join, sh_quote
from .schedulers.passthrough import Passthrough, passthrough
from .resources import ResourceRequest
from .resources_data import data_dir
from .schedulers import Scheduler, get_scheduler
from .site.schema import SiteProfile, replace
from .walltime import hhmm, slurm_time

if TYPE_CHECKING:
    from .chain.spec import Segment
    from .container.launch import ContainerLaunch
    from .stage.script import StagePlan

ERF_PLACEHOLDER = "<ERF written by ddlrun>"

@dataclass(frozen=True)
class SweepLaunch:
    """What a sweep's job script has beside a plain job's: the array directives, the LSF job
    name with its index range, and the launch line (the trial runner or the packed runner in
    front of the trial's ddlrun line)."""

    directives: Tuple[str, ...]
    launch_line: str
    lsf_job_name: Optional[str] = None
    launcher_line: Optional[str] = None      # packed: one trial's launch (the script's comment)


@dataclass(frozen=True)
class JobPlan:
    """A validated job, ready to render and submit."""

    site: SiteProfile
    request: ResourceRequest
    layout: Layout
    scheduler: Scheduler
    program: Tuple[str, ...]          # argv as it will run on each rank
    queue: Optional[str]
    walltime: Optional[int]           # minutes
    jobdir: Path
    workdir: Path
    output: str
    error: str
    modules: Tuple[str, ...]          # the modules the script loads (the launch plan's, by name)
    env_lines: Tuple[str, ...]        # conda env activation
    exports: Tuple[Tuple[str, str], ...]   # the user's: --export (and --horovod's, --lms's): ddlrun -x NAME
    launch: Optional[LaunchPlan] = None    # how the ranks start (wmlce_tools/launch): what ddlrun builds again
    job_vars: Tuple[Tuple[str, str], ...] = ()   # the job's own: a chain's contract, a sweep's resume (exported)
    segment: Optional["Segment"] = None   # one job of a chain (wml submit --chain N)
    stage: Optional["StagePlan"] = None   # --stage-env: the env copied to node-local storage
    staged_env_lines: Tuple[str, ...] = ()   # the env activated from the staged copy ($wml_env_prefix)
    notes: Tuple[str, ...] = ()       # warnings about how the options were read (plan_from)
    python: Tuple[Optional[str], str] = (None, "")   # the interpreter of a .py program, and why (job_python)
    passthrough: Passthrough = Passthrough()   # --mem, --exclusive, ..., --directive
    sweep: Optional["SweepLaunch"] = None    # one job of a sweep (wml sweep): its array lines, its launch
    queue_why: Optional[str] = None          # the queue wml chose (no -q, the default refused the job), and why

    def with_job_vars(self, pairs: Sequence[Tuple[str, str]]) -> "JobPlan":
        """This job with more of its own variables (a chain's contract, a sweep's resume): the
        script exports them; the ranks get those of wml's contract as the launch plan passes
        any job variable (``rankenv.CONTRACT``), not as values given to ddlrun."""
        names = {k for k, _ in pairs}
        return dataclasses.replace(self, job_vars=(*((k, v) for k, v in self.job_vars if k not in names), *pairs))

    @property
    def container(self) -> Optional["ContainerLaunch"]:
        return self.launch.container if self.launch is not None else None

    @property
    def _stage_plan(self) -> "StagePlan":
        seg = self.segment
        keep = seg is not None and seg.index < seg.chain.length     # the next segment reuses the copies
        return dataclasses.replace(self.stage, keep=True) if keep else self.stage

    @property
    def env_script_lines(self) -> Tuple[str, ...]:
        """The env's lines in the job script: staging first when the job stages it."""
        if self.stage is None:
            return self.env_lines
        return (*self._stage_plan.lines(self.scheduler.job_id_var), *self.staged_env_lines)

    @property
    def stage_end_command(self) -> str:
        """The end of the staged env's use, as a shell line (a chain's step runs it itself)."""
        return self._stage_plan.end_command(self.scheduler.job_id_var)

    def _stage_word(self, field: str) -> Optional[str]:
        return getattr(self.site.stage_env, field) if self.stage is not None else None

    @property
    def alloc_flags(self) -> Optional[str]:
        """LSF ``-alloc_flags``: the site's, its SMT word (``smt4``) set to the job's threads
        per core (OLCF: "smt1, smt2, smt4"), then the user's ``--alloc-flags``."""
        words = (self.site.alloc_flags or "").split()
        words = [f"smt{self.layout.threads_per_core}" if re.fullmatch(r"(?i)smt\d+", w) else w for w in words]
        words += [w for w in self.request.alloc_flags if w not in words]
        if self.layout.ranks_per_gpu > 1 and "gpumps" not in (w.lower() for w in words):
            # ranks sharing a GPU need CUDA MPS: Summit's GPUs are EXCLUSIVE_PROCESS otherwise
            # (OLCF Summit guide, "Multiple tasks, single GPU per RS")
            words.append("gpumps")
        need = self._stage_word("alloc_flags")      # the node-local storage staging uses (NVME)
        words += [w for w in (need or "").split() if w not in words]
        return " ".join(words) or None

    @property
    def warnings(self) -> Tuple[str, ...]:
        """Lines for stderr about a job that runs but wastes what it asks for."""
        idle = idle_gpu_warning(self.site, self.request, self.layout)
        return (*self.notes, *((idle,) if idle else ()), *self._oversubscribed())

    def _oversubscribed(self) -> Tuple[str, ...]:
        """The local site: every (emulated) node is this machine, whose cores its ranks share;
        more ranks' cores than it has run, slower, where a cluster site refuses the layout."""
        lay = self.layout
        if self.site.scheduler != "local":
            return ()
        cores = self.site.node.cores     # this machine's (an emulated node has its share)
        want = lay.size * lay.cores_per_rank
        if want <= cores:
            return ()
        return (f"{lay.size} rank(s) x {lay.cores_per_rank} core(s) on this machine's {cores} core(s): the ranks "
                f"share cores and run slower (a cluster site refuses such a layout); fewer ranks fit",)

    @property
    def attrs(self) -> Optional[str]:
        """Cobalt ``--attrs``: the queue's (its nodes' memory mode), else the site's."""
        q = self.site.queues.get(self.queue) if self.queue else None
        attrs = (q.attrs if q is not None and q.attrs else None) or self.site.attrs
        need = self._stage_word("attrs")      # the node-local SSD staging uses
        return ":".join(a for a in (attrs, need, self.passthrough.cobalt_attrs) if a) or None

    @property
    def constraint(self) -> Optional[str]:
        """Slurm ``--constraint``: the site's, and the node-local storage staging uses (nvme)."""
        need = self._stage_word("constraint")
        words: List[str] = []       # once each: --constraint nvme with --stage-env is nvme, not nvme&nvme
        for c in (self.site.slurm.constraint, need, self.passthrough.constraint):
            for w in ([c] if "|" in c else c.split("&")) if c else ():
                if w not in words:
                    words.append(w)
        return "&".join(words) or None

    @property
    def ddlrun_argv(self) -> List[str]:
        lay = self.layout
        argv = [*ddlrun_exe(), "--site", self.site.name, "-n", str(lay.size),
                "--ranks-per-node", str(lay.ranks_per_node),
                "--gpus-per-rank", str(lay.gpus_per_rank),
                *(["--ranks-per-gpu", str(lay.ranks_per_gpu)] if lay.ranks_per_gpu > 1 else []),
                "--cores-per-rank", str(lay.cores_per_rank),
                "--threads-per-core", str(lay.threads_per_core),
                "--mode", lay.mode]
        if self.request.gpu_binding:
            argv += ["--gpu-binding", self.site.gpu_binding]
        if self.request.gpu_sharing and lay.ranks_per_gpu > 1:     # ddlrun starts CUDA MPS (ddlrun/mps.py)
            argv += ["--gpu-sharing", self.request.gpu_sharing]
        if lay.emulated:
            argv += ["--emulate-nodes", str(lay.nodes)]
        for key, _ in self.exports:
            argv += ["-x", key]
        if self.container is not None:
            argv += ["--container", self.container.image, "--container-runtime", self.container.runtime]
            argv += ["--stage-image", self.request.stage_image] if self.request.stage_image else []
        elif self.site.container is not None and self.site.container.image is not None:
            argv += ["--container", "none"]      # not the site's default image
        argv += job_argv(self.request.restarts, self.request.spare_nodes)    # ddlrun/heal.py, ddlrun/spares.py
        return argv + ["--", *self.program]

    @property
    def launcher_argv(self) -> List[str]:
        """The launch ddlrun will run, as the launch plan's one assembly spells it before the
        allocation exists: hosts, the rendezvous and per-node files as placeholders, the ranks'
        variables as the plan gives them when nothing was set before the launch."""
        # ddlrun writes a jsrun ERF when the resource-set flags cannot say the layout (ranks per
        # node not a multiple of the sockets): show that here too
        from .ddlrun.rankfile import needs_erf

        lay = self.launch.layout       # a packed sweep's: one trial's, not the allocation's
        erf = ERF_PLACEHOLDER if self.site.launcher == "jsrun" and needs_erf(lay) else None
        hosts = ["localhost"] * lay.nodes if self.site.scheduler == "local" else None
        where = Where(hosts=hosts, rankfile=erf, output="direct" if lay.size == 1 else "prefixed")
        return launch_argv(self.launch, self.launch.promised(), where)

    @property
    def rank_env_lines(self) -> List[str]:
        """The ranks' variables, each with its source, as ddlrun decides them when nothing else
        is set (the script's comment)."""
        from .launch.describe import env_lines

        return env_lines(self.launch, self.launch.promised())


def active_env_python(environ=os.environ) -> Optional[Tuple[str, str]]:
    """(python, prefix) of the env active at submit: $VIRTUAL_ENV or $CONDA_PREFIX (this python
    when it is that env's), else the venv or conda env wml itself runs from; None when none is."""
    exe = sys.executable
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        prefix = environ.get(var)
        if not prefix:
            continue
        if Path(sys.prefix) == Path(prefix) or os.path.realpath(sys.prefix) == os.path.realpath(prefix):
            return exe, prefix
        python = Path(prefix) / "bin" / "python"
        if python.exists():
            return str(python), prefix
    if sys.prefix != sys.base_prefix or (Path(sys.prefix) / "conda-meta").is_dir():
        return exe, sys.prefix
    return None


def job_python(site: SiteProfile, req: ResourceRequest, modules: Sequence[str],
               environ=os.environ) -> Tuple[Optional[str], str]:
    """The one rule for the interpreter a job runs a .py with, on every site: the --env's, else
    the env active at submit (conda or venv), else the python of the site's module that the
    profile names (python_module); on the local site this python.  (None, why) when none."""
    if req.conda_env:
        return "python", f"the python of --env {req.conda_env} (first on PATH once activated)"
    active = active_env_python(environ)
    if active is not None:
        return active[0], f"the env active at submit, {active[1]}"
    if site.python_module and site.python_module in modules:
        return "python", f"the python of module {site.python_module} (site {site.name}'s python_module)"
    if site.scheduler == "local":
        return sys.executable, "this python (no env is active)"
    return None, (f"no env: give --env, or submit from an active conda env or venv"
                  f"{'' if site.python_module else f', or name the module that provides python as python_module in the {site.name} profile'}")


def _resolve_program(argv: Sequence[str], has_env: bool, workdir: Path,
                     interactive: bool = False, python: Tuple[Optional[str], str] = (sys.executable, "")) -> Tuple[str, ...]:
    if not argv and interactive:    # an interactive allocation runs a shell, not a program
        return ()
    if not argv:
        raise WmlError("no program given: wml submit [OPTIONS] PROGRAM [ARGS]...")
    prog, args = argv[0], list(argv[1:])
    if prog.startswith("-"):
        raise WmlError(f"unknown option {prog!r}: options go before the program (see --help)")
    looks_like_path = "/" in prog or prog.endswith(".py")
    if looks_like_path:
        path = (workdir / prog).resolve() if not os.path.isabs(prog) else Path(prog)
        if not path.is_file():
            raise WmlError(f"program not found: {prog}")
        if path.suffix == ".py" and not os.access(path, os.X_OK):
            if python[0] is None:
                raise WmlError(f"{prog} would run with a bare python found nowhere in the job: {python[1]}")
            return (python[0], str(path), *args)
        if not os.access(path, os.X_OK):
            raise WmlError(f"program {prog} is not executable (chmod +x it, or run it through an interpreter)")
        return (str(path), *args)
    if prog in ("python", "python3") and python[0] is None:
        raise WmlError(f"{prog} would be a bare python found nowhere in the job: {python[1]}")
    if shutil.which(prog) is None and not has_env:
        raise WmlError(f"program not found: {prog!r} is not on PATH (give a path, or --module/--env that provides it)")
    return (prog, *args)


def _env_activation(conda_env: Optional[str], check: bool = True,
                    prefix_shell: Optional[str] = None) -> Tuple[Tuple[str, ...], Optional[Path]]:
    """The job script's lines for ``--env`` and the env's prefix (``check``: the env is on this
    machine; else a path is taken as it is where the job runs).  ``prefix_shell``: the shell
    expression the env's prefix takes in the job (a staged copy's)."""
    if not conda_env:
        return (), None
    from .env.activation import env_prefix, job_env_lines

    return tuple(job_env_lines(conda_env, check=check, prefix_shell=prefix_shell)), env_prefix(conda_env, check=check)


def _interactive_queue(site: SiteProfile, req: ResourceRequest, interactive: bool) -> ResourceRequest:
    """An interactive allocation goes to the site's interactive-only queue when no -q names
    one (NERSC: the interactive QOS); a batch job is refused one."""
    if interactive and req.queue is None:
        only = [n for n, q in site.queues.items() if q.interactive_only]
        return dataclasses.replace(req, queue=only[0]) if only else req
    q = site.queues.get(req.queue) if req.queue else None
    if not interactive and q is not None and q.interactive_only:
        raise WmlError(f"queue {req.queue!r} on {site.name} is for interactive allocations only "
                       f"(wml submit --interactive); a batch job goes to {site.default_queue!r} or another -q")
    return req


def plan_job(site: SiteProfile, req: ResourceRequest, argv: Sequence[str], *,
             jobdir: Path, workdir: Optional[Path] = None, interactive: bool = False,
             preview: bool = False) -> JobPlan:
    """Validate everything about a job; raise WmlError naming the first problem.
    ``interactive``: an allocation for a shell (``wml submit --interactive``), no program needed.
    ``preview``: the script is only shown (``wml render``, ``--dry-run``): for a site other than
    this machine an ``--env`` path is not looked for here (it names a path on that machine)."""
    workdir = workdir or Path.cwd()
    if req.gpu_binding and req.gpu_binding != site.gpu_binding:
        site = replace(site, gpu_binding=req.gpu_binding)
    if req.project is None and site.defaults.account:
        req = dataclasses.replace(req, project=site.defaults.account)
    if req.restarts is None and site.defaults.restarts:
        req = dataclasses.replace(req, restarts=site.defaults.restarts)
    check_job(site, req)
    check_job_name(req.job_name)
    for option, value in (("--project", req.project), ("--queue", req.queue), ("--qos", req.qos),
                          ("--output", req.output), ("--error", req.error)):
        if value is not None:
            check_directive_value(option, value)
    choice = choose_queue(site, _interactive_queue(site, dataclasses.replace(req, nodes=allocation_nodes(site, req)),
                                                   interactive))
    queue, walltime = choice.name, choice.walltime
    layout = compile_layout(site, req)
    launch = build_launch(site, layout, LaunchOptions(
        program=tuple(argv), given=tuple(req.export_dict.items()), given_by="--export", modules=tuple(req.modules),
        container=req.container, container_runtime=req.container_runtime, workdir=str(workdir),
        record_dir=str(jobdir)))
    modules = tuple(check_module(m.name) for m in launch.modules if m.action == "load")
    if req.rack_contiguous and site.scheduler != "lsf":
        raise WmlError(f"--rack-contiguous is an LSF expert-mode option; {site.name} uses {site.scheduler}")
    sched = get_scheduler(site.scheduler)
    default_out, default_err = sched.output_paths(jobdir, req.job_name)
    output = req.output or default_out
    error = req.error or (req.output if req.output else default_err)
    for option, value in (("output path", output), ("error path", error)):
        check_directive_value(option, value)
    if req.alloc_flags and site.scheduler != "lsf":
        raise WmlError(f"--alloc-flags is an LSF option; {site.name} uses {site.scheduler}")
    if req.gpu_binding and not site.node.gpus:
        raise WmlError(f"--gpu-binding: {site.name} nodes have no GPUs")
    from .ddlrun.mps import choose as gpu_sharing

    gpu_sharing(site, layout.ranks_per_gpu, req.gpu_sharing)     # one the site cannot run: one line, here
    container = launch.container
    if container is not None and site.scheduler == "local":
        from .container.check import check_image_here

        check_image_here(container)
    from .container.check import check_job_options      # issue 60: --stage-image, --env with a container
    check_job_options(container, req.stage_image, req.conda_env)
    has_env = bool(req.conda_env or modules or container)
    python = job_python(site, req, modules) if container is None else \
        (container.spec.python, f"the python of the image {container.image}")
    program = _resolve_program(argv, has_env, workdir, interactive, python)
    if site.project_required and not req.project:
        raise WmlError(f"{site.name} charges every job to a project: give -P/--project or -A/--account "
                       "(the scheduler rejects a job without one; a default: defaults: {account: ...} in the site's profile)")
    check_env = not preview or site.scheduler == "local"
    env_lines, env_prefix = _env_activation(req.conda_env, check=check_env)
    from .stage.script import plan_staging

    if interactive and req.stage_env in ("on", "auto"):
        raise WmlError("--stage-env stages the env before a job script's ranks; --interactive runs no job script")
    stage = None if interactive else plan_staging(site, req, env_prefix, layout.nodes)
    staged_env_lines = (_env_activation(req.conda_env, check=check_env, prefix_shell='"$wml_env_prefix"')[0]
                        if stage is not None else ())
    passed = passthrough(site, req)
    return JobPlan(site=site, request=req, layout=layout, scheduler=sched, program=program,
                   launch=dataclasses.replace(launch, program=program),
                   queue=passed.queue or queue, walltime=walltime, jobdir=jobdir, workdir=workdir, passthrough=passed,
                   output=output, error=error, modules=modules, env_lines=env_lines,
                   exports=tuple(req.export_dict.items()), stage=stage, staged_env_lines=staged_env_lines,
                   python=python if program and program[0] == python[0] else (None, ""),
                   queue_why=choice.why if not passed.queue else None)


@lru_cache(maxsize=8)
def _jinja(template_dir: Optional[str] = None) -> jinja2.Environment:
    """wml's templates; a plugin scheduler's ``template_dir`` first, so that its template is found
    and may include wml's ``_body.sh.j2``."""
    cache = cache_dir()
    bcc = None
    if cache is not None:  # compiled templates, checked against the template's mtime
        (cache / "templates").mkdir(exist_ok=True)
        bcc = jinja2.FileSystemBytecodeCache(str(cache / "templates"))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([*([template_dir] if template_dir else []), str(data_dir("templates"))]),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, autoescape=False, bytecode_cache=bcc)
    env.filters["q"] = sh_quote
    env.filters["comment"] = comment
    return env


def _pbs_resources(plan: JobPlan, minutes: int) -> List[str]:
    if plan.site.scheduler != "pbs":
        return []
    from .schedulers.pbs import resource_list

    return resource_list(plan.site, allocation_nodes(plan.site, plan.request), minutes, plan.passthrough)


def _chain_context(plan: JobPlan) -> Optional[dict]:
    """What the templates need for one segment of a chain (None for a plain job): the one step
    that runs ddlrun and ends the segment (``chain/segment.py``)."""
    seg = plan.segment
    if seg is None:
        return None
    chain = seg.chain
    step = [sys.executable, "-m", "wmlce_tools.chain.segment", str(chain.run_dir), str(seg.index)]
    if not plan.site.scheduler_warns:      # no warning before the walltime: the step's own timer
        step += ["--timer", str(chain.walltime_s - chain.margin_s)]
    if plan.site.scheduler == "cobalt":    # Cobalt runs a dependent job only after an exit status of 0 (segment_end.py)
        step.append("--afterok-only")
    line = sh_join(step)
    if plan.stage is not None:             # exec runs no EXIT trap: the step ends the staged env's use itself
        line += " --then " + plan.stage_end_command
    ddlrun = plan.sweep.launch_line if plan.sweep is not None else sh_join(plan.ddlrun_argv)
    return dict(index=seg.index, length=chain.length, run_id=chain.run_id, signal=chain.signal,
                margin_s=chain.margin_s, margin_minutes=-(-chain.margin_s // 60),
                scheduler_warns=plan.site.scheduler_warns, step_line=f"{line} -- {ddlrun}")


def render_script(plan: JobPlan) -> str:
    lay, site = plan.layout, plan.site
    wall = plan.walltime or 0
    seg = plan.segment
    ctx = dict(
        version=__version__, site=site, layout=lay, job_name=plan.request.job_name,
        project=plan.request.project, queue=plan.queue, qos=plan.request.qos,
        after=plan.request.after if seg is None or seg.index == 1 else None,
        after_any=seg.previous if seg is not None else None, chain=_chain_context(plan),
        walltime_hhmm=hhmm(wall), walltime_slurm=slurm_time(wall), walltime_minutes=wall,
        output=plan.output, error=plan.error,
        output_prefix=(str(plan.jobdir / plan.request.job_name)
                       if site.scheduler == "cobalt" and not plan.request.output else None),
        rack_contiguous=plan.request.rack_contiguous, racks=lay.racks if site.nodes_per_rack else 1,
        slots=site.node.cores * lay.nodes, alloc_flags=plan.alloc_flags, attrs=plan.attrs,
        module_lines=[m.line for m in plan.launch.modules], env_lines=plan.env_script_lines,
        staged=plan.stage is not None,
        constraint=plan.constraint,
        exports=[(k, sh_quote(v)) for k, v in (*plan.exports, *plan.job_vars)], rank_env=plan.rank_env_lines,
        job_dir=sh_quote(str(plan.jobdir)),
        job_id_var=plan.scheduler.job_id_var, layout_description=lay.describe(),
        pbs_resources=_pbs_resources(plan, wall),
        extra_directives=[*(plan.container.directives(site.scheduler) if plan.container else ()), *plan.passthrough.lines],
        container_note=(f"each rank in {plan.container.runtime} image {plan.container.image}" if plan.container else None),
        launcher_line=sh_join(plan.launcher_argv),
        launch=f"cd {sh_quote(str(plan.workdir))}\n{sh_join(plan.ddlrun_argv)}",
        workdir_cd=f"cd {sh_quote(str(plan.workdir))}", ddlrun_line=sh_join(plan.ddlrun_argv),
        sweep_directives=plan.sweep.directives if plan.sweep else (), lsf_job_name=plan.request.job_name,
        alloc_nodes=allocation_nodes(site, plan.request), heals=bool(plan.request.restarts),
    )
    if plan.sweep is not None:
        ctx.update(launch=f"cd {sh_quote(str(plan.workdir))}\n{plan.sweep.launch_line}",
                   ddlrun_line=plan.sweep.launch_line, lsf_job_name=plan.sweep.lsf_job_name or plan.request.job_name)
        if plan.sweep.launcher_line:
            ctx["launcher_line"] = plan.sweep.launcher_line
    return _jinja(plan.scheduler.template_dir).get_template(plan.scheduler.template).render(**ctx)
