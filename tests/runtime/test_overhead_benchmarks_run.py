"""The record's and the heartbeat's overhead benchmarks (BENCHMARKS.md, issues 59 and 61) still run
against the runtime they measure, on 2 real ranks (a few steps; no figure is judged here): a
change of the runtime's API must not leave a benchmark that cannot be rerun."""
from __future__ import annotations

import pytest
from helpers.mpi import REPO, run_script


@pytest.mark.parametrize("script, line", [
    ("stats_overhead.py", "the record's work a step, from its parts"),
    ("heal_overhead.py", "the heartbeat adds"),
])
def test_the_benchmark_runs_on_two_ranks(script, line):
    job = run_script(2, REPO / "benchmarks" / script, "--blocks", "2", "--steps", "2", timeout=180)
    assert job.returncode == 0, job.stderr[-3000:]
    assert line in job.stdout, job.stdout
