"""Rendered job scripts, line by line against the centres' documentation.

Sources:
- Summit (LSF/jsrun): OLCF Summit User Guide, "Running Jobs" (#BSUB -P -W -nnodes -q -J -o -e
  -alloc_flags, -w dependencies) and "Job Launcher (jsrun)" (one rank per GPU:
  jsrun -n6N -a1 -c7 -g1 -r6 -bpacked:7); OLCF "IBM WML CE" guide (module ibm-wml-ce,
  rack-contiguous expert mode with -csm y, -n, -R cu[type=rack:maxcus=...]).
- Theta (Cobalt/aprun): ALCF Theta "Running Jobs and Submission Scripts" (#COBALT -n -t -q
  -A --attrs mcdram=cache:numa=quad) and "Affinity on Theta" (aprun -n -N -d -j -cc depth,
  -e VAR=value because exports don't reach compute nodes).
- Slurm: sbatch(1) and srun(1) (--nodes --ntasks-per-node --gpus-per-node --cpus-per-task
  --threads-per-core --time --partition --account --dependency=afterok:ID; srun
  --gpus-per-task --cpu-bind).
- Every batch script exports OMP_NUM_THREADS = the rank's hw threads (OLCF Summit guide,
  "OpenMP" jsrun examples; ALCF "Running jobs" aprun --env OMP_NUM_THREADS) and calls wml's
  own ddlrun by absolute path ({ddlrun} in the golden files).
"""
from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from helpers.job_output import assert_golden, directives, normalize, promised_launch

from wmlce_tools.jobscript import plan_job, render_script
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


def render(site, program, **kw):
    req = ResourceRequest(**kw)
    plan = plan_job(get_site(site), req, [str(program), "--epochs", "3"],
                    jobdir=Path("/jobs/j1"), workdir=Path("/work/proj"))
    return plan, render_script(plan)


@pytest.mark.parametrize("site, kw", [
    ("summit", dict(nodes=18, project="abc123", walltime=90, job_name="ddl_test")),
    ("theta", dict(nodes=128, project="datascience", walltime=60, job_name="hvd")),
    ("slurm-gpu", dict(nodes=4, project="m1234", walltime=120, job_name="train", after="4242")),
])
def test_golden_scripts(site, kw, program):
    _, script = render(site, program, **kw)
    golden = GOLDEN / f"{site}.sh"
    assert_golden(script, program, golden)


def test_summit_directives_and_jsrun_geometry(program):
    plan, script = render("summit", program, nodes=18, project="abc123", walltime=90, job_name="ddl_test", after="701106")
    assert directives(script, "#BSUB") == [
        "#BSUB -J ddl_test", "#BSUB -P abc123", "#BSUB -W 1:30", "#BSUB -nnodes 18", "#BSUB -q batch",
        "#BSUB -o /jobs/j1/ddl_test.%J.out", "#BSUB -e /jobs/j1/ddl_test.%J.err",
        '#BSUB -alloc_flags "smt4"', '#BSUB -w "done(701106)"']
    assert "module load ibm-wml-ce" in script
    argv = promised_launch(script)
    assert argv[:14] == ["jsrun", "-n", "108", "-a", "1", "-c", "7", "-g", "1", "-r", "6", "-b", "packed:7", "-d"]
    ddl = shlex.split(script.strip().splitlines()[-1])
    assert ddl[:3] == [plan.ddlrun_argv[0], "--site", "summit"] and ddl[ddl.index("-n") + 1] == "108"
    assert ddl[ddl.index("--mode") + 1] == "p:6x18x1x1"


def test_summit_rack_contiguous_expert_mode(program):
    _, script = render("summit", program, nodes=40, rack_contiguous=True, walltime=60, project="abc123")
    d = directives(script, "#BSUB")
    assert "#BSUB -csm y" in d and "#BSUB -n 1681" in d and not any("-nnodes" in x for x in d)
    r = [x for x in d if x.startswith("#BSUB -R")][0]
    assert "1680*{select[((CN)&&(type==any))]" in r and "span[ptile=42]" in r and "maxcus=3" in r


