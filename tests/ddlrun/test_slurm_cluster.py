"""ddlrun inside a real Slurm allocation (``scripts/local-slurm``: 2 emulated nodes on this
host, 2 CPUs and 2 emulated GPUs each): hosts come from SLURM_JOB_NODELIST, srun --mpi=pmi2
starts the ranks, and every rank's node and GPU agree with where Slurm really put it.

The cluster started here has its own base directory and port, so it does not disturb a
cluster the tests/slurm session uses.  Skipped, with the reason, only where this machine
cannot run Slurm (not root, or slurm-wlm/munge not installed: scripts/test installs them);
WML_REQUIRE_SLURM=1 (CI) turns that skip into a failure.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from ddlrun_helpers import HERE, Result

REPO = HERE.parents[1]
SCRIPT = REPO / "scripts" / "local-slurm"
SITE = """\
name: ddlrun-slurm
scheduler: slurm
launcher: srun
platform: linux-64
node: {sockets: 1, cores_per_socket: 2, threads_per_core: 1, gpus_per_socket: 2}
total_nodes: 2
queues:
  debug: {default: true, max_nodes: 2, max_walltime: "00:30:00"}
gpu_binding: per-rank
launcher_options: {srun_mpi: pmi2}
"""


def _cannot(reason: str):
    if os.environ.get("WML_REQUIRE_SLURM") == "1":
        pytest.fail(f"WML_REQUIRE_SLURM=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0:
        _cannot("starting a local Slurm cluster needs root")
    if not (shutil.which("slurmctld") and shutil.which("munged")):
        _cannot("slurm-wlm and munge are not installed (apt-get install slurm-wlm munge libpmix-dev)")
    base = tmp_path_factory.mktemp("slurm")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(WML_SLURM_BASE=str(base), WML_SLURM_PORT="27917", WML_SLURM_GPUS="2", WML_SLURM_NO_INSTALL="1")
    start = subprocess.run(["bash", str(SCRIPT), "start", "2"], env=env, capture_output=True, text=True,
                           timeout=180, stdin=subprocess.DEVNULL)
    if start.returncode != 0:
        pytest.fail(f"scripts/local-slurm start failed: {start.stderr.strip()[-2000:]}")
    env["SLURM_CONF"] = str(base / "etc" / "slurm.conf")
    try:
        yield env
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)


def _sbatch_and_wait(env, script: str, cwd, timeout: float = 90) -> Result:
    path = cwd / "job.sh"
    path.write_text(script)
    out = subprocess.run(["sbatch", "--parsable", "-o", str(cwd / "out.%j"), str(path)], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    while True:
        q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True,
                           timeout=30)
        if not q.stdout.strip():
            break
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job], env=env, timeout=30)
            pytest.fail(f"job {job} still {q.stdout.strip()} after {timeout} s")
        time.sleep(0.3)
    text = (cwd / f"out.{job}").read_text()
    return Result(0, text, text)


def test_ranks_land_where_slurm_put_them(cluster, tmp_path):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "ddlrun-slurm.yaml").write_text(SITE)
    env = dict(cluster, WML_SITE_PATH=str(sites), PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    script = (f"#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2 --gpus-per-node=2\n"
              f"{sys.executable} -m wmlce_tools.ddlrun.cli --site ddlrun-slurm -n 4 -x MY_VAR=1 -- "
              f"{sys.executable} {HERE / 'programs' / 'show_env.py'}\n")
    r = _sbatch_and_wait(env, script, tmp_path)
    ranks = r.ranks()
    assert len(ranks) == 4, r.stdout
    assert "ddlrun: srun -N 2 -n 4 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-task=1" in r.stdout
    for x in ranks:
        rank = int(x["RANK"])
        assert x["GROUP_RANK"] == x["SLURM_NODEID"] == str(rank // 2)
        assert x["LOCAL_RANK"] == x["SLURM_LOCALID"] == str(rank % 2)
        assert x["SLURMD_NODENAME"] == f"n{rank // 2 + 1}"
        assert x["CUDA_VISIBLE_DEVICES"] == str(rank % 2)        # Slurm's own narrowing, kept
        assert x["MASTER_ADDR"] == "n1" and x["MY_VAR"] == "1"
        assert x["DDL_OPTIONS"] == "-mode p:2x2x1x1" and "DDL_EMULATE_NODES" not in x
