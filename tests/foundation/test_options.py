"""The job options declared once (wmlce_tools/options.py): the command line and Python build the
same JobOptions, and every job command has the same options."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from wmlce_tools.errors import WmlError
from wmlce_tools.jobscript import render_script
from wmlce_tools.options import JobOptions, job_options, plan_from


def _option_names(command) -> set:
    return {o for p in typer.main.get_command(command).params for o in p.opts}


def test_render_and_submit_take_every_job_option(prog_app):
    from wmlce_tools.cli import app

    group = typer.main.get_group(app)
    render, submit = (set(o for p in group.commands[c].params for o in p.opts) for c in ("render", "submit"))
    declared = _option_names(prog_app) - {"--trials", "--install-completion", "--show-completion"}
    assert len({p.name for p in typer.main.get_command(prog_app).params}) - 4 == len(dataclasses.fields(JobOptions))
    assert declared <= render and declared <= submit
    assert submit - render == {"--dry-run", "--interactive", "--json", "--wait", "--script"}
    assert {"--lms", "--horovod", "-N", "--nodes", "-t", "--stage-env"} <= declared


@pytest.fixture
def prog_app():
    """A new job command as `wml sweep` would declare one: its own flag and the job options."""
    app = typer.Typer()

    @app.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
    @job_options
    def sweep(program: list[str], opts: JobOptions, trials: int = 1) -> None:
        typer.echo(repr((program, trials, opts)))

    return app


def test_a_new_command_gets_the_options_gathered_into_one_jobOptions(prog_app):
    out = CliRunner().invoke(prog_app, ["-N", "3", "--lms", "--module", "a", "--module", "b", "--trials", "2",
                                        "-t", "1:00", "train.py", "--lr", "1"])
    assert out.exit_code == 0, out.output
    program, trials, opts = eval(out.output, {"JobOptions": JobOptions})
    assert program == ["train.py", "--lr", "1"] and trials == 2
    assert opts == JobOptions(nodes=3, lms=True, module=("a", "b"), walltime="1:00")


def test_lms_exports_wml_lms_as_horovod_exports_wml_horovod(run_wml, tmp_path):
    prog = tmp_path / "train.py"
    prog.write_text("print(1)\n")
    plain = run_wml("render", "--site", "slurm-gpu", str(prog)).stdout
    lms = run_wml("render", "--site", "slurm-gpu", "--lms", str(prog)).stdout
    both = run_wml("render", "--site", "slurm-gpu", "--lms", "--horovod", str(prog)).stdout
    assert "WML_LMS" not in plain
    assert "export WML_LMS=1" in lms and "WML_HOROVOD" not in lms
    assert "export WML_LMS=1" in both and "export WML_HOROVOD=1" in both


def test_lms_is_a_flag_for_the_bare_stage_env_rewrite():
    from wmlce_tools.cli import _stage_env_flag

    assert _stage_env_flag(["submit", "--lms", "--stage-env", "--env", "/e", "p.py"]) == \
        ["submit", "--lms", "--stage-env=on", "--env", "/e", "p.py"]


def test_python_plan_is_the_command_lines(run_wml, tmp_path, monkeypatch):
    prog = tmp_path / "train.py"
    prog.write_text("print(1)\n")
    monkeypatch.chdir(tmp_path)
    opts = JobOptions.of(site="slurm-gpu", nodes=2, walltime="90", export=["A=1"], project="m1")
    plan, run = plan_from(opts, [str(prog)], jobdir=tmp_path, preview=True, logs_dir=tmp_path)
    assert run is None and plan.layout.nodes == 2 and plan.request.walltime == 90
    cli = run_wml("render", "--site", "slurm-gpu", "-N", "2", "-t", "90", "--export", "A=1", "-P", "m1",
                  str(prog)).stdout
    assert render_script(plan) == cli


def test_python_options_refuse_an_unknown_name_with_the_closest():
    with pytest.raises(WmlError, match="unknown job option 'node'; did you mean 'nodes'"):
        JobOptions.of(node=2)
    assert JobOptions(module="m").module == ("m",)
    assert dataclasses.replace(JobOptions(), nodes=4).nodes == 4
