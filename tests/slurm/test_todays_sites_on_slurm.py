"""Frontier- and Perlmutter-style jobs on the real Slurm of scripts/local-slurm with emulated GPUs
(WML_SLURM_GPUS, 2 per node in the test cluster).

The bundled frontier and perlmutter profiles, shrunk to the local nodes (2 CPUs, 2 GPUs, the
`debug` partition, srun --mpi=pmi2 for pip's MPICH, no modules; Perlmutter's QOS and `-C gpu`
need slurmdbd and node features this cluster does not have, so its queue is the partition),
keep everything else: Frontier's one rank per GCD (srun --gpus-per-task=1 --gpu-bind=closest,
each rank narrowed with ROCR_VISIBLE_DEVICES) and Perlmutter's --gpus-per-node with every GPU
visible to each rank (local-rank binding).  The jobs go through wml submit --wait, sbatch,
slurmd, srun, ddlrun's shim, MPICH and ddl_runtime.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.job_output import ddlcheck_ranks as ranks_of
import yaml

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "tests" / "jobs" / "programs" / "ddl_check.py"


def shrunk(name: str, local_slurm) -> dict:
    prof = yaml.safe_load((REPO / "site_configs" / f"{name}.yaml").read_text())
    prof["name"] = f"{name}-local"
    prof["node"].update(sockets=1, cores_per_socket=2, threads_per_core=1, gpus_per_socket=local_slurm.gpus_per_node)
    prof["node"].pop("gpu_order", None)    # Frontier's order of its 8 GCDs; these nodes have fewer
    prof.pop("default_threads_per_core", None)
    prof["total_nodes"] = len(local_slurm.nodes)
    prof["queues"] = {"debug": {"default": True, "max_nodes": len(local_slurm.nodes), "max_walltime": "0:30"}}
    prof["modules"] = []
    for setting in prof.get("fabric", {}).get("settings", []):
        setting.pop("modules", None)       # rccl-net-plugin & co. are not modules here; the variables stay
    prof.pop("detect", None)
    prof.setdefault("launcher_options", {})["srun_mpi"] = "pmi2"
    prof.pop("slurm", None)
    prof.pop("project_required", None)     # no accounts on this cluster
    return prof


@pytest.fixture
def sites(local_slurm, tmp_path):
    if local_slurm.gpus_per_node < 2:
        pytest.skip("the running local Slurm was started without emulated GPUs; "
                    "restart it with `scripts/local-slurm stop; WML_SLURM_GPUS=2 scripts/local-slurm start`")
    d = tmp_path / "sites"
    d.mkdir()
    for name in ("frontier", "perlmutter"):
        (d / f"{name}-local.yaml").write_text(yaml.safe_dump(shrunk(name, local_slurm)))
    return {"WML_SITE_PATH": str(d), "SLURM_CONF": str(local_slurm.conf), "WML_SLURM_BASE": str(local_slurm.base)}


def submit(run_wml, env, site):
    proc = run_wml("submit", "--site", site, "--nodes", "2", "-t", "5", "-J", site, "--json", "--wait", str(PROGRAM),
                   env=env, timeout=240)
    assert "Traceback" not in proc.stderr, proc.stderr
    info = json.loads(proc.stdout.splitlines()[0])
    text = Path(info["output"]).read_text() if Path(info["output"]).exists() else ""
    assert proc.returncode == 0, f"{proc.stderr}\n{text[-3000:]}"
    script = Path(info["script"]).read_text()
    return ranks_of(text), script, text


def test_frontier_style_one_rank_per_gcd(run_wml, sites):
    ranks, script, text = submit(run_wml, sites, "frontier-local")
    assert "--gpus-per-task=1" in script and "--gpu-bind=closest" in script and "--cpus-per-task=1" in script
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3], text[-3000:]
    assert "[0] DDLCHECK-OK size=4" in text
    for r in ranks:
        assert r["local_rank"] == r["rank"] % 2 and r["cross_rank"] == r["rank"] // 2
        # srun narrowed each task to one GPU; the shim kept ROCR_VISIBLE_DEVICES to that one
        assert len(r["env"]["ROCR_VISIBLE_DEVICES"].split(",")) == 1, r
    per_node = {}
    for r in ranks:
        per_node.setdefault(r["env"]["SLURMD_NODENAME"], set()).add(r["env"]["ROCR_VISIBLE_DEVICES"])
    assert len(per_node) == 2 and all(len(g) == 2 for g in per_node.values()), per_node


def test_perlmutter_style_all_gpus_visible_rank_picks_by_local_rank(run_wml, sites):
    ranks, script, text = submit(run_wml, sites, "perlmutter-local")
    assert re.search(r"srun .*--gpus-per-node=2", script) and "--gpus-per-task" not in script
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3], text[-3000:]
    assert "[0] DDLCHECK-OK size=4" in text
    for r in ranks:
        assert r["env"]["CUDA_VISIBLE_DEVICES"] == "0,1", r          # both GPUs, NVLink between them
    assert {r["env"]["SLURMD_NODENAME"] for r in ranks} == {"n1", "n2"}
