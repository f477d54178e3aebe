"""The rendered Polaris and Aurora (PBS Pro + PALS mpiexec) job scripts, executed end to end.

PALS has no open implementation and a PBS server needs root daemons, so the scripts run under
bash with the variables PBS sets inside a job (PBS_JOBID, PBS_NODEFILE, ...) and with TEST
DOUBLES: ``doubles/pals/mpiexec`` (strict about PALS's flags, see its header), and for the
whole submit path ``doubles/pbs/qsub`` / ``qstat`` (directives checked, the job run at once,
its record answered as ``qstat -x -f -F json`` prints it).  Everything else is real: the
script wml rendered, ``ddlrun`` inside it (hosts from $PBS_NODEFILE, the PALS launch line,
the per-rank shim that narrows each rank's GPUs with the site's variable in the site's
device order), MPICH's mpiexec, ddl_runtime and its allreduce.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
from helpers.job_output import ddlcheck_ranks, promised_launch, same_launch

HERE = Path(__file__).resolve().parent
DOUBLES = HERE / "doubles"
REPO = HERE.parents[1]
PROGRAM = REPO / "tests" / "jobs" / "programs" / "ddl_check.py"
RUN_TIMEOUT_S = 180


def module_function_env() -> Dict[str, str]:
    return {"BASH_FUNC_module%%": f"() {{  . {shlex.quote(str(DOUBLES / 'module'))} \"$@\"\n}}"}


def job_env(base: Dict[str, str], tmp: Path, extra: Dict[str, str], tools=("pals", "pbs")) -> Dict[str, str]:
    """The environment of wml (and its jobs) with the scheduler's doubles first on PATH: ``tools``,
    folders of tests/emulation/doubles (pals, pbs; lsf; cobalt), then the launcher doubles."""
    env = {k: v for k, v in base.items() if not k.startswith(("PBS_", "PALS_", "PMI_", "LSB_", "COBALT_"))}
    for var in ("BASH_ENV", "ENV", "MODULEPATH", "LOADEDMODULES"):
        env.pop(var, None)
    env.update(module_function_env())
    env.update(extra)
    # the PALS double first (it is "mpiexec"), then the PBS client doubles and the module double
    env["PATH"] = os.pathsep.join([*(str(DOUBLES / t) for t in tools), str(DOUBLES),
                                   str(Path(sys.executable).parent), env.get("PATH", "")])
    env["WML_DOUBLE_LOG"] = str(tmp / "doubles.log")
    env["WML_DOUBLE_STATE"] = str(tmp / "pbs-state")
    return env


def records(tmp: Path, tool: str) -> List[dict]:
    log = tmp / "doubles.log"
    return [r for r in map(json.loads, log.read_text().splitlines()) if r["tool"] == tool] if log.exists() else []


def check_ranks(stdout: str, size: int, per_node: int, hosts: List[str]) -> List[dict]:
    ranks = ddlcheck_ranks(stdout)
    assert [r["rank"] for r in ranks] == list(range(size)), stdout[-3000:]
    for r in ranks:
        assert r["size"] == size and r["local_rank"] == r["rank"] % per_node and r["local_size"] == per_node, r
        assert r["cross_rank"] == r["rank"] // per_node, r
        assert r["env"]["PALS_DOUBLE_NODE"] == hosts[r["rank"] // per_node], r
        assert r["env"]["LOCAL_RANK"] == str(r["rank"] % per_node), r
        assert r["ok"] and r["sum"] == size * (size + 1) / 2, r
    assert f"[0] DDLCHECK-OK size={size}" in stdout
    return ranks


def promised_launcher(script: str) -> List[str]:
    """The launcher's own words the script promises: those before the rank shim's python."""
    argv = promised_launch(script)
    return argv[1: argv.index("wmlce_tools.ddlrun.rankexec") - 2]


@pytest.fixture
def render(run_wml):
    def go(*args: str) -> str:
        proc = run_wml("render", *args)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    return go


def run_script(tmp: Path, base_env: Dict[str, str], script: str, job_id: str, hosts: List[str],
               extra: Dict[str, str]) -> subprocess.CompletedProcess:
    path = tmp / "job.sh"
    path.write_text(script)
    nodefile = tmp / f"{job_id}.nodefile"
    nodefile.write_text("".join(f"{h}\n" for h in hosts))
    env = job_env(base_env, tmp, {"PBS_JOBID": job_id, "PBS_NODEFILE": str(nodefile), "PBS_JOBNAME": "ddl_check",
                                   "PBS_O_WORKDIR": str(tmp), "PBS_ENVIRONMENT": "PBS_BATCH", **extra})
    try:   # PBS starts the script in $HOME; the script cd's to where it was rendered
        return subprocess.run(["bash", str(path)], cwd=env.get("HOME", str(tmp)), env=env, capture_output=True,
                              text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"job script did not finish within {RUN_TIMEOUT_S} s: {e.stdout!r} {e.stderr!r}")


POLARIS_HOSTS = ["x3005c0s13b0n0.hsn.cm.polaris.alcf.anl.gov", "x3005c0s13b1n0.hsn.cm.polaris.alcf.anl.gov"]
AURORA_HOSTS = ["x4407c6s2b0n0.hostmgmt2407.cm.aurora.alcf.anl.gov", "x4407c6s3b0n0.hostmgmt2407.cm.aurora.alcf.anl.gov"]


def test_polaris_script_runs_with_pals_and_alcf_gpu_order(render, isolated_env, tmp_path):
    script = render("--site", "polaris", "--nodes", "2", "--ranks-per-node", "2", "-q", "debug", "-P", "datascience",
                    "-t", "10", "-J", "ddl_check", str(PROGRAM))
    assert "#PBS -l select=2:system=polaris" in script
    proc = run_script(tmp_path, isolated_env, script, "4242.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov",
                      POLARIS_HOSTS, {"PALS_DOUBLE_CPUS": "64"})
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    ranks = check_ranks(proc.stdout, 4, 2, POLARIS_HOSTS)
    # 2 GPUs per rank, handed out from GPU 3 down as ALCF's set_affinity_gpu_polaris.sh does
    assert [r["env"]["CUDA_VISIBLE_DEVICES"] for r in ranks] == ["3,2", "1,0", "3,2", "1,0"]
    assert {r["env"]["PALS_DOUBLE_CPUS_BOUND"] for r in ranks if r["local_rank"] == 1} == {",".join(map(str, range(16, 32)))}
    [call] = records(tmp_path, "mpiexec-pals")
    assert same_launch(call["flags"], promised_launcher(script)), (call["flags"], promised_launcher(script))
    assert call["flags"][:6] == ["-n", "4", "--ppn", "2", "--depth=16", "--cpu-bind"]
    assert call["nodes"] == POLARIS_HOSTS                      # from $PBS_NODEFILE
    assert "wml: job 4242.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov (ddl_check) starting" in proc.stdout


def test_aurora_script_binds_tiles_with_ze_affinity_mask(render, isolated_env, tmp_path):
    script = render("--site", "aurora", "--nodes", "2", "--ranks-per-node", "2", "-q", "debug", "-P", "datascience",
                    "-t", "10", "--export", "CCL_LOG_LEVEL=warn", str(PROGRAM))
    proc = run_script(tmp_path, isolated_env, script, "777.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov",
                      AURORA_HOSTS, {"PALS_DOUBLE_CPUS": "208"})
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    ranks = check_ranks(proc.stdout, 4, 2, AURORA_HOSTS)
    # 12 tiles per node, 6 per rank; the frameworks module's FLAT hierarchy numbers tiles 0-11
    assert [r["env"]["ZE_AFFINITY_MASK"] for r in ranks] == ["0,1,2,3,4,5", "6,7,8,9,10,11"] * 2
    assert all("CUDA_VISIBLE_DEVICES" not in r["env"] or r["env"]["CUDA_VISIBLE_DEVICES"] == "" for r in ranks)
    [call] = records(tmp_path, "mpiexec-pals")
    assert same_launch(call["flags"], promised_launcher(script)), (call["flags"], promised_launcher(script))
    assert call["cpu_bind"] == "list:1-51:53-103"              # cores 0 and 52 left to the OS
    assert call["env"]["CCL_LOG_LEVEL"] == "warn"
    assert [m["load"] for m in records(tmp_path, "module")] == ["frameworks"]


def test_failing_rank_fails_the_pbs_job(render, isolated_env, tmp_path):
    script = render("--site", "polaris", "--nodes", "2", "--ranks-per-node", "1", "-q", "debug", "-P", "datascience",
                    "-t", "10", str(PROGRAM), "--fail-rank", "1", "--exit-code", "6")
    proc = run_script(tmp_path, isolated_env, script, "4243.polaris-pbs-01", POLARIS_HOSTS, {})
    assert proc.returncode != 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "DDLCHECK-FAIL rank 1 exits 6" in proc.stdout and "DDLCHECK-OK" not in proc.stdout


def test_wml_submit_wait_and_status_through_qsub_and_qstat(run_wml, isolated_env, tmp_path):
    """wml submit -> qsub (double: runs the job) -> script -> ddlrun -> PALS mpiexec (double);
    then --wait and wml status read the job's end from qstat -x -f -F json."""
    env = job_env(isolated_env, tmp_path, {"PBS_DOUBLE_NODES": "2"})
    proc = run_wml("submit", "--site", "polaris", "--nodes", "2", "--ranks-per-node", "1", "-q", "debug",
                   "-P", "datascience", "-t", "10", "-J", "ddl_check", "--wait", str(PROGRAM), env=env, timeout=240)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    m = re.search(r"Submitted job (\S+) to polaris \(pbs\); script (\S+); output (\S+)", proc.stdout)
    assert m, proc.stdout
    job_id, script, output = m.groups()
    assert job_id == "1.pbs-double"
    text = Path(output).read_text()
    assert "[0] DDLCHECK-OK size=2" in text and f"wml: job {job_id} (ddl_check) starting" in text
    status = run_wml("status", job_id, env=env)
    assert status.returncode == 0 and "COMPLETED" in status.stdout, status.stdout + status.stderr
    # a program that fails: the job FAILED with its exit status, read from Exit_status
    proc = run_wml("submit", "--site", "polaris", "--nodes", "1", "--ranks-per-node", "1", "-q", "debug",
                   "-P", "datascience", "-t", "10", "--wait", str(PROGRAM), "--fail-rank", "0", "--exit-code", "4", env=env, timeout=240)
    assert proc.returncode == 4, f"{proc.stdout}\n{proc.stderr}"


