"""The ``wml`` command line.

Sub-apps live beside the code they drive (``wmlce_tools/site/cli.py``, ``env/cli.py``,
``jobs/cli.py``) and are registered here, by module name: they are imported and built only when
used (or listed by ``--help``), and heavy imports happen inside commands, so ``wml render``
stays fast.
"""
import importlib

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperGroup
from typing_extensions import Annotated

from . import __version__
from .errors import WmlError, run_main

class _LazyGroup(TyperGroup):
    """A click group whose sub-commands in ``LAZY`` are imported on first use (the pattern
    click documents as "lazily loading subcommands"): typer would otherwise build every
    sub-command's parameters on every start."""

    #: name -> (module, attribute: a typer app, or a function registering commands on one)
    LAZY = {
        "site": ("wmlce_tools.site.cli", "app"),
        "env": ("wmlce_tools.env.cli", "env_app"),
        "module": ("wmlce_tools.env.cli", "module_app"),
        "jobs": ("wmlce_tools.jobs.cli", "register"),
        "status": ("wmlce_tools.jobs.cli", "register"),
        "cancel": ("wmlce_tools.jobs.cli", "register"),
        "logs": ("wmlce_tools.jobs.cli", "register"),
    }

    def list_commands(self, ctx):
        return [*super().list_commands(ctx), *self.LAZY]

    def get_command(self, ctx, name):
        if name not in self.LAZY:
            return super().get_command(ctx, name)
        module, attr = self.LAZY[name]
        obj = getattr(importlib.import_module(module), attr)
        if isinstance(obj, typer.Typer):
            cmd = typer.main.get_group(obj)
            cmd.name = name
            return cmd
        holder = typer.Typer()
        obj(holder)  # register(app): plain commands on the top level
        return typer.main.get_group(holder).get_command(ctx, name)


app = typer.Typer(
    cls=_LazyGroup,
    name="wml",
    help="Job tooling, curated environments and the DDL runtime for HPC machines "
         "(Summit/LSF, Theta/Cobalt, Slurm, PBS Pro, and this machine: the 'local' site).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},   # every sub-command inherits -h
)

PROGRAM_CONTEXT = {"allow_interspersed_args": False, "ignore_unknown_options": True,
                   "help_option_names": ["-h", "--help"]}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"wml {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True,
                                                          help="Show the version and exit.")] = None) -> None:
    """wml: turn a training script into a correct, tracked job on the machine you are on."""


