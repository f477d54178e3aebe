"""The rendered Summit (LSF + jsrun) and Theta (Cobalt + aprun) job scripts, executed end to end.

LSF and Cobalt have no open implementation, so each script runs under bash with the variables
those systems set inside a job (LSB_JOBID, LSB_DJOB_HOSTFILE, LSB_MCPU_HOSTS; COBALT_JOBID,
COBALT_PARTNAME, COBALT_JOBSIZE, COBALT_NODEFILE) and with TEST DOUBLES for the tools that
exist only there: ``doubles/jsrun`` and ``doubles/aprun`` (strict about their documented flag
sets, see their headers) and a ``module`` shell function (``doubles/module``).  Everything else
is real: the script wml rendered, ``ddlrun`` inside it (host discovery from the scheduler's
variables, the launcher line), mpiexec, the per-rank shim, ddl_runtime and its allreduce.

Each script runs a small DDL program (tests/jobs/programs/ddl_check.py) with the ranks the
launcher line promises; the test checks every rank's rank, local rank, node and reduced values,
and that the launcher was called with exactly the flags the script's comment shows.
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
from helpers.job_output import ddlcheck_ranks, promised_launch

HERE = Path(__file__).resolve().parent
DOUBLES = HERE / "doubles"
REPO = HERE.parents[1]
PROGRAM = REPO / "tests" / "jobs" / "programs" / "ddl_check.py"
RUN_TIMEOUT_S = 180


def module_function_env() -> Dict[str, str]:
    """``module`` as an exported bash function (how Lmod/Environment Modules define it)."""
    return {"BASH_FUNC_module%%": f"() {{  . {shlex.quote(str(DOUBLES / 'module'))} \"$@\"\n}}"}


@pytest.fixture
def emu(tmp_path, run_wml, isolated_env):
    return Emulation(tmp_path, run_wml, isolated_env)


class Emulation:
    def __init__(self, tmp_path: Path, run_wml, env: Dict[str, str]):
        self.tmp, self.run_wml, self.base_env = tmp_path, run_wml, dict(env)
        self.log = tmp_path / "doubles.log"

    def render(self, *args: str, env=None) -> str:
        proc = self.run_wml("render", *args, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def run(self, script_text: str, sched_env: Dict[str, str], executable: bool = False) -> subprocess.CompletedProcess:
        script = self.tmp / "job.sh"
        script.write_text(script_text)
        script.chmod(0o755)
        env = dict(self.base_env)
        # a real Lmod/Environment Modules init (BASH_ENV) would replace the module double
        for var in ("BASH_ENV", "ENV", "MODULEPATH", "LOADEDMODULES"):
            env.pop(var, None)
        env.update(module_function_env())
        env.update(sched_env)
        env["PATH"] = f"{DOUBLES}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["WML_DOUBLE_LOG"] = str(self.log)
        # Cobalt runs the script itself (it must be executable); LSF hands it to a shell
        argv = [str(script)] if executable else ["bash", str(script)]
        try:
            return subprocess.run(argv, cwd=self.tmp, env=env, capture_output=True, text=True,
                                   timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"job script did not finish within {RUN_TIMEOUT_S} s; output so far: {e.stdout!r} {e.stderr!r}")

    def records(self, tool: str) -> List[dict]:
        if not self.log.exists():
            return []
        return [r for r in map(json.loads, self.log.read_text().splitlines()) if r["tool"] == tool]

    def lsf_env(self, job_id: str, hosts: Dict[str, int], hostfile: bool = True) -> Dict[str, str]:
        """What LSF sets inside a Summit job: the launch node first (1 slot), then the compute hosts."""
        env = {"LSB_JOBID": job_id, "LSB_MCPU_HOSTS": " ".join(f"{h} {n}" for h, n in hosts.items()),
               "LSB_JOBNAME": "ddl_check", "LSB_QUEUE": "batch"}
        if hostfile:
            path = self.tmp / f"{job_id}.hostfile"
            path.write_text("".join(f"{h}\n" * n for h, n in hosts.items()))
            env["LSB_DJOB_HOSTFILE"] = str(path)
            rankfile = self.tmp / f"{job_id}.rankfile"   # first line: the launch node
            rankfile.write_text("".join(f"{h}\n" * n for h, n in hosts.items()))
            env["LSB_DJOB_RANKFILE"] = str(rankfile)
        return env

    def cobalt_env(self, job_id: str, nids: List[int], nodefile: bool = False) -> Dict[str, str]:
        parts = f"{nids[0]}-{nids[-1]}" if nids == list(range(nids[0], nids[-1] + 1)) else ",".join(map(str, nids))
        env = {"COBALT_JOBID": job_id, "COBALT_PARTNAME": parts, "COBALT_JOBSIZE": str(len(nids)),
               "COBALT_PARTSIZE": str(len(nids))}
        if nodefile:
            path = self.tmp / f"{job_id}.nodefile"
            path.write_text("".join(f"nid{n:05d}\n" for n in nids))
            env["COBALT_NODEFILE"] = str(path)
        return env


def check_ranks(proc, size: int, per_node: int, node_of, node_var: str) -> List[dict]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    ranks = ddlcheck_ranks(proc.stdout)
    assert [r["rank"] for r in ranks] == list(range(size)), proc.stdout[-3000:]
    for r in ranks:
        assert r["size"] == size
        assert r["local_rank"] == r["rank"] % per_node, r
        assert r["local_size"] == per_node, r
        assert r["cross_rank"] == r["rank"] // per_node, r
        assert r["env"][node_var] == node_of(r["rank"]), r
        assert r["env"]["LOCAL_RANK"] == str(r["rank"] % per_node) and r["env"]["GROUP_RANK"] == str(r["rank"] // per_node)
        assert r["ok"] and r["sum"] == size * (size + 1) / 2 and r["avg"] == (size - 1) / 2, r
    assert f"[0] DDLCHECK-OK size={size}" in proc.stdout
    return ranks


def promised_launcher(script: str) -> List[str]:
    """The launcher line the script's comment promises, as argv, without the program."""
    argv = promised_launch(script)
    # the interpreter: the submitting env's python, or `python` of --env or the site's module (issue 40.2)
    at = next(i for i, a in enumerate(argv) if i and os.path.basename(a).startswith("python"))
    return argv[1:at]


