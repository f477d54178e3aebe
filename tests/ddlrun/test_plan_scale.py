"""ddlrun's plan at full-machine size (issue 31 item 7): every step of a launch is linear in
ranks, and the dry-run output is what it was.

- ``test_dry_run_output_unchanged``: ``ddlrun --dry-run`` (and the lines it says before) for
  every launcher and host source at small sizes, byte for byte against files written by the
  code before the planning was made linear (tests/ddlrun/golden/dryrun/).  Regenerate them,
  when a change of output is intended, with ``python tests/ddlrun/test_plan_scale.py``.
- ``test_plan_and_dry_run_read_each_rank_a_bounded_number_of_times``: operation counts, not
  wall time: RankSlot is replaced by one that counts reads of its fields, and a whole plan + dry
  run at N nodes must read a bounded number per rank (the old ``Layout.on_node`` read every
  rank's node for each node: nodes x ranks).
- ``test_a_node_placement_is_worked_out_once_per_layout``: nodes placed alike share one placement.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from wmlce_tools import layout as layout_module
from wmlce_tools.ddlrun.cli import parse_args
from wmlce_tools.ddlrun.plan import build_plan
from wmlce_tools.ddlrun.runner import dry_run_text
from wmlce_tools.layout import RankSlot, compile_layout
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site

from ddlrun_helpers import FAKE_GPU_SITE, openmpi_mpiexec

GOLDEN = Path(__file__).parent / "golden" / "dryrun"
OPENMPI = "/usr/bin/mpiexec.openmpi"
#: a Slurm cluster whose users launch with Open MPI's mpiexec: the rankfile path (two sockets)
FAKE_MPI_SITE = """\
name: fakempi
description: a Slurm cluster launching with mpiexec (tests only)
scheduler: slurm
launcher: mpiexec
platform: linux-64
node: {sockets: 2, cores_per_socket: 4, threads_per_core: 2, gpus_per_socket: 2}
total_nodes: 64
queues:
  batch: {default: true, max_nodes: 64, max_walltime: "1:00"}
