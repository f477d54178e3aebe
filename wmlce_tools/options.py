"""A job's options, declared once: ``wml render``, ``wml submit`` (and every command that makes a
job) take them as command-line options, and Python callers build the same ``JobOptions``.

Each field of ``JobOptions`` carries its typer option (names, help) in its annotation and its
default as the field's default; ``job_options`` turns a command ``f(..., opts: JobOptions, ...)``
into one with those options, and ``plan_from`` makes the checked JobPlan from them.

The options layer, between `runs` (below) and `api` / `cli` (above it).
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence

import typer
from typing_extensions import Annotated

from .errors import WmlError

Site = Annotated[Optional[str], typer.Option("--site", "-s", help="Site profile (default: $WML_SITE, detection, then 'local').")]


@dataclass(frozen=True)
class JobOptions:
    """What ``wml render``/``wml submit`` take before the program, as given (strings, as typed;
    checked by ``plan_from``).  From Python: ``JobOptions(nodes=2, walltime="30")`` or
    ``JobOptions.of(**kwargs)`` (an unknown name is one WmlError)."""

    site: Site = None
    horovod: Annotated[bool, typer.Option("--horovod", help="Run a Horovod script unchanged: 'import horovod.torch' (.tensorflow, .keras) gives ddl_runtime's Horovod API (exports WML_HOROVOD=1 for ddlrun).")] = False
    lms: Annotated[bool, typer.Option("--lms", help="Large Model Support: tensors a model does not keep on the GPU are swapped to host memory, so a model larger than GPU memory trains (exports WML_LMS=1 for ddlrun).")] = False
    nodes: Annotated[int, typer.Option("--nodes", "-N", help="Nodes.")] = 1
    ranks_per_node: Annotated[Optional[int], typer.Option(help="Ranks per node (default: GPUs per node, or 1).")] = None
    gpus_per_rank: Annotated[Optional[int], typer.Option(help="GPUs per rank (default: GPUs per node / ranks per node).")] = None
    ranks_per_gpu: Annotated[Optional[int], typer.Option(help="K consecutive ranks of a node share one GPU (ranks per node default to GPUs x K; Summit adds -alloc_flags gpumps).")] = None
    cores_per_rank: Annotated[Optional[int], typer.Option(help="Cores per rank (default: fair share of usable cores).")] = None
    threads_per_core: Annotated[Optional[int], typer.Option(help="Hardware threads per core a rank uses (SMT level).")] = None
    walltime: Annotated[Optional[str], typer.Option("--walltime", "-t", help="Walltime: minutes (90), 90m, 2h, 1h30m, HH:MM, HH:MM:SS, D-HH[:MM[:SS]] or seconds (90s); each scheduler gets its own form of it, in whole minutes rounded up.")] = None
    queue: Annotated[Optional[str], typer.Option("--queue", "-q", help="Queue or partition (default: the site's; when the default refuses the job, the first that takes it, named in the dry run and the submit line; never a preemptable one).")] = None
    qos: Annotated[Optional[str], typer.Option("--qos", help="Slurm quality of service beside the partition (sbatch --qos; OLCF Frontier: --qos debug); one of the site profile's QOSes when it lists them.")] = None
    project: Annotated[Optional[str], typer.Option("--account", "-A", "--project", "-P", help="Project/account to charge: -A/--account as sbatch and qsub take it, -P/--project as bsub (default: the site profile's defaults.account).")] = None
    job_name: Annotated[str, typer.Option("--job-name", "-J", help="Job name.")] = "wml-job"
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Job output file (scheduler pattern, e.g. out.%J).")] = None
    error: Annotated[Optional[str], typer.Option("--error", "-e", help="Job error file (default: next to the output).")] = None
    env: Annotated[Optional[str], typer.Option("--env", help="Env to activate in the job: a conda env (name or path) or a virtualenv (python -m venv, uv venv; by path). wml render and --dry-run for another site take a path as it is there.")] = None
    module: Annotated[Optional[List[str]], typer.Option("--module", help="Module to load (repeatable).")] = None
    export: Annotated[Optional[List[str]], typer.Option("--export", help="KEY=VALUE exported to every rank (repeatable).")] = None
    after: Annotated[Optional[str], typer.Option("--after", help="Start after job JOBID has completed successfully.")] = None
    rack_contiguous: Annotated[bool, typer.Option("--rack-contiguous", help="LSF expert mode: nodes in as few racks as possible.")] = False
    alloc_flags: Annotated[Optional[List[str]], typer.Option("--alloc-flags", help="LSF -alloc_flags words beside the SMT level, which follows --threads-per-core (e.g. 'gpumps NVME'; repeatable).")] = None
    gpu_binding: Annotated[Optional[str], typer.Option("--gpu-binding", help="per-rank: each rank sees only its GPUs; local-rank: one resource set per node with all its GPUs visible (CUDA IPC between them), each rank picks its GPU by local rank (default: the site's).")] = None
    gpu_sharing: Annotated[Optional[str], typer.Option("--gpu-sharing", metavar="mps|time-slice", help="Ranks sharing a GPU (--ranks-per-gpu): mps: ddlrun starts one CUDA MPS control daemon per node before the ranks and stops it after them; time-slice: no MPS (default: the site profile's gpu_sharing, else time-slice).")] = None
    chain: Annotated[Optional[int], typer.Option("--chain", help="Run longer than a walltime: submit N jobs, each starting when the previous one ends (afterany); a signal before each walltime tells the ranks to checkpoint and stop (exit 75), the next job resumes from the checkpoint, and the job that finishes the run cancels the rest.")] = None
    checkpoint_dir: Annotated[Optional[str], typer.Option("--checkpoint-dir", help="With --chain: the directory every job of the chain checkpoints to and resumes from (default: checkpoints/ in the run's directory).")] = None
    signal_margin: Annotated[Optional[str], typer.Option("--signal-margin", help="With --chain: how long before the walltime the ranks get SIGUSR1 to checkpoint and stop; the same forms as -t (minutes, 5m, HH:MM:SS, or seconds as 90s; default: the site's, 5 minutes).")] = None
    container: Annotated[Optional[str], typer.Option("--container", metavar="IMAGE", help="Run each rank in this image with the site's container runtime (its profile's container: section: Shifter, Apptainer, podman-hpc, pyxis, the CSCS Container Engine, Charliecloud, podman), one container per rank started by the site's launcher; wml's rank shim is bound in read-only; 'none': no container, not even the site's default image.")] = None
    container_runtime: Annotated[Optional[str], typer.Option("--container-runtime", metavar="NAME", help="With --container: which of the site's runtimes (default: its container.runtime; Perlmutter: shifter or podman-hpc).")] = None
    stage_image: Annotated[Optional[str], typer.Option("--stage-image", metavar="on|off", help="With --container: copy the image file (.sif, SquashFS) to each node's local storage (the site's stage_env place) once before any rank starts and run the ranks from the copy, removed at the end when no job uses it; off: read it where it is (default: the site's container.stage).")] = None
    restarts: Annotated[Optional[int], typer.Option("--restarts", metavar="N", help="Heal the run in its allocation: up to N times, when ranks die by a signal, hang (no step ended for far longer than usual: named with their Python stack) or a node is lost, ddlrun ends the rest and relaunches from the last checkpoint (the job directory's checkpoints/, or the chain's; Checkpointer(every=...) says how often), leaving the failed node out; the same exception at the same step twice ends the run (default: the site's defaults.restarts, else 0).")] = None
    spare_nodes: Annotated[int, typer.Option("--spare-nodes", metavar="K", help="Ask for K nodes more than the layout's, for a restart (--restarts) to take in place of a node that failed; without one a failed node ends the job (a chain's next job leaves it out).")] = 0
    stage_env: Annotated[Optional[str], typer.Option("--stage-env", help="With --env: copy the env to each node's local storage (the site's stage_env place) before any rank starts, and run the ranks from the copy (no import storm on the shared file system); --stage-env=auto: on failure run from the shared env with one warning line; --stage-env=off: not even when the site stages by default.", metavar="[=auto|=off]")] = None

    mem: Annotated[Optional[str], typer.Option("--mem", help="Memory per node (64G, 500M): sbatch --mem, PBS select mem= (LSF and Cobalt jobs get whole nodes: refused).")] = None
    exclusive: Annotated[bool, typer.Option("--exclusive", help="Nodes not shared with other jobs: sbatch --exclusive, PBS place=excl (LSF and Cobalt never share a job's nodes: refused).")] = False
    reservation: Annotated[Optional[str], typer.Option("--reservation", help="Run in this reservation: sbatch --reservation, bsub -U; on PBS Pro and Cobalt the reservation's queue.")] = None
    mail: Annotated[Optional[str], typer.Option("--mail", help="Mail this user or address when the job ends or fails (sbatch --mail-user, qsub -M, bsub -u, Cobalt --notify).")] = None
    begin: Annotated[Optional[str], typer.Option("--begin", help="Start no earlier than HH:MM or YYYY-MM-DDTHH:MM[:SS] (sbatch --begin, qsub -a, bsub -b).")] = None
    constraint: Annotated[Optional[str], typer.Option("--constraint", "-C", help="Node features (sbatch --constraint, joined to the site's with &; bsub -R select[]; Cobalt --attrs).")] = None
    directive: Annotated[Optional[List[str]], typer.Option("--directive", help="A directive line of the site's scheduler copied into the script's header, e.g. '#SBATCH --licenses=scratch' (#SBATCH, #PBS, #BSUB, #COBALT; repeatable); one that sets what a wml option sets is refused.")] = None

    def __post_init__(self) -> None:
        for name in _lists():     # repeatable options: a tuple (a list from the command line)
            value = getattr(self, name)
            if isinstance(value, str):
                value = [value]
            object.__setattr__(self, name, tuple(value) if value is not None else None)

    @classmethod
    def of(cls, **kwargs: Any) -> "JobOptions":
        """``JobOptions(**kwargs)``, an unknown name refused with the closest known one."""
        import difflib

        if "account" in kwargs:       # -A/--account and -P/--project are one option
            if "project" in kwargs:
                raise WmlError("account and project are one option: give one")
            kwargs["project"] = kwargs.pop("account")
        names = [f.name for f in dataclasses.fields(cls)]
        for key in kwargs:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise WmlError(f"unknown job option {key!r}{hint}")
        return cls(**kwargs)

    def replace(self, **changes: Any) -> "JobOptions":
        return dataclasses.replace(self, **changes)


@functools.lru_cache(maxsize=None)
def _hints() -> dict:
    """JobOptions' annotations, evaluated once (each evaluation reads every field's typer.Option;
    importing this module evaluates none of them)."""
    return typing.get_type_hints(JobOptions, include_extras=True)


@functools.lru_cache(maxsize=None)
def _lists() -> tuple:
    """The repeatable options: the fields whose type is a List."""
    return tuple(name for name, hint in _hints().items() if _is_list(hint))


def _is_list(hint: Any) -> bool:
    return typing.get_origin(hint) is list or any(_is_list(a) for a in typing.get_args(hint))


def flag_options() -> frozenset:
    """The command-line names of JobOptions' options that take no value (--horovod ...)."""
    hints = _hints()
    out = set()
    for f in dataclasses.fields(JobOptions):
        base, info = typing.get_args(hints[f.name])[:2]
        if base is bool:
            out.update(d for d in (info.default, *info.param_decls) if isinstance(d, str) and d.startswith("-"))
    return frozenset(out)


