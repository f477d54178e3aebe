"""The chain's one job-script step (``python -m wmlce_tools.chain.segment``, chain/segment.py):
the walltime timer, the stop signal passed to ddlrun and asked again until ddlrun can take it,
a stop that comes before ddlrun runs, ddlrun's status (128 + N for a signal), the staged env's end
(``--then``) and ``segment_end``.  Here "ddlrun" is a stand-in: a small Python program that
reports how it started and takes the signal as ddlrun does (ignored until it installs its
handler, then exit 75); the chain tests (tests/chain, tests/emulation/test_chain_*) run the real one."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wmlce_tools.chain import record

STANDIN = """\
import json, os, signal, sys, time
out = sys.argv[1]
def say(**kw):
    with open(out, "a") as f:
        f.write(json.dumps(kw) + "\\n")
say(start=signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN)
time.sleep(float(sys.argv[2]))          # starting: the signal is ignored
def stop(*_):
    say(stopped=time.monotonic())
    sys.exit(75)
signal.signal(signal.SIGUSR1, stop)
say(ready=time.monotonic())
if sys.argv[3] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(float(sys.argv[3]))
say(done=True)
"""


@pytest.fixture
def run(tmp_path, isolated_env):
    run_dir = tmp_path / "run"
    ckpt = tmp_path / "ckpt"
    run_dir.mkdir()
    ckpt.mkdir()
    record.save(run_dir, record.ChainRecord(run_id="r-1", site="local", scheduler="local", length=3,
                                            checkpoint_dir=str(ckpt)))
    standin = tmp_path / "ddlrun_standin.py"
    standin.write_text(STANDIN)
    log = tmp_path / "ddlrun.jsonl"
    env = dict(isolated_env, WML_STOP_SIGNAL="USR1", WML_CHECKPOINT_DIR=str(ckpt), WML_RUN_ID="r-1",
               WML_CHAIN_LENGTH="3", WML_CHAIN_SEGMENT="1")

    def start(*opts, starting=0.0, then_exit="30", index=1):
        argv = [sys.executable, "-m", "wmlce_tools.chain.segment", str(run_dir), str(index), *opts, "--",
                sys.executable, str(standin), str(log), str(starting), then_exit]
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def events():
        return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []

    return start, events, run_dir, ckpt


def finish(proc, timeout=30):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def end_status(run_dir, index=1):
    return json.loads((run_dir / f"segment-{index}" / record.END_FILE).read_text())["status"]


def test_the_timer_stops_ddlrun_asking_again_until_it_can_take_it(run):
    start, events, run_dir, _ = run
    t0 = time.monotonic()
    code, out, err = finish(start("--timer", "0.2", starting="1"))
    assert code == 75, (out, err)
    assert err.count("wml: SIGUSR1 (this script's timer: the walltime is near): asking every rank to checkpoint "
                     "and stop") == 1, err
    ev = events()
    assert ev[0] == {"start": True}                        # ddlrun starts with the signal ignored
    assert "stopped" in ev[-1] and time.monotonic() - t0 < 15  # the first ask came too early; a later one took
    assert "segment 1 of 3 stopped for the walltime; segment 2 resumes from it" in out
    assert end_status(run_dir) == 75


def test_the_schedulers_signal_at_any_moment_reaches_ddlrun(run):
    start, events, run_dir, _ = run
    proc = start(starting="0.3")
    status = Path(f"/proc/{proc.pid}/status")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:                 # the step's handler is in place (SigCgt: USR1)
        caught = next(ln for ln in status.read_text().splitlines() if ln.startswith("SigCgt:"))
        if int(caught.split()[1], 16) >> (signal.SIGUSR1 - 1) & 1:
            break
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGUSR1)                   # maybe before ddlrun runs, maybe while it starts
    code, out, err = finish(proc)
    assert code == 75, (out, err)
    assert err.count("wml: SIGUSR1 (the scheduler's warning before the walltime)") == 1, err
    assert "stopped" in events()[-1]
    assert end_status(run_dir) == 75


def test_a_finished_run_runs_nothing(run):
    start, events, run_dir, ckpt = run
    (ckpt / "FINISHED").write_text("{}")
    code, out, err = finish(start())
    assert code == 0 and events() == []
    assert f"wml: run r-1 has already finished ({ckpt / 'FINISHED'}); segment 1 of 3 has nothing to do" in out


def test_ddlrun_ended_by_a_signal_is_128_plus_n_and_the_next_segment_resumes(run):
    start, events, run_dir, _ = run
    code, out, err = finish(start(then_exit="kill"))
    assert code == 128 + signal.SIGKILL and end_status(run_dir) == 137
    assert "segment 1 of 3 failed with exit status 137; segment 2 resumes from the last good checkpoint" in out


def test_then_runs_after_ddlrun_and_before_the_segment_ends(run, tmp_path):
    start, events, run_dir, ckpt = run
    marker = tmp_path / "then.txt"
    code, out, err = finish(start("--then", sys.executable, "-c",
                                  f"import os; open({str(marker)!r}, 'w').write(str(os.path.exists("
                                  f"{str(run_dir / 'segment-1' / record.END_FILE)!r})))", then_exit="0"))
    assert code == 0, (out, err)
    assert events()[-1] == {"done": True}
    assert marker.read_text() == "False"                # before segment_end wrote end.json
    assert (ckpt / "FINISHED").exists() and "run r-1 finished in segment 1 of 3" in out


@pytest.mark.parametrize("argv, fragment", [
    (["RUN", "1", "ddlrun"], "no -- before ddlrun's command"),
    (["RUN", "one", "--", "ddlrun"], "give RUN_DIR and INDEX, not RUN one"),
    (["RUN", "1", "--timer", "soon", "--", "ddlrun"], "--timer takes seconds"),
    (["RUN", "1", "--"], "no ddlrun command after --"),
])
def test_bad_usage_is_one_line(argv, fragment, isolated_env):
    r = subprocess.run([sys.executable, "-m", "wmlce_tools.chain.segment", *argv], env=isolated_env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and fragment in r.stderr, r.stderr
