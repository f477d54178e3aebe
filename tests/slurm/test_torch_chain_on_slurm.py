"""A torch training run that needs three walltimes, through ``wml submit --site local-slurm --chain 3``
on the real local Slurm, ends with the same weights, bit for bit, as the same run done in one job.

The program is tests/checkpoint/programs/torch_chain.py: a torch loop with ddl_runtime.torch's
``DistributedOptimizer`` and the documented ``Checkpointer`` lines, deterministic data order,
dropout with per-rank random streams, SGD with momentum; 2 ranks on 2 Slurm nodes.  Real: wml,
sbatch with ``--signal=B:USR1@60`` and ``--dependency=afterany``, slurmd running each segment's
script, its trap forwarding SIGUSR1 to ddlrun, ddlrun to srun and both ranks, the runtime's
agreement riding in the gradient reduction, rank 0's checkpoint, exit 75, the next segment's
restore, FINISHED.  Not waited for: Slurm's own ``--signal`` timer (a walltime is at least a
minute, and Slurm's event resolution sends the signal up to 60 s early), so each segment's
walltime is played by the program (``--wait-for-stop-after 10``: after 10 steps in a segment
each rank waits for the stop signal before its next step, and rank 0 writes waiting-seg<k>), and
the test then sends the signal Slurm would send, to the same process, with
``scancel --signal=USR1 --batch``.  25 steps: segment 1 stops at step 10, segment 2 at step 21,
segment 3 trains steps 22-24 and finishes.
"""
from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "tests" / "checkpoint" / "programs" / "torch_chain.py"
ARGS = ["--steps", "25", "--step-seconds", "0"]


def test_a_torch_run_of_three_walltimes_through_a_chain_of_three_equals_one_job(slurm_chain, tmp_path):
    chained, one = tmp_path / "chained", tmp_path / "one-job"
    chained.mkdir()
    one.mkdir()
    sub = slurm_chain.submit(["python", str(PROGRAM), str(chained), *ARGS, "--wait-for-stop-after", "10"],
                             chain=3, nodes=2, rpn=1, name="torch")
    for k in (1, 2):      # the walltime's warning, once the segment has done a walltime's work
        slurm_chain.wait_file(sub, chained / f"waiting-seg{k}", timeout=120)
        slurm_chain.slurm.run("scancel", "--signal=USR1", "--batch", sub.job_ids[k - 1])
    infos = slurm_chain.wait(sub, timeout=240)
    report = slurm_chain.report(sub)
    assert [(i["JobState"], i["ExitCode"]) for i in infos] == [("FAILED", "75:0"), ("FAILED", "75:0"),
                                                                ("COMPLETED", "0:0")], report
    status = slurm_chain.status(sub)
    assert [(s["state"], s["step"]) for s in status["segments"]] == [("STOPPED", 10), ("STOPPED", 21),
                                                                      ("COMPLETED", 21)], report
    assert status["state"] == "FINISHED", status

    proc = slurm_chain.wml("submit", "--site", "local-slurm", "--nodes", "2", "--ranks-per-node", "1", "-t", "5",
                           "-J", "one-job", "--json", "--wait", "python", str(PROGRAM), str(one), *ARGS, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (chained / "final.sha256").read_text() == (one / "final.sha256").read_text(), report