gpu_binding: per-rank
"""
CASE_NAMES = ("frontier-slurm-4-nodes", "frontier-slurm-fitted", "perlmutter-slurm-local-rank", "aurora-pbs-3-nodes",
              "aurora-pbs-smt2", "polaris-pbs-2-nodes", "summit-lsf-2-nodes", "summit-lsf-erf",
              "theta-cobalt-2-nodes", "fakegpu-openmpi-emulated", "fakegpu-lr-openmpi-emulated",
              "fakempi-openmpi-rankfile")


def _nodefile(work: Path, name: str, hosts: List[str]) -> str:
    f = work / name
    f.write_text("".join(h + "\n" for h in hosts))
    return str(f)


def _cases(work: Path) -> Dict[str, Tuple[List[str], Dict[str, str]]]:
    """name -> (ddlrun arguments before the program, the allocation's environment)."""
    sites = work / "sites"
    sites.mkdir(exist_ok=True)
    (sites / "fakegpu.yaml").write_text(FAKE_GPU_SITE.format(name="fakegpu", gpus=4, binding="per-rank"))
    (sites / "fakegpu-lr.yaml").write_text(FAKE_GPU_SITE.format(name="fakegpu-lr", gpus=4, binding="local-rank"))
    (sites / "fakempi.yaml").write_text(FAKE_MPI_SITE)
    aurora = [f"x4102c0s{i}b0n0.hostmgmt2000.cm.aurora.alcf.anl.gov" for i in range(3)]
    cases = {
        "frontier-slurm-4-nodes": (["--site", "frontier"], {
            "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "frontier[00001-00003,00010]",
            "SLURM_TASKS_PER_NODE": "8(x4)"}),
        "frontier-slurm-fitted": (["--site", "frontier"], {
            "SLURM_JOB_ID": "4243", "SLURM_JOB_NODELIST": "frontier[00001-00003]", "SLURM_TASKS_PER_NODE": "2(x3)"}),
        "perlmutter-slurm-local-rank": (["--site", "perlmutter", "--gpu-binding", "local-rank"], {
            "SLURM_JOB_ID": "17", "SLURM_JOB_NODELIST": "nid[001000-001001]", "SLURM_TASKS_PER_NODE": "4(x2)"}),
        "aurora-pbs-3-nodes": (["--site", "aurora"], {
            "PBS_JOBID": "1.aurora-pbs-0001", "PBS_NODEFILE": _nodefile(work, "aurora-nodes", aurora)}),
        "aurora-pbs-smt2": (["--site", "aurora", "--threads-per-core", "2"], {
            "PBS_JOBID": "2.aurora-pbs-0001", "PBS_NODEFILE": _nodefile(work, "aurora-nodes", aurora)}),
        "polaris-pbs-2-nodes": (["--site", "polaris", "-x", "NCCL_DEBUG=INFO"], {
            "PBS_JOBID": "77.polaris-pbs-01", "PBS_NODEFILE": _nodefile(work, "polaris-nodes", ["x1", "x1", "x2"])}),
        "summit-lsf-2-nodes": (["--site", "summit"], {
            "LSB_JOBID": "4242", "LSB_MCPU_HOSTS": "batch2 1 a01n01 42 a01n02 42"}),
        "summit-lsf-erf": (["--site", "summit", "--ranks-per-node", "3"], {
            "LSB_JOBID": "4242", "LSB_MCPU_HOSTS": "batch2 1 a01n01 42 a01n02 42"}),
        "theta-cobalt-2-nodes": (["--site", "theta", "-x", "OMP_NUM_THREADS=2"], {
            "COBALT_JOBID": "77", "COBALT_PARTNAME": "3820-3821", "COBALT_JOBSIZE": "2"}),
        "fakegpu-openmpi-emulated": (["--site", "fakegpu", "-n", "4", "--emulate-nodes", "2",
                                      "--mpiexec", OPENMPI, "--timeline", "tl.json"], {
            "WML_SITE_PATH": str(sites), "WML_JOB_ID": "12"}),
        "fakegpu-lr-openmpi-emulated": (["--site", "fakegpu-lr", "-n", "4", "--emulate-nodes", "2",
                                         "--mpiexec", OPENMPI], {"WML_SITE_PATH": str(sites), "WML_JOB_ID": "11"}),
        "fakempi-openmpi-rankfile": (["--site", "fakempi", "--mpiexec", OPENMPI], {
            "WML_SITE_PATH": str(sites), "SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[1-3]"}),
    }
    assert tuple(cases) == CASE_NAMES
    return cases


def dry_run(args: List[str], env: Dict[str, str], work: Path) -> str:
    """What ``ddlrun ARGS --dry-run python train.py`` says: the notes (stderr) then stdout,
    with this machine's paths replaced by names."""
    opts = parse_args([*args, "--dry-run", "--", "python", "train.py"])
    plan = build_plan(opts, env)
    text = "".join(f"ddlrun: {n}\n" for n in plan.notes) + dry_run_text(plan)
    for path, name in ((sys.executable, "{python}"), (plan.launcher_exe, "{launcher}"),
                       (str(work), "{work}"), (tempfile.gettempdir(), "{tmp}")):
        if path:
            text = text.replace(path, name)
    return text


@pytest.mark.parametrize("name", CASE_NAMES)
def test_dry_run_output_unchanged(name, tmp_path, monkeypatch, isolated_env):
    if "openmpi" in name and openmpi_mpiexec() != OPENMPI:
        pytest.skip(f"needs Debian's Open MPI at {OPENMPI}")
    monkeypatch.chdir(tmp_path)
    args, env = _cases(tmp_path)[name]
    assert dry_run(args, env, tmp_path) == (GOLDEN / f"{name}.txt").read_text(), (
        f"ddlrun --dry-run output differs from {GOLDEN / name}.txt; if intended, regenerate it")


class CountingSlot(RankSlot):
    """A RankSlot that counts every read of its fields (rank, node, gpus, cores...)."""

    reads = 0

    def __getattribute__(self, name):
        if not name.startswith("__"):
            CountingSlot.reads += 1
        return super().__getattribute__(name)


@pytest.mark.parametrize("name, nodes", [
    ("aurora-pbs-3-nodes", 64), ("frontier-slurm-4-nodes", 64), ("summit-lsf-erf", 64),
    ("fakempi-openmpi-rankfile", 48)])
def test_plan_and_dry_run_read_each_rank_a_bounded_number_of_times(name, nodes, tmp_path, monkeypatch,
                                                                  isolated_env):
    """The whole plan and its dry run (launch line, shim settings, rankfile/ERF) at N nodes read
    each rank's fields a bounded number of times: linear in ranks, and without a rankfile or ERF
    (srun, PALS) no more than one node's ranks.  The old Layout.on_node read every rank's node
    for each node (64 nodes: 64 reads per rank)."""
    if "openmpi" in name and openmpi_mpiexec() != OPENMPI:
        pytest.skip(f"needs Debian's Open MPI at {OPENMPI}")
    monkeypatch.chdir(tmp_path)
    args, env = _cases(tmp_path)[name]
    env = dict(env)
    if "PBS_NODEFILE" in env:
        env["PBS_NODEFILE"] = _nodefile(tmp_path, "big", [f"x{i}" for i in range(nodes)])
    elif "LSB_MCPU_HOSTS" in env:
        env["LSB_MCPU_HOSTS"] = "batch2 1 " + " ".join(f"a{i:02d}n01 42" for i in range(nodes))
    else:
        env["SLURM_JOB_NODELIST"] = f"n[1-{nodes}]"
        env.pop("SLURM_TASKS_PER_NODE", None)
    monkeypatch.setattr(layout_module, "RankSlot", CountingSlot)
    CountingSlot.reads = 0
    plan = build_plan(parse_args([*args, "--dry-run", "--", "python", "train.py"]), env)
    text = dry_run_text(plan)
    ranks = plan.layout.size
    assert plan.layout.nodes == nodes and f" --size {ranks} " in text
    # a rankfile/ERF has a line per rank; without one (srun, PALS) one node's ranks at most
    bound = 8 * (ranks if plan.placement else plan.layout.ranks_per_node)
    assert CountingSlot.reads <= bound, f"{CountingSlot.reads} rank fields read for {ranks} ranks on {nodes} nodes"


@pytest.mark.parametrize("site, req", [
    ("aurora", ResourceRequest(nodes=40)), ("frontier", ResourceRequest(nodes=40)),
    ("summit", ResourceRequest(nodes=40, ranks_per_node=3)),
    ("theta", ResourceRequest(nodes=40, ranks_per_node=128, threads_per_core=2))])
def test_a_node_placement_is_worked_out_once_per_layout(site, req):
    """Every node of a real machine is placed alike: compile_layout works one node out and every
    node's ranks share its tuples (before: the cores, GPUs and hw threads of every rank were
    built again for each node)."""
    lay = compile_layout(get_site(site), req)
    rpn = lay.ranks_per_node
    first = lay.on_node(0)
    assert [r.rank for r in lay.ranks] == list(range(lay.size))
    for n in range(lay.nodes):
        here = lay.on_node(n)
        assert [(r.node, r.local_rank, r.rank) for r in here] == [(n, lr, n * rpn + lr) for lr in range(rpn)]
        assert all(a.cores is b.cores and a.gpus is b.gpus and a.hwthreads is b.hwthreads
                   for a, b in zip(first, here))
    assert lay.on_node(lay.nodes) == () and lay.on_node(-1) == ()


def regenerate() -> None:
    work = Path(tempfile.mkdtemp())
    os.chdir(work)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, (args, env) in _cases(work).items():
        (GOLDEN / f"{name}.txt").write_text(dry_run(args, env, work))
        print(f"wrote {GOLDEN / name}.txt")


if __name__ == "__main__":
    regenerate()
