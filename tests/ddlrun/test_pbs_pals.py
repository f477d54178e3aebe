"""ddlrun on today's machines: hosts from PBS Pro's $PBS_NODEFILE, PALS's rank variables, and
each rank's GPUs narrowed with the site's variable (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES
on Frontier, ZE_AFFINITY_MASK on Aurora)."""
from __future__ import annotations

import pytest

from ddl_runtime.core.jobenv import detect_launcher
from wmlce_tools.ddlrun.hosts import discover_hosts
from wmlce_tools.ddlrun.plan import DdlrunOptions, build_plan
from wmlce_tools.ddlrun.rankexec import RankSettings, ShimError, rank_environment
from wmlce_tools.errors import WmlError


def test_hosts_from_pbs_nodefile_in_order_once_each(tmp_path):
    f = tmp_path / "nodefile"
    # PBS lists a node once per chunk (and again per MPI slot with mpiprocs>1)
    f.write_text("x3005c0s13b0n0.hsn.cm.polaris.alcf.anl.gov\nx3005c0s13b0n0.hsn.cm.polaris.alcf.anl.gov\n"
                 "x3005c0s19b1n0.hsn.cm.polaris.alcf.anl.gov\n")
    hs = discover_hosts({"PBS_NODEFILE": str(f), "PBS_JOBID": "1.polaris-pbs-01"})
    assert hs.hosts == ("x3005c0s13b0n0.hsn.cm.polaris.alcf.anl.gov", "x3005c0s19b1n0.hsn.cm.polaris.alcf.anl.gov")
    assert hs.slots == (None, None) and hs.source == "PBS_NODEFILE"


def test_missing_pbs_nodefile_is_one_clear_error(tmp_path):
    with pytest.raises(WmlError, match="PBS_NODEFILE=.*no such file"):
        discover_hosts({"PBS_NODEFILE": str(tmp_path / "gone")})


def test_pals_rank_variables():
    info = detect_launcher({"PALS_RANKID": "5", "PALS_LOCAL_RANKID": "1", "PALS_NODEID": "2", "PMI_RANK": "5",
                            "PMI_SIZE": "8", "PMI_LOCAL_RANK": "1", "PMI_LOCAL_SIZE": "2"})
    assert (info.name, info.rank, info.size, info.local_rank, info.local_size, info.node_id) == ("pals", 5, 8, 1, 2, 2)


def test_ddlrun_plan_inside_a_polaris_job(tmp_path):
    f = tmp_path / "nodefile"
    f.write_text("x1\nx2\n")
    plan = build_plan(DdlrunOptions(program=("true",), site="polaris", dry_run=True),
                      {"PBS_NODEFILE": str(f), "PBS_JOBID": "77.polaris-pbs-01"})
    argv = plan.command()
    assert argv[:8] == [argv[0], "-n", "8", "--ppn", "4", "--depth=8", "--cpu-bind", "depth"]
    assert plan.master_addr == "x1"


def settings(**kw):
    base = dict(size=4, ranks_per_node=2, binding="per-rank", node_gpus=(((0, 1, 2, 3, 4, 5), (6, 7, 8, 9, 10, 11)),),
                mode="p:2x2x1x1", master_addr="x1", master_port=20001)
    base.update(kw)
    return RankSettings(**base)


def test_aurora_rank_gets_its_tiles_in_ze_affinity_mask():
    env = rank_environment(settings(gpu_env="ZE_AFFINITY_MASK"),
                           {"PALS_RANKID": "3", "PALS_LOCAL_RANKID": "1", "PMI_SIZE": "4"})
    assert env["ZE_AFFINITY_MASK"] == "6,7,8,9,10,11" and "CUDA_VISIBLE_DEVICES" not in env
    assert env["LOCAL_RANK"] == "1" and env["GROUP_RANK"] == "1"


def test_frontier_keeps_the_gcd_srun_gave_the_task():
    """srun --gpus-per-task=1 --gpu-bind=closest narrows ROCR_VISIBLE_DEVICES itself (to the GCD
    closest to the task's cores, not necessarily the layout's): the shim keeps it."""
    s = settings(size=16, ranks_per_node=8, node_gpus=(tuple((g,) for g in range(8)),), mode="p:8x2x1x1",
                 gpu_env="ROCR_VISIBLE_DEVICES")
    env = rank_environment(s, {"SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_LOCALID": "3", "SLURM_NTASKS": "16",
                               "SLURM_NODEID": "0", "ROCR_VISIBLE_DEVICES": "5"})
    assert env["ROCR_VISIBLE_DEVICES"] == "5"
    # without srun's narrowing, the layout's GCD, as an index into what the node shows
    env = rank_environment(s, {"SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_LOCALID": "3", "SLURM_NTASKS": "16",
                               "SLURM_NODEID": "0"})
    assert env["ROCR_VISIBLE_DEVICES"] == "3"


def test_local_rank_disagreeing_with_pals_is_refused():
    with pytest.raises(ShimError, match="local rank"):
        rank_environment(settings(), {"PALS_RANKID": "3", "PALS_LOCAL_RANKID": "0", "PMI_SIZE": "4"})
