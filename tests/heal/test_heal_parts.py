"""The parts of self-healing runs (issue 61) that need no ranks: the hung/lost decision on made-up
heartbeats, the attempts' one line, which of the allocation's nodes a launch uses, the job
scripts' directives and ddlrun line, and each scheduler's way (or none) to keep a queued job off
a node.  The real runs are in test_heal_local.py and tests/slurm/test_heal_on_slurm.py."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from wmlce_tools.ddlrun.hosts import HostSet
from wmlce_tools.ddlrun.plan import DdlrunOptions, build_plan
from wmlce_tools.ddlrun.spares import NoSpareLeft, usable_hosts
from wmlce_tools.errors import WmlError
from wmlce_tools.runstats import attempts, liveness
from wmlce_tools.schedulers import get_scheduler


def _beat(rank, steps, phase="step", limit=3.0, base=0):
    return liveness.parse_beat(json.dumps({"format": 1, "rank": rank, "steps": steps, "step_base": base,
                                           "median_s": 0.1, "limit_s": limit, "phase": phase, "since": 0.0,
                                           "at": 0.0}))


def test_a_rank_that_stops_stepping_is_hung_and_the_ranks_in_a_collective_wait_for_it():
    w = liveness.Watch(4)
    w.update([_beat(r, 10) for r in range(4)], now=0.0)
    w.update([_beat(0, 11, "collective"), _beat(1, 10), _beat(2, 11, "collective"), _beat(3, 12)], now=1.0)
    assert list(w.stalled(now=3.5, slack_s=1.0).hung) == []           # 3.5 s: not past 3 s + 1 s
    w.update([_beat(3, 13)], now=4.9)
    stall = w.stalled(now=5.1, slack_s=1.0)
    assert list(stall.hung) == [1] and list(stall.waiting) == [0, 2]
    assert stall.stalled_s[0] == pytest.approx(5.1)


def test_no_limit_during_the_warm_up_nor_after_the_end_and_a_save_is_timed_apart():
    w = liveness.Watch(3)
    w.update([_beat(0, 2, limit=None), _beat(1, 30, "ended", limit=None), _beat(2, 30, "step")], now=0.0)
    w.update([_beat(2, 30, "save", limit=1800.0)], now=1.0)     # a save begun is progress, with its own limit
    assert list(w.stalled(now=100.0, slack_s=1.0).hung) == []
    assert list(w.stalled(now=1802.5, slack_s=1.0).hung) == [2]


def test_every_stalled_rank_in_a_collective_is_named_when_none_is_outside_one():
    w = liveness.Watch(2)
    w.update([_beat(0, 5, "collective"), _beat(1, 5, "collective")], now=0.0)
    assert list(w.stalled(now=10.0, slack_s=1.0).hung) == [0, 1]


def test_the_ranks_that_failed_first_and_the_lost_nodes():
    reports = [liveness.Report(3, 137, 1.0), liveness.Report(2, 137, 1.2), liveness.Report(0, 143, 1.3),
               liveness.Report(1, 143, 1.4), liveness.Report(5, 137, 9.0)]
    assert [r.rank for r in liveness.failed_first(reports)] == [3, 2]     # SIGTERMs and late ones are teardown
    assert liveness.failed_first([liveness.Report(0, 0, 1.0), liveness.Report(1, 75, 1.0)]) == []
    assert liveness.lost_nodes(6, 2, [0, 1, 4, 5]) == [1]
    assert liveness.lost_nodes(6, 2, []) == []          # nothing reported at all: no node can be told
    assert liveness.signal_name(137) == "SIGKILL" and liveness.signal_name(1) is None


def test_the_attempts_line_time_lost_and_steps_redone(tmp_path):
    rec = attempts.Attempts(restarts=2, spare_nodes=1, attempts=[
        attempts.Attempt(1, ["node0", "node1"], 100.0, outcome="failed", fault_at=130.0, reached_step=10,
                         faults=[attempts.Fault(2, "node1", "signal", signal="SIGKILL", step=10)]),
        attempts.Attempt(2, ["node0", "node2"], 130.5, outcome="finished", restored_step=7, first_step_at=136.7)])
    assert rec.time_lost_s(0) == pytest.approx(6.7) and rec.steps_redone(0) == 2
    assert rec.one_line() == ("2 attempts: 1 failed (rank 2 on node1 killed by SIGKILL at step 10), restarted on "
                              "node0,node2 from the checkpoint of step 7: 6.7 s lost, 2 steps redone; 2 finished")
    attempts.save(tmp_path, rec)
    assert attempts.load(tmp_path) == rec
    assert attempts.status_line(str(tmp_path)) == rec.one_line()


def test_spares_are_kept_out_of_the_layout_and_a_failed_node_is_replaced_by_one():
    hosts = HostSet(("n1", "n2", "n3"), (None, None, None), "SLURM_JOB_NODELIST")
    opts = DdlrunOptions(program=("true",), spare_nodes=1)
    used, left, names = usable_hosts(hosts, opts, "srun")
    assert used.hosts == ("n1", "n2") and left == ("n3",) and names == ("n1", "n2")
    used, left, _ = usable_hosts(hosts, dataclasses.replace(opts, exclude=("n2",)), "srun")
    assert used.hosts == ("n1", "n3") and left == ("n2",)
    with pytest.raises(NoSpareLeft, match=r"1 failed \(n2\) and no spare is left"):
        usable_hosts(HostSet(("n1", "n2"), (None, None), "x"), DdlrunOptions(program=("true",), exclude=("n2",)),
                     "srun")
    with pytest.raises(WmlError, match="jsrun cannot"):
        usable_hosts(hosts, opts, "jsrun")
    emulated = DdlrunOptions(program=("true",), emulate_nodes=2, spare_nodes=1, exclude=("node1",))
    assert usable_hosts(HostSet(("localhost",), (None,), "this machine"), emulated, "mpiexec")[2] == ("node0", "node2")


def test_srun_is_told_to_leave_the_spare_and_the_failed_nodes_out(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-3]")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    opts = DdlrunOptions(program=("true",), site="local-slurm", np=2, ranks_per_node=1, dry_run=True,
                         spare_nodes=1, exclude=("n1",))
    plan = build_plan(opts)
    argv = plan.command()
    assert "--exclude=n1" in argv and plan.node_hosts == ("n2", "n3"), argv
    assert [plan.node_name(n) for n in range(2)] == ["n2", "n3"]


def test_the_job_script_asks_for_the_spares_and_keeps_the_allocation_when_a_node_fails(run_wml, tmp_path):
    prog = tmp_path / "train.py"
    prog.write_text("pass\n")
    slurm = run_wml("render", "--site", "slurm-gpu", "-N", "2", "--spare-nodes", "1", "--restarts", "2", "-q", "gpu",
                    "-A", "m1", str(prog))
    assert slurm.returncode == 0, slurm.stderr
    assert "#SBATCH --nodes=3\n#SBATCH --no-kill\n" in slurm.stdout
    assert "--mode p:4x2x1x1 --restarts=2 --spare-nodes=1 -- " in slurm.stdout
    pbs = run_wml("render", "--site", "polaris", "-N", "2", "--spare-nodes", "1", "--restarts", "1", "-A", "p",
                  str(prog))
    assert pbs.returncode == 0 and "#PBS -l select=3:system=polaris" in pbs.stdout, pbs.stderr
    assert "#PBS -W tolerate_node_failures=all" in pbs.stdout
    plain = run_wml("render", "--site", "slurm-gpu", "-N", "2", "-q", "gpu", "-A", "m1", str(prog))
    assert "--no-kill" not in plain.stdout and "--restarts" not in plain.stdout and "#SBATCH --nodes=2" in plain.stdout
    summit = run_wml("render", "--site", "summit", "-N", "2", "--spare-nodes", "1", "-P", "p", str(prog))
    assert summit.returncode == 2 and summit.stderr.startswith("wml: error: --spare-nodes: summit's launcher, jsrun"), \
        summit.stderr
    bad = run_wml("render", "-N", "2", "--restarts", "-1", str(prog))
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "--restarts" in bad.stderr, bad.stderr
    packed = run_wml("sweep", "--param", "lr=1,2", "--pack", "2", "--site", "slurm-gpu", "-q", "gpu", "-A", "m1",
                     "--spare-nodes", "1", "--dry-run", str(prog))
    assert packed.returncode != 0 and "--spare-nodes: packed trials" in packed.stderr, packed.stderr


def test_each_scheduler_keeps_a_queued_job_off_a_node_in_its_own_form_or_says_it_has_none():
    assert get_scheduler("slurm").exclude_argv("12", ["n2", "n5"]) == ["scontrol", "update", "JobId=12",
                                                                        "ExcNodeList=n2,n5"]
    assert get_scheduler("lsf").exclude_argv("12", ["h1", "h2"]) == ["bmod", "-R",
                                                                      "select[hname!='h1' && hname!='h2']", "12"]
    for name in ("pbs", "cobalt"):
        sched = get_scheduler(name)
        assert sched.exclude_argv("12", ["x"]) is None and "no documented way" in sched.no_exclusion


def test_ddlrun_refuses_a_negative_restart_count_in_one_line(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--restarts", "-2", "true"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr == "ddlrun: error: --restarts must be >= 0, got -2\n", proc.stderr
    assert not list(tmp_path.iterdir())         # nothing written


def test_the_record_says_the_attempts_step_base():
    from ddl_runtime.core.stats import RunStats

    st = RunStats(0, 1)
    st.step_base = 8
    st.end_step()
    assert st.as_dict()["step_base"] == 8
    assert np.isfinite(st.as_dict()["first_step_s"])