# Options shared by render and submit --------------------------------------------------
Site = Annotated[Optional[str], typer.Option("--site", "-s", help="Site profile (default: $WML_SITE, detection, then 'local').")]
Nodes = Annotated[int, typer.Option("--nodes", "-N", help="Nodes.")]
RanksPerNode = Annotated[Optional[int], typer.Option(help="Ranks per node (default: GPUs per node, or 1).")]
GpusPerRank = Annotated[Optional[int], typer.Option(help="GPUs per rank (default: GPUs per node / ranks per node).")]
RanksPerGpu = Annotated[Optional[int], typer.Option(help="K consecutive ranks of a node share one GPU (ranks per node default to GPUs x K; Summit adds -alloc_flags gpumps).")]
CoresPerRank = Annotated[Optional[int], typer.Option(help="Cores per rank (default: fair share of usable cores).")]
ThreadsPerCore = Annotated[Optional[int], typer.Option(help="Hardware threads per core a rank uses (SMT level).")]
Walltime = Annotated[Optional[str], typer.Option("--walltime", "-t", help="Walltime: minutes, HH:MM, HH:MM:SS or seconds (90s); schedulers get whole minutes, rounded up.")]
Queue = Annotated[Optional[str], typer.Option("--queue", "-q", help="Queue or partition (default: the site's).")]
Project = Annotated[Optional[str], typer.Option("--project", "-P", help="Project/account to charge.")]
JobName = Annotated[str, typer.Option("--job-name", "-J", help="Job name.")]
Output = Annotated[Optional[str], typer.Option("--output", "-o", help="Job output file (scheduler pattern, e.g. out.%J).")]
ErrorFile = Annotated[Optional[str], typer.Option("--error", "-e", help="Job error file (default: next to the output).")]
Env = Annotated[Optional[str], typer.Option("--env", help="Env to activate in the job: a conda env (name or path) or a virtualenv (python -m venv, uv venv; by path). wml render and --dry-run for another site take a path as it is there.")]
StageEnv = Annotated[Optional[str], typer.Option("--stage-env", help="With --env: copy the env to each node's local storage (the site's stage_env place) before any rank starts, and run the ranks from the copy (no import storm on the shared file system); --stage-env=auto: on failure run from the shared env with one warning line; --stage-env=off: not even when the site stages by default.", metavar="[=auto|=off]")]
Module = Annotated[Optional[List[str]], typer.Option("--module", help="Module to load (repeatable).")]
Export = Annotated[Optional[List[str]], typer.Option("--export", help="KEY=VALUE exported to every rank (repeatable).")]
After = Annotated[Optional[str], typer.Option("--after", help="Start after job JOBID has completed successfully.")]
RackContiguous = Annotated[bool, typer.Option("--rack-contiguous", help="LSF expert mode: nodes in as few racks as possible.")]
AllocFlags = Annotated[Optional[List[str]], typer.Option("--alloc-flags", help="LSF -alloc_flags words beside the SMT level, which follows --threads-per-core (e.g. 'gpumps NVME'; repeatable).")]
GpuBinding = Annotated[Optional[str], typer.Option("--gpu-binding", help="per-rank: each rank sees only its GPUs; local-rank: one resource set per node with all its GPUs visible (CUDA IPC between them), each rank picks its GPU by local rank (default: the site's).")]
Horovod = Annotated[bool, typer.Option("--horovod", help="Run a Horovod script unchanged: 'import horovod.torch' (.tensorflow, .keras) gives ddl_runtime's Horovod API (exports WML_HOROVOD=1 for ddlrun).")]
ChainLength = Annotated[Optional[int], typer.Option("--chain", help="Run longer than a walltime: submit N jobs, each starting when the previous one ends (afterany); a signal before each walltime tells the ranks to checkpoint and stop (exit 75), the next job resumes from the checkpoint, and the job that finishes the run cancels the rest.")]
CheckpointDir = Annotated[Optional[str], typer.Option("--checkpoint-dir", help="With --chain: the directory every job of the chain checkpoints to and resumes from (default: checkpoints/ in the run's directory).")]
SignalMargin = Annotated[Optional[str], typer.Option("--signal-margin", help="With --chain: how long before the walltime the ranks get SIGUSR1 to checkpoint and stop; the same forms as -t (minutes, HH:MM:SS, or seconds as 90s; default: the site's, 5 minutes).")]
Program = Annotated[List[str], typer.Argument(help="The program and its arguments (a .py file runs with python).")]
OptionalProgram = Annotated[Optional[List[str]], typer.Argument(help="The program and its arguments (a .py file runs with python); none with --interactive.")]


def _horovod_exports(export, horovod: bool):
    """--horovod: the job script exports WML_HOROVOD=1, which turns on ddlrun --horovod.
    ``--export WML_HOROVOD=...`` and ``--export HOROVOD_*=...`` are checked now as ddlrun checks
    them in the job, so a bad value fails here, not after the queue wait."""
    export = [*(export or []), "WML_HOROVOD=1"] if horovod else export
    given = dict(item.partition("=")[::2] for item in export or () if "=" in item)
    if any(k == "WML_HOROVOD" or k.startswith("HOROVOD_") for k in given):
        from .ddlrun.horovod import check_settings, wanted

        if wanted(horovod, given):
            check_settings((), given, timeline_file=False)   # the file is written on the compute nodes
    return export


