"""The local site behaves as a batch scheduler would (issue 33): it ends a job at its walltime
(TIMEOUT), a running job is seen from a second process (``wml jobs/status/logs -f``,
``wml cancel``), and every form of a job's id names the same job.  Real: the ``wml`` command, the
job script, ddlrun and MPICH's mpiexec; the walltimes are real timers of a few seconds, and the
tests assert states, never durations."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wmlce_tools.jobs.registry import JobRecord, Registry

GATE = Path(__file__).parent / "programs" / "gate.py"


def _jobs(run_wml):
    proc = run_wml("jobs", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _gate_processes(marker: str):
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if str(GATE) in ln and marker in ln]


def _start(isolated_env, tmp_path, *args):
    return subprocess.Popen([sys.executable, "-m", "wmlce_tools", "submit", *args], cwd=tmp_path,
                            env=isolated_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc, limit=120.0):
    deadline = time.monotonic() + limit
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_a_local_job_is_ended_at_its_walltime_and_shown_as_timeout(run_wml, tmp_path):
    ready, go = tmp_path / "ready", tmp_path / "never"
    proc = run_wml("submit", "-t", "8s", str(GATE), str(ready), str(go), timeout=120)
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert ready.exists()            # it ran, and it would have waited for ever
    assert "reached its walltime (8 s)" in proc.stdout
    [job] = _jobs(run_wml)
    assert job["state"] == "TIMEOUT" and job["exit_code"] == proc.returncode
    assert not _gate_processes(str(go)), "a process of the job outlived its walltime"
    table = run_wml("jobs").stdout.splitlines()
    assert table[1].split()[4] == "TIMEOUT", table


def test_a_rank_that_ignores_sigterm_is_killed_after_the_grace(run_wml, tmp_path):
    ready, go = tmp_path / "ready", tmp_path / "never"
    proc = run_wml("submit", "-t", "8s", str(GATE), str(ready), str(go), "--ignore-term",
                   env={"WML_LOCAL_KILL_WAIT_S": "2"}, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "SIGKILL 2 s later" in proc.stdout
    [job] = _jobs(run_wml)
    assert job["state"] == "TIMEOUT"
    assert not _gate_processes(str(go)), "a rank that ignored SIGTERM outlived the grace"


def test_a_chain_segment_that_ignores_the_stop_signal_is_said_so_and_the_next_one_starts(run_wml, tmp_path):
    ready, go = tmp_path / "ready", tmp_path / "never"
    proc = run_wml("submit", "--chain", "2", "-t", "4s", "--signal-margin", "2s", "-J", "deaf",
                   str(GATE), str(ready), str(go), "--ignore-usr1", timeout=180)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in text
    assert "segment 1 of 2 took no notice of SIGUSR1" in text
    assert "segment 2 starts from the beginning: there is no checkpoint" in text
    assert "segment 2 of 2 took no notice of SIGUSR1" in text and "the run is not finished" in text
    assert "finished in segment" not in text
    jobs = _jobs(run_wml)
    assert sorted((j["job_id"][-1], j["state"]) for j in jobs) == [("1", "TIMEOUT"), ("2", "TIMEOUT")]
    assert not _gate_processes(str(go))


def test_a_running_local_job_is_seen_from_a_second_process(run_wml, isolated_env, tmp_path):
    ready, go = tmp_path / "ready", tmp_path / "go"
    before = time.time()
    submit = _start(isolated_env, tmp_path, "-J", "gated", str(GATE), str(ready), str(go))
    try:
        _wait_for(ready, submit)
        [job] = _jobs(run_wml)
        assert job["state"] == "RUNNING" and job["exit_code"] is None
        assert before - 1 <= job["submitted_at"] <= time.time()     # submitted, not ended
        local_id = f"@{job['id']}"
        hint = next(ln for ln in iter(submit.stderr.readline, "") if "from another shell: " in ln)
        status_cmd = hint.split("from another shell: ", 1)[1].split(", ")[0]
        # another shell: this venv not activated (issue 47: "wml status @1" was not found there)
        shell_env = {k: v for k, v in isolated_env.items() if k != "VIRTUAL_ENV"}
        shell_env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
        status = subprocess.run(["bash", "-c", status_cmd], cwd=tmp_path, env=shell_env, capture_output=True,
                                text=True, timeout=60)
        assert status.returncode == 0 and ": RUNNING" in status.stdout, (status_cmd, status.stdout + status.stderr)
        assert status_cmd.endswith(f" status {local_id}")
        so_far = run_wml("logs", local_id)
        assert "gate: running" in so_far.stdout and "gate: done" not in so_far.stdout
        follow = subprocess.Popen([sys.executable, "-m", "wmlce_tools", "logs", "-f", local_id], cwd=tmp_path,
                                  env=isolated_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        go.write_text("go\n")
        out, err = follow.communicate(timeout=120)
        assert follow.returncode == 0 and "gate: done" in out, out + err
        assert f"job {job['job_id']} COMPLETED" in err
        sub_out, sub_err = submit.communicate(timeout=120)
    finally:
        go.write_text("go\n")
        if submit.poll() is None:
            submit.kill()
    assert submit.returncode == 0, sub_err
    assert f"job {job['job_id']} ({local_id} in wml jobs) running" in hint
    [done] = _jobs(run_wml)
    assert done["state"] == "COMPLETED" and done["submitted_at"] == job["submitted_at"]


def test_wml_cancel_ends_a_running_local_job(run_wml, isolated_env, tmp_path):
    ready, go = tmp_path / "ready", tmp_path / "never"
    submit = _start(isolated_env, tmp_path, str(GATE), str(ready), str(go))
    try:
        _wait_for(ready, submit)
        [job] = _jobs(run_wml)
        cancel = run_wml("cancel", f"@{job['id']}")
        assert cancel.returncode == 0 and "CANCELLED" in cancel.stdout, cancel.stdout + cancel.stderr
        submit.communicate(timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert submit.returncode != 0
    [done] = _jobs(run_wml)
    assert done["state"] == "CANCELLED"
    assert not _gate_processes(str(go))


def test_every_id_form_names_the_same_job(run_wml, tmp_path):
    ready, go = tmp_path / "ready", tmp_path / "go"
    go.write_text("go\n")
    chained = run_wml("submit", "--chain", "1", "-t", "1:00", "--json", str(GATE), str(ready), str(go))
    assert chained.returncode == 0, chained.stderr
    run_id = json.loads(chained.stdout.splitlines()[-1])["run_id"]
    plain = run_wml("submit", "--json", str(GATE), str(ready), str(go))
    assert plain.returncode == 0, plain.stderr
    info = json.loads(plain.stdout.splitlines()[-1])
    rows = {j["job_id"]: j for j in _jobs(run_wml)}
    job = rows[info["job_id"]]
    listed = run_wml("jobs").stdout
    assert run_id in listed and info["job_id"] in listed
    # the plain job: its ID (@N), id:N, its job id, its directory's name
    for ref in (f"@{job['id']}", f"id:{job['id']}", info["job_id"], Path(info["jobdir"]).name):
        st = run_wml("status", "--json", ref)
        assert st.returncode == 0, (ref, st.stderr)
        assert json.loads(st.stdout)["id"] == job["id"], ref
    # the chained run: its run id (as submit and wml jobs print it), its segment's ID and job id
    segment = next(j for j in rows.values() if j["job_id"] != info["job_id"])
    for ref in (run_id, f"@{segment['id']}", segment["job_id"]):
        st = run_wml("status", "--json", ref)
        assert st.returncode == 0, (ref, st.stderr)
        assert json.loads(st.stdout)["run_id"] == run_id, ref
        logs = run_wml("logs", ref)
        assert logs.returncode == 0 and "gate: done" in logs.stdout, (ref, logs.stderr)


def test_a_bare_number_is_the_schedulers_id_and_at_n_the_id_column(run_wml, isolated_env, tmp_path):
    """Issue 40.11: the number submit printed is the number every command reads; `wml jobs`
    IDs are @N, which no scheduler id looks like."""
    reg = Registry(Path(isolated_env["XDG_DATA_HOME"]) / "wml" / "jobs.sqlite")
    first = reg.add(JobRecord(site="local", scheduler="local", job_id="local-a", job_dir=str(tmp_path / "a")))
    slurm = reg.add(JobRecord(site="local-slurm", scheduler="slurm", job_id=str(first.id), state="COMPLETED",
                              exit_code=0, job_dir=str(tmp_path / "b")))
    assert reg.resolve(str(first.id))[0].id == slurm.id
    st = run_wml("status", "--json", str(first.id))
    assert st.returncode == 0 and json.loads(st.stdout)["id"] == slurm.id and st.stderr == ""
    for ref in (f"@{first.id}", f"id:{first.id}"):
        st = run_wml("status", "--json", ref)
        assert st.returncode == 0 and json.loads(st.stdout)["id"] == first.id
    st = run_wml("status", "--json", f"job:{first.id}")
    assert st.returncode == 0 and json.loads(st.stdout)["id"] == slurm.id
    assert run_wml("jobs", "--no-refresh").stdout.splitlines()[1].startswith(f"@{slurm.id} ")
    # a number that is only an ID: refused, naming the @N form
    lonely = reg.add(JobRecord(site="local", scheduler="local", job_id="local-c", job_dir=str(tmp_path / "c")))
    st = run_wml("status", str(lonely.id))
    assert st.returncode == 2 and f"@{lonely.id} is local job local-c" in st.stderr
    # a scheduler id that is no ID is still found
    other = reg.add(JobRecord(site="local-slurm", scheduler="slurm", job_id="987654", state="FAILED", exit_code=1))
    assert reg.resolve("987654")[0].id == other.id


def test_cancel_refuses_a_number_two_jobs_had_naming_both(run_wml, isolated_env, tmp_path):
    reg = Registry(Path(isolated_env["XDG_DATA_HOME"]) / "wml" / "jobs.sqlite")
    old = reg.add(JobRecord(site="local-slurm", scheduler="slurm", job_id="8", state="RUNNING", job_dir=str(tmp_path)))
    new = reg.add(JobRecord(site="perlmutter", scheduler="slurm", job_id="8", state="PENDING", job_dir=str(tmp_path)))
    proc = run_wml("cancel", "8")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "8 could mean 2 jobs" in proc.stderr
    assert f"perlmutter job 8 (PENDING, @{new.id})" in proc.stderr and f"local-slurm job 8 (RUNNING, @{old.id})" in proc.stderr
    st = run_wml("status", "--json", "--", "8")     # status takes the newest, and names the other
    assert f"also local-slurm job 8" in st.stderr and f"(@{old.id})" in st.stderr


def test_a_bad_kill_wait_is_one_line_before_any_job_is_recorded(run_wml, tmp_path):
    """WML_LOCAL_KILL_WAIT_S that is no number: one line, exit 2, no job directory and no job in
    `wml jobs` (it was recorded, run and marked FAILED before)."""
    proc = run_wml("submit", "-t", "8s", "/bin/true", env={"WML_LOCAL_KILL_WAIT_S": "abc"}, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["wml: error: WML_LOCAL_KILL_WAIT_S='abc' must be a number of seconds >= 0"]
    assert _jobs(run_wml) == []
    assert not list(tmp_path.glob("wml-jobs/*"))
