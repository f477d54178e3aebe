"""``wml sweep [OPTIONS] PROGRAM {name}...``, ``wml sweep show RUN``, ``wml sweep resume RUN``.

Built on ``wmlce_tools.api`` (``plan``, ``resume``) and the one declaration of the job options
(``wmlce_tools.options.JobOptions``): a trial takes exactly what ``wml submit`` takes."""

import json
import sys
from typing import List, Optional

import typer
from typer.core import TyperGroup
from typing_extensions import Annotated

from ..options import JobOptions, check_no_option, job_options

RUN = Annotated[str, typer.Argument(help="The sweep: its run id (wml jobs shows it), its directory, or one of its jobs.")]
PROGRAM_CONTEXT = {"allow_interspersed_args": False, "ignore_unknown_options": True,
                   "help_option_names": ["-h", "--help"]}


class _SweepGroup(TyperGroup):
    """``wml sweep OPTIONS PROGRAM`` is ``wml sweep run OPTIONS PROGRAM``; ``show`` and
    ``resume`` are sub-commands."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_SweepGroup, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Many runs of one program: a grid of parameters substituted into its arguments ({name}) "
                       "and environment (WML_TRIAL, WML_PARAM_<NAME>), run as the scheduler's job array or "
                       "packed into one allocation (the dry run says which and why).  "
                       "wml sweep [OPTIONS] PROGRAM ARGS... is wml sweep run.")


@app.command("run", context_settings=PROGRAM_CONTEXT)
@job_options
def run_cmd(program: Annotated[List[str], typer.Argument(help="The program and its arguments, with {name} for a parameter's value.")],
            opts: JobOptions = None,
            param: Annotated[Optional[List[str]], typer.Option("--param", help="NAME=V1,V2,... (repeatable): the grid is every combination.")] = None,
            params_file: Annotated[Optional[str], typer.Option("--params-file", help="YAML (NAME: [values] is a grid; a list of mappings is the trials) or CSV (a header of names, a row per trial).")] = None,
            seeds: Annotated[Optional[int], typer.Option("--seeds", help="Run each trial N times with parameter seed = 0..N-1.")] = None,
            max_running: Annotated[Optional[int], typer.Option("--max-running", help="At most K trials at once (Slurm --array %K, LSF [1-N]%K, PBS Pro: K subjobs in turn; packed: K at a time).")] = None,
            pack: Annotated[Optional[int], typer.Option("--pack", help="Run every trial in one allocation of NODES nodes, each trial on its own nodes/GPUs, the next starting as one ends.")] = None,
            dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the script, the submit command, and whether it runs as an array or packed and why; submit nothing.")] = False,
            as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object describing the sweep.")] = False) -> None:
    """Submit PROGRAM once per trial of the grid; its results gather in one run directory
    (wml sweep show RUN).  On the local site the trials run now, packed on emulated nodes."""
    from .. import api
    from ..runs.submission import submit_command_text
    from ..sweeps.grid import build_trials
    from ..runs.sweep_submit import submit_sweep

    check_no_option(program)
    trials = build_trials(param or (), params_file, seeds)
    sp = api.plan(program, trials, max_running=max_running, pack=pack, preview=dry_run, opts=opts)
    for line in sp.warnings:
        sys.stderr.write(f"wml: warning: {line}\n")
    info = {"run_id": sp.record.run_id, "run_dir": str(sp.run_dir), "site": sp.plan.site.name, "mode": sp.mode,
            "why": sp.why, "trials": sp.record.size, "script": str(sp.plan.jobdir / "job.sh"),
            "submit_command": submit_command_text(sp.plan), "queue": sp.plan.queue, "queue_why": sp.plan.queue_why,
            "walltime": sp.walltime_note}
    if dry_run:
        if as_json:
            typer.echo(json.dumps({**info, "job_id": None, "dry_run": True, "script_text": sp.script}))
            return
        sys.stdout.write(sp.script)
        sys.stdout.write(sp.describe())
        typer.echo(f"# dry run: would write {sp.run_dir}/ (sweep.json, trials/, submit-1/job.sh) and run: "
                   f"{info['submit_command']}")
        return
    out = (lambda s: sys.stderr.write(s)) if as_json else sys.stdout.write
    result = submit_sweep(sp, out=out)
    if as_json:
        typer.echo(json.dumps({**info, "job_id": result.job_id}))
    if sp.plan.site.scheduler == "local":
        from ..runs.sweep_view import view

        v = view(sp.run_dir, sp.record.__class__(**{**sp.record.__dict__, "job_ids": [result.job_id]}), refresh=False)
        typer.echo(f"wml: sweep {sp.record.run_id} finished: {v.count_text()}; wml sweep show {sp.record.run_id}", err=True)
        if result.exit_code:
            raise typer.Exit(1)
    elif not as_json:
        queue = f" in queue {sp.plan.queue} ({sp.plan.queue_why})" if sp.plan.queue_why else ""
        typer.echo(f"Submitted sweep {sp.record.run_id} ({sp.record.size} trials, {sp.mode}) as job {result.job_id} "
                   f"to {sp.plan.site.name}{queue}; wml sweep show {sp.record.run_id}")


@app.command("show")
def show_cmd(run: RUN,
             sort: Annotated[Optional[str], typer.Option("--sort", help="Sort the trials by this metric (or parameter), smallest first; -NAME: largest first. Numbers sort as numbers.")] = None,
             fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
             tail: Annotated[int, typer.Option("--tail", help="Lines of each failed trial's output to show.")] = 5) -> None:
    """Each trial's parameters, state, exit status, walltime and metrics (the last JSON object
    line its rank 0 printed), and a failed trial's last lines."""
    from ..errors import WmlError
    from ..runs.sweep_view import find_run, render

    if fmt not in ("table", "csv", "json"):
        raise WmlError(f"--format {fmt}: expected table, csv or json")
    sys.stdout.write(render(find_run(run), sort=sort, fmt=fmt, tail=tail))


@app.command("resume")
def resume_cmd(run: RUN,
               as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object describing the resubmission.")] = False) -> None:
    """Submit again only the trials that failed, timed out, were cancelled or never ran (same request,
    same run directory; each trial's attempt count goes up)."""
    from .. import api

    out = (lambda s: sys.stderr.write(s)) if as_json else sys.stdout.write
    job = api.resume(run, out=out)
    res = job.submit_result
    if as_json:
        typer.echo(json.dumps({"run_id": job.run_id, "job_id": res.job_id, "trials": job.rerun}))
        return
    which = ", ".join(map(str, job.rerun))
    if res.scheduler == "local":
        from ..runs.sweep_view import find_run

        v = find_run(str(job.run_dir))
        how = "; ".join(f"trial {t.index} {t.state.lower()}" + (f" again (exit status {t.exit_code})"
                                                                 if t.state != "COMPLETED" and t.exit_code is not None
                                                                 else " again" if t.state != "COMPLETED" else "")
                        for t in v.trials if t.index in job.rerun)
        typer.echo(f"wml: sweep {job.run_id}: trial(s) {which} ran again: {how} (earlier output kept as "
                   f"trials/<i>/output.attempt-<n>.log); wml sweep show {job.run_id}", err=True)
        if res.exit_code:
            raise typer.Exit(1)
    else:
        typer.echo(f"Resubmitted trial(s) {which} of sweep {job.run_id} as job {res.job_id}")
