"""Training that outlives a job (issue 26), Keras on both backends and a TensorFlow custom loop:
the walltime's signal reaches one rank mid-epoch, every rank saves and exits 75, the next job
resumes and ends with the very weights of the same run done in one go; a corrupt checkpoint is
refused with one line on every rank.  The resumed job's run record (issue 59) counts the steps
it really trained (9: steps 9 to 17; the batches a resumed epoch passes over are no steps), the
run's step it reached (17) and the checkpoint it resumed after (8), and ``wml report`` says so.
Real ranks: `ddlrun -n 2`, two jobs per case.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

from fw_helpers import REPO, WORKERS, ddlrun

from ddl_runtime.checkpoint.protocol import CHECKPOINT_DIR_ENV, EXIT_RESUME, LATEST_FILE, STOP_SIGNAL_ENV

CASES = [("keras", "torch"), ("keras", "tensorflow"), ("tfloop", "tensorflow")]


def _weights(path):
    with np.load(path) as d:
        return [d[k] for k in sorted(d.files, key=lambda k: int(k.split("_")[1]))]


@pytest.mark.parametrize("mode,backend", CASES, ids=[f"{m}-{b}" for m, b in CASES])
def test_stopped_mid_epoch_resumes_to_the_uninterrupted_weights(tmp_path, mode, backend):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir()
    out.mkdir()
    env = {"KERAS_BACKEND": backend, CHECKPOINT_DIR_ENV: str(ckpt), STOP_SIGNAL_ENV: "USR1",
           "TF_CPP_MIN_LOG_LEVEL": "2"}

    first = ddlrun(2, WORKERS / "walltime_resume.py", mode, "first", str(out), env=env, timeout=240)
    assert first.returncode == EXIT_RESUME, first.output
    assert "AFTER THE STOPPED RUN" not in first.stdout, first.output  # neither rank went on
    # rank 1 alone got the signal after its 9th step; both stopped there (steps count from 0)
    assert json.loads((ckpt / LATEST_FILE).read_text())["step"] == 8, first.output

    stats = tmp_path / "stats"
    second = ddlrun(2, WORKERS / "walltime_resume.py", mode, "resume", str(out), env=dict(env, DDL_STATS_DIR=str(stats)),
                    timeout=240)
    assert second.returncode == 0, second.output
    from wmlce_tools.runstats.records import load

    rec = load(stats)
    assert [(r.steps, r.run_step, r.resumed_from) for r in rec.ranks] == [(9, 17, 8)] * 2, second.output
    rep = subprocess.run([sys.executable, "-m", "wmlce_tools", "report", str(stats), "--no-html"], cwd=str(REPO),
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0 and "job stats: 9 steps, step " in " ".join(rep.stdout.split()), rep.stdout + rep.stderr
    assert "resuming from the checkpoint of step 8" in second.stdout + second.stderr, second.output
    for r in range(2):
        ref, final = _weights(out / f"reference.rank{r}.npz"), _weights(out / f"final.rank{r}.npz")
        assert len(ref) == len(final) == 4
        for a, b in zip(ref, final):  # bit for bit
            assert a.dtype == b.dtype and np.array_equal(a, b), (r, np.abs(a - b).max())
    lines = [line.split("] ", 1)[1] for line in second.stdout.splitlines() if "] CASE corrupt: " in line]
    assert len(lines) == 2 and len(set(lines)) == 1, second.output  # the same line on both ranks
    assert lines[0].startswith("CASE corrupt: CheckpointError: ") and "corrupt" in lines[0][20:], lines[0]
