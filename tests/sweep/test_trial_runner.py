"""The in-job trial runner (``python -m wmlce_tools.sweeps.trial``) as an array element runs it,
without a scheduler: which trials an element runs (one; PBS Pro's --stride K: every Kth; LSF's
index from 1), each trial's {name} fields and environment, its state, metrics and output, a
failing trial not stopping the next, and SIGTERM recorded as CANCELLED."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

from wmlce_tools.sweeps import record

TRIAL = [sys.executable, "-m", "wmlce_tools.sweeps.trial"]
PROG = ("import json, os, sys, time; time.sleep(float(sys.argv[2])); "
        "print('noise'); print(json.dumps({'a': sys.argv[1], 't': os.environ['WML_TRIAL'], "
        "'env_a': os.environ['WML_PARAM_A']})); sys.exit(int(sys.argv[1] == 'bad'))")


ESCAPED = PROG.replace("{", "{{").replace("}", "}}")      # a literal brace is {{ in a sweep's program


def _run_dir(tmp_path, values):
    run = tmp_path / "run"
    (run / "trials").mkdir(parents=True)
    record.save(run, record.SweepRecord(run_id="run", site="local", scheduler="local", mode="array",
                                        program=["x"], trials=[{"a": v} for v in values]))
    return run


def _element(run, index, *extra, sleep="0", env=None):
    return subprocess.run([*TRIAL, str(run), str(index), *extra, "--", sys.executable, "-c", ESCAPED, "{a}", sleep],
                          capture_output=True, text=True, timeout=60, env=env)


def test_one_trial_per_element_and_lsf_base(tmp_path):
    run = _run_dir(tmp_path, ["x0", "x1", "x2"])
    assert _element(run, 1).returncode == 0
    assert [record.read_state(run, i) is not None for i in range(3)] == [False, True, False]
    st = record.read_state(run, 1)
    assert st["state"] == "COMPLETED" and st["exit_code"] == 0 and st["attempt"] == 1
    assert st["metrics"] == {"a": "x1", "t": "1", "env_a": "x1"} and st["walltime_s"] >= 0
    assert "noise" in (run / "trials" / "1" / "output.log").read_text()
    assert _element(run, 3, "--base", "1").returncode == 0          # LSF: LSB_JOBINDEX 3 is trial 2
    assert record.read_state(run, 2)["metrics"]["a"] == "x2"


def test_pbs_stride_runs_every_kth_and_a_failure_does_not_stop_the_next(tmp_path):
    run = _run_dir(tmp_path, ["a", "bad", "c", "d", "e"])
    proc = _element(run, 1, "--stride", "2")                          # subjob 1 of 2: trials 1, 3
    assert proc.returncode == 1, proc.stderr                           # the first failing trial's status
    assert record.read_state(run, 1)["state"] == "FAILED" and record.read_state(run, 3)["state"] == "COMPLETED"
    assert [record.read_state(run, i) for i in (0, 2, 4)] == [None, None, None]


def test_sigterm_ends_the_trial_as_cancelled(tmp_path):
    run = _run_dir(tmp_path, ["slow"])
    p = subprocess.Popen([*TRIAL, str(run), "0", "--", sys.executable, "-c", ESCAPED, "{a}", "60"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while record.read_state(run, 0) is None:
        assert time.monotonic() < deadline, "the trial did not start"
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) != 0
    st = record.read_state(run, 0)
    assert st["state"] == "CANCELLED" and st["end"] - st["start"] < 30
