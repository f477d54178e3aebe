"""A run that needs three walltimes, through ``wml submit --chain 3`` on the local site: the
segments run one after another here, each job script's own timer sending SIGUSR1 a margin
before its (emulated) walltime of a few seconds.  Real: wml, the job scripts, their timer and
trap, ddlrun, MPICH's mpiexec, the per-rank shim; the program is tests/chain/programs/resumable.py,
which speaks the contract (ddl_runtime.checkpoint.protocol) directly."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROGRAM = Path(__file__).resolve().parent / "programs" / "resumable.py"


# the timer's signal 3 s into each segment; the walltime, which the local site enforces, well after it
def run_chain(run_wml, tmp_path, chain, steps, per_walltime, walltime="60s", margin="57s"):
    result = tmp_path / "result.json"
    proc = run_wml("submit", "--chain", str(chain), "-t", walltime, "--signal-margin", margin,
                   "--ranks-per-node", "2", "-J", "run", "--json", str(PROGRAM), "--steps", str(steps),
                   "--steps-per-walltime", str(per_walltime), "--result", str(result), timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout.splitlines()[-1]), result


def test_three_walltimes_on_the_local_site_equal_one_job(run_wml, tmp_path):
    proc, info, result = run_chain(run_wml, tmp_path, chain=3, steps=25, per_walltime=10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = tmp_path / "one.json"
    subprocess.run([sys.executable, str(PROGRAM), "--steps", "25", "--result", str(one)], check=True, timeout=60)
    assert json.loads(result.read_text()) == json.loads(one.read_text())
    assert [s["exit_code"] for s in info["segments"]] == [75, 75, 0]
    ckpt = Path(info["checkpoint_dir"])
    assert ckpt == Path(info["run_dir"]) / "checkpoints" and (ckpt / "FINISHED").exists()
    for k in (1, 2, 3):
        for rank in (0, 1):
            seen = json.loads((ckpt / "ranks" / f"seg{k}-rank{rank}.json").read_text())
            assert seen["env"]["WML_CHAIN_SEGMENT"] == str(k) and seen["env"]["WML_RUN_ID"] == info["run_id"]
            assert seen["signalled"] == (k < 3)
    assert "wml: SIGUSR1 (this script's timer: the walltime is near)" in proc.stderr
    assert "ddlrun: 2 rank(s) checkpointed and stopped for the walltime (exit status 75)" in proc.stderr
    assert "crash" not in proc.stderr and "failed" not in proc.stderr
    jobs = run_wml("jobs")
    rows = [ln.split() for ln in jobs.stdout.splitlines()]
    assert rows[1][:2] == ["run", info["run_id"]] and "FINISHED" in rows[1], jobs.stdout
    # STEP: the step the ranks reached ("-": this program keeps no ddl_runtime record); CKPT: latest.json's
    assert [(r[1], r[5], r[7], r[8]) for r in rows[2:5]] == [("1/3", "STOPPED", "-", "10"), ("2/3", "STOPPED", "-", "20"),
                                                             ("3/3", "COMPLETED", "-", "20")], jobs.stdout


def test_a_chain_too_short_says_how_to_go_on(run_wml, tmp_path):
    proc, info, result = run_chain(run_wml, tmp_path, chain=1, steps=25, per_walltime=10)
    assert proc.returncode == 75, proc.stderr[-3000:]
    assert "it was the chain's last: the run is not finished" in proc.stdout + proc.stderr
    assert f"--checkpoint-dir {info['checkpoint_dir']}" in proc.stderr
    assert not result.exists()
    # resuming it: a new chain on the same checkpoint directory finishes the run
    again = run_wml("submit", "--chain", "2", "-t", "60s", "--signal-margin", "57s", "--checkpoint-dir",
                    info["checkpoint_dir"], str(PROGRAM), "--steps", "25", "--steps-per-walltime", "10",
                    "--result", str(result), timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(result.read_text())["step"] == 25
    # and a segment that finds the run finished exits at once, saying so
    done = run_wml("submit", "--chain", "1", "-t", "60s", "--signal-margin", "57s", "--checkpoint-dir",
                   info["checkpoint_dir"], str(PROGRAM), "--steps", "25", "--result", str(result), timeout=60)
    assert done.returncode == 0 and "has already finished" in done.stdout + done.stderr
