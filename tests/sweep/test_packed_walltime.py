"""A packed allocation holds every round of its trials (issue 53): ``-t`` is one trial's
walltime, the job's is rounds x that, said in the dry run, or refused with the figure it would
need past the queue's limit; a trial ended by the walltime is TIMEOUT, not CANCELLED."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers.job_output import directives

from wmlce_tools.errors import WmlError
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site
from wmlce_tools.sweeps import record
from wmlce_tools.sweeps.grid import build_trials
from wmlce_tools.runs.sweep_plan import SweepOptions, plan_sweep
from wmlce_tools.sweeps.trial import at_walltime

SLEEPER = ("import json, sys, time; time.sleep(float(sys.argv[2])); print(json.dumps({'lr': float(sys.argv[1])}))")


def _plan(site, program, grid, opts, **kw):
    return plan_sweep(get_site(site), ResourceRequest(**kw), [str(program), "--lr", "{lr}"], build_trials(grid),
                      opts, Path("/jobs/sweep1"), workdir=Path("/work/proj"), preview=True)


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


def test_packed_allocation_walltime_is_rounds_times_one_trials(program):
    grid = ["lr=1,2,3", "bs=32,64"]                       # 6 trials
    sp = _plan("slurm-gpu", program, grid, SweepOptions(pack=2), walltime=30, gpus_per_rank=4)
    assert "#SBATCH --time=01:30:00" in directives(sp.script, "#SBATCH")    # 3 rounds of 2 x 30 min
    assert ("# walltime: 6 trial(s), 2 at a time, run in 3 round(s) of 30 min each (-t): the job asks for "
            "1 h 30 min (3 x 30 min)") in sp.describe()
    sp = _plan("theta", program, grid, SweepOptions(max_running=2), project="p", walltime=20)
    assert "#COBALT -t 60" in directives(sp.script, "#COBALT")
    # Theta's debug queues hold 1 hour: 3 rounds of 30 min is refused with the figure it needs
    with pytest.raises(WmlError) as e:
        _plan("theta", program, grid, SweepOptions(max_running=2), project="p", walltime=30)
    msg = str(e.value)
    assert msg.startswith("6 trial(s), 2 at a time, run in 3 round(s) of 30 min each (-t): the job needs a "
                          "walltime of 1 h 30 min (3 x 30 min), but ")
    assert "walltime 1:30 is above the 1:00 maximum for queue 'debug-cache-quad'" in msg and "--pack NODES" in msg
    # all at once: one round, one trial's walltime
    sp = _plan("slurm-gpu", program, grid, SweepOptions(pack=6), walltime=30, gpus_per_rank=4)
    assert "#SBATCH --time=00:30:00" in directives(sp.script, "#SBATCH")


def test_every_round_of_a_local_sweep_runs_each_line_labelled(run_wml, tmp_path):
    prog = tmp_path / "sleeper.py"
    prog.write_text(SLEEPER.replace("; ", "\n"))
    proc = run_wml("sweep", "-t", "5s", "--param", "lr=0.1,0.01,0.001", "--json", str(prog), "{lr}", "2",
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.splitlines()[-1])
    shown = json.loads(run_wml("sweep", "show", info["run_id"], "--format", "json").stdout)
    assert [t["state"] for t in shown["trials"]] == ["COMPLETED"] * 3, shown     # 3 rounds x 5 s
    # each trial's lines in the job's output carry its index (trials may run side by side)
    assert all(f'[trial {i}] {{"lr": {lr}}}' in proc.stderr.splitlines() for i, lr in enumerate((0.1, 0.01, 0.001)))



def test_trial_past_the_walltime_is_timeout_without_mpichs_banner(run_wml, tmp_path):
    prog = tmp_path / "sleeper.py"
    prog.write_text(SLEEPER.replace("; ", "\n"))
    slow = run_wml("sweep", "-t", "2s", "--param", "lr=1", "--json", str(prog), "{lr}", "30", timeout=120)
    assert slow.returncode != 0
    run_id = json.loads(slow.stdout.splitlines()[-1])["run_id"]
    shown = json.loads(run_wml("sweep", "show", run_id, "--format", "json").stdout)
    assert [t["state"] for t in shown["trials"]] == ["TIMEOUT"] and shown["counts"]["TIMEOUT"] == 1
    log = (Path(json.loads(slow.stdout.splitlines()[-1])["run_dir"]) / "trials" / "0" / "output.log").read_text()
    assert "BAD TERMINATION" not in log and "YOUR APPLICATION TERMINATED" not in log and "=====" not in log


def test_deadline_reading():
    now = time.time()
    env = {record.DEADLINE_VAR: f"{now + 100}/1800"}
    assert not at_walltime(env, now)                 # 100 s early: a cancel
    assert at_walltime(env, now + 95)                # within 5% of 30 min (60 s at most) of the end
    assert at_walltime({record.DEADLINE_VAR: f"{now}/10"}, now - 0.5)
    assert not at_walltime({}, now) and not at_walltime({record.DEADLINE_VAR: "junk"}, now)
