"""The job scripts ``--stage-env`` renders: one staging command before any rank, the env
activated from the copy, and what each centre asks a job to request for its node-local storage
(Summit ``-alloc_flags NVME``, Frontier ``--constraint=nvme``, Theta ``--attrs ssds=required``;
Perlmutter, Polaris and Aurora need nothing).  Golden files: tests/stage/golden/<site>.sh."""
from __future__ import annotations

import os

import shlex
import subprocess
from pathlib import Path

import pytest
from helpers.job_output import directives, normalize

from wmlce_tools.errors import WmlError
from wmlce_tools.jobscript import plan_job, render_script
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site

GOLDEN = Path(__file__).parent / "golden"
SITES = {
    "summit": dict(nodes=2, project="abc123", walltime=30),
    "frontier": dict(nodes=2, project="abc123", walltime=30),
    "perlmutter": dict(nodes=2, project="m1234", walltime=30),
    "polaris": dict(nodes=2, project="datascience", walltime=30),
    "aurora": dict(nodes=2, project="datascience", walltime=30),
    "theta": dict(nodes=2, project="datascience", walltime=30),
}


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


def render(site, program, env, **kw):
    plan = plan_job(get_site(site), ResourceRequest(conda_env=str(env), **kw), [str(program)],
                    jobdir=Path("/jobs/j1"), workdir=Path("/work/proj"))
    return render_script(plan)


def golden_text(script: str, program, env) -> str:
    return normalize(script, program).replace(str(env), "/shared/envs/stagetest")


@pytest.mark.parametrize("site", sorted(SITES))
def test_golden_staged_scripts(site, program, shared_env, monkeypatch):
    monkeypatch.delenv("WML_STAGE_PLACE", raising=False)
    script = render(site, program, shared_env, stage_env="on", **SITES[site])
    golden = GOLDEN / f"{site}.sh"
    if os.environ.get("WML_REGENERATE_GOLDEN") == "1":      # as tests/helpers/job_output.py's goldens
        golden.write_text(golden_text(script, program, shared_env))
    assert golden_text(script, program, shared_env) == golden.read_text(), (
        f"rendered script differs from {golden}; if the change is intended, regenerate it (WML_REGENERATE_GOLDEN=1)")


def test_each_site_requests_its_node_local_storage(program, shared_env, monkeypatch):
    monkeypatch.delenv("WML_STAGE_PLACE", raising=False)
    s = render("summit", program, shared_env, stage_env="on", **SITES["summit"])
    assert '#BSUB -alloc_flags "smt4 NVME"' in directives(s, "#BSUB")
    f = render("frontier", program, shared_env, stage_env="on", **SITES["frontier"])
    assert "#SBATCH --constraint=nvme" in directives(f, "#SBATCH")
    p = render("perlmutter", program, shared_env, stage_env="on", **SITES["perlmutter"])
    assert "#SBATCH --constraint=gpu" in directives(p, "#SBATCH")          # /tmp: nothing to add
    t = render("theta", program, shared_env, stage_env="on", **SITES["theta"])
    assert "#COBALT --attrs mcdram=cache:numa=quad:ssds=required:ssd_size=128" in directives(t, "#COBALT")
    # without staging, none of it
    assert "NVME" not in render("summit", program, shared_env, **SITES["summit"])
    assert "nvme" not in render("frontier", program, shared_env, **SITES["frontier"])


@pytest.mark.parametrize("site", sorted(SITES))
def test_the_staging_is_one_command_before_the_ranks(site, program, shared_env, monkeypatch):
    monkeypatch.delenv("WML_STAGE_PLACE", raising=False)
    script = render(site, program, shared_env, stage_env="auto", **SITES[site])
    lines = script.splitlines()
    [stage] = [i for i, ln in enumerate(lines) if ln.startswith("wml_env_prefix=$(")]
    argv = shlex.split(lines[stage][len("wml_env_prefix=$("):-1])
    assert argv[1:4] == ["-m", "wmlce_tools.stage", "job"] and "--auto" in argv
    assert argv[argv.index("--env") + 1] == str(shared_env)
    assert argv[argv.index("--place") + 1] == get_site(site).stage_env.place
    launch = max(i for i, ln in enumerate(lines) if "ddlrun" in ln and not ln.startswith("#"))
    assert stage < lines.index('export CONDA_PREFIX="$wml_env_prefix"') < launch
    assert f"CONDA_PREFIX={shared_env}" not in script


