"""A run that needs three walltimes, through a real 3-job chain on the local Slurm.

Real: ``wml submit --chain 3``, sbatch with ``--dependency=afterany`` and ``--signal``, slurmd
running each segment's job script, its trap forwarding SIGUSR1 to ddlrun, ddlrun to srun and
every rank, exit status 75 through ddlrun and the script, FINISHED and scancel of the segments
left.  Not waited for: Slurm's own ``--signal`` timer (its minimum walltime is a minute and its
signal may come up to 60 s early, so three real walltimes would take minutes); the test sends
the same signal to the same process, the batch shell, with ``scancel --signal=USR1 --batch``
once a segment has done the work one walltime holds.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "tests" / "chain" / "programs" / "resumable.py"
STEPS, PER_WALLTIME = 25, 10         # three segments: 10 + 10 + 5 steps


def one_job_result(tmp_path: Path) -> dict:
    out = tmp_path / "one-job.json"
    subprocess.run([sys.executable, str(PROGRAM), "--steps", str(STEPS), "--result", str(out)],
                   check=True, timeout=60, capture_output=True)
    return json.loads(out.read_text())


def test_three_walltimes_through_a_chain_of_three(slurm_chain, tmp_path):
    result = tmp_path / "result.json"
    sub = slurm_chain.submit(["python", str(PROGRAM), "--steps", str(STEPS), "--steps-per-walltime",
                              str(PER_WALLTIME), "--result", str(result)], chain=3, nodes=2, rpn=1)
    assert len(sub.job_ids) == 3
    for k in (1, 2):      # the walltime's warning, once the segment has done a walltime's work
        slurm_chain.wait_file(sub, sub.checkpoint_dir / f"waiting-seg{k}")
        slurm_chain.slurm.run("scancel", "--signal=USR1", "--batch", sub.job_ids[k - 1])
    infos = slurm_chain.wait(sub)
    report = slurm_chain.report(sub)
    assert [i["JobState"] for i in infos] == ["FAILED", "FAILED", "COMPLETED"], report
    assert [i["ExitCode"] for i in infos] == ["75:0", "75:0", "0:0"], report
    assert json.loads(result.read_text()) == one_job_result(tmp_path), report
    assert (sub.checkpoint_dir / "FINISHED").exists()
    for k in (1, 2, 3):   # every rank, on both nodes, got the contract and (but in the last) the signal
        for rank in (0, 1):
            seen = json.loads((sub.checkpoint_dir / "ranks" / f"seg{k}-rank{rank}.json").read_text())
            assert seen["env"]["WML_CHAIN_SEGMENT"] == str(k) and seen["env"]["WML_CHAIN_LENGTH"] == "3"
            assert seen["env"]["WML_CHECKPOINT_DIR"] == str(sub.checkpoint_dir)
            assert seen["signalled"] == (k < 3), (k, rank, seen)
    status = slurm_chain.status(sub)
    assert status["state"] == "FINISHED" and status["step"] == 2 * PER_WALLTIME
    assert [(s["state"], s["step"]) for s in status["segments"]] == [("STOPPED", 10), ("STOPPED", 20),
                                                                      ("COMPLETED", 20)], status
    logs = slurm_chain.wml("logs", sub.job_ids[1])
    assert logs.returncode == 0, logs.stderr
    heads = [ln for ln in logs.stdout.splitlines() if ln.startswith("==> segment")]
    assert [h.split()[2] for h in heads] == ["1/3:", "2/3:", "3/3:"], logs.stdout
    assert "segment 1 of 3 stopped for the walltime at step 10; segment 2 resumes from it" in logs.stdout


def test_the_finishing_segment_cancels_the_rest(slurm_chain, tmp_path):
    result = tmp_path / "result.json"
    sub = slurm_chain.submit(["python", str(PROGRAM), "--steps", "3", "--result", str(result)], chain=3)
    infos = slurm_chain.wait(sub)
    report = slurm_chain.report(sub)
    assert [i["JobState"] for i in infos] == ["COMPLETED", "CANCELLED", "CANCELLED"], report
    out = next((sub.run_dir / "segment-1").glob("*.out")).read_text()
    assert f"cancelled the segments still queued: {sub.job_ids[1]} {sub.job_ids[2]}" in out, report
