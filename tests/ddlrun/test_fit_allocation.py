"""ddlrun inside an allocation smaller than the site's default (issue 14 part 2): with no rank
count asked for, the ranks fit the slots the allocation gives each node (one line says so);
an explicit request that cannot fit stays an error.  Dry runs of the real ``ddlrun``."""
from __future__ import annotations

import pytest

from test_mapping import split

SLURM_6x2 = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "nid[0001-0006]", "SLURM_TASKS_PER_NODE": "2(x6)"}


def _fitted_lines(r):
    return [ln for ln in r.stderr.splitlines() if ln.startswith("ddlrun: fitted to the allocation: ")]


def test_slurm_allocation_of_6_nodes_x_2_tasks_is_fitted(ddlrun):
    """The reported case: slurm-gpu (4 GPUs per node), 6 nodes, SLURM_TASKS_PER_NODE=2(x6)."""
    r = ddlrun("--site", "slurm-gpu", "--dry-run", "python", "x.py", env=SLURM_6x2)
    launch, shim, program = split(r)
    assert launch == ["srun", "-N", "6", "-n", "12", "--ntasks-per-node=2", "--cpus-per-task=32",
                      "--threads-per-core=1", "--gpus-per-task=2", "--cpu-bind=cores", "--kill-on-bad-exit=1"]
    assert shim["--size"] == "12" and shim["--ranks-per-node"] == "2" and shim["--gpus"] == "0,1;2,3"
    assert shim["--mode"] == "p:2x6x1x1" and program == ["python", "x.py"]
    assert _fitted_lines(r) == [
        "ddlrun: fitted to the allocation: 12 ranks, 2 per node on 6 node(s), 2 GPU(s) per rank "
        "(SLURM_TASKS_PER_NODE gives 2 slot(s) per node; slurm-gpu places 4 per node); -n or --ranks-per-node chooses"]


@pytest.mark.parametrize("args, message", [
    (["-n", "24"], "4 ranks on nid0001, which has 2 slot(s) (SLURM_JOB_NODELIST); pass --oversubscribe"),
    (["--ranks-per-node", "4"], "4 ranks on nid0001, which has 2 slot(s)"),
])
def test_an_explicit_request_that_cannot_fit_stays_an_error(ddlrun, args, message):
    r = ddlrun("--site", "slurm-gpu", *args, "--dry-run", "python", "x.py", env=SLURM_6x2)
    assert r.returncode != 0 and r.stdout == ""
    assert r.error_lines == [f"ddlrun: error: {r.error_lines[0][len('ddlrun: error: '):]}"]
    assert message in r.error_lines[0] and not _fitted_lines(r)


def test_an_allocation_as_large_as_the_default_is_left_alone(ddlrun):
    env = dict(SLURM_6x2, SLURM_TASKS_PER_NODE="4(x6)")
    r = ddlrun("--site", "slurm-gpu", "--dry-run", "python", "x.py", env=env)
    _, shim, _ = split(r)
    assert shim["--size"] == "24" and not _fitted_lines(r)


def test_uneven_slots_fit_the_smallest_node(ddlrun):
    env = dict(SLURM_6x2, SLURM_JOB_NODELIST="nid[0001-0003]", SLURM_TASKS_PER_NODE="3(x2),1")
    r = ddlrun("--site", "slurm-gpu", "--dry-run", "python", "x.py", env=env)
    _, shim, _ = split(r)
    assert shim["--size"] == "3" and shim["--ranks-per-node"] == "1" and shim["--gpus"] == "0,1,2,3"
    assert "at least 1 slot(s) on every node" in _fitted_lines(r)[0]


def test_lsf_allocation_hostfile_is_fitted(ddlrun, tmp_path):
    """Summit places 6 ranks per node; an LSF job given 2 slots per compute host (one line per
    slot in LSB_DJOB_HOSTFILE, the launch node first with 1) gets 2 ranks x 3 GPUs."""
    hf = tmp_path / "djob"
    hf.write_text("batch1\nh41n01\nh41n01\nh41n02\nh41n02\n")
    r = ddlrun("--site", "summit", "--dry-run", "python", "x.py", env={"LSB_JOBID": "9", "LSB_DJOB_HOSTFILE": str(hf)})
    launch, shim, _ = split(r)
    assert launch[:9] == ["jsrun", "-n", "4", "-a", "1", "-c", "21", "-g", "3"]
    assert shim["--gpus"] == "0,1,2;3,4,5" and shim["--ranks-per-node"] == "2"
    assert "(LSB_DJOB_HOSTFILE (launch node batch1 left out) gives 2 slot(s) per node; summit places 6 per node)" \
        in _fitted_lines(r)[0]


def test_hostfile_slots_are_fitted(ddlrun, tmp_path):
    (tmp_path / "hosts").write_text("a slots=1\nb slots=1\n")
    r = ddlrun("--site", "slurm-gpu", "--hostfile", "hosts", "--dry-run", "python", "x.py")
    launch, shim, _ = split(r)
    assert launch[:5] == ["srun", "-N", "2", "-n", "2"] and shim["--gpus"] == "0,1,2,3"
    assert _fitted_lines(r) and "hostfile hosts gives 1 slot(s) per node" in _fitted_lines(r)[0]
    # -H with slots, explicit -n that cannot fit: the error, as before
    r = ddlrun("-H", "a:1,b:1", "--site", "slurm-gpu", "-n", "4", "--dry-run", "python", "x.py")
    assert r.returncode != 0 and "2 ranks on a, which has 1 slot(s)" in r.stderr
