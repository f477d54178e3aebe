"""The job lifecycle (record, refresh, wait, cancel, logs) for LSF and Cobalt jobs, with the
bjobs/bkill/qstat/qdel TEST DOUBLES of tests/jobs/doubles (those tools have no open
implementation; the real-Slurm side is tests/slurm/test_wml_on_slurm.py), and for the local
site through the real ``wml`` command."""
from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest

from wmlce_tools.errors import WmlError
from wmlce_tools.jobs import lifecycle
from wmlce_tools.jobs.registry import Registry
from wmlce_tools.schedulers.states import JobState
from wmlce_tools.schedulers import CANCEL_FINISHED, CANCEL_REQUESTED, CANCEL_UNKNOWN, SchedulerError
from wmlce_tools.runs.submission import SubmitResult

DOUBLES = Path(__file__).parent / "doubles"
RECORDED = Path(__file__).parent / "recorded"


@pytest.fixture
def world(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("WML_DOUBLE_STATE", str(state))
    monkeypatch.setenv("PATH", f"{DOUBLES}:{__import__('os').environ['PATH']}")
    monkeypatch.setattr(lifecycle, "POLL_FIRST_S", 0.05)
    monkeypatch.setattr(lifecycle, "POLL_MAX_S", 0.2)
    return World(tmp_path, state)


class World:
    def __init__(self, tmp: Path, state: Path):
        self.tmp, self.state = tmp, state
        self.reg = Registry(tmp / "data" / "jobs.sqlite")

    def set(self, job_id: str, text: str) -> None:
        (self.state / job_id).write_text(text + "\n")

    def forget(self, job_id: str) -> None:
        (self.state / job_id).unlink()

    def calls(self):
        p = self.state / "calls"
        return p.read_text().splitlines() if p.exists() else []

    def submitted(self, scheduler: str, job_id: str, site: str) -> "lifecycle.JobRecord":
        jobdir = self.tmp / f"job-{job_id}"
        jobdir.mkdir()
        out = jobdir / ("ddl_test.output" if scheduler == "cobalt" else f"ddl_test.{job_id}.out")
        err = jobdir / ("ddl_test.error" if scheduler == "cobalt" else f"ddl_test.{job_id}.err")
        res = SubmitResult(job_id=job_id, site=site, scheduler=scheduler, script=jobdir / "job.sh",
                           submit_command="bsub < job.sh" if scheduler == "lsf" else "qsub job.sh",
                           jobdir=jobdir, output=str(out), error=str(err))
        rec = lifecycle.record_submission(res, None, registry=self.reg)
        assert rec.state == JobState.PENDING and rec.id is not None
        return rec


# -- LSF ---------------------------------------------------------------------------------

def test_lsf_job_goes_pending_running_done(world):
    rec = world.submitted("lsf", "701106", "summit")
    for text, state in (("PEND -", JobState.PENDING), ("RUN -", JobState.RUNNING), ("DONE -", JobState.COMPLETED)):
        world.set("701106", text)
        rec = lifecycle.refresh(rec, world.reg)
        assert rec.state == state
        assert world.reg.get("701106").state == state
    assert rec.exit_code == 0
    n = len(world.calls())
    assert lifecycle.refresh(rec, world.reg).state == JobState.COMPLETED
    assert len(world.calls()) == n            # an ended job is not asked about again


def test_lsf_job_forgotten_by_mbatchd_is_read_from_its_job_report(world):
    rec = world.submitted("lsf", "701107", "summit")
    Path(rec.output).write_text((RECORDED / "lsf" / "job-report-exit.out").read_text())
    rec = lifecycle.refresh(rec, world.reg)         # bjobs: "Job <701107> is not found"
    assert (rec.state, rec.exit_code) == (JobState.FAILED, 3)


def test_lsf_job_nobody_knows_is_unknown(world):
    rec = world.submitted("lsf", "701108", "summit")
    assert lifecycle.refresh(rec, world.reg).state == JobState.UNKNOWN
    with pytest.raises(WmlError, match="no longer knows it"):
        lifecycle.wait_for(world.reg.get("701108"), out=io.StringIO(), timeout=5, registry=world.reg)


def test_lsf_cancel_running_job_ends_cancelled(world):
    rec = world.submitted("lsf", "701109", "summit")
    world.set("701109", "RUN -")
    rec, outcome = lifecycle.cancel(rec, world.reg, settle=5)
    assert outcome == CANCEL_REQUESTED
    # bjobs now says EXIT 130; wml asked for the kill, so it is CANCELLED, not FAILED
    assert (rec.state, rec.exit_code) == (JobState.CANCELLED, 130)
    assert "bkill 701109" in world.calls()
    assert world.reg.get("701109").state == JobState.CANCELLED


def test_lsf_cancel_finished_and_unknown(world):
    rec = world.submitted("lsf", "701110", "summit")
    world.set("701110", "EXIT 3")
    # the registry still says PENDING: bkill finds the job has already finished
    rec2, outcome = lifecycle.cancel(rec, world.reg, settle=1)
    assert outcome == CANCEL_FINISHED and rec2.state == JobState.FAILED and rec2.exit_code == 3
    rec3 = world.submitted("lsf", "701111", "summit")
    rec3, outcome = lifecycle.cancel(rec3, world.reg, settle=1)
    assert outcome == CANCEL_UNKNOWN and rec3.state == JobState.UNKNOWN


def test_lsf_down_is_an_error_for_status_and_a_retry_for_wait(world):
    rec = world.submitted("lsf", "701112", "summit")
    world.set("701112", "RUN -")
    (world.state / "down").write_text("")
    with pytest.raises(SchedulerError, match="LSF is down"):
        lifecycle.refresh(rec, world.reg)

    def recover():
        time.sleep(0.6)
        (world.state / "down").unlink()
        world.set("701112", "EXIT 4")

    t = threading.Thread(target=recover)
    t.start()
    out = io.StringIO()
    code = lifecycle.wait_for(rec, out=out, timeout=30, registry=world.reg)
    t.join()
    assert code == 4
    text = out.getvalue()
    assert "could not ask the scheduler: bjobs failed: LSF is down" in text and "retrying" in text
    assert "wml: job 701112 FAILED with exit code 4 after" in text


def test_wait_plain_lines_and_timeout(world):
    rec = world.submitted("lsf", "701113", "summit")
    world.set("701113", "RUN -")
    out = io.StringIO()
    with pytest.raises(WmlError) as e:
        lifecycle.wait_for(rec, out=out, timeout=0.5, registry=world.reg)
    assert e.value.exit_code == 124
    assert "job 701113 is still RUNNING; it keeps running" in str(e.value)
    assert out.getvalue().startswith("wml: job 701113 RUNNING 00:00\n")   # never silent


def test_wait_live_line_on_a_terminal(world):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    rec = world.submitted("lsf", "701114", "summit")
    world.set("701114", "RUN -")
    threading.Timer(1.5, lambda: world.set("701114", "DONE -")).start()
    out = Tty()
    assert lifecycle.wait_for(rec, out=out, timeout=30, registry=world.reg) == 0
    text = out.getvalue()
    assert "job 701114 RUNNING 00:0" in text            # the live line (rich redraws it in place)
    assert "wml: job 701114 COMPLETED with exit code 0" in text


def test_lsf_tools_missing(world, monkeypatch):
    rec = world.submitted("lsf", "701115", "summit")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(WmlError, match="bjobs not found: run this on a Summit login node"):
        lifecycle.refresh(rec, world.reg)


# -- Cobalt ------------------------------------------------------------------------------

def test_cobalt_job_from_queue_to_cobaltlog(world):
    rec = world.submitted("cobalt", "351457", "theta")
    for word, state in (("queued", JobState.PENDING), ("starting", JobState.RUNNING),
                        ("running", JobState.RUNNING), ("exiting", JobState.RUNNING)):
        world.set("351457", word)
        rec = lifecycle.refresh(rec, world.reg)
        assert rec.state == state, word
    world.forget("351457")                           # left the queue; the cobaltlog tells how it ended
    (Path(rec.job_dir) / "ddl_test.cobaltlog").write_text((RECORDED / "cobalt" / "job-failed.cobaltlog").read_text())
    rec = lifecycle.refresh(rec, world.reg)
    assert (rec.state, rec.exit_code) == (JobState.FAILED, 3)


def test_cobalt_cancel(world):
    rec = world.submitted("cobalt", "351458", "theta")
    world.set("351458", "running")
    rec, outcome = lifecycle.cancel(rec, world.reg, settle=2)
    assert outcome == CANCEL_REQUESTED and rec.state == JobState.CANCELLED
    assert world.calls()[-2:] == ["qdel 351458", "qstat -f 351458"]


def test_exit_code_of():
    from wmlce_tools.jobs.registry import JobRecord

    def r(state, code):
        return JobRecord(site="s", scheduler="slurm", job_id="1", state=state, exit_code=code)

    assert lifecycle.exit_code_of(r(JobState.COMPLETED, 0)) == 0
    assert lifecycle.exit_code_of(r(JobState.FAILED, 3)) == 3
    assert lifecycle.exit_code_of(r(JobState.CANCELLED, 0)) == 1     # sacct -c says 0:0 for a cancelled job
    assert lifecycle.exit_code_of(r(JobState.TIMEOUT, None)) == 1
    assert lifecycle.exit_code_of(r(JobState.CANCELLED, 143)) == 143


# -- the local site, through the real command ----------------------------------------------

def test_local_jobs_are_recorded_ended(run_wml, tmp_path):
    ok = tmp_path / "ok.sh"
    ok.write_text("#!/bin/bash\necho hello from $WML_JOB_ID\n")
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/bash\necho failing; exit 5\n")
    for p in (ok, bad):
        p.chmod(0o755)
    a = run_wml("submit", "--site", "local", "--json", str(ok))
    assert a.returncode == 0, a.stderr
    b = run_wml("submit", "--site", "local", "--json", str(bad))
    assert b.returncode == 5, b.stderr
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    listed = json.loads(run_wml("jobs", "--json").stdout)
    assert [(j["job_id"], j["state"], j["exit_code"]) for j in listed] == [
        (jb["job_id"], "FAILED", 5), (ja["job_id"], "COMPLETED", 0)]
    st = run_wml("status", ja["job_id"])
    assert st.returncode == 0 and f"job {ja['job_id']} (wml-job, local): COMPLETED (exit code 0)" in st.stdout
    logs = run_wml("logs", ja["job_id"])
    assert logs.returncode == 0 and f"hello from {ja['job_id']}" in logs.stdout
    # by local id too
    local_id = str(listed[1]["id"])
    assert f"hello from {ja['job_id']}" in run_wml("logs", f"id:{local_id}").stdout
    c = run_wml("cancel", jb["job_id"])
    assert c.returncode == 0 and "already ended: FAILED" in c.stdout
    table = run_wml("jobs").stdout
    assert table.splitlines()[0].split()[:5] == ["ID", "JOB", "SITE", "NAME", "STATE"]


def test_registry_trouble_is_one_line(run_wml, isolated_env, tmp_path):
    data = Path(isolated_env["XDG_DATA_HOME"]) / "wml"
    data.mkdir(parents=True)
    (data / "jobs.sqlite").write_bytes(b"this is not a database" * 100)
    for cmd in (["jobs"], ["status", "1"]):
        p = run_wml(*cmd)
        assert p.returncode == 2 and p.stderr.startswith("wml: error: ") and p.stderr.count("\n") == 1, p.stderr
        assert "Traceback" not in p.stderr


def test_logs_follow_streams_until_the_job_ends(world):
    rec = world.submitted("lsf", "701116", "summit")
    world.set("701116", "RUN -")
    out_path = Path(rec.output)

    def job():
        for i in range(3):
            with open(out_path, "a") as f:
                f.write(f"step {i}\n")
            time.sleep(0.4)
        world.set("701116", "DONE -")

    t = threading.Thread(target=job)
    t.start()
    out, err = io.StringIO(), io.StringIO()
    assert lifecycle.logs(rec, follow=True, out=out, err=err, registry=world.reg, poll_max=0.3) == 0
    t.join()
    # one header per file, as tail -f writes them (the error file stays empty here)
    assert out.getvalue() == f"==> {rec.output} <==\nstep 0\nstep 1\nstep 2\n"
    assert "wml: job 701116 COMPLETED with exit code 0" in err.getvalue()


def test_logs_follow_stops_when_the_scheduler_forgets_the_job(world):
    rec = world.submitted("lsf", "701117", "summit")      # bjobs: not found, no job report
    Path(rec.output).write_text("partial\n")
    out, err = io.StringIO(), io.StringIO()
    assert lifecycle.logs(rec, follow=True, out=out, err=err, registry=world.reg, poll_max=0.2) == 0
    assert out.getvalue() == f"==> {rec.output} <==\npartial\n" and "no longer knows job 701117" in err.getvalue()


def test_logs_without_output_yet(world):
    rec = world.submitted("lsf", "701118", "summit")
    with pytest.raises(WmlError, match="has no output yet; it will be in"):
        lifecycle.logs(rec, out=io.StringIO())


def test_local_submits_at_once_are_all_recorded(isolated_env, tmp_path):
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-m", "wmlce_tools", "submit", "--site", "local", "--json", "true"],
                              cwd=tmp_path, env=isolated_env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [o[1][-500:] for o in outs]
    assert not any("Traceback" in o[1] for o in outs)
    dirs = {json.loads(o[0])["jobdir"] for o in outs}
    assert len(dirs) == 4
    reg = Registry(Path(isolated_env["XDG_DATA_HOME"]) / "wml" / "jobs.sqlite")
    assert sorted(r.job_dir for r in reg.list()) == sorted(dirs)
