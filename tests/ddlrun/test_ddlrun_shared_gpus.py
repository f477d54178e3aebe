"""ddlrun with ranks that share a GPU (issue 30 item 1): planned and launched under the real
MPICH on a host that pretends to have 1 or 4 GPUs (site profiles with fake GPU counts, as the
other mapping tests do), each rank's CUDA_VISIBLE_DEVICES / DDL_LAYOUT_GPUS read back from the
rank itself.  ``ddlrun -n 2`` on one GPU used to refuse the layout outright; without the flag it
still refuses, in one line that names it."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from wmlce_tools.ddlrun.rankexec import RankSettings, parse_gpus, rank_environment

from ddlrun_helpers import FAKE_GPU_SITE, SHOW_ENV

RUNTIME_PROGRAM = """\
import json, os
import numpy as np
import ddl_runtime as ddl
ddl.init()
total = ddl.allreduce(np.array([float(ddl.rank() + 1)]), op="sum")
print("RT " + json.dumps({"rank": ddl.rank(), "local_rank": ddl.local_rank(), "gpu": ddl.local_gpuid(),
                          "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "sum": float(total[0])}), flush=True)
"""


@pytest.fixture
def one_gpu(site_dir):
    (site_dir / "onegpu.yaml").write_text(FAKE_GPU_SITE.format(name="onegpu", gpus=1, binding="per-rank"))
    (site_dir / "onegpu-lr.yaml").write_text(FAKE_GPU_SITE.format(name="onegpu-lr", gpus=1, binding="local-rank"))
    return "onegpu"


def shim_settings(result):
    argv = shlex.split(result.stdout.splitlines()[0])
    at = argv.index("wmlce_tools.ddlrun.rankexec") + 1
    shim = argv[at:argv.index("--", at)]
    return dict(zip(shim[::2], shim[1::2]))


def test_two_ranks_on_one_gpu_without_the_flag_is_one_line_naming_it(ddlrun, one_gpu):
    r = ddlrun("--site", one_gpu, "-n", "2", "python", str(SHOW_ENV))
    assert r.returncode == 2 and r.stdout == ""
    assert r.error_lines == ["ddlrun: error: 2 ranks per node but a onegpu node has 1 GPU; give --ranks-per-gpu 2 "
                             "to share them, or --gpus-per-rank 0 to run CPU-only ranks"]


def test_two_ranks_share_the_one_gpu(ddlrun, one_gpu):
    r = ddlrun("--site", one_gpu, "-n", "2", "--ranks-per-gpu", "2", "python", str(SHOW_ENV))
    assert r.returncode == 0, r.stderr
    ranks = r.ranks()
    assert [(e["RANK"], e["LOCAL_RANK"], e["CUDA_VISIBLE_DEVICES"]) for e in ranks] == [("0", "0", "0"), ("1", "1", "0")]
    assert all(e["DDL_LAYOUT_GPUS"] == "0;0" and e["DDL_GPU_BINDING"] == "per-rank" for e in ranks)


def test_the_job_scripts_environment_variable_does_the_same(ddlrun, one_gpu):
    r = ddlrun("--site", one_gpu, "-n", "2", "python", str(SHOW_ENV), env={"WML_RANKS_PER_GPU": "2"})
    assert r.returncode == 0, r.stderr
    assert [e["CUDA_VISIBLE_DEVICES"] for e in r.ranks()] == ["0", "0"]
    r = ddlrun("--site", one_gpu, "-n", "2", "python", str(SHOW_ENV), env={"WML_RANKS_PER_GPU": "two"})
    assert r.returncode == 2 and r.error_lines == [
        "ddlrun: error: WML_RANKS_PER_GPU='two': expected an integer >= 1 (ranks sharing each GPU)"]


def test_emulated_nodes_each_have_local_rank_0_on_the_one_gpu(ddlrun, one_gpu):
    """How Horovod's test_torch.py runs 2 ranks on one GPU: .cuda(hvd.local_rank()) is cuda:0 on both."""
    r = ddlrun("--site", one_gpu, "-n", "2", "--emulate-nodes", "2", "--ranks-per-gpu", "2", "python", str(SHOW_ENV))
    assert r.returncode == 0, r.stderr
    ranks = r.ranks()
    assert [(e["LOCAL_RANK"], e["GROUP_RANK"], e["CUDA_VISIBLE_DEVICES"], e["DDL_LAYOUT_GPUS"]) for e in ranks] == [
        ("0", "0", "0", "0"), ("0", "1", "0", "0")]
    assert all(e["DDL_EMULATE_NODES"] == "2" for e in ranks)
    r = ddlrun("--site", one_gpu, "-n", "4", "--emulate-nodes", "2", "--ranks-per-gpu", "2", "python", str(SHOW_ENV))
    assert r.returncode == 2 and r.error_lines == ["ddlrun: error: 4 ranks at 2 per GPU need 2 GPUs, but this host has 1"]


def test_local_rank_binding_lists_the_shared_gpu_per_local_rank(ddlrun, one_gpu):
    r = ddlrun("--site", "onegpu-lr", "-n", "2", "--ranks-per-gpu", "2", "python", str(SHOW_ENV))
    assert r.returncode == 0, r.stderr
    ranks = r.ranks()
    assert all("CUDA_VISIBLE_DEVICES" not in e and e["DDL_LAYOUT_GPUS"] == "0;0" for e in ranks)


def test_four_gpus_two_ranks_each_consecutive(ddlrun):
    r = ddlrun("--site", "fakegpu", "--ranks-per-gpu", "2", "--oversubscribe", "python", str(SHOW_ENV))
    assert r.returncode == 0, r.stderr
    assert [e["CUDA_VISIBLE_DEVICES"] for e in r.ranks()] == ["0", "0", "1", "1", "2", "2", "3", "3"]
    dry = ddlrun("--site", "fakegpu", "--ranks-per-gpu", "2", "--dry-run", "python", "x.py")
    assert shim_settings(dry)["--gpus"] == "0;0;1;1;2;2;3;3" and shim_settings(dry)["--ranks-per-node"] == "8"
    # what srun --gpus-per-node=4 shows every task (0,1,2,3): the shim picks the shared one
    s = RankSettings(size=8, ranks_per_node=8, binding="per-rank", node_gpus=parse_gpus(shim_settings(dry)["--gpus"]),
                     mode="p:8x1x1x1", master_addr="n1", master_port=29500)
    got = [rank_environment(s, {"SLURM_STEP_ID": "0", "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r),
                                "SLURM_NTASKS": "8", "SLURM_NODEID": "0",
                                "CUDA_VISIBLE_DEVICES": "0,1,2,3"})["CUDA_VISIBLE_DEVICES"] for r in range(8)]
    assert got == ["0", "0", "1", "1", "2", "2", "3", "3"]


def test_the_runtime_starts_on_the_shared_layout(ddlrun, one_gpu, tmp_path):
    prog = tmp_path / "rt.py"
    prog.write_text(RUNTIME_PROGRAM)
    for extra in ([], ["--emulate-nodes", "2"]):
        r = ddlrun("--site", one_gpu, "-n", "2", "--ranks-per-gpu", "2", *extra, sys.executable, str(prog), timeout=120)
        assert r.returncode == 0, r.stderr
        recs = sorted((json.loads(ln.split("RT ", 1)[1]) for ln in r.stdout.splitlines() if "RT " in ln),
                      key=lambda d: d["rank"])
        assert [(d["gpu"], d["visible"], d["sum"]) for d in recs] == [(0, "0", 3.0), (0, "0", 3.0)]


def test_summit_dry_run_is_the_scripts_promise():
    """ddlrun inside the allocation recomputes the launch the rendered script promises."""
    import subprocess

    from helpers.job_output import promised_launch

    from wmlce_tools.jobscript import plan_job, render_script
    from wmlce_tools.resources import ResourceRequest
    from wmlce_tools.site.registry import get_site

    plan = plan_job(get_site("summit"), ResourceRequest(nodes=2, project="a", ranks_per_gpu=2), ["true"],
                    jobdir=Path("/jobs/j"), workdir=Path("/tmp"))
    promised = promised_launch(render_script(plan))
    argv = plan.ddlrun_argv
    argv = argv[argv.index("--site"):]
    argv.insert(argv.index("--"), "--dry-run")
    env = {"PATH": "/usr/bin:/bin", "LSB_JOBID": "1", "LSB_MCPU_HOSTS": "batch1 1 a01n01 42 a01n02 42",
           "OMP_NUM_THREADS": "3"}
    p = subprocess.run([sys.executable, "-m", "wmlce_tools.ddlrun.cli", *argv],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    launch = shlex.split(p.stdout.splitlines()[0])
    master = launch.index("--master") + 1          # the one word the script leaves to the allocation
    assert promised[master] == "<node 0>:<port from the job id>" and launch[master].startswith("a01n01:")
    assert launch[:master] + launch[master + 1:] == promised[:master] + promised[master + 1:]
    assert "--gpus" in launch and launch[launch.index("--gpus") + 1] == "0;0;1;1;2;2;3;3;4;4;5;5"



def test_wml_submit_on_a_one_gpu_machine_passes_the_sharing_to_ddlrun(run_wml):
    """The local site sees one GPU (CUDA_VISIBLE_DEVICES=0): the job script's ddlrun gets
    --ranks-per-gpu and both emulated nodes' rank runs on it."""
    one_gpu = {"CUDA_VISIBLE_DEVICES": "0", "WML_SITE": "local"}
    p = run_wml("submit", "--nodes", "2", "--ranks-per-gpu", "2", str(SHOW_ENV), env=one_gpu)
    assert p.returncode == 0, p.stderr
    ranks = sorted((json.loads(ln.split("ENV ", 1)[1]) for ln in p.stdout.splitlines() if "ENV " in ln),
                   key=lambda e: int(e["RANK"]))
    assert [(e["LOCAL_RANK"], e["CUDA_VISIBLE_DEVICES"], e["DDL_EMULATE_NODES"]) for e in ranks] == [
        ("0", "0", "2"), ("0", "0", "2")]
    p = run_wml("submit", "--ranks-per-node", "2", str(SHOW_ENV), env=one_gpu)
    assert p.returncode == 2 and "give --ranks-per-gpu 2 to share them" in p.stderr