def summit_hosts(n: int) -> Dict[str, int]:
    return {"batch1": 1, **{f"h41n{i:02d}": 42 for i in range(1, n + 1)}}


# -- Summit: LSF + jsrun ------------------------------------------------------------------

def test_summit_script_runs_one_rank_per_gpu_group_on_two_nodes(emu):
    script = emu.render("--site", "summit", "--nodes", "2", "--ranks-per-node", "2", "-P", "abc123", "-t", "10",
                        "-J", "ddl_check", str(PROGRAM))
    assert "#BSUB -nnodes 2" in script and "module load ibm-wml-ce" in script
    proc = emu.run(script, emu.lsf_env("701106", summit_hosts(2)))
    ranks = check_ranks(proc, 4, 2, lambda r: f"h41n{r // 2 + 1:02d}", "JSM_DOUBLE_HOST")
    # each rank's resource set holds its 3 GPUs, numbered from 0 inside the set
    assert {r["env"]["CUDA_VISIBLE_DEVICES"] for r in ranks} == {"0,1,2"}
    [call] = emu.records("jsrun")
    assert call["flags"] == promised_launcher(script) == ["-n", "4", "-a", "1", "-c", "21", "-g", "3", "-r", "2",
                                                          "-b", "packed:21", "-d", "packed"]
    assert call["hosts"] == ["h41n01", "h41n02"]          # the launch node batch1 is not a compute host
    assert [m["load"] for m in emu.records("module")] == ["ibm-wml-ce"]
    assert "wml: job 701106 (ddl_check) starting" in proc.stdout


