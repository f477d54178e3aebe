"""Horovod's own test_torch.py (../shared/conformance/horovod, unmodified) with its CPU tensors sent
down horovod.torch's device route, the code CUDA tensors take on the NCCL transport (issue 41),
through a gloo group (device_route_on_cpu/sitecustomize.py), 2 ranks under `ddlrun --horovod`.

Left out: the pre/postscale tests, whose expectations for CPU tensors are Horovod's CPU arithmetic
(float16 scaled in float32) while the device route scales as its GPU build does (in the tensor's
dtype; their CUDA expectations); test_global_barrier_op, which times a barrier from the end of
an allreduce and fails on whichever rank sees that allreduce end last; and the *_duplicate_name_error
tests, which expect a name submitted twice in a row to be still in flight, while through gloo the
first may have finished within the second's submit (then the second is a new, unmatched request).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hvd_examples_helpers import REPO, clean_env
from test_conformance_tensorflow import SUITE, _summary

SITE = Path(__file__).resolve().parent / "device_route_on_cpu"
SUBSET = "not prescale and not postscale and not global_barrier_op and not duplicate_name"


@pytest.mark.timeout(900)
@pytest.mark.skipif(not SUITE.is_dir() and not os.environ.get("CI"), reason=f"{SUITE} is not here (CI has it)")
def test_horovod_torch_suite_passes_through_the_device_route_on_two_ranks():
    env = clean_env({"PYTHONPATH": f"{REPO}{os.pathsep}{SITE}", "DDL_TEST_DEVICE_ROUTE_ON_CPU": "1",
                     "PYTHONDONTWRITEBYTECODE": "1", "DDL_STALL_SHUTDOWN_S": "60"})
    cmd = [sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--horovod", "-n", "2", sys.executable, "-m", "pytest",
           "-q", "-p", "no:cacheprovider", "-o", "addopts=", "parallel/test_torch.py", "-k", SUBSET]
    try:
        p = subprocess.run(cmd, cwd=SUITE, capture_output=True, text=True, timeout=600, env=env,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the suite did not end within 600 s (a hang): {str(exc.stdout)[-3000:]}")
    out = p.stdout + p.stderr
    for rank in (0, 1):
        counts = _summary(out, rank)
        assert counts.get("failed", 0) == 0 and counts.get("error", 0) + counts.get("errors", 0) == 0, out[-6000:]
        assert counts.get("passed", 0) >= 90, (counts, out[-3000:])
    assert p.returncode == 0, out[-4000:]
    for rank in (0, 1):  # the route ran every kind (sitecustomize counts them)
        (line,) = [ln for ln in out.splitlines() if ln.startswith(f"[{rank}] DEVICE_ROUTE_POSTS ")]
        posts = dict(eval(line.split(" ", 2)[2]))
        for kind in ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter"):
            assert posts.get(kind, 0) > 0, (rank, posts)