def _check_no_option(program: Optional[List[str]]) -> None:
    """PROGRAM takes what follows the options as they are (ignore_unknown_options): a word that
    starts with '-' there is an option this command does not have; name the closest one."""
    if not program or not program[0].startswith("-"):
        return
    import difflib

    ctx = _click("globals").get_current_context()
    given = program[0].split("=", 1)[0]
    names = [o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
    close = difflib.get_close_matches(given, names, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise WmlError(f"unknown option {program[0]!r}{hint} (options go before the program; see {ctx.command_path} -h)")


def _plan(site, nodes, ranks_per_node, gpus_per_rank, cores_per_rank, threads_per_core, walltime,
          queue, project, job_name, output, error, env, module, export, after, rack_contiguous, program,
          alloc_flags=None, gpu_binding=None, interactive=False, jobdir=None,
          chain=None, checkpoint_dir=None, signal_margin=None, preview=False, logs_dir=None, ranks_per_gpu=None,
          stage_env=None):
    """The JobPlan (with ``chain``: segment 1's, and the Chain), everything checked (``preview``:
    only shown, see plan_job)."""
    from .chain.spec import check_length
    from .jobscript import plan_job
    from .resources import ResourceRequest, parse_exports
    from .site.registry import choose_site
    from .submit import new_jobdir
    from .walltime import parse_duration_s

    check_length(chain, interactive)
    if chain is None and (checkpoint_dir is not None or signal_margin is not None):
        raise WmlError("--checkpoint-dir and --signal-margin go with --chain N")
    profile = choose_site(site)
    walltime_s = parse_duration_s(walltime) if walltime is not None else None
    req = ResourceRequest(
        nodes=nodes, ranks_per_node=ranks_per_node, gpus_per_rank=gpus_per_rank, ranks_per_gpu=ranks_per_gpu,
        cores_per_rank=cores_per_rank, threads_per_core=threads_per_core,
        walltime=-(-walltime_s // 60) if walltime_s is not None else None, walltime_s=walltime_s,
        queue=queue, project=project, job_name=job_name, output=output, error=error,
        after=after, conda_env=env, modules=tuple(module or ()), exports=parse_exports(export or []),
        rack_contiguous=rack_contiguous,
        alloc_flags=tuple(w for text in alloc_flags or () for w in text.replace(",", " ").split()),
        gpu_binding=gpu_binding, stage_env=stage_env)
    if jobdir is None:
        base = Path(os.environ.get("WML_JOBS_DIR") or Path.cwd() / "wml-jobs")
        jobdir = new_jobdir(base.absolute(), job_name)
    if chain is None:
        return plan_job(profile, req, program or [], jobdir=jobdir, interactive=interactive, preview=preview), None
    from .chain.submit import plan_chain, segment_plan

    plan = plan_job(profile, req, program or [], jobdir=jobdir, preview=preview)
    run = plan_chain(plan, jobdir, chain, checkpoint_dir, signal_margin, walltime_s)
    return segment_plan(plan, run, 1, logs_dir=logs_dir), run


def _warn(plan) -> None:
    for line in plan.warnings:
        sys.stderr.write(f"wml: warning: {line}\n")


@app.command(context_settings=PROGRAM_CONTEXT)
def render(program: Program, site: Site = None, horovod: Horovod = False, nodes: Nodes = 1, ranks_per_node: RanksPerNode = None,
           gpus_per_rank: GpusPerRank = None, ranks_per_gpu: RanksPerGpu = None, cores_per_rank: CoresPerRank = None,
           threads_per_core: ThreadsPerCore = None, walltime: Walltime = None, queue: Queue = None,
           project: Project = None, job_name: JobName = "wml-job", output: Output = None,
           error: ErrorFile = None, env: Env = None, module: Module = None, export: Export = None,
           after: After = None, rack_contiguous: RackContiguous = False, alloc_flags: AllocFlags = None,
           gpu_binding: GpuBinding = None, chain: ChainLength = None, checkpoint_dir: CheckpointDir = None,
           signal_margin: SignalMargin = None, stage_env: StageEnv = None) -> None:
    """Print the job script for PROGRAM on a site (writes and submits nothing).

    The script's output and error files go to the current directory (it exists when you
    submit the printed script from here); `wml submit` gives each job its own directory.
    With --chain N: the first job's script (the others differ only in their segment number
    and their dependency on the job before); its output files go to the current directory
    too, not to segment-1/, which only `wml submit` makes."""
    from .jobscript import render_script

    _check_no_option(program)
    export = _horovod_exports(export, horovod)
    plan, _ = _plan(site, nodes, ranks_per_node, gpus_per_rank, cores_per_rank, threads_per_core, walltime,
                    queue, project, job_name, output, error, env, module, export, after, rack_contiguous, program,
                    alloc_flags, gpu_binding, jobdir=Path.cwd().absolute(), chain=chain,
                    checkpoint_dir=checkpoint_dir, signal_margin=signal_margin, preview=True,
                    logs_dir=Path.cwd().absolute(), ranks_per_gpu=ranks_per_gpu, stage_env=stage_env)
    _warn(plan)
    sys.stdout.write(render_script(plan))


@app.command(context_settings=PROGRAM_CONTEXT)
def submit(program: OptionalProgram = None, site: Site = None, horovod: Horovod = False, nodes: Nodes = 1, ranks_per_node: RanksPerNode = None,
           gpus_per_rank: GpusPerRank = None, ranks_per_gpu: RanksPerGpu = None, cores_per_rank: CoresPerRank = None,
           threads_per_core: ThreadsPerCore = None, walltime: Walltime = None, queue: Queue = None,
           project: Project = None, job_name: JobName = "wml-job", output: Output = None,
           error: ErrorFile = None, env: Env = None, module: Module = None, export: Export = None,
           after: After = None, rack_contiguous: RackContiguous = False, alloc_flags: AllocFlags = None,
           gpu_binding: GpuBinding = None, chain: ChainLength = None, checkpoint_dir: CheckpointDir = None,
           signal_margin: SignalMargin = None, stage_env: StageEnv = None,
           dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the script and the submit command; submit nothing.")] = False,
           interactive: Annotated[bool, typer.Option("--interactive", help="Open an interactive allocation with these resources (bsub -Is, salloc, qsub -I).")] = False,
           as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object describing the job.")] = False,
           wait: Annotated[bool, typer.Option("--wait", help="Wait for the job to end (live status line) and exit with its exit code.")] = False) -> None:
    """Write the job script into ./wml-jobs/<name>-<time>/, submit it, print the job id.

    On the local site the job runs now, its output streamed here and kept in the job
    directory, and wml exits with the job's exit status; as a scheduler would, it is ended at
    its walltime (-t: SIGTERM, then SIGKILL 30 s later; TIMEOUT), and `wml jobs/status/logs -f/
    cancel` see it while it runs."""
    from .jobscript import render_script
    from .submit import submit as do_submit, submit_command_text

    _check_no_option(program)
    export = _horovod_exports(export, horovod)
    plan, run = _plan(site, nodes, ranks_per_node, gpus_per_rank, cores_per_rank, threads_per_core, walltime,
                      queue, project, job_name, output, error, env, module, export, after, rack_contiguous, program,
                      alloc_flags, gpu_binding, interactive=interactive, chain=chain,
                      checkpoint_dir=checkpoint_dir, signal_margin=signal_margin, preview=dry_run,
                      ranks_per_gpu=ranks_per_gpu, stage_env=stage_env)
    _warn(plan)
    if interactive:
        from .interactive import run_interactive

        run_interactive(plan, dry_run=dry_run)
        return
    script = render_script(plan)
    if dry_run:
        info = {"job_id": None, "site": plan.site.name, "scheduler": plan.site.scheduler,
                "script": str(plan.jobdir / "job.sh"), "submit_command": submit_command_text(plan),
                "ranks": plan.layout.size, "nodes": plan.layout.nodes, "dry_run": True,
                "script_text": script}
        if as_json:
            typer.echo(json.dumps(info))
        else:
            sys.stdout.write(script)
            typer.echo(f"# dry run: would write {plan.jobdir}/job.sh and run: {info['submit_command']}")
            if run is not None:
                typer.echo(f"# then jobs 2..{run.length} of the chain (segment-<k>/job.sh, each after the one before "
                           f"ends); checkpoints in {run.checkpoint_dir}")
        return
    out = (lambda s: sys.stderr.write(s)) if as_json else sys.stdout.write
    if plan.stage is not None:     # built here, once, not on the job's nodes
        from .stage.archive import ensure_archive

        ensure_archive(plan.stage.prefix)
    if run is not None:
        from .chain.cli import submit_chain_cmd

        code = submit_chain_cmd(plan, run, out, as_json=as_json, wait=wait)
        if code:
            raise typer.Exit(code)
        return
    result = do_submit(plan, script, out=out)
    if as_json:
        typer.echo(json.dumps(result.as_json()))
    elif plan.site.scheduler == "local":
        how = "finished" if result.state in (None, "COMPLETED", "FAILED") else f"ended ({result.state})"
        typer.echo(f"wml: job {result.job_id} {how} with exit status {result.exit_code}; "
                   f"output in {result.output}", err=True)
    else:
        typer.echo(f"Submitted job {result.job_id} to {plan.site.name} ({plan.site.scheduler}); "
                   f"script {result.script}; output {result.output}")
    from .jobs.cli import wait_after_submit

    code = wait_after_submit(result, plan, wait)    # records the job; --wait: waits for it
    if code:
        raise typer.Exit(code)


bench_app = typer.Typer(help="Benchmarks of the DDL runtime.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("allreduce", context_settings=PROGRAM_CONTEXT)
def bench_allreduce(
        bench_args: Annotated[Optional[List[str]], typer.Argument(help="Options of python -m ddl_runtime.bench (see --help there).")] = None,
        ranks: Annotated[int, typer.Option("-n", "--ranks", help="Ranks to run with.")] = 2,
        site: Site = None) -> None:
    """Allreduce benchmark (nccl-tests style sweep + ResNet-50 gradients) through ddlrun.

    Runs `ddlrun -n RANKS python -m ddl_runtime.bench ARGS`: on this machine with the local
    site, or inside an allocation on a cluster."""
    from .ddlrun.cli import run_cli

    argv = ["-n", str(ranks), "--no-prefix"] + (["--site", site] if site else [])
    argv += ["--", sys.executable, "-m", "ddl_runtime.bench", *(bench_args or [])]
    code = run_cli(argv)
    if code:
        raise typer.Exit(code)


def _usage_line(e) -> str:
    """A command-line parser's usage error (a mistyped command or option, a missing program, a
    bad option value) as our one line, with the closest name when there is one:
    ``render: missing argument 'program' (see wml render -h)``."""
    import difflib

    errors = _click("exceptions")
    path = e.ctx.command_path if e.ctx is not None else "wml"
    msg = " ".join(e.format_message().split()).rstrip(".")
    close = []
    if isinstance(e, errors.NoSuchOption):
        msg = f"no such option {e.option_name}"
        close = difflib.get_close_matches(e.option_name, list(e.possibilities or ()), n=1)
    elif msg.startswith("No such command") and e.ctx is not None:
        msg = msg.split(". Did you mean")[0]
        word = msg.split("'")[1] if msg.count("'") >= 2 else ""
        cmd = e.ctx.command
        names = cmd.list_commands(e.ctx) if hasattr(cmd, "list_commands") else []
        close = [f"'{c}'" for c in difflib.get_close_matches(word, names, n=1)]
    msg = msg[:1].lower() + msg[1:] + (f"; did you mean {close[0]}?" if close else "")
    where = path.split(" ", 1)[1] + ": " if " " in path else ""
    return f"{where}{msg} (see {path} -h)"


def _click(module: str):
    """A module of the click that typer runs on (recent typer carries its own, ``typer._click``)."""
    try:
        return importlib.import_module(f"typer._click.{module}")
    except ImportError:
        return importlib.import_module(f"click.{module}")


def _run(argv: Optional[List[str]]) -> Optional[int]:
    errors = _click("exceptions")
    try:
        return app(args=argv, prog_name="wml", standalone_mode=False)
    except errors.NoArgsIsHelpError as e:     # `wml`, `wml env`: their help
        e.show()
        return e.exit_code
    except errors.UsageError as e:
        raise WmlError(_usage_line(e), exit_code=e.exit_code) from None
    except errors.ClickException as e:
        raise WmlError(e.format_message(), exit_code=e.exit_code) from None
    except typer.Abort:
        raise KeyboardInterrupt from None




#: render/submit options that take no value (every other option before the program takes one)
_FLAGS = {"--horovod", "--rack-contiguous", "--dry-run", "--interactive", "--json", "--wait", "--help", "-h"}


def _stage_env_flag(argv: List[str]) -> List[str]:
    """``--stage-env`` takes an optional value (``--stage-env=auto``), which typer's options
    cannot: a bare one among render/submit's options becomes ``--stage-env=on``."""
    if len(argv) < 2 or argv[0] not in ("render", "submit"):
        return argv
    out, i = [argv[0]], 1
    while i < len(argv):
        word = argv[i]
        if word == "--" or not word.startswith("-"):
            return out + argv[i:]            # the program and its arguments: never touched
        if word == "--stage-env":
            word = "--stage-env=on"
        out.append(word)
        if "=" not in word and word not in _FLAGS and i + 1 < len(argv):
            out.append(argv[i + 1])          # the option's value
            i += 1
        i += 1
    return out


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point: user errors (ours and the command-line parser's) are one line on stderr,
    never a traceback or a usage block."""
    args = _stage_env_flag(list(sys.argv[1:] if argv is None else argv))
    run_main("wml", lambda: _run(args))
