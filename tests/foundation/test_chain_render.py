"""The job scripts of a chain (``wml submit --chain N``), rendered for every scheduler, and the
bad input refused before anything is written.

Sources for the directives (checked with the search tool; ../shared/notes/domain.md):
- Slurm sbatch(1): ``--signal=[{R|B}:]<sig>[@sig_time]`` (B: the batch shell only, which
  forwards it), ``--dependency=afterany:<id>``.
- IBM Spectrum LSF 10.1 bsub: ``-wa 'signal'`` and ``-wt '[hour:]minute'`` ("the amount of
  time before a job control action occurs that a job warning action is to be taken";
  IBM's example: ``bsub -W 60 -wt '2' -wa 'URG'``); ``-w 'ended(<id>)'``.
- PBS Pro qsub: ``-W depend=afterany:<id>``; no warning before the walltime.
- Cobalt qsub: ``--dependencies <id>``; no warning before the walltime.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers.job_output import assert_golden, directives, normalize

from wmlce_tools.runs.chain import plan_chain, segment_plan
from wmlce_tools.jobscript import plan_job, render_script
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site

GOLDEN = Path(__file__).parent / "golden"
RUN_DIR = Path("/jobs/train-20250101-000000")


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


def render_segment(site, program, index=2, previous="4242", margin=None, checkpoint_dir="/scratch/ckpt", **kw):
    plan = plan_job(get_site(site), ResourceRequest(**kw), [str(program), "--epochs", "3"],
                    jobdir=RUN_DIR / "segment-1", workdir=Path("/work/proj"))
    chain = plan_chain(plan, RUN_DIR, 3, checkpoint_dir, margin, None)
    seg = segment_plan(plan, chain, index, previous if index > 1 else None)
    return render_script(seg)


CHAIN_JOBS = {
    "summit": dict(nodes=2, project="abc123", walltime=120, job_name="train"),
    "theta": dict(nodes=128, project="datascience", walltime=60, job_name="train"),
    "slurm-gpu": dict(nodes=2, project="m1234", walltime=120, job_name="train"),
    "polaris": dict(nodes=2, project="datascience", walltime=60, queue="debug", job_name="train"),
}
PREVIOUS = {"summit": "701106", "theta": "4242", "slurm-gpu": "4242", "polaris": "4241.polaris-pbs-01"}


@pytest.mark.parametrize("site", sorted(CHAIN_JOBS))
def test_golden_chain_segment_scripts(site, program):
    script = render_segment(site, program, previous=PREVIOUS[site], **CHAIN_JOBS[site])
    golden = GOLDEN / f"chain-{site}.sh"
    assert_golden(script, program, golden)


def test_slurm_asks_for_the_signal_and_depends_afterany(program):
    d = directives(render_segment("slurm-gpu", program, margin="150s", **CHAIN_JOBS["slurm-gpu"]), "#SBATCH")
    assert "#SBATCH --signal=B:USR1@150" in d and "#SBATCH --dependency=afterany:4242" in d
    first = render_segment("slurm-gpu", program, index=1, after="99", **CHAIN_JOBS["slurm-gpu"])
    assert "#SBATCH --dependency=afterok:99" in directives(first, "#SBATCH")   # --after holds the first segment
    assert "--timer" not in first  # Slurm warns: no timer of the script's own


def test_lsf_warning_is_in_whole_minutes_rounded_up(program):
    script = render_segment("summit", program, margin="90s", **CHAIN_JOBS["summit"])
    d = directives(script, "#BSUB")
    assert d[-3:] == ['#BSUB -w "ended(4242)"', "#BSUB -wa USR1", "#BSUB -wt 2"]


@pytest.mark.parametrize("site, dep", [("theta", "#COBALT --dependencies 4242"),
                                       ("polaris", "#PBS -W depend=afterany:4242")])
def test_timer_sites_count_down_walltime_minus_margin(site, dep, program):
    kw = dict(CHAIN_JOBS[site], walltime=30)
    script = render_segment(site, program, margin="0:01:00", **kw)
    assert dep in script
    assert " -m wmlce_tools.chain.segment /jobs/train-20250101-000000 2 --timer 1740 " in script   # 30 min - 1 min
    assert "--signal" not in script and "-wa" not in script


def test_every_rank_gets_the_contract_variables(program):
    from ddl_runtime.checkpoint import protocol as p

    script = render_segment("theta", program, index=3, **CHAIN_JOBS["theta"])
    for line in (f"export {p.CHECKPOINT_DIR_ENV}=/scratch/ckpt", f"export {p.STOP_SIGNAL_ENV}=USR1",
                 f"export {p.SEGMENT_ENV}=3", f"export {p.CHAIN_LENGTH_ENV}=3",
                 f"export {p.RUN_ID_ENV}=train-20250101-000000"):
        assert line in script
    # the job's own variables, not values given to ddlrun: the launch plan passes them on as wml's
    # contract (aprun hands its environment on; Open MPI is told their names)
    from wmlce_tools.rankenv import CONTRACT

    assert f"-x {p.SEGMENT_ENV}" not in script
    assert {p.CHECKPOINT_DIR_ENV, p.STOP_SIGNAL_ENV, p.SEGMENT_ENV, p.CHAIN_LENGTH_ENV, p.RUN_ID_ENV} <= set(CONTRACT)


@pytest.mark.parametrize("site", sorted(CHAIN_JOBS) + ["local"])
def test_chain_scripts_pass_bash_n(site, program, tmp_path):
    kw = CHAIN_JOBS.get(site, dict(nodes=1))
    if site == "local":
        plan = plan_job(get_site("local"), ResourceRequest(nodes=1), [str(program)], jobdir=RUN_DIR / "segment-1")
        script = render_script(segment_plan(plan, plan_chain(plan, RUN_DIR, 2, "/tmp/ckpt", "2s", 10), 1))
    else:
        script = render_segment(site, program, **kw)
    f = tmp_path / "job.sh"
    f.write_text(script)
    assert subprocess.run(["bash", "-n", str(f)], capture_output=True).returncode == 0


# -- bad input: one line, exit != 0, nothing written or submitted ---------------------------

@pytest.mark.parametrize("args, message", [
    (["--chain", "0"], "--chain 0: a chain has 1 or more jobs"),
    (["--chain", "-2"], "--chain -2: a chain has 1 or more jobs"),
    (["--chain", "2", "--interactive"], "cannot be combined with --interactive"),
    (["--chain", "2", "-t", "10", "--signal-margin", "10"], "--signal-margin 0:10:00 is not shorter than the walltime 0:10"),
    (["--chain", "2", "-t", "10", "--signal-margin", "soon"], "malformed --signal-margin 'soon'"),
    (["--chain", "2", "-t", "10", "--checkpoint-dir", "{file}/ckpt"], "is not a directory"),
    (["--checkpoint-dir", "/tmp/x"], "--checkpoint-dir and --signal-margin go with --chain N"),
])
def test_bad_chain_input_is_one_line_and_writes_nothing(args, message, run_wml, tmp_path, program):
    afile = tmp_path / "afile"
    afile.write_text("")
    args = [a.replace("{file}", str(afile)) for a in args]
    proc = run_wml("submit", "--site", "slurm-gpu", "-P", "m1", *args, str(program))
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "wml-jobs").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_checkpoint_dir_is_refused(run_wml, tmp_path, program):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    proc = run_wml("submit", "--site", "slurm-gpu", "-P", "m1", "--chain", "2", "--checkpoint-dir", str(ro), str(program))
    assert proc.returncode != 0 and f"--checkpoint-dir {ro} is not writable" in proc.stderr


def test_local_chain_needs_a_walltime(run_wml, program, tmp_path):
    proc = run_wml("submit", "--chain", "2", str(program))
    assert proc.returncode != 0 and "--chain on the local site needs -t" in proc.stderr
    assert not (tmp_path / "wml-jobs").exists()
