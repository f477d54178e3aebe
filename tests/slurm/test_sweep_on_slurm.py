"""``wml sweep`` on the real local Slurm: a 2 x 3 grid of a 2-rank torch script as a Slurm job
array with ``--max-running 2`` (at most 2 array tasks running, sampled from squeue all along),
the parameters reaching each trial, ``wml sweep show`` listing six trials' metrics, one trial
made to fail shown FAILED and ``wml sweep resume`` rerunning it alone (a new array of one);
then the same grid ``--pack 2``: one allocation, its trials as concurrent job steps, two at a
time (from the trials' recorded start/end times)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

PROGRAM = Path(__file__).resolve().parents[1] / "sweep" / "programs" / "grid_train.py"
GRID = ["--param", "lr=0.1,0.2", "--param", "bs=8,16,32"]


def _program(tmp_path):
    return [str(PROGRAM), "--lr", "{lr}", "--bs", "{bs}", "--sleep", "1", "--fail-if", str(tmp_path / "fail-{lr}-{bs}")]


def _wml(slurm_chain, *args, timeout=120):
    proc = slurm_chain.wml(*args, timeout=timeout)
    return proc


def _show(slurm_chain, run_id):
    proc = _wml(slurm_chain, "sweep", "show", run_id, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _running_tasks(slurm, job_id):
    out = slurm.run("squeue", "-h", "-r", "-j", job_id, "-t", "RUNNING,COMPLETING", "-o", "%i", check=False).stdout
    return [ln for ln in out.split() if ln.strip()]


def _wait_array(slurm, job_id, run_dir, n, timeout=240):
    """Until no task of ``job_id`` is queued or running; the most running at once (squeue)."""
    deadline = time.monotonic() + timeout
    most = 0
    while True:
        running = _running_tasks(slurm, job_id)
        most = max(most, len(running))
        left = slurm.run("squeue", "-h", "-r", "-j", job_id, "-o", "%i", check=False).stdout.split()
        if not left:
            return most
        if time.monotonic() > deadline:
            tails = [(run_dir / "trials" / str(i) / "output.log") for i in range(n)]
            pytest.fail(f"array {job_id} not done after {timeout} s: {left}; "
                        + " | ".join(p.read_text()[-300:] for p in tails if p.exists()))
        time.sleep(0.2)


def _states(run_dir, n):
    return [json.loads((run_dir / "trials" / str(i) / "state.json").read_text()) for i in range(n)]


def test_grid_as_a_slurm_array_at_most_two_running_then_resume(slurm_chain, tmp_path):
    slurm = slurm_chain.slurm
    (tmp_path / "fail-0.2-16").write_text("")          # trial 4 (lr=0.2, bs=16) fails
    proc = _wml(slurm_chain, "sweep", "--site", "local-slurm", "--nodes", "1", "--ranks-per-node", "2",
                "--cores-per-rank", "1", "-t", "5", "--max-running", "2", *GRID, "--json", *_program(tmp_path))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.splitlines()[-1])
    assert info["mode"] == "array" and info["trials"] == 6
    run_dir, job_id = Path(info["run_dir"]), info["job_id"]
    assert "#SBATCH --array=0-5%2" in (run_dir / "submit-1" / "job.sh").read_text()
    most = _wait_array(slurm, job_id, run_dir, 6)
    assert 1 <= most <= 2, most
    shown = _show(slurm_chain, info["run_id"])
    assert [t["state"] for t in shown["trials"]] == ["COMPLETED"] * 4 + ["FAILED", "COMPLETED"], shown
    for t in shown["trials"]:
        if t["state"] == "COMPLETED":    # its parameters reached argv and the environment of both ranks
            assert t["world"] == 2 and float(t["env_lr"]) == t["lr"] and int(t["env_bs"]) == t["bs"]   # typed
            assert t["loss"] == pytest.approx(float(t["lr"]) * int(t["bs"]) * 3)
    states = _states(run_dir, 6)
    assert {s["job_id"] for s in states} == {job_id}
    # at most 2 trials ran at any moment (their recorded times agree with squeue)
    for s in states:
        assert sum(o["start"] < s["start"] < o["end"] for o in states if o is not s) <= 1
    (tmp_path / "fail-0.2-16").unlink()
    again = _wml(slurm_chain, "sweep", "resume", info["run_id"], "--json")
    assert again.returncode == 0, again.stderr
    res = json.loads(again.stdout.splitlines()[-1])
    assert res["trials"] == [4]
    assert "#SBATCH --array=0-0" in (run_dir / "submit-2" / "job.sh").read_text()
    _wait_array(slurm, res["job_id"], run_dir, 6)
    after = _states(run_dir, 6)
    assert [s["state"] for s in after] == ["COMPLETED"] * 6
    assert after[4]["attempt"] == 2 and after[4]["job_id"] == res["job_id"]
    assert all(after[i]["end"] == states[i]["end"] for i in (0, 1, 2, 3, 5))     # only trial 4 ran again
    line = [ln for ln in _wml(slurm_chain, "jobs").stdout.splitlines() if info["run_id"] in ln]
    assert len(line) == 1 and "6 completed" in line[0], line


def test_grid_packed_in_one_allocation_two_at_a_time(slurm_chain, tmp_path):
    slurm = slurm_chain.slurm
    proc = _wml(slurm_chain, "sweep", "--site", "local-slurm", "--nodes", "1", "--ranks-per-node", "2",
                "--cores-per-rank", "1", "-t", "5", "--pack", "2", *GRID, "--json", *_program(tmp_path))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.splitlines()[-1])
    assert info["mode"] == "packed"
    run_dir, job_id = Path(info["run_dir"]), info["job_id"]
    script = (run_dir / "submit-1" / "job.sh").read_text()
    assert "#SBATCH --nodes=2" in script and "--array" not in script
    slurm.wait_done(job_id, timeout=240)
    states = _states(run_dir, 6)
    assert [s["state"] for s in states] == ["COMPLETED"] * 6, [s["state"] for s in states]
    assert {s["job_id"] for s in states} == {job_id}                  # one allocation
    assert sorted(s["placement"]["nodes"][0] for s in states) == [0, 0, 0, 1, 1, 1]
    concurrent = [sum(o["start"] <= s["start"] < o["end"] for o in states) for s in states]
    assert max(concurrent) == 2, concurrent                           # two at a time, never more
    assert len({s["host"] for s in states}) >= 1


def test_cancel_a_sweep_cancels_its_array(slurm_chain, tmp_path):
    slurm = slurm_chain.slurm
    hold = Path(__file__).resolve().parents[1] / "sweep" / "programs" / "hold.py"
    proc = _wml(slurm_chain, "sweep", "--site", "local-slurm", "--nodes", "1", "-t", "5", "--max-running", "1",
                "--seeds", "3", "--json", str(hold), "60")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.splitlines()[-1])
    run_dir = Path(info["run_dir"])
    deadline = time.monotonic() + 60
    while not (run_dir / "trials" / "0" / "state.json").exists():     # trial 0 has started
        assert time.monotonic() < deadline, "trial 0 did not start within 60 s"
        time.sleep(0.2)
    out = _wml(slurm_chain, "cancel", info["run_id"])
    assert out.returncode == 0 and f"sweep {info['run_id']}" in out.stdout, out.stderr
    deadline = time.monotonic() + 60
    while slurm.run("squeue", "-h", "-r", "-j", info["job_id"], check=False).stdout.strip():
        assert time.monotonic() < deadline, "the array was still queued 60 s after wml cancel"
        time.sleep(0.2)
    shown = _show(slurm_chain, info["run_id"])
    assert shown["trials"][0]["state"] in ("CANCELLED", "FAILED") and shown["counts"]["COMPLETED"] == 0
    assert [t["state"] for t in shown["trials"][1:]] == ["MISSING", "MISSING"], shown