def test_summit_local_rank_binding_and_cuda_aware_mpi_from_lsb_mcpu_hosts(emu, tmp_path):
    """A site variant (WML_SITE_PATH): one resource set per node holding all 6 GPUs and the
    node's ranks (OLCF's later advice), --smpiargs=-gpu; hosts from LSB_MCPU_HOSTS alone."""
    sites = tmp_path / "sites"
    sites.mkdir()
    text = (REPO / "site_configs" / "summit.yaml").read_text()
    text = text.replace("name: summit", "name: summit-lr").replace("gpu_binding: per-rank", "gpu_binding: local-rank")
    text = text.replace("cuda_aware_mpi: false", "cuda_aware_mpi: true")
    text = re.sub(r"detect:\n(  .*\n)+", "", text)
    (sites / "summit-lr.yaml").write_text(text)
    env = {"WML_SITE_PATH": str(sites)}
    script = emu.render("--site", "summit-lr", "--nodes", "2", "--ranks-per-node", "2", "-P", "abc123", "-t", "10",
                        str(PROGRAM), env=env)
    proc = emu.run(script, {**env, **emu.lsf_env("701108", summit_hosts(2), hostfile=False)})
    ranks = check_ranks(proc, 4, 2, lambda r: f"h41n{r // 2 + 1:02d}", "JSM_DOUBLE_HOST")
    assert {r["env"]["CUDA_VISIBLE_DEVICES"] for r in ranks} == {"0,1,2,3,4,5"}
    [call] = emu.records("jsrun")
    assert call["flags"] == promised_launcher(script)
    assert call["nrs"] == 2 and call["tasks_per_rs"] == 2 and call["gpu_per_rs"] == 6 and call["rs_per_host"] == 1
    assert call["smpiargs"] == "-gpu"


def test_summit_rack_contiguous_script_runs(emu):
    script = emu.render("--site", "summit", "--nodes", "2", "--ranks-per-node", "1", "-P", "abc123", "-t", "10",
                        "--rack-contiguous", str(PROGRAM))
    assert "#BSUB -csm y" in script and "#BSUB -n 85" in script
    proc = emu.run(script, emu.lsf_env("701109", summit_hosts(2)))
    check_ranks(proc, 2, 1, lambda r: f"h41n{r + 1:02d}", "JSM_DOUBLE_HOST")
    # one rank per node does not split over Summit's 2 sockets: ddlrun writes an ERF, and the
    # script's comment says so
    [call] = emu.records("jsrun")
    assert promised_launcher(script) == ["--erf_input", "<ERF written by ddlrun>"]
    assert call["flags"][0] == "--erf_input" and call["ranks"] == 2 and call["hosts"] == ["h41n01", "h41n02"]


def test_summit_three_ranks_per_node_run_from_an_explicit_resource_file(emu):
    """3 ranks do not split over Summit's 2 sockets, so ddlrun hands jsrun an ERF."""
    script = emu.render("--site", "summit", "--nodes", "1", "--ranks-per-node", "3", "-P", "abc123", "-t", "10",
                        str(PROGRAM))
    proc = emu.run(script, emu.lsf_env("701110", summit_hosts(1)))
    ranks = check_ranks(proc, 3, 3, lambda r: "h41n01", "JSM_DOUBLE_HOST")
    assert {r["env"]["CUDA_VISIBLE_DEVICES"] for r in ranks} == {"0,1"}
    [call] = emu.records("jsrun")
    assert "erf_input" in call and call["ranks"] == 3
    assert promised_launcher(script)[0] == "--erf_input"


def test_summit_failing_program_fails_the_job_with_its_exit_status(emu):
    script = emu.render("--site", "summit", "--nodes", "1", "--ranks-per-node", "1", "-P", "abc123", "-t", "10",
                        str(PROGRAM), "--fail-rank", "0", "--exit-code", "7")
    proc = emu.run(script, emu.lsf_env("701111", summit_hosts(1)))
    assert proc.returncode == 7, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "DDLCHECK-FAIL rank 0 exits 7" in proc.stdout


# -- Theta: Cobalt + aprun ----------------------------------------------------------------

