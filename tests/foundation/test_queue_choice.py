"""Queues, partitions and QOSes as the sites have them (issue 53):
- a queue wml chooses for a job that gave no -q is said, with why, in the dry run and the
  submit line; a preemptable queue (ALCF Polaris: "jobs in the preemptable queue can be killed
  at any time") is never chosen, only named (https://docs.alcf.anl.gov/polaris/running-jobs/);
- Slurm QOS beside the partition (``--qos``; OLCF Frontier's debug QOS: "add the -q debug option
  ... or #SBATCH -q debug", frontier_user_guide "debug Quality of Service Class"), and a
  directive naming an option wml does not write for this job goes through;
- a refusal names the limit that actually stops the job (Theta: debug's 1 hour, not the
  default queue's 128-node minimum);
- directives that contradict what wml wrote (--ntasks, --gres=gpu, --array) are refused, and
  --constraint is written once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from wmlce_tools.errors import WmlError
from wmlce_tools.jobscript import plan_job, render_script
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


def _plan(site, program, **kw):
    return plan_job(get_site(site), ResourceRequest(**kw), [str(program)], jobdir=Path("/jobs/j1"), preview=True)


def test_queue_wml_chose_is_said_in_the_dry_run_and_never_a_preemptable_one(run_wml, program):
    proc = run_wml("submit", "--dry-run", "--site", "polaris", "-A", "ABC", "-t", "3h", str(program))
    assert proc.returncode == 0, proc.stderr
    assert "#PBS -q capacity" in proc.stdout.splitlines()          # 1-4 nodes, 168 h; not preemptable
    said = [ln for ln in proc.stdout.splitlines() if ln.startswith("# queue: ")]
    assert said == ["# queue: wml chose queue 'capacity' (1-4 nodes up to 168 h; 1 running job per user): the "
                    "default queue 'prod' refuses this job (1 nodes is below the 10-node minimum of queue 'prod' on polaris)"]
    fr = run_wml("submit", "--dry-run", "--json", "--site", "frontier", "-A", "ABC", "-t", "3h", str(program))
    info = json.loads(fr.stdout)
    assert "#SBATCH --partition=extended" in info["script_text"] and info["queue"] == "extended"
    assert "the default queue 'batch' refuses this job (walltime 3:00 is above the 2:00 maximum" in info["queue_why"]
    # only the preemptable queue takes 6 nodes for 3 h: named, not chosen
    six = run_wml("render", "--site", "polaris", "-A", "ABC", "-N", "6", "-t", "3h", str(program))
    assert six.returncode != 0 and six.stdout == ""
    assert "queue(s) that take this job: preemptable (preemptable: may be killed" in six.stderr and "(-q)" in six.stderr
    # the default queue takes it: nothing to say
    plain = _plan("frontier", program, project="a", walltime=60)
    assert plain.queue == "batch" and plain.queue_why is None
    assert _plan("polaris", program, project="a", walltime=180, queue="preemptable").queue == "preemptable"


def test_submit_line_names_the_chosen_queue(program):
    from wmlce_tools.cli import _queue_said

    plan = _plan("frontier", program, project="a", walltime=180)
    assert _queue_said(plan).startswith(" in queue extended (wml chose queue 'extended'")
    assert _queue_said(_plan("frontier", program, project="a", walltime=60)) == ""


def test_refusal_names_the_limit_that_stops_a_small_job(program):
    with pytest.raises(WmlError) as e:
        _plan("theta", program, project="a", walltime=90)
    assert "1 nodes is below the 128-node minimum of queue 'default' on theta; and no other queue takes it" in str(e.value)
    assert "debug-cache-quad: walltime 1:30 is above the 1:00 maximum for queue 'debug-cache-quad'" in str(e.value)


def test_frontier_debug_qos_beside_the_batch_partition(run_wml, program):
    proc = run_wml("render", "--site", "frontier", "-A", "X", "--qos", "debug", str(program))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "#SBATCH --partition=batch" in lines and "#SBATCH --qos=debug" in lines
    bad = run_wml("render", "--site", "frontier", "-A", "X", "-q", "debug", str(program))
    assert bad.returncode != 0 and "('debug' is a QOS of frontier, beside its partitions: --qos debug)" in bad.stderr
    with pytest.raises(WmlError, match="unknown QOS 'high' on frontier; QOSes: debug"):
        _plan("frontier", program, project="a", qos="high")
    with pytest.raises(WmlError, match=r"--qos: theta \(cobalt\) has no QOS beside its queues; give -q"):
        _plan("theta", program, project="a", nodes=128, qos="debug")
    with pytest.raises(WmlError, match="-q names the QOS on perlmutter"):
        _plan("perlmutter", program, qos="debug")
    # the profile lists no QOS: the name goes to sbatch as given
    assert "#SBATCH --qos=high" in render_script(_plan("slurm-gpu", program, qos="high")).splitlines()


def test_directive_goes_through_when_wml_writes_no_such_option(program):
    s = render_script(_plan("slurm-gpu", program, queue="gpu", directives=("#SBATCH --qos=high",)))
    assert "#SBATCH --partition=gpu" in s.splitlines() and "#SBATCH --qos=high" in s.splitlines()
    s = render_script(_plan("frontier", program, project="a", directives=("#SBATCH -q debug",)))
    assert "#SBATCH -q debug" in s.splitlines()
    with pytest.raises(WmlError, match="wml writes --qos itself; give --qos"):
        _plan("frontier", program, project="a", qos="debug", directives=("#SBATCH --qos=debug",))
    with pytest.raises(WmlError, match="wml writes --qos itself; give -q"):     # Perlmutter: -q is the QOS
        _plan("perlmutter", program, directives=("#SBATCH --qos=high",))


@pytest.mark.parametrize("line, give", [
    ("#SBATCH --ntasks=3", "-N and --ranks-per-node"),
    ("#SBATCH -n 3", "-N and --ranks-per-node"),
    ("#SBATCH --gres=gpu:2", "--gpus-per-rank"),
    ("#SBATCH --gres=nvme:1,gpu:a100:2", "--gpus-per-rank"),
    ("#SBATCH --gpus-per-task=1", "--gpus-per-rank"),
    ("#SBATCH --array=0-3", "wml sweep"),
])
def test_directive_contradicting_the_layout_is_refused(program, line, give):
    with pytest.raises(WmlError, match=f"give {give}"):
        _plan("slurm-gpu", program, directives=(line,))


def test_constraint_written_once(tmp_path, program):
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "conda-meta").mkdir()
    plan = _plan("frontier", program, project="a", constraint="nvme", stage_env="on", conda_env=str(env))
    assert "#SBATCH --constraint=nvme" in render_script(plan).splitlines()
    assert _plan("perlmutter", program, constraint="hbm80g").constraint == "gpu&hbm80g"


def test_frontier_debug_qos_takes_no_chain_and_reaches_salloc(run_wml, program):
    chain = run_wml("submit", "--dry-run", "--site", "frontier", "-A", "X", "--qos", "debug", "--chain", "2", "-t", "1h",
                    str(program))
    assert chain.returncode != 0 and "--chain: frontier's QOS 'debug' takes no job chains" in chain.stderr
    salloc = run_wml("submit", "--dry-run", "--interactive", "--site", "frontier", "-A", "X", "--qos", "debug")
    assert salloc.returncode == 0, salloc.stderr
    assert "--partition=batch" in salloc.stdout and "--qos=debug" in salloc.stdout.split()
