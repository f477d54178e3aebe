"""Keras and TensorFlow steps in the runtime's per-rank record (issue 51's gap): 2 real ranks
under pip's MPICH, each Keras backend set explicitly, the records read as `wml report` reads them.

Keras compiles its train step, so a step is counted where Python runs every step: a callback's
batch end (ddl_runtime.keras' and Horovod's callbacks), else each run of the gradient reduction
(a custom loop with a DistributedGradientTape).  Model: Dense(4->3) + Dense(3->1), 19 float32
parameters: 76 bytes reduced a step.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.mpi import REPO, run_script
from wmlce_tools.runstats.records import load

PROGRAM = Path(__file__).resolve().parent / "programs" / "keras_steps.py"
STEP_BYTES = 19 * 4
PHASE = re.compile(r"\[(\d+)\] PHASE (\S+) (\d+) (\d+)")
# phase: steps it adds (fit: 2 epochs x 3 batches; Horovod's fit: 1 x 3, two callbacks counting once;
# a tf.function loop: 4 steps, the first one traced)
PHASES = {"ddl-keras-fit": 6, "hvd-keras-fit": 3, "ddl-tf-tape": 4, "hvd-tf-tape": 4}


@pytest.mark.parametrize("backend", ["tensorflow", "torch"])
def test_keras_and_tensorflow_steps_reach_the_record_wml_report_reads(tmp_path, backend):
    stats_dir = tmp_path / "stats"
    job = run_script(2, PROGRAM, timeout=240,
                     env={"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2", "DDL_STATS_DIR": str(stats_dir)})
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    phases = [n for n in PHASES if backend == "tensorflow" or not n.endswith("-tape")]
    for rank in (0, 1):
        # the two ranks' lines can arrive run together (MPICH forwards output as it comes)
        seen = [list(m.groups()[1:]) for m in PHASE.finditer(job.stdout) if m.group(1) == str(rank)]
        expected, steps = [], 0
        for name in phases:
            steps += PHASES[name]
            expected.append([name, str(steps), str(steps * STEP_BYTES)])
        assert seen == expected, job.stdout
    rec = load(stats_dir)
    assert not rec.partial and [r.rank for r in rec.ranks] == [0, 1]
    total = sum(PHASES[n] for n in phases)
    for r in rec.ranks:
        assert r.status == "finished" and r.steps == total and r.bytes_reduced == total * STEP_BYTES
        assert r.timed_steps == total - 1 and r.mean_step_s > 0 and 0 < r.mean_comm_s < r.mean_step_s
    out = subprocess.run([sys.executable, "-m", "wmlce_tools", "report", str(stats_dir)], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"{total} steps" in out.stdout, out.stdout
