"""Nodes with two hardware threads per core, on a real Slurm: a second local cluster
(scripts/local-slurm with WML_SLURM_CPUS=4 WML_SLURM_THREADS_PER_CORE=2: each emulated node
declares 1 socket x 2 cores x 2 threads, ``ThreadsPerCore=2`` in slurm.conf), its own base
directory and ports, started and stopped here; the shared cluster is left alone.

What it pins down (issue 13): the allocation and the step must ask for the same cores.
``#SBATCH --cpus-per-task=2`` alone is 2 CPUs = 1 core on such nodes, and the step's
``srun --cpus-per-task=2 --threads-per-core=1`` wants 2 cores: Slurm refuses the step with
"More processors requested than permitted" (sbatch(1)/srun(1) "--threads-per-core").  wml's
script says ``#SBATCH --threads-per-core`` as srun does, and srun repeats ``--cpus-per-task``
(Slurm >= 22.05 does not hand sbatch's value to srun; SRUN_CPUS_PER_TASK is the only other
way).  The control case, the same script without that line, must fail on this cluster, so
the configuration really reproduces the fault.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from helpers.job_output import ddlcheck_ranks

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "local-slurm"
PROGRAM = REPO / "tests" / "jobs" / "programs" / "ddl_check.py"
SITE = textwrap.dedent("""\
    # TEST PROFILE: the SMT2 local cluster of tests/slurm/test_threads_per_core.py
    name: smt2-slurm
    scheduler: slurm
    launcher: srun
    platform: linux-64
    node: {sockets: 1, cores_per_socket: 2, threads_per_core: 2, gpus_per_socket: 0}
    total_nodes: 2
    default_threads_per_core: 1
    queues:
      debug: {default: true, max_nodes: 2, max_walltime: "00:30:00"}
    launcher_options: {srun_mpi: pmi2}
    """)


def _free_port_block(n: int) -> int:
    """A slurmctld port with the next n ports free too (17400-17990; the shared cluster uses 16817+)."""
    for port in range(17400, 18000, 10):
        try:
            for p in range(port, port + n + 1):
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    pytest.fail("no free block of ports in 17400-17999 for the SMT2 cluster")


@pytest.fixture(scope="module")
def smt2_slurm(local_slurm, tmp_path_factory):
    """Needs ``local_slurm`` first: it installs Slurm and munge where they are missing."""
    base = tmp_path_factory.mktemp("slurm-smt2")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "WML_SLURM_"))}
    env = dict(clean, WML_SLURM_BASE=str(base), WML_SLURM_PORT=str(_free_port_block(2)),
               WML_SLURM_CPUS="4", WML_SLURM_THREADS_PER_CORE="2", WML_SLURM_GPUS="0", WML_SLURM_NO_INSTALL="1")

    def script(*args, timeout):
        try:
            return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"scripts/local-slurm {' '.join(args)} (SMT2 cluster, base {base}) did not finish in {timeout} s")

    started = script("start", "2", timeout=180)
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        conf = base / "etc" / "slurm.conf"
        # the shared fixture's helper class (bounded waits, scontrol/sacct readers), for this cluster
        yield type(local_slurm)(base=base, conf=conf, nodes=["n1", "n2"], started_here=True)
    finally:
        stopped = script("stop", timeout=120)
        assert stopped.returncode == 0, stopped.stderr[-3000:]


@pytest.fixture
def smt2_env(smt2_slurm, tmp_path):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "smt2-slurm.yaml").write_text(SITE)
    return {"SLURM_CONF": str(smt2_slurm.conf), "WML_SLURM_BASE": str(smt2_slurm.base), "WML_SITE_PATH": str(sites)}


def test_the_nodes_declare_two_threads_per_core(smt2_slurm):
    out = smt2_slurm.run("sinfo", "-h", "-N", "-o", "%N %c %z").stdout.split("\n")
    assert sorted(line.split() for line in out if line.strip()) == [["n1", "4", "1:2:2"], ["n2", "4", "1:2:2"]]


def test_wml_job_runs_on_smt2_nodes_and_each_rank_gets_its_cpus(smt2_slurm, smt2_env, run_wml, tmp_path):
    proc = run_wml("submit", "--site", "smt2-slurm", "--nodes", "2", "--ranks-per-node", "1",
                   "-t", "5", "--json", "--wait", str(PROGRAM), env=smt2_env, timeout=240)
    info = json.loads(proc.stdout.splitlines()[0])
    script = Path(info["script"]).read_text()
    assert "#SBATCH --cpus-per-task=2\n#SBATCH --threads-per-core=1\n" in script
    out = Path(info["output"]).read_text() if Path(info["output"]).exists() else ""
    err = Path(info["error"]).read_text() if Path(info["error"]).exists() else ""
    assert proc.returncode == 0, f"{proc.stderr}\n{out[-3000:]}\n{err[-3000:]}"
    assert "DDLCHECK-OK size=2" in out
    ranks = ddlcheck_ranks(out)
    assert len(ranks) == 2
    # the step was given --cpus-per-task itself (no inheritance from sbatch since 22.05)
    assert {r["env"]["SLURM_CPUS_PER_TASK"] for r in ranks} == {"2"}
    assert {r["env"]["SLURMD_NODENAME"] for r in ranks} == {"n1", "n2"}


def test_without_threads_per_core_in_sbatch_the_step_is_refused(smt2_slurm, smt2_env, run_wml, tmp_path):
    """The control: wml's own script with the ``#SBATCH --threads-per-core`` line taken out is
    what wml rendered before the fix, and this cluster refuses its step."""
    proc = run_wml("render", "--site", "smt2-slurm", "--nodes", "1", "--ranks-per-node", "1", "-t", "5",
                   "-o", str(tmp_path / "control.out"), str(PROGRAM), env=smt2_env)
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --threads-per-core=1\n" in proc.stdout
    script = tmp_path / "control.sh"
    script.write_text(proc.stdout.replace("#SBATCH --threads-per-core=1\n", ""))
    job = smt2_slurm.run("sbatch", "--parsable", str(script), cwd=tmp_path,
                         env=smt2_slurm.env(WML_SITE_PATH=smt2_env["WML_SITE_PATH"])).stdout.strip().split(";")[0]
    info = smt2_slurm.wait_done(job, timeout=120)
    assert info["JobState"] == "FAILED", info
    deadline = time.monotonic() + 10
    text = ""
    while time.monotonic() < deadline and "More processors requested than permitted" not in text:
        text = (tmp_path / "control.out").read_text() if (tmp_path / "control.out").exists() else ""
        time.sleep(0.2)
    assert "More processors requested than permitted" in text, text[-3000:]
