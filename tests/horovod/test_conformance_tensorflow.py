"""Horovod's own TensorFlow suite (test/parallel/test_tensorflow.py, unmodified, in
../shared/conformance/horovod) against horovod.tensorflow, run the way Horovod's CI runs it: one
pytest process per rank under `ddlrun --horovod -n 2`, graph and eager mode.

CI runs the part that exercises what wml had to build for it (errors on every rank with
Horovod's classes, graph-mode naming, gradients, dtypes, the *_op queries, elastic state,
partial tapes, objects) in a few minutes; README's "From Horovod to wml" gives the whole
file's figure and the command that reproduces it.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hvd_examples_helpers import REPO, clean_env

SUITE = REPO.parent / "shared" / "conformance" / "horovod"

# Every test whose name matches runs, in both modes (Horovod's file runs each in graph and eager).
SUBSET = "error or grad_cpu or _op or elastic or partial or object"


def _summary(out: str, rank: int) -> dict:
    """Counts from rank `rank`'s pytest summary line ('12 passed, 3 skipped, 4 subtests passed in ...')."""
    # pytest -q prints it bare ('40 passed in 9.9s') or framed in '=' (with -v or a short summary)
    summary = re.compile(rf"^\[{rank}\] [= ]*\d+ (passed|failed|errors?|skipped|deselected)\b.* in [\d.]+s")
    lines = [ln for ln in out.splitlines() if summary.match(ln)]
    assert lines, f"rank {rank} printed no pytest summary:\n{out[-4000:]}"
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", lines[-1])}


@pytest.mark.timeout(900)
@pytest.mark.skipif(not SUITE.is_dir() and not os.environ.get("CI"), reason=f"{SUITE} is not here (CI has it)")
def test_horovod_tensorflow_suite_subset_passes_on_two_ranks():
    env = clean_env({"KERAS_BACKEND": "tensorflow", "PYTHONDONTWRITEBYTECODE": "1", "DDL_STALL_SHUTDOWN_S": "60"})
    cmd = [sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--horovod", "-n", "2", sys.executable, "-m", "pytest",
           "-q", "-p", "no:cacheprovider", "-o", "addopts=", "parallel/test_tensorflow.py", "-k", SUBSET]
    try:
        p = subprocess.run(cmd, cwd=SUITE, capture_output=True, text=True, timeout=600, env=env,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the suite did not end within 600 s (a hang): {str(exc.stdout)[-3000:]}")
    out = p.stdout + p.stderr
    for rank in (0, 1):
        counts = _summary(out, rank)
        assert counts.get("failed", 0) == 0 and counts.get("error", 0) + counts.get("errors", 0) == 0, out[-6000:]
        assert counts.get("passed", 0) >= 30, (counts, out[-3000:])
    assert p.returncode == 0, out[-4000:]
