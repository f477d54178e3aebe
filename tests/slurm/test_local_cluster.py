"""The local Slurm cluster behaves like a real one: placement, SLURM_* variables, MPI under
srun and under mpiexec, cancel, final states with exit codes, dependencies.

These prove the cluster the scheduler tests run against; they use sbatch/srun/squeue/scontrol/
sacct directly, not wml.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "local-slurm"

pytestmark = pytest.mark.timeout(180)

PY = shlex.quote(sys.executable)

# Every rank prints one line: key=value pairs from the environment Slurm gave it.
SLURM_VARS = ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURMD_NODENAME",
              "SLURM_NTASKS", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE",
              "SLURM_STEP_ID")
RANK_LINE = "echo RANK " + " ".join(f'{v}="${v}"' for v in SLURM_VARS)

MPI_PROGRAM = r"""
import os
from mpi4py import MPI
c = MPI.COMM_WORLD
v = c.allreduce(c.rank + 1, op=MPI.SUM)
vmax = c.allreduce(c.rank, op=MPI.MAX)
names = c.allgather(os.environ.get("SLURMD_NODENAME", "?"))
# One write per line: mpiexec (hydra) forwards output in chunks, and print() may write the text
# and its newline separately, so lines of different ranks could run together.
line = (f"MPI rank={c.rank} size={c.size} node={os.environ.get('SLURMD_NODENAME')} sum={v} max={vmax} "
        f"nodes={','.join(names)}\n")
os.write(1, line.encode())
"""


def _parse(lines, prefix):
    rows = []
    for line in lines.splitlines():
        if line.startswith(prefix + " "):
            rows.append(dict(re.findall(r'(\w+)="?([^" ]*)"?', line[len(prefix) + 1:])))
    return rows


def _read_until(path: Path, done, timeout: float = 10) -> str:
    """A finished job's output file.  The node writes it and this host's file system (gVisor
    here) may show it to another process a moment late: wait, bounded, until it exists and
    ``done(text)``; then return what is there (the caller's assertions show what is missing)."""
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text() if path.exists() else None
        if text is not None and done(text):
            return text
        if time.monotonic() >= deadline:
            if text is None:
                pytest.fail(f"job output {path} did not appear within {timeout} s")
            return text
        time.sleep(0.1)


def _read(path: Path, expect_lines: int = 0, prefix: str = "", timeout: float = 10) -> str:
    """``_read_until`` ``expect_lines`` lines start with ``prefix``."""
    return _read_until(path, lambda t: sum(ln.startswith(prefix) for ln in t.splitlines()) >= expect_lines,
                       timeout)


def test_nodes_are_idle_and_named(local_slurm):
    assert len(local_slurm.nodes) >= 2, local_slurm.nodes
    out = local_slurm.run("sinfo", "-h", "-N", "-o", "%N %T %c %P").stdout
    rows = [line.split() for line in out.splitlines()]
    assert {r[0] for r in rows} == set(local_slurm.nodes)
    for name, state, cpus, part in rows:
        assert state in ("idle", "mixed", "allocated"), (name, state)
        assert int(cpus) == 2
        assert part.rstrip("*") == "debug"


def test_script_start_is_idempotent_and_status_reports(local_slurm):
    env = local_slurm.env()
    t0 = time.monotonic()
    again = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=120, env=env)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert time.monotonic() - t0 < 30
    status = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True, timeout=60, env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "slurmctld: running" in status.stdout
    for n in local_slurm.nodes:
        assert f"slurmd {n}: running" in status.stdout
    printed = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True, timeout=30, env=env)
    assert f"export SLURM_CONF={local_slurm.conf}" in printed.stdout


def test_start_with_other_node_count_while_running_is_refused(local_slurm):
    other = str(len(local_slurm.nodes) + 1)
    r = subprocess.run(["bash", str(SCRIPT), "start", other], capture_output=True, text=True, timeout=120,
                       env=local_slurm.env())
    assert r.returncode != 0
    assert "already running with" in r.stderr and "stop" in r.stderr


