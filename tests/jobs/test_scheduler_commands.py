"""Scheduler faults reported in seconds (issue 14 part 3): the one command path of
``wmlce_tools/schedulers/commands.py``.

Slurm: the real sbatch/squeue/scontrol, pointed (SLURM_CONF) at a configuration whose
controller port nobody listens on -- the shared local cluster is never touched.  Without the
fix ``wml submit --site local-slurm`` took ~9 s (sbatch's own connect retries) to fail.
LSF: the bsub/bparams TEST DOUBLES of tests/jobs/doubles (LSF has no open implementation)."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wmlce_tools.errors import WmlError
from wmlce_tools.schedulers import SchedulerError, SchedulerUnreachable, get_scheduler

DOUBLES = Path(__file__).parent / "doubles"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def dead_slurm(tmp_path):
    """A slurm.conf whose slurmctld (on 127.0.0.1, a port just found free) is not running."""
    if shutil.which("sbatch") is None or shutil.which("scontrol") is None:
        if os.environ.get("WML_REQUIRE_SLURM") == "1":
            pytest.fail("WML_REQUIRE_SLURM=1 but sbatch/scontrol are not installed")
        pytest.skip("Slurm's client commands are not installed (scripts/local-slurm installs them)")
    port = _free_port()
    conf = tmp_path / "dead-slurm.conf"
    conf.write_text(f"ClusterName=dead\nSlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)\n"
                    f"SlurmctldPort={port}\nAuthType=auth/munge\nCredType=cred/munge\n"
                    f"NodeName=n1 CPUs=2 NodeAddr=127.0.0.1 Port={port + 1}\n"
                    "PartitionName=debug Nodes=ALL Default=YES\n")
    return conf


def test_submit_with_slurmctld_unreachable_fails_in_seconds(run_wml, dead_slurm, tmp_path):
    t0 = time.monotonic()
    proc = run_wml("submit", "--site", "local-slurm", "-t", "5", "-J", "never", "true",
                   env={"SLURM_CONF": str(dead_slurm)}, timeout=60)
    elapsed = time.monotonic() - t0
    err = proc.stderr
    assert proc.returncode != 0
    assert err.startswith("wml: error: sbatch did not answer within 3 s and the Slurm controller (slurmctld) "
                          "looks unreachable (`scontrol ping` says: "), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "is DOWN" in err and f"check that slurmctld is running (scontrol ping) and that SLURM_CONF ({dead_slurm})" in err
    kept = Path(re.search(r"the script is kept in (\S+)$", err.strip()).group(1))
    assert kept.is_file() and "#SBATCH" in kept.read_text()
    # decided by the probe, not by sbatch's own 9 s of connect retries (the bound only tells
    # the two apart: wml's start-up on a loaded box is part of it)
    assert elapsed < 9, elapsed
    assert run_wml("jobs", "--json").stdout.strip() in ("[]", "")


def test_status_with_slurmctld_unreachable_fails_in_seconds(dead_slurm, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(dead_slurm))
    sched = get_scheduler("slurm")
    t0 = time.monotonic()
    with pytest.raises(SchedulerUnreachable, match=r"^squeue did not answer within 3 s and the Slurm controller"):
        sched.run_command(sched.status_queries("12")[0].argv, wait_s=60, retry_busy=True)
    assert time.monotonic() - t0 < 9      # squeue alone retries for ~18 s


@pytest.fixture
def lsf(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("WML_DOUBLE_STATE", str(state))
    monkeypatch.setenv("PATH", f"{DOUBLES}:{os.environ['PATH']}")
    monkeypatch.setenv("WML_SCHEDULER_CONNECT_S", "1")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#BSUB -nnodes 1\ntrue\n")
    return state, script


def _bsub(script: Path, err):
    with open(script) as stdin:
        return get_scheduler("lsf").run_command(["bsub"], stdin=stdin, wait_s=30, progress=err, context="ctx")


def test_bsub_hanging_with_mbatchd_down_is_stopped_and_named(lsf, capsys):
    state, script = lsf
    (state / "bsub").write_text("hang\n")
    (state / "down").write_text("")
    t0 = time.monotonic()
    with pytest.raises(SchedulerUnreachable) as e:
        _bsub(script, sys.stderr)
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert msg.startswith("bsub did not answer within 1 s and the LSF master batch daemon (mbatchd) looks "
                          "unreachable (`bparams` says: LSF is down. Please wait ...); check that LSF answers"), msg
    assert msg.endswith("; ctx") and "\n" not in msg
    # the hanging bsub (and its sleep) was stopped, not left behind
    out = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True).stdout.split()
    mine = [p for p in out if Path(f"/proc/{p}/environ").exists()
            and str(state).encode() in Path(f"/proc/{p}/environ").read_bytes()]
    assert mine == []


def test_busy_mbatchd_gets_the_long_wait(lsf, capsys):
    state, script = lsf
    (state / "bsub").write_text("busy 2\n")
    proc = _bsub(script, sys.stderr)
    assert proc.returncode == 0 and get_scheduler("lsf").parse_submit(proc.stdout) == "701201"
    err = capsys.readouterr().err
    assert "wml: bsub: the LSF master batch daemon (mbatchd) is busy (LSF is processing your request" in err
    assert "bparams" not in (state / "calls").read_text()     # busy: no probe needed


def test_slow_but_alive_server_is_waited_for_with_a_line(lsf, capsys):
    state, script = lsf
    (state / "bsub").write_text("slow 2\n")
    proc = _bsub(script, sys.stderr)
    assert proc.returncode == 0 and "Job <701201> is submitted" in proc.stdout
    err = capsys.readouterr().err
    assert "wml: bsub has not answered after 1 s; the LSF master batch daemon (mbatchd) answers `bparams`, " \
           "so waiting up to 30 s" in err


def test_alive_server_that_never_answers_is_bounded(lsf):
    state, script = lsf
    (state / "bsub").write_text("slow 20\n")
    with open(script) as stdin, pytest.raises(SchedulerError, match=r"^bsub did not answer within 2 s; try again later"):
        get_scheduler("lsf").run_command(["bsub"], stdin=stdin, wait_s=2, progress=open(os.devnull, "w"))


def test_missing_command_is_one_line(lsf, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(WmlError, match=r"^bsub not found: run this on a Summit login node, or use --dry-run$"):
        get_scheduler("lsf").run_command(["bsub"])


def test_connect_setting_is_checked(lsf, monkeypatch):
    monkeypatch.setenv("WML_SCHEDULER_CONNECT_S", "soon")
    with pytest.raises(WmlError, match="WML_SCHEDULER_CONNECT_S='soon' is not a number of seconds"):
        get_scheduler("lsf").run_command(["bsub"])


def test_a_commands_pipes_are_closed_once_it_has_ended():
    """Its stdout and stderr pipes closed by the threads that read them, not left to the garbage
    collector (a ResourceWarning, 'unclosed file', in the test runs of issue 47)."""
    from wmlce_tools.schedulers.commands import _Running

    running = _Running([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
                       None, None, None)
    assert running.wait(60) == 0
    done = running.result(["x"])
    assert (done.stdout, done.stderr) == ("out\n", "err\n")
    assert running.proc.stdout.closed and running.proc.stderr.closed