def test_theta_script_runs_two_ranks_on_each_of_two_nodes(emu):
    script = emu.render("--site", "theta", "--nodes", "2", "--ranks-per-node", "2", "-q", "debug-cache-quad",
                        "-P", "datascience", "-t", "10", "-J", "ddl_check", "--export", "OMP_NUM_THREADS=2",
                        str(PROGRAM))
    assert "#COBALT -n 2" in script and "#COBALT -q debug-cache-quad" in script
    proc = emu.run(script, emu.cobalt_env("351457", [3820, 3821]), executable=True)
    check_ranks(proc, 4, 2, lambda r: f"nid0{3820 + r // 2}", "ALPS_DOUBLE_NODE")
    [call] = emu.records("aprun")
    assert call["flags"][: len(promised_launcher(script))] == promised_launcher(script)[: len(call["flags"])]
    assert call["flags"] == ["-n", "4", "-N", "2", "-d", "32", "-j", "1", "-cc", "depth", "-e", "OMP_NUM_THREADS=2"]
    assert call["e"] == {"OMP_NUM_THREADS": "2"}          # exports reach the compute nodes through -e
    assert [m["load"] for m in emu.records("module")] == ["datascience/horovod-0.15.2"]
    assert "wml: job 351457 (ddl_check) starting" in proc.stdout


def test_theta_hyperthreads_and_nodefile(emu):
    script = emu.render("--site", "theta", "--nodes", "2", "--ranks-per-node", "1", "--threads-per-core", "2",
                        "-q", "debug-flat-quad", "-P", "datascience", "-t", "10", str(PROGRAM))
    proc = emu.run(script, emu.cobalt_env("351458", [3900, 3901], nodefile=True), executable=True)
    check_ranks(proc, 2, 1, lambda r: f"nid0{3900 + r}", "ALPS_DOUBLE_NODE")
    [call] = emu.records("aprun")
    assert call["j"] == 2 and call["N"] * call["d"] <= 64 * call["j"]


def test_theta_failing_rank_ends_the_whole_job(emu):
    """Rank 0 exits 5 while rank 1 waits in the allreduce: the runtime aborts the job (it
    does not hang), and the job fails."""
    script = emu.render("--site", "theta", "--nodes", "2", "--ranks-per-node", "1", "-q", "debug-cache-quad",
                        "-P", "datascience", "-t", "10", str(PROGRAM), "--fail-rank", "0", "--exit-code", "5")
    proc = emu.run(script, emu.cobalt_env("351459", [3820, 3821]), executable=True)
    assert proc.returncode != 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "DDLCHECK-FAIL rank 0 exits 5" in proc.stdout and "DDLCHECK-OK" not in proc.stdout


# -- the doubles themselves are strict ----------------------------------------------------

def run_double(tool: str, *args: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("LSB_", "COBALT_", "WML_DOUBLE"))}
    e.update(env)
    return subprocess.run([str(DOUBLES / tool), *args], capture_output=True, text=True, timeout=60, env=e)


LSF = {"LSB_MCPU_HOSTS": "batch1 1 h41n01 42 h41n02 42"}
COBALT = {"COBALT_PARTNAME": "3820-3821", "COBALT_JOBSIZE": "2"}


@pytest.mark.parametrize("tool,args,env,words", [
    ("jsrun", ["--bogus", "1", "true"], LSF, "unknown option '--bogus'"),
    ("jsrun", ["-n", "2", "-x", "true"], LSF, "unknown option '-x'"),
    ("jsrun", ["-a", "1", "true"], LSF, "-n/--nrs"),
    ("jsrun", ["-n", "2", "-c", "43", "true"], LSF, "a host has 42"),
    ("jsrun", ["-n", "2", "-g", "4", "-r", "2", "true"], LSF, "GPUs per host"),
    ("jsrun", ["-n", "2", "-g", "7", "true"], LSF, "a host has 6 GPUs"),
    ("jsrun", ["-n", "6", "-r", "2", "-c", "7", "true"], LSF, "need 3 hosts"),
    ("jsrun", ["-n", "2", "-a", "2", "-c", "7", "-b", "packed:7", "true"], LSF, "do not fit"),
    ("jsrun", ["-n", "2", "-b", "spread", "true"], LSF, "--bind 'spread'"),
    ("jsrun", ["-n", "2", "true"], {}, "no allocation"),
    ("jsrun", ["-n", "2"], LSF, "no program"),
    ("aprun", ["-n", "4", "-N", "2", "--cpu-binding", "true"], COBALT, "unknown option '--cpu-binding'"),
    ("aprun", ["-N", "2", "true"], COBALT, "-n (number"),
    ("aprun", ["-n", "2", "-N", "2", "-d", "64", "-j", "1", "true"], COBALT, "128 CPUs per node"),
    ("aprun", ["-n", "6", "-N", "2", "true"], COBALT, "needs 3 nodes"),
    ("aprun", ["-n", "2", "-j", "8", "true"], COBALT, "at most 4"),
    ("aprun", ["-n", "2", "-e", "NOEQUALS", "true"], COBALT, "VAR=value"),
    ("aprun", ["-n", "2", "true"], {}, "no allocation"),
])
def test_doubles_refuse_what_the_real_tools_refuse(tool, args, env, words):
    proc = run_double(tool, *args, env=env)
    assert proc.returncode == 2, proc
    assert proc.stderr.startswith(f"{tool}: error: ") and words in proc.stderr, proc.stderr