def test_sbatch_places_ranks_on_distinct_nodes(local_slurm, tmp_path):
    script = f"#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2 -o {tmp_path}/out-%j.txt\nsrun bash -c {shlex.quote(RANK_LINE)}\n"
    job = local_slurm.sbatch(script, cwd=tmp_path)
    info = local_slurm.wait_done(job)
    assert info["JobState"] == "COMPLETED", info
    rows = _parse(_read(tmp_path / f"out-{job}.txt", 4, "RANK "), "RANK")
    assert sorted(int(r["SLURM_PROCID"]) for r in rows) == [0, 1, 2, 3]
    by_rank = {int(r["SLURM_PROCID"]): r for r in rows}
    first, second = local_slurm.nodes[0], local_slurm.nodes[1]
    # Block distribution: ranks 0,1 on the first node, 2,3 on the second.
    assert [by_rank[i]["SLURMD_NODENAME"] for i in range(4)] == [first, first, second, second]
    assert [by_rank[i]["SLURM_LOCALID"] for i in range(4)] == ["0", "1", "0", "1"]
    assert [by_rank[i]["SLURM_NODEID"] for i in range(4)] == ["0", "0", "1", "1"]
    for r in rows:
        assert r["SLURM_JOB_ID"] == job
        assert r["SLURM_NTASKS"] == "4"
        assert r["SLURM_JOB_NUM_NODES"] == "2"
        assert r["SLURM_TASKS_PER_NODE"] == "2(x2)"
        assert r["SLURM_STEP_ID"] == "0"
        assert r["SLURM_JOB_NODELIST"] in (f"{first},{second}", "n[1-2]")


def test_srun_allocates_directly(local_slurm):
    out = local_slurm.run("srun", "-N", "2", "-n", "3", "--distribution=cyclic", "bash", "-c", RANK_LINE,
                          timeout=60).stdout
    rows = _parse(out, "RANK")
    nodes = {int(r["SLURM_PROCID"]): r["SLURMD_NODENAME"] for r in rows}
    first, second = local_slurm.nodes[0], local_slurm.nodes[1]
    assert nodes == {0: first, 1: second, 2: first}


_MPI_LINE = re.compile(r"MPI rank=(?P<rank>\d+) size=(?P<size>\d+) node=(?P<node>[a-z]+\d+) sum=(?P<sum>\d+) "
                       r"max=(?P<max>\d+) nodes=(?P<nodes>(?:[a-z]+\d+,)*[a-z]+\d+)")


def _mpi_rows(text):
    """Rank lines, found anywhere: mpiexec (hydra) forwards each rank's output in chunks and
    may put one rank's newline after another rank's text, so lines can run together."""
    return {int(m["rank"]): m.groupdict() for m in _MPI_LINE.finditer(text)}


def _check_allreduce(text, nodes):
    rows = _mpi_rows(text)
    assert sorted(rows) == [0, 1, 2, 3], text
    first, second = nodes[0], nodes[1]
    for rank, r in rows.items():
        assert r["size"] == "4"
        assert r["sum"] == "10"          # 1 + 2 + 3 + 4
        assert r["max"] == "3"
        assert r["nodes"] == f"{first},{first},{second},{second}"
    assert [rows[i]["node"] for i in range(4)] == [first, first, second, second]


def test_mpi4py_allreduce_under_srun_pmi2(local_slurm, tmp_path):
    """pip's MPICH under srun --mpi=pmi2 (PMI-1 wire).  The cluster's task prolog gives every
    task MPIR_CVAR_CH4_NETMOD=ofi, so MPI_Init publishes one short PMI-1 line per node and none
    of UCX's ~4 KB business cards, cut into ~1 KB `-seg-k/9` lines, which Slurm's pmi2 plugin
    sometimes read in two pieces on a loaded box (the job then hung in MPI_Init or aborted in
    UCX).  A job that chooses its netmod keeps it."""
    pytest.importorskip("mpi4py", reason="mpi4py is needed (pip install 'wml[mpi]')")
    prog = tmp_path / "allreduce.py"
    prog.write_text(MPI_PROGRAM)
    script = (f"#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2 -o {tmp_path}/out-%j.txt -e {tmp_path}/err-%j.txt\n"
              f"PMI_DEBUG=1 srun --mpi=pmi2 {PY} {shlex.quote(str(prog))}\n"
              f"srun bash -c 'echo NETMOD default=$MPIR_CVAR_CH4_NETMOD'\n"
              f"MPIR_CVAR_CH4_NETMOD=ucx srun bash -c 'echo NETMOD chosen=$MPIR_CVAR_CH4_NETMOD'\n")
    job = local_slurm.sbatch(script, cwd=tmp_path)
    info = local_slurm.wait_done(job, timeout=90)
    text = _read_until(tmp_path / f"out-{job}.txt", lambda t: t.count("NETMOD chosen=") >= 4)
    assert info["JobState"] == "COMPLETED", (info, text)
    _check_allreduce(text, local_slurm.nodes)
    assert re.findall(r"NETMOD (\w+=\w*)", text).count("default=ofi") == 4, text
    assert re.findall(r"NETMOD (\w+=\w*)", text).count("chosen=ucx") == 4, text
    err = _read_until(tmp_path / f"err-{job}.txt", lambda t: "cmd=put " in t)
    puts = [line for line in err.splitlines() if "cmd=put " in line]
    assert puts, err[-3000:]
    assert not [line for line in puts if "-seg-" in line], puts
    assert "invalid client request" not in err


