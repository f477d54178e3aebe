"""wml against the real Slurm of scripts/local-slurm (2 emulated nodes, n1 and n2): submit,
wait, status, cancel, logs, dependencies, every directive the Slurm template can emit, and
the faults (slurmctld unreachable, sbatch refusing, unknown ids, concurrent submits).

Everything here is real: the ``wml`` command, sbatch/squeue/scontrol/sacct/scancel, slurmd
running the job script, ddlrun, srun --mpi=pmi2, MPICH and ddl_runtime.  The job registry is
per test (each test has its own XDG data dir).
"""
from __future__ import annotations

import itertools
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest
from helpers.job_output import ddlcheck_ranks as rank_lines

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "tests" / "jobs" / "programs" / "ddl_check.py"


@pytest.fixture
def wml(local_slurm, run_wml, isolated_env, tmp_path):
    """Run ``wml`` with the local cluster's environment; JSON helpers for status/jobs."""
    return Wml(local_slurm, run_wml, isolated_env, tmp_path)


class Wml:
    def __init__(self, slurm, run_wml, env, tmp):
        self.slurm, self.run_wml, self.tmp = slurm, run_wml, tmp
        self.env = {"SLURM_CONF": str(slurm.conf), "WML_SLURM_BASE": str(slurm.base)}
        self.base_env = dict(env)

    def __call__(self, *args: str, env=None, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
        proc = self.run_wml(*args, env={**self.env, **(env or {})}, timeout=timeout)
        assert "Traceback" not in proc.stderr, proc.stderr
        if check:
            assert proc.returncode == 0, f"wml {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
        return proc

    def submit(self, *args: str, nodes=1, rpn=1, name="t", wait=False, env=None, timeout=180) -> subprocess.CompletedProcess:
        argv = ["submit", "--site", "local-slurm", "--nodes", str(nodes), "--ranks-per-node", str(rpn), "-t", "5",
                "-J", name, "--json"] + (["--wait"] if wait else []) + list(args)
        return self(*argv, env=env, timeout=timeout)

    def submitted(self, proc) -> dict:
        assert proc.returncode == 0 or "job_id" in proc.stdout, proc.stderr
        return json.loads(proc.stdout.splitlines()[0])

    def status(self, job: str) -> dict:
        return json.loads(self("status", job, "--json", check=True).stdout)

    def jobs(self) -> List[dict]:
        return json.loads(self("jobs", "--json", check=True).stdout)

    def wait_status(self, job: str, states, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            st = self.status(job)
            if st["state"] in states:
                return st
            if time.monotonic() > deadline:
                pytest.fail(f"job {job} not {states} after {timeout} s: {st}")
            time.sleep(0.5)


# -- the DDL job end to end ----------------------------------------------------------------

def test_submit_wait_runs_four_ranks_on_two_nodes(wml):
    proc = wml.submit(str(PROGRAM), nodes=2, rpn=2, name="ddlcheck", wait=True)
    assert proc.returncode == 0, proc.stderr
    job = wml.submitted(proc)
    # the wait showed progress and the end, on stderr (stdout has the JSON)
    assert re.search(rf"wml: job {job['job_id']} (PENDING|RUNNING) \d\d:\d\d", proc.stderr), proc.stderr
    assert f"wml: job {job['job_id']} COMPLETED with exit code 0" in proc.stderr
    output = Path(job["output"]).read_text()
    ranks = rank_lines(output)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3], output
    nodes = wml.slurm.nodes[:2]
    for r in ranks:
        assert r["size"] == 4 and r["local_size"] == 2
        assert r["local_rank"] == r["rank"] % 2 and r["cross_rank"] == r["rank"] // 2
        assert r["env"]["SLURMD_NODENAME"] == nodes[r["rank"] // 2], r      # a different emulated node per pair
        assert r["env"]["SLURM_LOCALID"] == str(r["rank"] % 2) and r["env"]["SLURM_NODEID"] == str(r["rank"] // 2)
        assert r["ok"] and r["sum"] == 10.0 and r["avg"] == 1.5
    assert "[0] DDLCHECK-OK size=4" in output
    # the registry and the scheduler agree
    st = wml.status(job["job_id"])
    assert st["state"] == "COMPLETED" and st["exit_code"] == 0
    assert wml.slurm.state(job["job_id"]) == "COMPLETED"
    [listed] = wml.jobs()
    assert listed["job_id"] == job["job_id"] and listed["state"] == "COMPLETED" and listed["name"] == "ddlcheck"
    logs = wml("logs", job["job_id"], check=True)
    assert "DDLCHECK-OK size=4" in logs.stdout
    table = wml("jobs", check=True).stdout
    assert re.search(rf"^@\d+\s+{job['job_id']}\s+local-slurm\s+ddlcheck\s+COMPLETED\s+0\s", table, re.M), table


def test_failing_program_ends_failed_with_its_exit_code(wml):
    proc = wml.submit(str(PROGRAM), "--fail-rank", "0", "--exit-code", "7", name="fails", wait=True)
    assert proc.returncode == 7, proc.stderr
    job = wml.submitted(proc)
    st = wml.status(job["job_id"])
    assert st["state"] == "FAILED" and st["exit_code"] == 7
    assert wml.slurm.state(job["job_id"]) == "FAILED"
    assert "DDLCHECK-FAIL rank 0 exits 7" in wml("logs", job["job_id"], check=True).stdout


def test_failing_rank_of_several_fails_the_job(wml):
    proc = wml.submit(str(PROGRAM), "--fail-rank", "1", "--exit-code", "7", nodes=2, name="fails2", wait=True)
    job = wml.submitted(proc)
    assert proc.returncode != 0
    st = wml.status(job["job_id"])
    assert st["state"] == "FAILED" and st["exit_code"] not in (None, 0)
    assert proc.returncode == st["exit_code"]


def test_cancel_stops_a_running_job(wml):
    job = wml.submitted(wml.submit("sleep", "300", name="sleeper"))
    wml.wait_status(job["job_id"], {"RUNNING"})
    proc = wml("cancel", job["job_id"], check=True)
    assert f"job {job['job_id']} CANCELLED" in proc.stdout
    assert wml.status(job["job_id"])["state"] == "CANCELLED"
    assert wml.slurm.state(job["job_id"]) == "CANCELLED"
    # cancelling again says it has ended, still exit 0
    again = wml("cancel", job["job_id"], check=True)
    assert "already ended: CANCELLED" in again.stdout


def test_cancel_a_pending_job(wml):
    """A job held by a dependency that never runs: cancel takes it out of the queue."""
    first = wml.submitted(wml.submit("sleep", "300", name="holder"))
    second = wml.submitted(wml.submit("--after", first["job_id"], "true", name="held"))
    assert wml.status(second["job_id"])["state"] == "PENDING"
    for j in (second, first):
        wml("cancel", j["job_id"], check=True)
        assert wml.status(j["job_id"])["state"] == "CANCELLED"


def test_after_really_delays_the_second_job(wml):
    first = wml.submitted(wml.submit("sleep", "6", name="first"))
    second = wml.submitted(wml.submit("--after", first["job_id"], "true", name="second"))
    wml.wait_status(first["job_id"], {"RUNNING"})
    info = wml.slurm.job(second["job_id"])
    assert info["JobState"] == "PENDING" and info["Reason"] == "Dependency", info
    assert f"afterok:{first['job_id']}" in info["Dependency"]
    st = wml.status(second["job_id"])
    assert st["state"] == "PENDING" and st["reason"] == "Dependency"
    assert "PENDING (Dependency)" in wml("status", second["job_id"], check=True).stdout
    a = wml.slurm.wait_done(first["job_id"], timeout=60)
    b = wml.slurm.wait_done(second["job_id"], timeout=60)
    assert a["JobState"] == "COMPLETED" and b["JobState"] == "COMPLETED"
    assert b["StartTime"] >= a["EndTime"], (a["EndTime"], b["StartTime"])


def test_waiting_on_a_job_whose_dependency_failed_ends_with_the_reason(wml):
    first = wml.submitted(wml.submit("false", name="fails-first"))
    proc = wml.submit("--after", first["job_id"], "true", name="never", wait=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    second = wml.submitted(proc)
    assert f"job {second['job_id']} can never start: the job it depends on did not complete successfully" \
        in proc.stderr and "DependencyNeverSatisfied" in proc.stderr
    st = wml.status(second["job_id"])
    assert st["state"] == "PENDING" and st["reason"] == "DependencyNeverSatisfied"
    assert "it can never start" in wml("status", second["job_id"], check=True).stdout
    wml("cancel", second["job_id"], check=True)
    assert wml.status(second["job_id"])["state"] == "CANCELLED"


def test_logs_follow_until_the_job_ends(wml, tmp_path):
    prog = tmp_path / "ticker.sh"
    prog.write_text("#!/bin/bash\nfor i in 1 2 3 4; do echo tick $i; sleep 1; done\necho done-ticking\n")
    prog.chmod(0o755)
    job = wml.submitted(wml.submit(str(prog), name="ticker"))
    t0 = time.monotonic()
    proc = wml("logs", "-f", job["job_id"], timeout=90, check=True)
    assert time.monotonic() - t0 >= 2          # it followed the job rather than print a snapshot
    for i in range(1, 5):
        assert f"tick {i}" in proc.stdout
    assert "done-ticking" in proc.stdout
    assert f"wml: job {job['job_id']} COMPLETED" in proc.stderr


def test_wait_shows_a_live_line_on_a_terminal_and_ctrl_c_leaves_the_job_running(wml, tmp_path):
    env = dict(wml.base_env, **wml.env, TERM="xterm", COLUMNS="120")
    argv = [sys.executable, "-m", "wmlce_tools", "submit", "--site", "local-slurm", "-t", "5", "-J", "ttyjob",
            "--wait", "sleep", "120"]
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - child
        os.chdir(tmp_path)
        # a terminal's Ctrl-C, whatever this test inherited: a suite started in the background
        # (as some CI runners do) has SIGINT ignored, which exec keeps and python then honours
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        os.execvpe(argv[0], argv, env)
    buf = b""
    deadline = time.monotonic() + 60
    try:
        while b"RUNNING" not in buf:
            if time.monotonic() > deadline:
                pytest.fail(f"no RUNNING line on the terminal after 60 s: {buf[-2000:]!r}")
            r, _, _ = select.select([fd], [], [], 1)
            if r:
                try:
                    buf += os.read(fd, 4096)
                except OSError:
                    break
        text = buf.decode(errors="replace")
        m = re.search(r"Submitted job (\d+)", text)
        assert m, text
        job_id = m.group(1)
        assert re.search(rf"job {job_id} RUNNING \d\d:\d\d", text), text
        os.kill(pid, signal.SIGINT)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            r, _, _ = select.select([fd], [], [], 1)
            if r:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                buf += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    text = buf.decode(errors="replace")
    assert os.WEXITSTATUS(status) == 130, text
    assert f"stopped waiting; job {job_id} is still RUNNING" in text and "keeps running" in text, text
    assert "Traceback" not in text
    assert wml.slurm.state(job_id) == "RUNNING"            # Ctrl-C did not touch the job
    wml("cancel", job_id, check=True)
    assert wml.slurm.state(job_id) == "CANCELLED"


# -- every directive the Slurm template can emit, through the real sbatch --test-only ------

def _local_slurm_variant(tmp_path: Path, **queues: str) -> Dict[str, str]:
    sites = tmp_path / "sites"
    sites.mkdir(exist_ok=True)
    text = (REPO / "site_configs" / "local-slurm.yaml").read_text()
    text = text.replace("name: local-slurm", "name: local-slurm-x")
    text = re.sub(r"detect:\n(  .*\n)+", "", text)
    for name, extra in queues.items():
        text = text.replace("queues:\n", f"queues:\n  {name}:\n    max_nodes: 2\n    max_walltime: \"00:30:00\"\n{extra}", 1)
    (sites / "local-slurm-x.yaml").write_text(text)
    return {"WML_SITE_PATH": str(sites)}


def _render(site: str, program: List[str], tmp_path: Path, env=None, **req) -> str:
    """The script ``wml render`` prints, rendered in this process (fast: 288 of them below)."""
    from wmlce_tools.jobscript import plan_job, render_script
    from wmlce_tools.resources import ResourceRequest
    from wmlce_tools.site.registry import get_site

    profile = get_site(site, {**os.environ, **(env or {})})
    plan = plan_job(profile, ResourceRequest(**req), program, jobdir=tmp_path / "jobdir", workdir=tmp_path)
    return render_script(plan)


def test_every_template_option_combination_is_accepted_by_sbatch_test_only(wml, tmp_path):
    dep = wml.submitted(wml.submit("true", name="dep"))
    wml.slurm.wait_done(dep["job_id"])
    combos = itertools.product(
        [dict(nodes=1, ranks_per_node=1), dict(nodes=2, ranks_per_node=2), dict(nodes=2, ranks_per_node=1, cores_per_rank=2)],
        [{}, dict(project="proj_a1")],
        [{}, dict(after=dep["job_id"])],
        [{}, dict(output=str(tmp_path / "out.%j.txt")), dict(output=str(tmp_path / "o.%j"), error=str(tmp_path / "e.%j"))],
        [dict(walltime=7), dict(walltime=29)],
        [{}, dict(queue="debug")],
        [dict(job_name="combo"), dict(job_name="a.b-c_9")],
    )
    checked = 0
    for parts in combos:
        req = {k: v for p in parts for k, v in p.items()}
        script = _render("local-slurm", ["true"], tmp_path, **req)
        path = tmp_path / f"combo{checked}.sh"
        path.write_text(script)
        proc = wml.slurm.run("sbatch", "--test-only", str(path), check=False, cwd=tmp_path)
        assert proc.returncode == 0 and "to start at" in proc.stderr, (req, proc.stderr, script)
        for flag in (f"--job-name={req['job_name']}", f"--nodes={req['nodes']}", "--ntasks-per-node=",
                     "--cpus-per-task=", "--time=", "--partition=debug", "--output=", "--error="):
            assert f"#SBATCH {flag}" in script
        assert ("#SBATCH --account=proj_a1" in script) == ("project" in req)
        assert (f"#SBATCH --dependency=afterok:{dep['job_id']}" in script) == ("after" in req)
        checked += 1
    assert checked == 3 * 2 * 2 * 3 * 2 * 2 * 2


def test_gpu_directives_through_sbatch_test_only(wml, tmp_path):
    """``--gpus-per-node`` (GPU sites only).  With the cluster's emulated GPUs
    (WML_SLURM_GPUS, the test fixture starts 2 per node) sbatch must accept it for a site
    profile of this cluster with its GPUs, in both GPU bindings; and a request for more GPUs
    than a node has is refused for want of GPUs, never for the option's spelling."""
    gpus = wml.slurm.gpus_per_node
    if gpus:
        base = (REPO / "site_configs" / "local-slurm.yaml").read_text().replace("name: local-slurm", "name: gpu-x")
        base = re.sub(r"detect:\n(  .*\n)+", "", base).replace("gpus_per_socket: 0", f"gpus_per_socket: {gpus}")
        for binding in ("per-rank", "local-rank"):
            sites = tmp_path / f"sites-{binding}"
            sites.mkdir()
            (sites / "gpu-x.yaml").write_text(base + f"gpu_binding: {binding}\n")
            for nodes, rpn in ((1, 1), (2, gpus)):
                script = _render("gpu-x", ["true"], tmp_path, env={"WML_SITE_PATH": str(sites)},
                                 nodes=nodes, ranks_per_node=rpn, walltime=5)
                assert f"#SBATCH --gpus-per-node={gpus}" in script, script
                path = tmp_path / f"gpu-{binding}-{nodes}.sh"
                path.write_text(script)
                proc = wml.slurm.run("sbatch", "--test-only", str(path), check=False, cwd=tmp_path)
                assert proc.returncode == 0 and "to start at" in proc.stderr, (binding, nodes, proc.stderr, script)
    script = _render("slurm-gpu", ["true"], tmp_path, nodes=1, queue="debug", walltime=10)
    assert "#SBATCH --gpus-per-node=4" in script
    path = tmp_path / "gpu.sh"
    path.write_text(script)
    proc = wml.slurm.run("sbatch", "--test-only", str(path), check=False, cwd=tmp_path)
    assert proc.returncode != 0
    assert not re.search(r"unrecognized option|invalid option|unknown option", proc.stderr, re.I), proc.stderr
    assert re.search(r"gres|generic resource|node configuration|Requested node", proc.stderr, re.I), proc.stderr


# -- faults ----------------------------------------------------------------------------------

def test_slurmctld_unreachable_gives_one_line_errors_and_records_nothing(wml, tmp_path):
    ok = wml.submitted(wml.submit("true", name="before"))
    wml.slurm.wait_done(ok["job_id"])
    # the same cluster seen through a config whose controller port nobody listens on
    conf = tmp_path / "down.conf"
    conf.write_text(re.sub(r"^SlurmctldPort=\d+", "SlurmctldPort=1", Path(wml.slurm.conf).read_text(), flags=re.M))
    down = {"SLURM_CONF": str(conf)}
    argv_submit = ["submit", "--site", "local-slurm", "-t", "5", "-J", "never", "true"]
    procs = [subprocess.Popen([sys.executable, "-m", "wmlce_tools", *a], cwd=tmp_path, text=True,
                              env={**wml.base_env, **wml.env, **down}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for a in (argv_submit, ["status", ok["job_id"]])]
    outs = [p.communicate(timeout=120) for p in procs]
    (s_out, s_err), (st_out, st_err) = outs
    assert procs[0].returncode != 0 and procs[1].returncode != 0
    for err in (s_err, st_err):
        assert err.startswith("wml: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
        assert "the Slurm controller (slurmctld) looks unreachable (`scontrol ping` says: " in err, err
        assert f"SLURM_CONF ({conf})" in err, err
    assert "sbatch did not answer within 3 s" in s_err and "the script is kept in" in s_err
    kept = re.search(r"the script is kept in (\S+)$", s_err.strip()).group(1)
    assert Path(kept).is_file()
    assert f"cannot get the state of job {ok['job_id']}" in st_err
    # nothing was recorded for the failed submit; the earlier job keeps its state
    assert [j["job_id"] for j in wml.jobs()] == [ok["job_id"]]
    assert wml.status(ok["job_id"])["state"] == "COMPLETED"


def test_sbatch_refusal_is_shown_and_the_script_kept(wml, tmp_path):
    env = _local_slurm_variant(tmp_path, nosuch="")
    proc = wml("submit", "--site", "local-slurm-x", "-q", "nosuch", "-t", "5", "true", env=env)
    assert proc.returncode != 0
    assert proc.stderr.startswith("wml: error: sbatch rejected the job: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Invalid partition name specified" in proc.stderr
    kept = Path(re.search(r"script kept in (\S+?)\)", proc.stderr).group(1))
    assert kept.is_file() and "#SBATCH --partition=nosuch" in kept.read_text()
    assert wml.jobs() == []


def test_unknown_job_ids(wml):
    for cmd in (["status", "424242"], ["cancel", "424242"], ["logs", "424242"], ["logs", "-f", "id:77"]):
        proc = wml(*cmd)
        assert proc.returncode == 2, (cmd, proc.stderr)
        assert proc.stderr.startswith("wml: error: no job ") and "wml jobs" in proc.stderr, proc.stderr


def test_a_job_the_scheduler_never_knew_is_unknown(wml, tmp_path):
    """Registered but unknown to squeue, scontrol, sacct and the completion file."""
    from wmlce_tools.jobs.registry import JobRecord, Registry

    reg = Registry(Path(wml.base_env["XDG_DATA_HOME"]) / "wml" / "jobs.sqlite")
    reg.add(JobRecord(site="local-slurm", scheduler="slurm", job_id="987654", name="ghost",
                      output=str(tmp_path / "ghost.out"), error=str(tmp_path / "ghost.err"), job_dir=str(tmp_path)))
    assert wml.status("987654")["state"] == "UNKNOWN"
    assert "987654 (ghost, local-slurm): UNKNOWN" in wml("status", "987654", check=True).stdout


def test_submits_at_once_are_all_recorded(wml, tmp_path):
    argv = [sys.executable, "-m", "wmlce_tools", "submit", "--site", "local-slurm", "-t", "5", "--json", "true"]
    procs = [subprocess.Popen(argv, cwd=tmp_path, text=True, env={**wml.base_env, **wml.env},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    ids = sorted(json.loads(o[0])["job_id"] for o in outs)
    assert len(set(ids)) == 3
    assert sorted(j["job_id"] for j in wml.jobs()) == ids
    # same name, same second: each still got its own job directory and output file
    assert len({json.loads(o[0])["script"] for o in outs}) == 3
    assert len({json.loads(o[0])["output"] for o in outs}) == 3