def test_doubles_accept_attached_and_long_spellings(tmp_path):
    log = tmp_path / "log"
    # one write() per rank: print() under PYTHONUNBUFFERED writes the text and the newline apart,
    # and two ranks' pieces could interleave ("10" then two newlines)
    write_rank = "import os; os.write(1, os.environ['JSM_NAMESPACE_RANK'].encode() + b'\\n')"
    proc = run_double("jsrun", "-n2", "-a1", "-c7", "-g1", "-r2", "-bpacked:7", "--launch_distribution=packed",
                      "--smpiargs=-gpu", "-l", "gpu-cpu", sys.executable, "-c", write_rank,
                      env={**LSF, "WML_DOUBLE_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["0", "1"]
    rec = json.loads(log.read_text())
    assert rec["nrs"] == 2 and rec["bind"] == "packed:7" and rec["smpiargs"] == "-gpu"


# -- issue 13: Summit fixes, executed -------------------------------------------------------

def test_summit_script_runs_wmls_ddlrun_when_ibms_is_first_on_path(emu, tmp_path):
    """``module load ibm-wml-ce`` puts IBM's ddlrun first on PATH (a TEST DOUBLE here that
    fails loudly): the script still runs wml's, by absolute path."""
    ibm = tmp_path / "ibm-wml-ce" / "bin"
    ibm.mkdir(parents=True)
    (ibm / "ddlrun").write_text("#!/bin/sh\necho 'IBM ddlrun (test double) must not run' >&2\nexit 97\n")
    (ibm / "ddlrun").chmod(0o755)
    script = emu.render("--site", "summit", "--nodes", "1", "--ranks-per-node", "2", "-P", "abc123", "-t", "10",
                        str(PROGRAM))
    script = script.replace("module load ibm-wml-ce\n", f"module load ibm-wml-ce\nexport PATH={ibm}:$PATH\n")
    proc = emu.run(script, emu.lsf_env("701120", summit_hosts(1)))
    check_ranks(proc, 2, 2, lambda r: "h41n01", "JSM_DOUBLE_HOST")
    assert "IBM ddlrun" not in proc.stderr


def test_summit_olcf_dl_layout_option_runs_all_gpus_per_rank_set(emu):
    """--gpu-binding local-rank: one resource set per node with its 6 GPUs (jsrun -r1 -g6 -a6
    -c42), every rank sees all 6 and picks its own by local rank; OMP_NUM_THREADS reaches
    each rank as cores x threads (7 x smt2)."""
    script = emu.render("--site", "summit", "--nodes", "1", "--threads-per-core", "2", "-P", "abc123", "-t", "10",
                        "--gpu-binding", "local-rank", "--alloc-flags", "gpumps", str(PROGRAM))
    assert '#BSUB -alloc_flags "smt2 gpumps"' in script
    proc = emu.run(script, emu.lsf_env("701121", summit_hosts(1)))
    ranks = check_ranks(proc, 6, 6, lambda r: "h41n01", "JSM_DOUBLE_HOST")
    assert {r["env"]["CUDA_VISIBLE_DEVICES"] for r in ranks} == {"0,1,2,3,4,5"}
    assert {r["env"]["DDL_GPU_BINDING"] for r in ranks} == {"local-rank"}
    assert {r["env"]["OMP_NUM_THREADS"] for r in ranks} == {"14"}
    [call] = emu.records("jsrun")
    assert call["flags"] == promised_launcher(script)
    assert call["nrs"] == 1 and call["tasks_per_rs"] == 6 and call["gpu_per_rs"] == 6 and call["rs_per_host"] == 1