def _mpiexec():
    """The mpiexec beside this interpreter (pip's mpich), else the one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def test_mpi4py_allreduce_with_mpiexec_inside_sbatch(local_slurm, tmp_path):
    pytest.importorskip("mpi4py", reason="mpi4py is needed (pip install 'wml[mpi]')")
    mpiexec = _mpiexec()
    assert mpiexec, "no mpiexec beside the interpreter or on PATH (pip install mpich)"
    prog = tmp_path / "allreduce.py"
    prog.write_text(MPI_PROGRAM)
    # Hydra reads the allocation from SLURM_* and starts its proxies on the nodes via srun.
    script = (f"#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2 -o {tmp_path}/out-%j.txt\n"
              f"{shlex.quote(mpiexec)} -n 4 {PY} {shlex.quote(str(prog))}\n")
    job = local_slurm.sbatch(script, cwd=tmp_path)
    info = local_slurm.wait_done(job, timeout=90)
    text = _read_until(tmp_path / f"out-{job}.txt", lambda t: len(_mpi_rows(t)) >= 4)
    assert info["JobState"] == "COMPLETED", (info, text)
    _check_allreduce(text, local_slurm.nodes)


def test_completed_job_state_and_exit_code(local_slurm, tmp_path):
    job = local_slurm.sbatch(f"#!/bin/bash\n#SBATCH -o {tmp_path}/out-%j.txt\necho hello\n", cwd=tmp_path)
    info = local_slurm.wait_done(job)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0")
    assert _read(tmp_path / f"out-{job}.txt", 1, "hello").strip() == "hello"
    rec = local_slurm.completion(job)
    assert (rec["State"], rec["ExitCode"]) == ("COMPLETED", "0:0")
    # squeue still lists a finished job (MinJobAge) when asked for all states.
    sq = local_slurm.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%i %T").stdout.split()
    assert sq == [job, "COMPLETED"]


def test_failed_job_keeps_its_exit_code(local_slurm, tmp_path):
    job = local_slurm.sbatch(f"#!/bin/bash\n#SBATCH -J wml-fails -o {tmp_path}/out-%j.txt\necho before\nexit 3\n",
                             cwd=tmp_path)
    info = local_slurm.wait_done(job)
    assert info["JobState"] == "FAILED", info
    assert info["ExitCode"] == "3:0"
    assert info["Reason"] == "NonZeroExitCode"
    rec = local_slurm.completion(job)
    assert (rec["State"], rec["ExitCode"], rec["JobName"]) == ("FAILED", "3:0", "wml-fails")


def test_failed_srun_step_fails_the_job(local_slurm, tmp_path):
    script = f"#!/bin/bash\n#SBATCH -N 2 -o {tmp_path}/out-%j.txt\nset -e\necho started\nsrun bash -c 'exit $((SLURM_PROCID + 4))'\necho not reached\n"
    job = local_slurm.sbatch(script, cwd=tmp_path)
    info = local_slurm.wait_done(job)
    assert info["JobState"] == "FAILED", info
    assert info["ExitCode"].split(":")[0] in ("4", "5"), info
    text = _read(tmp_path / f"out-{job}.txt", 1, "started")
    assert "started" in text and "not reached" not in text


def test_scancel_stops_a_running_job(local_slurm, tmp_path):
    pidfile = tmp_path / "pid"
    script = f"#!/bin/bash\n#SBATCH -o {tmp_path}/out-%j.txt\necho $$ > {pidfile}\nexec sleep 300\n"
    job = local_slurm.sbatch(script, cwd=tmp_path)
    local_slurm.wait_state(job, {"RUNNING"}, timeout=30)
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline, "the job did not write its pid within 10 s"
        time.sleep(0.1)
    pid = int(pidfile.read_text())
    os.kill(pid, 0)  # really running on this host
    t0 = time.monotonic()
    local_slurm.run("scancel", job)
    info = local_slurm.wait_state(job, {"CANCELLED"}, timeout=30)
    assert info["JobState"] == "CANCELLED"
    # The process is gone too, well before its sleep would have ended.
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() - t0 < 30, f"pid {pid} still alive 30 s after scancel"
        time.sleep(0.1)
    assert local_slurm.completion(job)["State"] == "CANCELLED"


def test_dependency_afterok_delays_the_second_job(local_slurm, tmp_path):
    stamps = tmp_path / "stamps"
    first = local_slurm.sbatch(
        f"#!/bin/bash\n#SBATCH -o /dev/null\nsleep 3\necho first-end $(date +%s.%N) >> {stamps}\n", cwd=tmp_path)
    second = local_slurm.sbatch(
        f"#!/bin/bash\n#SBATCH -o /dev/null\necho second-start $(date +%s.%N) >> {stamps}\n",
        f"--dependency=afterok:{first}", cwd=tmp_path)
    info = local_slurm.job(second)
    assert info["JobState"] == "PENDING", info
    assert info["Reason"] == "Dependency", info
    assert info["Dependency"].startswith(f"afterok:{first}"), info
    local_slurm.wait_done(first, timeout=60)
    info = local_slurm.wait_done(second, timeout=60)
    assert info["JobState"] == "COMPLETED", info
    lines = dict(line.split() for line in stamps.read_text().splitlines())
    assert float(lines["second-start"]) >= float(lines["first-end"])


def test_dependency_on_a_failed_job_never_runs(local_slurm, tmp_path):
    first = local_slurm.sbatch("#!/bin/bash\n#SBATCH -o /dev/null\nexit 1\n", cwd=tmp_path)
    second = local_slurm.sbatch("#!/bin/bash\n#SBATCH -o /dev/null\ntrue\n", f"--dependency=afterok:{first}",
                                cwd=tmp_path)
    local_slurm.wait_done(first)
    info = local_slurm.wait_state(second, {"PENDING", "CANCELLED"}, timeout=30)
    deadline = time.monotonic() + 30
    while info["JobState"] == "PENDING" and info.get("Reason") != "DependencyNeverSatisfied":
        assert time.monotonic() < deadline, f"second job not marked DependencyNeverSatisfied: {info}"
        time.sleep(0.3)
        info = local_slurm.job(second)
    # Slurm either keeps it pending forever (the default) or cancels it (kill_invalid_depend).
    assert info["JobState"] in ("PENDING", "CANCELLED"), info
    if info["JobState"] == "PENDING":
        local_slurm.run("scancel", second)
        local_slurm.wait_state(second, {"CANCELLED"}, timeout=30)


def test_sbatch_test_only_accepts_and_rejects(local_slurm, tmp_path):
    script = tmp_path / "t.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    ok = local_slurm.run("sbatch", "--test-only", "-N", "2", "--ntasks-per-node=2", "-p", "debug",
                         "-t", "00:10:00", str(script), check=False)
    assert ok.returncode == 0, ok.stderr
    assert "to start at" in ok.stderr
    too_many = local_slurm.run("sbatch", "--test-only", "-N", str(len(local_slurm.nodes) + 1), str(script),
                               check=False)
    assert too_many.returncode != 0
    assert "node" in too_many.stderr.lower()


def test_emulated_gpus_are_bound_per_task(local_slurm, tmp_path):
    if local_slurm.gpus_per_node < 2:
        pytest.skip("the running local Slurm was started without emulated GPUs; "
                    "restart it with `scripts/local-slurm stop; WML_SLURM_GPUS=2 scripts/local-slurm start`")
    line = 'echo GPU rank=$SLURM_PROCID node=$SLURMD_NODENAME local=$SLURM_LOCALID cvd=$CUDA_VISIBLE_DEVICES'
    script = (f"#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2 --gpus-per-node=2 -o {tmp_path}/out-%j.txt\n"
              f"srun --gpus-per-task=1 bash -c {shlex.quote(line.replace('GPU', 'TASK'))}\n"
              f"srun -N 2 -n 2 --ntasks-per-node=1 bash -c {shlex.quote(line.replace('GPU', 'NODE'))}\n")
    job = local_slurm.sbatch(script, cwd=tmp_path)
    info = local_slurm.wait_done(job)
    text = _read_until(tmp_path / f"out-{job}.txt", lambda t: t.count("\nNODE ") + t.startswith("NODE ") >= 2)
    assert info["JobState"] == "COMPLETED", (info, text)
    per_task = {int(r["rank"]): r for r in map(lambda ln: dict(re.findall(r"(\w+)=(\S*)", ln)),
                                               (ln for ln in text.splitlines() if ln.startswith("TASK ")))}
    assert sorted(per_task) == [0, 1, 2, 3], text
    # Each task sees exactly one GPU: its local rank's.
    assert [per_task[i]["cvd"] for i in range(4)] == ["0", "1", "0", "1"]
    per_node = [dict(re.findall(r"(\w+)=(\S*)", ln)) for ln in text.splitlines() if ln.startswith("NODE ")]
    assert sorted(r["cvd"] for r in per_node) == ["0,1", "0,1"]


@pytest.mark.timeout(240)
def test_walltime_limit_ends_in_timeout(local_slurm, tmp_path):
    """Slurm's smallest limit is one minute and slurmctld checks limits every 30 s: ~90 s."""
    job = local_slurm.sbatch("#!/bin/bash\n#SBATCH -t 1 -o /dev/null\nexec sleep 600\n", cwd=tmp_path)
    local_slurm.wait_state(job, {"RUNNING"}, timeout=30)
    info = local_slurm.wait_state(job, {"TIMEOUT"}, timeout=150)
    assert info["Reason"] == "TimeLimit", info
    assert info["ExitCode"] == "0:15", info        # killed by SIGTERM
    assert local_slurm.completion(job)["State"] == "TIMEOUT"


