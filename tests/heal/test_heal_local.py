"""Self-healing runs on the local site (issue 61): real ranks (pip's MPICH, ddlrun, rankexec, torch,
ddl_runtime's DistributedOptimizer and Checkpointer(every=4)), emulated nodes of which one is a spare.

- every rank of node 1 SIGKILLs itself as step 10 begins (a node lost): `wml submit --restarts
  --spare-nodes 1` relaunches on nodes 0 and 2 from the checkpoint of step 7, names node 1, and ends
  with the very weights of the uninterrupted run; `wml status` and `wml report` say what happened;
- rank 1 sleeps for ever as step 10 begins, outside any collective: named as hung with its Python
  stack (the sleep's line), the attempt ended, the run restarted on the spare and finished;
- rank 1 raises at step 10 in every attempt: restarted once, then ended with that traceback
  (the same exception at the same step: a bug), not four times;
- Horovod's torch and Keras APIs (ddlrun --horovod) heal the same way with the runtime's checkpoint.

The hang floor is 3 s here (DDL_HANG_FLOOR_S) so that a test waits seconds, not the default 10 minutes.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from helpers.mpi import REPO

PROGRAMS = Path(__file__).resolve().parent / "programs"
TRAIN = PROGRAMS / "heal_train.py"


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WML_", "DDL_", "SLURM_", "PMI_", "OMPI_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _ddlrun(cwd: Path, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "wmlce_tools.ddlrun.cli", *args]
    try:
        return subprocess.run(cmd, cwd=str(cwd), env=_env(**env), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"ddlrun did not end within {timeout} s: {(e.stderr or '')[-3000:]}") from None


def _final(text: str) -> str:
    finals = re.findall(r"FINAL ([0-9a-f]{64})", text)
    assert len(finals) == 1, text[-3000:]
    return finals[0]


def _attempts(job_dir: Path) -> dict:
    return json.loads((job_dir / "attempts.json").read_text())


_REFERENCE: dict = {}


def _reference(tmp_path_factory, ranks_per_node: int, nodes: int = 2) -> str:
    """The weights of the same run with no fault and no restart, on the same layout."""
    key = (ranks_per_node, nodes)
    if key not in _REFERENCE:
        base = tmp_path_factory.mktemp("reference")
        (base / "out").mkdir()
        proc = _ddlrun(base, "-n", str(ranks_per_node * nodes), "--emulate-nodes", str(nodes), "--",
                       "python", str(TRAIN), str(base / "out"), timeout=240, WML_CHECKPOINT_DIR=str(base / "ckpt"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        _REFERENCE[key] = _final(proc.stdout)
    return _REFERENCE[key]


def test_a_lost_node_is_left_out_the_spare_takes_its_place_and_the_weights_are_the_uninterrupted_runs(
        run_wml, tmp_path, tmp_path_factory):
    out = tmp_path / "out"
    out.mkdir()
    proc = run_wml("submit", "--nodes", "2", "--ranks-per-node", "2", "--spare-nodes", "1", "--restarts", "2",
                   "-J", "heal", "--json", "--", "python", str(TRAIN), str(out), "--kill-at", "10", "--node", "1",
                   env={"OMP_NUM_THREADS": "1"}, timeout=400)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, text[-4000:]
    assert "ddlrun: attempt 1 failed: rank 2 on node1 killed by SIGKILL at step 10" in text, text[-4000:]
    assert "relaunching on node0, node2 without node1, from the checkpoint of step 7" in text, text[-4000:]
    assert _final(text) == _reference(tmp_path_factory, 2)
    job = json.loads(proc.stdout.splitlines()[-1])
    rec = _attempts(Path(job["jobdir"]))
    first, second = rec["attempts"]
    assert first["nodes"] == ["node0", "node1"] and second["nodes"] == ["node0", "node2"], rec
    assert {(f["rank"], f["node"], f["kind"], f["signal"]) for f in first["faults"]} == \
        {(2, "node1", "signal", "SIGKILL"), (3, "node1", "signal", "SIGKILL")}, rec
    assert first["left_out"] == ["node1"] and first["reached_step"] == 10 and second["restored_step"] == 7, rec
    assert second["outcome"] == "finished" and second["first_step_at"] > first["fault_at"], rec
    # wml status and wml report say it: attempts, what failed, time lost, steps redone
    status = run_wml("status", job["job_id"])
    line = next(ln for ln in status.stdout.splitlines() if ln.strip().startswith("attempts:"))
    assert re.search(r"2 attempts: 1 failed \(rank \d on node1 killed by SIGKILL at step 10; rank \d on node1 "
                     r"killed by SIGKILL at step 10\), restarted on node0,node2 from the checkpoint of step 7: "
                     r"[\d.]+ s lost, 2 steps redone; 2 finished", line), status.stdout
    report = run_wml("report", job["job_id"], env={"COLUMNS": "250"})
    assert report.returncode == 0, report.stderr
    assert "attempts: 2 attempts: 1 failed" in report.stdout, report.stdout
    assert "attempt 1 (node0,node1): rank 3 on node1 killed by SIGKILL at step 10" in report.stdout, report.stdout
    # the page's timeline shows the attempts: the failed one, the time from the fault to the restart's first step
    page = tmp_path / "report.html"
    html = run_wml("report", job["job_id"], "--html", str(page))
    assert html.returncode == 0, html.stderr
    text = page.read_text()
    assert "attempt that failed" in text and "from the fault to the first step after the restart" in text
    from helpers.page import CHROMIUM, drawn
    if CHROMIUM:
        assert drawn(page).get("timeline", 0) >= 4, drawn(page)   # ran, 2 attempts, the restart


def test_a_rank_that_stops_stepping_outside_any_collective_is_named_with_its_stack_and_restarted(tmp_path):
    (tmp_path / "out").mkdir()
    proc = _ddlrun(tmp_path, "-n", "2", "--emulate-nodes", "2", "--spare-nodes", "1", "--restarts", "1", "--",
                   "python", str(TRAIN), str(tmp_path / "out"), "--hang-at", "10", "--node", "1",
                   DDL_HANG_FLOOR_S="3", WML_JOB_DIR=str(tmp_path / "job"))
    err = proc.stderr
    assert proc.returncode == 0, err[-4000:]
    assert re.search(r"ddlrun: rank 1 on node1 hung: no step ended for \d+ s \(its limit 3 s\); 1 rank\(s\) wait "
                     r"for it in a collective; stopping the job", err), err[-4000:]
    stack = err.split("ddlrun: rank 1's Python stack:", 1)[1]
    # the main thread's innermost frame: the line of heal_train.py that sleeps
    sleep_line = next(i for i, ln in enumerate(TRAIN.read_text().splitlines(), 1) if "time.sleep(3600)" in ln)
    assert f'File "{TRAIN}", line {sleep_line} in main' in stack, stack[:3000]
    assert "relaunching on node0, node2 without node1" in err, err[-4000:]
    rec = _attempts(tmp_path / "job")
    fault = rec["attempts"][0]["faults"][0]
    assert (fault["rank"], fault["node"], fault["kind"], fault["step"]) == (1, "node1", "hang", 10), fault
    assert f"line {sleep_line} in main" in fault["stack"], fault
    assert [a["outcome"] for a in rec["attempts"]] == ["failed", "finished"], rec
    assert "FINAL" in proc.stdout


def test_the_same_exception_at_the_same_step_after_a_restart_ends_the_run_with_its_traceback(tmp_path):
    (tmp_path / "out").mkdir()
    proc = _ddlrun(tmp_path, "-n", "2", "--restarts", "3", "--", "python", str(TRAIN), str(tmp_path / "out"),
                   "--raise-at", "10", "--rank", "1", WML_JOB_DIR=str(tmp_path / "job"))
    err = proc.stderr
    assert proc.returncode != 0, err[-4000:]
    assert err.count("ddlrun: /") == 2, err[-4000:]          # two launches, not four
    said = err.split("a bug, not a fault; not restarted. Its traceback:\n", 1)
    assert len(said) == 2, err[-4000:]
    assert "ddlrun: attempt 2: rank 1 raised ValueError: bad batch at step 10" in said[0], err[-4000:]
    assert said[1].startswith("Traceback (most recent call last):") and \
        "ValueError: bad batch at step 10" in said[1].split("ddlrun:", 1)[0], said[1][:2000]
    rec = _attempts(tmp_path / "job")
    assert [a["outcome"] for a in rec["attempts"]] == ["failed", "failed"], rec
    assert "the same exception at the same step as in attempt 1" in rec["attempts"][1]["note"], rec
    fault = rec["attempts"][1]["faults"][0]
    assert (fault["rank"], fault["kind"], fault["step"]) == (1, "exception", 10), fault
    assert "ValueError: bad batch at step 10" in fault["traceback"], fault


def test_horovod_torch_heals_with_the_runtimes_checkpoint(tmp_path, tmp_path_factory):
    (tmp_path / "out").mkdir()
    proc = _ddlrun(tmp_path, "--horovod", "-n", "2", "--emulate-nodes", "2", "--spare-nodes", "1", "--restarts", "1",
                   "--", "python", str(TRAIN), str(tmp_path / "out"), "--horovod", "--kill-at", "10", "--node", "1",
                   WML_JOB_DIR=str(tmp_path / "job"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "ddlrun: attempt 1 failed: rank 1 on node1 killed by SIGKILL at step 10" in proc.stderr
    assert "relaunching on node0, node2 without node1, from the checkpoint of step 7" in proc.stderr
    assert _final(proc.stdout) == _reference(tmp_path_factory, 1)


def test_horovod_keras_heals_with_the_runtimes_checkpoint(tmp_path):
    keras_env = {"KERAS_BACKEND": "torch", "TF_CPP_MIN_LOG_LEVEL": "2"}
    for d in ("ref", "out"):
        (tmp_path / d).mkdir()
    ref = _ddlrun(tmp_path, "--horovod", "-n", "2", "--emulate-nodes", "2", "--", "python",
                  str(PROGRAMS / "heal_keras.py"), str(tmp_path / "ref"), WML_CHECKPOINT_DIR=str(tmp_path / "ckpt"),
                  **keras_env)
    assert ref.returncode == 0, ref.stderr[-4000:]
    proc = _ddlrun(tmp_path, "--horovod", "-n", "2", "--emulate-nodes", "2", "--spare-nodes", "1", "--restarts", "1",
                   "--", "python", str(PROGRAMS / "heal_keras.py"), str(tmp_path / "out"), "--kill-at", "10",
                   WML_JOB_DIR=str(tmp_path / "job"), **keras_env)
    err = proc.stderr
    assert proc.returncode == 0, err[-4000:]
    assert "ddlrun: attempt 1 failed: rank 1 on node1 killed by SIGKILL at step 10" in err, err[-4000:]
    assert "relaunching on node0, node2 without node1, from the checkpoint of step 7" in err, err[-4000:]
    with np.load(tmp_path / "out" / "final.npz") as got, np.load(tmp_path / "ref" / "final.npz") as want:
        assert sorted(got.files) == sorted(want.files)
        for k in want.files:      # bit for bit
            assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k


def test_a_cancel_reaching_ddlrun_is_not_healed(tmp_path):
    """SIGTERM to ddlrun (wml cancel, the walltime's end): the ranks end, and no restart follows."""
    import signal
    import time

    prog = "import pathlib, os, time; pathlib.Path(f'up{os.environ[\"RANK\"]}').touch(); time.sleep(300)"
    proc = subprocess.Popen([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "-n", "2", "--restarts", "2", "--",
                             sys.executable, "-c", prog], cwd=str(tmp_path), env=_env(WML_JOB_DIR=str(tmp_path / "job")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ((tmp_path / "up0").exists() and (tmp_path / "up1").exists()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err[-3000:]
    assert err.count("ddlrun: /") == 1 and "ddlrun got SIGTERM (a cancel, or the walltime's end): not restarted" in err, \
        err[-3000:]
    assert _attempts(tmp_path / "job")["attempts"][0]["outcome"] == "failed"