def test_theta_directives_and_aprun_line(program):
    _, script = render("theta", program, nodes=128, project="datascience", walltime=60,
                       exports=(("OMP_NUM_THREADS", "64"),))
    assert directives(script, "#COBALT") == [
        "#COBALT -n 128", "#COBALT -t 60", "#COBALT -q default", "#COBALT -A datascience",
        "#COBALT --attrs mcdram=cache:numa=quad", "#COBALT --jobname wml-job", "#COBALT -O /jobs/j1/wml-job"]
    argv = promised_launch(script)
    assert argv[:11] == ["aprun", "-n", "128", "-N", "1", "-d", "64", "-j", "1", "-cc", "depth"]
    assert argv[11:13] == ["-e", "OMP_NUM_THREADS=64"]


def test_theta_hyperthreads_geometry(program):
    _, script = render("theta", program, nodes=128, ranks_per_node=4, threads_per_core=2, walltime=60)
    argv = promised_launch(script)
    assert argv[:9] == ["aprun", "-n", "512", "-N", "4", "-d", "32", "-j", "2"]


def test_slurm_directives_and_srun_line(program):
    _, script = render("slurm-gpu", program, nodes=4, project="m1234", walltime=120, after="4242")
    assert directives(script, "#SBATCH") == [
        "#SBATCH --job-name=wml-job", "#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=4",
        "#SBATCH --cpus-per-task=16", "#SBATCH --threads-per-core=1", "#SBATCH --gpus-per-node=4",
        "#SBATCH --time=02:00:00",
        "#SBATCH --partition=gpu", "#SBATCH --account=m1234",
        "#SBATCH --output=/jobs/j1/wml-job.%j.out", "#SBATCH --error=/jobs/j1/wml-job.%j.err",
        "#SBATCH --dependency=afterok:4242"]
    argv = promised_launch(script)
    assert argv[:9] == ["srun", "-N", "4", "-n", "16", "--ntasks-per-node=4", "--cpus-per-task=16",
                        "--threads-per-core=1", "--gpus-per-task=1"]
    assert "--cpu-bind=cores" in argv


@pytest.mark.parametrize("site", ["summit", "theta", "slurm-gpu", "local"])
def test_every_rendered_script_passes_bash_n(site, program, tmp_path):
    kw = {"theta": dict(nodes=128)}.get(site, dict(nodes=2))
    _, script = render(site, program, modules=("foo/1.0",), exports=(("A", "it's $(id)"),), project="p1", **kw)
    f = tmp_path / "job.sh"
    f.write_text(script)
    assert subprocess.run(["bash", "-n", str(f)], capture_output=True).returncode == 0


HOSTILE = ["x; rm -rf ~", "$(id)", "`id`", "it's", 'say "hi"', "two\nlines", "a\\b", "*", "--flag=$HOME"]


def test_hostile_arguments_reach_the_program_exactly(program, tmp_path):
    """The rendered script runs exactly the given argv, whatever it contains."""
    plan = plan_job(get_site("local"), ResourceRequest(nodes=1), [str(program), *HOSTILE],
                    jobdir=tmp_path / "j", workdir=tmp_path)
    script = render_script(plan)
    # Replace ddlrun with a printer of its argv after "--": what the job would run.
    printer = tmp_path / "bin" / "ddlrun"
    printer.parent.mkdir()
    printer.write_text("#!/usr/bin/env python3\nimport sys, json\na = sys.argv[1:]\nprint(json.dumps(a[a.index('--') + 1:]))\n")
    printer.chmod(0o755)
    ddlrun = plan.ddlrun_argv[0]
    assert script.count(f"\n{ddlrun} ") == 1
    f = tmp_path / "job.sh"
    f.write_text(script.replace(f"\n{ddlrun} ", f"\n{printer} "))
    out = subprocess.run(["bash", str(f)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import json
    assert json.loads(out.stdout.splitlines()[-1])[2:] == HOSTILE
