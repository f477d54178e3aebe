"""CUDA MPS on the real Slurm of scripts/local-slurm (issue 57 item 1): two emulated nodes with
emulated GPUs, a site profile of this cluster whose ranks share each GPU under MPS.  ``wml submit
--wait`` -> sbatch -> the job script -> ddlrun, which starts the stand-in ``nvidia-cuda-mps-control``
(tests/ddlrun/programs/fake_mps_control.py, first on PATH) once per node through srun (one task
per node, the node's GPUs in the step), checks in a second step that both daemons outlived the
first (a Slurm step may end what it leaves running), runs the ranks, and stops the daemons in a
last step.  The place names ``{node}``, so each emulated node has its own directory and each rank
the one of its node."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from helpers.mps import MPS_RANK, env_for, fake_mps_bin, journal, kinds

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def site(local_slurm, tmp_path):
    if local_slurm.gpus_per_node < 1:
        pytest.skip("the running local Slurm was started without emulated GPUs; "
                    "restart it with `scripts/local-slurm stop; WML_SLURM_GPUS=2 scripts/local-slurm start`")
    prof = yaml.safe_load((REPO / "site_configs" / "local-slurm.yaml").read_text())
    prof.update(name="mps-local", gpu_sharing={"default": "mps", "checked": "2026-11-29",
                                               "docs": ["https://docs.alcf.anl.gov/polaris/running-jobs/using-gpus/"]})
    prof["node"].update(gpus_per_socket=1)
    prof.pop("detect", None)
    d = tmp_path / "sites"
    d.mkdir()
    (d / "mps-local.yaml").write_text(yaml.safe_dump(prof))
    return d


def test_one_daemon_per_node_through_srun_around_the_ranks(run_wml, local_slurm, site, tmp_path):
    path = tmp_path / "journal.jsonl"
    env = env_for(fake_mps_bin(tmp_path), path, "unused")
    env.pop("WML_STAGE_PLACE")            # the site's place: $WML_SLURM_BASE/tmpfs/{node}
    env.update(WML_SITE_PATH=str(site), SLURM_CONF=str(local_slurm.conf), WML_SLURM_BASE=str(local_slurm.base))
    proc = run_wml("submit", "--site", "mps-local", "--nodes", "2", "--ranks-per-gpu", "2", "-t", "5", "-J", "mps",
                   "--json", "--wait", str(MPS_RANK), env=env, timeout=240)
    info = json.loads(proc.stdout.splitlines()[0])
    text = "".join(Path(info[k]).read_text() for k in ("output", "error") if info.get(k) and Path(info[k]).exists())
    assert proc.returncode == 0, f"{proc.stderr}\n{text[-3000:]}"
    entries = journal(path)
    seq = kinds(entries)
    first_rank, last_rank = seq.index("rank"), len(seq) - 1 - seq[::-1].index("rank")
    assert sorted(seq[:first_rank]) == ["ask:get_server_list"] * 4 + ["start"] * 2, seq     # start + status, 2 nodes
    assert seq[first_rank:last_rank + 1] == ["rank"] * 4 and seq[last_rank + 1:] == ["ask:quit"] * 2, seq
    starts = {e["node"]: e["pipe"] for e in entries if e["event"] == "start"}
    assert sorted(starts) == ["n1", "n2"], entries
    job = info["job_id"]
    for node, pipe in starts.items():     # each node its own directory under its node-local place
        assert re.fullmatch(re.escape(str(local_slurm.base)) + rf"/tmpfs/{node}/wml-mps-{job}\.\d+/pipe", pipe), pipe
        assert not os.path.exists(os.path.dirname(pipe))
    for rank in (e for e in entries if e["event"] == "rank"):
        assert (rank["pipe"], rank["alive"]) == (starts[rank["node"]], True), rank
    assert "ddlrun: CUDA MPS: control daemon started on 2 node(s)" in text
    assert "ddlrun: CUDA MPS: control daemon stopped" in text