def test_bad_requests_are_one_line_errors(program, shared_env, tmp_path):
    with pytest.raises(WmlError, match="give --env NAME"):
        plan_job(get_site("frontier"), ResourceRequest(stage_env="on", project="a"), [str(program)], jobdir=tmp_path)
    with pytest.raises(WmlError, match="names no node-local storage"):
        plan_job(get_site("slurm-gpu"), ResourceRequest(stage_env="on", conda_env=str(shared_env)), [str(program)],
                 jobdir=tmp_path)
    with pytest.raises(WmlError, match="--stage-env=maybe"):
        ResourceRequest(stage_env="maybe")


def test_cli_stage_env_flag_and_dry_run(run_wml, program, shared_env):
    """``--stage-env`` alone, ``=auto`` and ``=off`` on the command line; ``--dry-run`` shows the step."""
    r = run_wml("submit", "--dry-run", "--nodes", "2", "--env", str(shared_env), "--stage-env", str(program))
    assert r.returncode == 0, r.stderr
    assert "-m wmlce_tools.stage job" in r.stdout and "--auto" not in r.stdout
    r = run_wml("render", "--env", str(shared_env), "--stage-env=auto", str(program), "--stage-env")
    assert r.returncode == 0, r.stderr
    assert "--auto" in r.stdout and r.stdout.rstrip().endswith(f"{program} --stage-env")   # the program's own args
    r = run_wml("render", "--env", str(shared_env), "--stage-env=off", str(program))
    assert r.returncode == 0 and "wmlce_tools.stage" not in r.stdout
    r = run_wml("render", "--site", "slurm-gpu", "--env", str(shared_env), "--stage-env", str(program))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "wml: error: --stage-env: site slurm-gpu names no node-local storage (its profile has no stage_env)"]


@pytest.mark.parametrize("site", sorted(SITES))
def test_staged_scripts_pass_bash_n(site, program, shared_env, tmp_path):
    f = tmp_path / "job.sh"
    f.write_text(render(site, program, shared_env, stage_env="on", **SITES[site]))
    r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_chain_keeps_the_copies_for_its_next_segment_and_the_last_removes_them(program, shared_env, tmp_path):
    from wmlce_tools.runs.chain import plan_chain, segment_plan

    plan = plan_job(get_site("frontier"), ResourceRequest(conda_env=str(shared_env), stage_env="on", **SITES["frontier"]),
                    [str(program)], jobdir=tmp_path / "run" / "segment-1", workdir=Path("/work/proj"))
    chain = plan_chain(plan, tmp_path / "run", 3, str(tmp_path / "ckpt"), None, None)

    def end_line(index):
        script = render_script(segment_plan(plan, chain, index, "41" if index > 1 else None))
        lines = script.splitlines()
        # exec runs no EXIT trap: the segment's step runs the end itself once ddlrun has ended
        step = next(ln for ln in lines if ln.startswith("exec "))
        end = next(ln for ln in lines if ln.startswith("wml_stage_end() {"))
        then = step.split(" --then ", 1)[1].split(" -- ", 1)[0]
        assert end == f"wml_stage_end() {{ {then} || true; }}", (step, end)
        assert " -m wmlce_tools.stage end " in then and then.endswith('--job "${SLURM_JOB_ID:-$$}"')
        return end

    assert " --keep " in end_line(1) and " --keep " in end_line(2)
    assert " --keep " not in end_line(3)


def test_interactive_refuses_stage_env(run_wml, shared_env):
    r = run_wml("submit", "--site", "frontier", "-P", "a", "--interactive", "--dry-run", "--env", str(shared_env),
                "--stage-env")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "wml: error: --stage-env stages the env before a job script's ranks; --interactive runs no job script"]


def test_a_site_that_stages_by_default(program, shared_env, tmp_path, monkeypatch):
    import msgspec

    from wmlce_tools.site.schema import StageEnvOptions, replace

    monkeypatch.delenv("WML_STAGE_PLACE", raising=False)
    base = get_site("polaris")
    site = replace(base, stage_env=replace(base.stage_env, default="auto"))

    def script(**kw):
        return render_script(plan_job(site, ResourceRequest(conda_env=str(shared_env), project="a", **kw),
                                      [str(program)], jobdir=tmp_path))

    assert "-m wmlce_tools.stage job" in script() and "--auto" in script()
    assert "wmlce_tools.stage" not in script(stage_env="off")
    assert "wmlce_tools.stage" not in render_script(plan_job(site, ResourceRequest(project="a"), [str(program)],
                                                             jobdir=tmp_path))      # no --env: nothing to stage
    with pytest.raises(msgspec.ValidationError):     # the profile's place is checked when it is loaded
        msgspec.convert({"place": "scratch/here"}, StageEnvOptions)