def test_wml_cancel_of_a_finished_pbs_job_asks_qdel_and_reports_how_it_ended(run_wml, isolated_env, tmp_path):
    env = job_env(isolated_env, tmp_path, {"PBS_DOUBLE_NODES": "1"})
    proc = run_wml("submit", "--site", "polaris", "--nodes", "1", "--ranks-per-node", "1", "-q", "debug",
                   "-P", "datascience", "-t", "10", str(PROGRAM), env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    job_id = re.search(r"Submitted job (\S+)", proc.stdout).group(1)
    cancel = run_wml("cancel", job_id, env=env)
    assert cancel.returncode == 0, cancel.stderr
    assert [r["job"] for r in records(tmp_path, "qdel")] == [job_id]
    assert f"job {job_id} had already ended: COMPLETED" in cancel.stdout
    unknown = run_wml("cancel", "99.pbs-double", env=env)
    assert unknown.returncode != 0 and unknown.stderr.startswith("wml: error: ")


# -- the doubles themselves are strict ----------------------------------------------------

def run_double(path: Path, *args: str, env: Dict[str, str], cwd=None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PBS_", "WML_DOUBLE"))}
    e.update(env)
    return subprocess.run([str(path), *args], capture_output=True, text=True, timeout=60, env=e, cwd=cwd)


@pytest.fixture
def nodefile(tmp_path):
    p = tmp_path / "nodes"
    p.write_text("x1\nx2\n")
    return {"PBS_NODEFILE": str(p)}


@pytest.mark.parametrize("args,words", [
    (["-n", "2", "--bogus", "true"], "unknown option '--bogus'"),
    (["--ppn", "2", "true"], "-n (number"),
    (["-n", "6", "--ppn", "2", "true"], "needs 3 nodes"),
    (["-n", "2", "--ppn", "2", "--depth=40", "--cpu-bind", "depth", "true"], "80 CPUs"),
    (["-n", "2", "--ppn", "2", "--cpu-bind=list:1-8:5-9", "true"], "share CPUs"),
    (["-n", "2", "--ppn", "2", "--cpu-bind=list:1-80:81-90", "true"], "must be in 0-63"),
    (["-n", "2", "--cpu-bind", "spread", "true"], "--cpu-bind 'spread'"),
    (["-n", "2", "--env", "NOEQUALS", "true"], "KEY=VALUE"),
])
def test_pals_double_refuses_what_pals_refuses(args, words, nodefile):
    proc = run_double(DOUBLES / "pals" / "mpiexec", *args, env=nodefile)
    assert proc.returncode == 2 and proc.stderr.startswith("mpiexec: error: ") and words in proc.stderr, proc.stderr


def test_pals_double_needs_a_pbs_job():
    proc = run_double(DOUBLES / "pals" / "mpiexec", "-n", "1", "true", env={})
    assert proc.returncode == 2 and "PBS_NODEFILE" in proc.stderr


@pytest.mark.parametrize("lines,words", [
    (["#PBS -l select=1", "#PBS -l walltime=0:10:00"], "Account_Name is required"),
    (["#PBS -A p", "#PBS -l walltime=0:10:00"], "no select"),
    (["#PBS -A p", "#PBS -l select=9", "#PBS -l walltime=0:10:00"], "resource limits"),
    (["#PBS -A p", "#PBS -l select=1", "#PBS -l walltime=0:10:00", "#PBS -l gpus=4"], "Unknown resource 'gpus'"),
    (["#PBS -A p", "#PBS -l select=1", "#PBS -l walltime=ten"], "walltime"),
    (["#PBS -A p", "#PBS -l select=1", "#PBS -l walltime=0:10:00", "#PBS -W depend=after:1"], "illegal -W"),
    (["#PBS -A p", "#PBS -l select=1", "#PBS -l walltime=0:10:00", "#PBS -X"], "invalid option"),
])
def test_qsub_double_refuses_what_qsub_refuses(lines, words, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + "\n".join(lines) + "\necho hi\n")
    proc = run_double(DOUBLES / "pbs" / "qsub", str(script), env={"WML_DOUBLE_STATE": str(tmp_path / "st")})
    assert proc.returncode != 0 and proc.stderr.startswith("qsub: ") and words in proc.stderr, proc.stderr