def test_site_profile_matches_the_cluster(local_slurm, tmp_path):
    """site_configs/local-slurm.yaml describes what scripts/local-slurm starts, and a script
    rendered from it is one the real sbatch accepts."""
    from wmlce_tools.site.loader import load_site_file
    from wmlce_tools.walltime import parse_walltime

    repo = Path(__file__).resolve().parents[2]
    site = load_site_file(repo / "site_configs" / "local-slurm.yaml")
    assert (site.scheduler, site.launcher) == ("slurm", "srun")
    node = local_slurm.run("scontrol", "show", "node", "-o", local_slurm.nodes[0]).stdout
    fields = dict(tok.split("=", 1) for tok in node.split() if "=" in tok)
    assert int(fields["CPUTot"]) == site.node.cores * site.node.threads_per_core
    assert int(fields["ThreadsPerCore"]) == site.node.threads_per_core
    assert site.total_nodes <= len(local_slurm.nodes)
    part = local_slurm.run("scontrol", "show", "partition", "-o").stdout
    pfields = dict(tok.split("=", 1) for tok in part.split() if "=" in tok)
    queue = site.default_queue
    assert pfields["PartitionName"] == queue
    assert pfields["MaxTime"] in ("00:30:00", "30:00")
    assert parse_walltime(site.queues[queue].max_walltime) == parse_walltime("00:30:00")
    mpi = local_slurm.run("srun", "--mpi=list", check=False)
    assert site.launcher_options.srun_mpi in (mpi.stdout + mpi.stderr)

    prog = tmp_path / "train.py"
    prog.write_text("print('hi')\n")
    rendered = subprocess.run([sys.executable, "-m", "wmlce_tools", "render", "--site", "local-slurm", "--nodes",
                               str(site.total_nodes), "--ranks-per-node", "2", "-t", "10", str(prog)],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path, env=local_slurm.env())
    assert rendered.returncode == 0, rendered.stderr
    script = tmp_path / "job.sh"
    script.write_text(rendered.stdout)
    test_only = local_slurm.run("sbatch", "--test-only", str(script), check=False, cwd=tmp_path)
    assert test_only.returncode == 0, test_only.stderr
    assert "to start at" in test_only.stderr