def _projects_option() -> Any:
    """-A/--account/-P/--project on the command line: repeatable there, so that two different
    projects (``-A ABC -P DEF``) are refused rather than the last silently kept."""
    base = typing.get_args(_hints()["project"])[1]
    decls = [d for d in (base.default, *base.param_decls) if isinstance(d, str)]
    return Annotated[Optional[List[str]], typer.Option(*decls, help=base.help)]


def _one_project(given: Optional[Sequence[str]]) -> Optional[str]:
    if not given:
        return None
    if len(set(given)) > 1:
        raise WmlError(f"-A/--account and -P/--project name one project, given {' and '.join(dict.fromkeys(given))}: give one")
    return given[0]


def job_options(func: Callable) -> Callable:
    """A typer command from ``func(..., opts: JobOptions, ...)``: the ``opts`` parameter becomes
    one option per JobOptions field, in the declaration's order and where ``opts`` stands, and
    ``func`` is called with them gathered into one ``JobOptions``."""
    sig = inspect.signature(func)
    hints = _hints()
    projects = _projects_option()
    fields = dataclasses.fields(JobOptions)
    params: List[inspect.Parameter] = []
    for p in sig.parameters.values():
        if p.name != "opts":
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                     annotation=projects if f.name == "project" else hints[f.name]) for f in fields]
    names = {f.name for f in fields}

    @functools.wraps(func)
    def command(**kwargs: Any) -> Any:
        kwargs["project"] = _one_project(kwargs.get("project"))
        opts = JobOptions(**{k: kwargs.pop(k) for k in list(kwargs) if k in names})
        return func(opts=opts, **kwargs)

    command.__signature__ = sig.replace(parameters=params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    del command.__wrapped__       # typer reads the signature above, not func's
    return command


def _horovod_exports(export: Optional[Sequence[str]], horovod: bool, lms: bool = False) -> Optional[List[str]]:
    """--horovod: the job script exports WML_HOROVOD=1, which turns on ddlrun --horovod (--lms:
    WML_LMS=1, the same way).  ``--export WML_HOROVOD=...`` and ``--export HOROVOD_*=...`` are
    checked now as ddlrun checks them in the job, so a bad value fails here, not after the
    queue wait."""
    export = list(export) if export is not None else None
    if horovod:
        export = [*(export or []), "WML_HOROVOD=1"]
    if lms:
        export = [*(export or []), "WML_LMS=1"]
    given = dict(item.partition("=")[::2] for item in export or () if "=" in item)
    if any(k == "WML_HOROVOD" or k.startswith("HOROVOD_") for k in given):
        from .ddlrun.horovod import check_settings, wanted

        if wanted(horovod, given):
            check_settings((), given, timeline_file=False)   # the file is written on the compute nodes
    return export


def request_from(opts: JobOptions, export: Optional[Sequence[str]] = None):
    """The ResourceRequest ``opts`` ask for (every value checked), and the walltime in seconds
    (``export``: the exports with --horovod's and --lms's, when already made)."""
    from .resources import ResourceRequest, parse_exports
    from .walltime import parse_duration_s

    if export is None:
        export = _horovod_exports(opts.export, opts.horovod, opts.lms)
    walltime_s = parse_duration_s(opts.walltime) if opts.walltime is not None else None
    return ResourceRequest(
        nodes=opts.nodes, ranks_per_node=opts.ranks_per_node, gpus_per_rank=opts.gpus_per_rank,
        ranks_per_gpu=opts.ranks_per_gpu, cores_per_rank=opts.cores_per_rank, threads_per_core=opts.threads_per_core,
        walltime=-(-walltime_s // 60) if walltime_s is not None else None, walltime_s=walltime_s,
        queue=opts.queue, qos=opts.qos, project=opts.project, job_name=opts.job_name, output=opts.output, error=opts.error,
        after=opts.after, conda_env=opts.env, modules=tuple(opts.module or ()), exports=parse_exports(export or []),
        rack_contiguous=opts.rack_contiguous,
        alloc_flags=tuple(w for text in opts.alloc_flags or () for w in text.replace(",", " ").split()),
        gpu_binding=opts.gpu_binding, gpu_sharing=opts.gpu_sharing, stage_env=opts.stage_env, container=opts.container,
        container_runtime=opts.container_runtime, stage_image=opts.stage_image, mem=opts.mem, exclusive=opts.exclusive,
        reservation=opts.reservation, mail=opts.mail, begin=opts.begin, constraint=opts.constraint,
        directives=tuple(opts.directive or ()), restarts=opts.restarts, spare_nodes=opts.spare_nodes), walltime_s


def plan_from(opts: JobOptions, program: Optional[Sequence[str]], *, interactive: bool = False,
              jobdir: Optional[Path] = None, preview: bool = False, logs_dir: Optional[Path] = None):
    """The JobPlan for ``program`` with ``opts`` (with --chain: segment 1's, and the Chain; else
    the plan and None), everything checked.  ``jobdir``: default a new one under $WML_JOBS_DIR
    or ./wml-jobs; ``preview``: only shown (render, --dry-run; see plan_job)."""
    from .chain.spec import check_length
    from .jobscript import plan_job
    from .site.registry import choose_site
    from .runs.submission import new_jobdir
    from .walltime import check_two_part

    export = _horovod_exports(opts.export, opts.horovod, opts.lms) or []
    check_length(opts.chain, interactive)
    if opts.chain is None and (opts.checkpoint_dir is not None or opts.signal_margin is not None):
        raise WmlError("--checkpoint-dir and --signal-margin go with --chain N")
    profile = choose_site(opts.site)
    check_two_part(opts.walltime, profile.scheduler, profile.name)
    req, walltime_s = request_from(opts, export)
    if jobdir is None:
        base = Path(os.environ.get("WML_JOBS_DIR") or Path.cwd() / "wml-jobs")
        jobdir = new_jobdir(base.absolute(), opts.job_name)
    plan = plan_job(profile, req, list(program or []), jobdir=jobdir, interactive=interactive and opts.chain is None,
                    preview=preview)
    if opts.chain is None:
        return plan, None
    qos = profile.qos.get(opts.qos) if opts.qos else None
    if qos is not None and not qos.chains:
        raise WmlError(f"--chain: {profile.name}'s QOS {opts.qos!r} takes no job chains ({qos.description})")
    from .runs.chain import plan_chain, segment_plan

    run = plan_chain(plan, jobdir, opts.chain, opts.checkpoint_dir, opts.signal_margin, walltime_s)
    return segment_plan(plan, run, 1, logs_dir=logs_dir), run


def click_module(module: str):
    """A module of the click that typer runs on (recent typer carries its own, ``typer._click``)."""
    import importlib

    try:
        return importlib.import_module(f"typer._click.{module}")
    except ImportError:
        return importlib.import_module(f"click.{module}")


def check_no_option(program: Optional[List[str]]) -> None:
    """PROGRAM takes what follows the options as they are (ignore_unknown_options): a word that
    starts with '-' there is an option this command does not have; name the closest one."""
    if not program or not program[0].startswith("-"):
        return
    import difflib

    ctx = click_module("globals").get_current_context()
    given = program[0].split("=", 1)[0]
    names = [o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
    close = difflib.get_close_matches(given, names, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise WmlError(f"unknown option {program[0]!r}{hint} (options go before the program; see {ctx.command_path} -h)")
