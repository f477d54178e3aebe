"""The CLI layer (the top): the `wml` command line (the typer app and `main`, here).

Sub-apps are registered here by module name and imported only when used (or listed by
`--help`), and heavy imports happen inside commands, so `wml render` stays fast: `jobs.py`
(`wml jobs/status/cancel/logs`), `sweep.py` (`wml sweep`), `chain.py` (what `wml submit
--chain` says and `wml logs` of a chain), and the command-line parts of lower packages that
only import their own package (`site/cli.py`, `env/cli.py`; `ddlrun/cli.py` is `ddlrun`'s).

May import every layer below: `api`, `options`, `runs`, `jobs`, `jobscript`, ... (the top of
the package, `wmlce_tools/__init__.py`, and `__main__` are above it).
"""
import importlib

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperGroup
from typing_extensions import Annotated

from .. import __version__
from ..errors import WmlError, run_main
from ..options import check_no_option as _check_no_option, click_module as _click
from ..options import JobOptions, Site, flag_options, job_options, plan_from

class _LazyGroup(TyperGroup):
    """A click group whose sub-commands in ``LAZY`` are imported on first use (the pattern
    click documents as "lazily loading subcommands"): typer would otherwise build every
    sub-command's parameters on every start."""

    #: name -> (module, attribute: a typer app, or a function registering commands on one)
    LAZY = {
        "site": ("wmlce_tools.site.cli", "app"),
        "env": ("wmlce_tools.env.cli", "env_app"),
        "module": ("wmlce_tools.env.cli", "module_app"),
        "jobs": ("wmlce_tools.cli.jobs", "register"),
        "status": ("wmlce_tools.cli.jobs", "register"),
        "cancel": ("wmlce_tools.cli.jobs", "register"),
        "logs": ("wmlce_tools.cli.jobs", "register"),
        "sweep": ("wmlce_tools.cli.sweep", "app"),
        "report": ("wmlce_tools.report.cli", "register"),
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


# render and submit take the job options of options.JobOptions (declared once there)
Program = Annotated[List[str], typer.Argument(help="The program and its arguments (a .py file runs with python).")]
OptionalProgram = Annotated[Optional[List[str]], typer.Argument(help="The program and its arguments (a .py file runs with python); none with --interactive.")]


def _queue_said(plan) -> str:
    """The submit line's word on a queue wml chose for the job (empty when -q or the default)."""
    return f" in queue {plan.queue} ({plan.queue_why})" if plan.queue_why else ""


def _warn(plan) -> None:
    for line in plan.warnings:
        sys.stderr.write(f"wml: warning: {line}\n")


@app.command(context_settings=PROGRAM_CONTEXT)
@job_options
def render(program: Program, opts: JobOptions) -> None:
    """Print the job script for PROGRAM on a site (writes and submits nothing).

    The script's output and error files go to the current directory (it exists when you
    submit the printed script from here); `wml submit` gives each job its own directory.
    With --chain N: the first job's script (the others differ only in their segment number
    and their dependency on the job before); its output files go to the current directory
    too, not to segment-1/, which only `wml submit` makes."""
    from ..jobscript import render_script

    _check_no_option(program)
    here = Path.cwd().absolute()
    plan, _ = plan_from(opts, program, jobdir=here, preview=True, logs_dir=here)
    _warn(plan)
    sys.stdout.write(render_script(plan))


@app.command(context_settings=PROGRAM_CONTEXT)
@job_options
def submit(program: OptionalProgram = None, opts: JobOptions = None,
           dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the script and the submit command; submit nothing.")] = False,
           interactive: Annotated[bool, typer.Option("--interactive", help="Open an interactive allocation with these resources (bsub -Is, salloc, qsub -I).")] = False,
           as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object describing the job.")] = False,
           wait: Annotated[bool, typer.Option("--wait", help="Wait for the job to end (live status line) and exit with its exit code.")] = False,
           script: Annotated[Optional[str], typer.Option("--script", help="Submit this hand-written job script as it is (its directives must be the site's scheduler's) and track it in wml jobs/status/logs; only --site, --dry-run, --json and --wait go with it.")] = None) -> None:
    """Write the job script into ./wml-jobs/<name>-<time>/, submit it, print the job id.

    On the local site the job runs now, its output streamed here and kept in the job
    directory, and wml exits with the job's exit status; as a scheduler would, it is ended at
    its walltime (-t: SIGTERM, then SIGKILL 30 s later; TIMEOUT), and `wml jobs/status/logs -f/
    cancel` see it while it runs."""
    from ..jobscript import render_script
    from ..runs.submission import submit as do_submit, submit_command_text

    _check_no_option(program)
    if script is not None:
        _submit_script(script, program, opts, dry_run=dry_run, interactive=interactive, as_json=as_json, wait=wait)
        return
    plan, run = plan_from(opts, program, interactive=interactive, preview=dry_run)
    _warn(plan)
    if interactive:
        from ..runs.interactive import run_interactive

        run_interactive(plan, dry_run=dry_run)
        return
    script = render_script(plan)
    if dry_run:
        info = {"job_id": None, "site": plan.site.name, "scheduler": plan.site.scheduler,
                "script": str(plan.jobdir / "job.sh"), "submit_command": submit_command_text(plan),
                "ranks": plan.layout.size, "nodes": plan.layout.nodes, "dry_run": True,
                "python": plan.python[0], "python_from": plan.python[1] or None, "queue": plan.queue,
                "queue_why": plan.queue_why, "script_text": script}
        if as_json:
            typer.echo(json.dumps(info))
        else:
            sys.stdout.write(script)
            if plan.python[0]:
                typer.echo(f"# python: {plan.python[0]}: {plan.python[1]}")
            if plan.queue_why:
                typer.echo(f"# queue: {plan.queue_why}")
            typer.echo(f"# dry run: would write {plan.jobdir}/job.sh and run: {info['submit_command']}")
            if run is not None:
                typer.echo(f"# then jobs 2..{run.length} of the chain (segment-<k>/job.sh, each after the one before "
                           f"ends); checkpoints in {run.checkpoint_dir}")
        return
    out = (lambda s: sys.stderr.write(s)) if as_json else sys.stdout.write
    if plan.stage is not None:     # built here, once, not on the job's nodes
        from ..stage.archive import ensure_archive

        ensure_archive(plan.stage.prefix)
    if run is not None:
        from .chain import submit_chain_cmd

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
        typer.echo(f"Submitted job {result.job_id} to {plan.site.name} ({plan.site.scheduler}){_queue_said(plan)}; "
                   f"script {result.script}; output {result.output}")
    from .jobs import wait_after_submit

    code = wait_after_submit(result, plan, wait)    # records the job; --wait: waits for it
    if code:
        raise typer.Exit(code)


def _submit_script(path: str, program, opts: JobOptions, *, dry_run: bool, interactive: bool, as_json: bool,
                   wait: bool) -> None:
    """``wml submit --script job.sh``: the script says the job; wml submits and tracks it."""
    import dataclasses

    from ..runs.script import submit_script
    from ..site.registry import choose_site

    if program:
        raise WmlError(f"--script {path} is the job: give no program ({program[0]!r})")
    if interactive:
        raise WmlError("--script submits a batch script; --interactive opens an allocation: give one")
    given = [f.name for f in dataclasses.fields(JobOptions)
             if f.name != "site" and getattr(opts, f.name) != f.default]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise WmlError(f"--script {path} is submitted as it is written: {flag} goes into it as a directive")
    out = (lambda s: sys.stderr.write(s)) if as_json else sys.stdout.write
    result = submit_script(choose_site(opts.site), path, dry_run=dry_run, out=out)
    if result is None:
        return
    if as_json:
        typer.echo(json.dumps(result.as_json()))
    elif result.scheduler == "local":
        typer.echo(f"wml: job {result.job_id} finished with exit status {result.exit_code}; output in {result.output}",
                   err=True)
    else:
        typer.echo(f"Submitted job {result.job_id} to {result.site} ({result.scheduler}); "
                   f"script {result.script}; output {result.output}")
    from .jobs import wait_after_submit

    code = wait_after_submit(result, None, wait)
    if code:
        raise typer.Exit(code)


bench_app = typer.Typer(help="Benchmarks of the DDL runtime.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(bench_app, name="bench")


@bench_app.command("allreduce", context_settings=PROGRAM_CONTEXT)
def bench_allreduce(
        bench_args: Annotated[Optional[List[str]], typer.Argument(help="Options of python -m ddl_runtime.bench (see --help there).")] = None,
        ranks: Annotated[int, typer.Option("-n", "--ranks", help="Ranks to run with.")] = 2,
        site: Site = None) -> None:
    """Allreduce benchmark (nccl-tests style sweep + ResNet-50 gradients) through ddlrun.

    Runs `ddlrun -n RANKS python -m ddl_runtime.bench ARGS`: on this machine with the local
    site, or inside an allocation on a cluster."""
    from ..ddlrun.cli import run_cli

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
_FLAGS = {*flag_options(), "--dry-run", "--interactive", "--json", "--wait", "--help", "-h"}
#: commands whose options come before a program (they take JobOptions)
JOB_COMMANDS = ("render", "submit", "sweep")


def _stage_env_flag(argv: List[str]) -> List[str]:
    """``--stage-env`` takes an optional value (``--stage-env=auto``), which typer's options
    cannot: a bare one among render/submit's options becomes ``--stage-env=on``."""
    if len(argv) < 2 or argv[0] not in JOB_COMMANDS:
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
