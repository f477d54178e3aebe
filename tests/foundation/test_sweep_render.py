"""A sweep's job script per scheduler, against the golden files beside the plain jobs' and
the schedulers' documentation:
- Slurm (Frontier): ``#SBATCH --array=0-5%2``, the index in SLURM_ARRAY_TASK_ID
  (https://slurm.schedmd.com/job_array.html: "%" = most tasks running at once);
- LSF (Summit): ``#BSUB -J "name[1-6]%2"``, LSB_JOBINDEX from 1, output ``%J.%I`` (IBM LSF
  bsub -J: "job_name[index_list]%job_slot_limit", indices from 1);
- PBS Pro (Polaris): ``#PBS -J 0-1`` with ``--max-running 2``: two subjobs, each running its
  trials in turn (-J has no running limit), PBS_ARRAY_INDEX, ``^array_index^`` output;
- Cobalt (Theta): no arrays: one allocation, the packed runner."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from helpers.job_output import assert_golden, directives

from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site
from wmlce_tools.sweeps.grid import build_trials
from wmlce_tools.runs.sweep_plan import SweepOptions, plan_sweep

GOLDEN = Path(__file__).parent / "golden"
GRID = ["lr=0.1,0.01", "bs=32,64,128"]


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


def render(site, program, max_running=2, pack=None, **kw):
    sp = plan_sweep(get_site(site), ResourceRequest(**kw), [str(program), "--lr", "{lr}", "--bs", "{bs}"],
                    build_trials(GRID), SweepOptions(max_running=max_running, pack=pack), Path("/jobs/sweep1"),
                    workdir=Path("/work/proj"))
    return sp, sp.script


@pytest.mark.parametrize("site, kw", [
    ("summit", dict(nodes=2, project="abc123", walltime=30, job_name="lr_sweep")),
    ("polaris", dict(nodes=1, project="proj", walltime=30, job_name="lr_sweep")),
    ("frontier", dict(nodes=1, project="abc123", walltime=30, job_name="lr_sweep")),
    ("theta", dict(nodes=1, project="datascience", walltime=20, job_name="lr_sweep")),   # 3 rounds: 1:00
])
def test_golden_sweep_scripts(site, kw, program):
    _, script = render(site, program, **kw)
    golden = GOLDEN / f"sweep-{site}.sh"
    assert_golden(script, program, golden)


def test_array_lines_per_scheduler(program):
    sp, script = render("frontier", program, nodes=1, project="a")
    assert sp.mode == "array" and "#SBATCH --array=0-5%2" in directives(script, "#SBATCH")
    deadline, _, rest = script.strip().splitlines()[-1].partition(" ))/3600 ")    # WML_JOB_DEADLINE=$(( ... ))/3600: no -t, 1 h
    assert deadline == "WML_JOB_DEADLINE=$(( $(date +%s) + 3600"
    last = shlex.split(rest)
    assert last[3:5] == ["/jobs/sweep1", "$SLURM_ARRAY_TASK_ID"] and "{lr}" in last
    sp, script = render("summit", program, nodes=1, project="a", job_name="s")
    assert '#BSUB -J "s[1-6]%2"' in directives(script, "#BSUB")
    assert "#BSUB -o /jobs/sweep1/submit-1/s.%J.%I.out" in directives(script, "#BSUB")
    assert '"$LSB_JOBINDEX" --base 1 --' in script
    sp, script = render("polaris", program, nodes=1, project="a", walltime=30)
    assert "#PBS -J 0-1" in directives(script, "#PBS") and '"$PBS_ARRAY_INDEX" --stride 2 --' in script
    assert "#PBS -l walltime=01:30:00" in directives(script, "#PBS")   # 3 trials in turn x 30 min
    assert "no limit on running subjobs" in sp.why
    sp, script = render("polaris", program, max_running=None, nodes=1, project="a")
    assert "#PBS -J 0-5" in directives(script, "#PBS") and "--stride" not in script


def test_theta_is_packed_and_says_why(program):
    sp, script = render("theta", program, nodes=1, project="p", walltime=20)
    assert sp.mode == "packed" and "Cobalt has no job arrays" in sp.why
    assert "#COBALT -n 2" in directives(script, "#COBALT")           # 2 trials at a time, a node each
    assert "wmlce_tools.sweeps.packed /jobs/sweep1 --" in script
    assert "theta's page: https://docs.alcf.anl.gov/theta/" in sp.describe()


def test_pack_on_an_array_site_is_one_allocation(program):
    sp, script = render("frontier", program, max_running=None, pack=3, nodes=1, project="a")
    assert sp.mode == "packed" and "--pack 3" in sp.why and "#SBATCH --nodes=3" in script
    assert not any("--array" in d for d in directives(script, "#SBATCH"))
