"""benchmarks/gpu_checks.sh --cpu: the one GPU command's smoke run, so that it does not rot in CI.

Every entry with a CPU mode runs (on CPU tensors; no figure is a GPU figure and no limit applies):
each prints its CHECK lines, the table has a line per check and the command exits 0.  A run that
reports nothing is a FAIL line and exit 1 (checked with a broken entry).
"""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXPECTED = ["collectives correct (2 ranks, cpu)", "collectives correct (1 rank, cpu)", "optimizer correct",
            "helpers correct", "ddl.allreduce 4 MB", "hvd.allreduce 1 MB", "bound 4 MB", "hvd-bound 1 MB",
            "step 1 rank, ddl_runtime", "step 1 rank, horovod", "resnet 1x16 alone", "resnet 2x8 sharing, ddl",
            "resnet 2x8 sharing, hvd"]


def _run(tmp_path, *args, env=None):
    environment = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(REPO), **(env or {})}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    return subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_checks.sh"), *args], capture_output=True,
                          text=True, env=environment, timeout=1800)


def test_the_gpu_command_runs_every_cpu_entry_and_prints_one_line_per_check(tmp_path):
    job = _run(tmp_path, "--cpu")
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    lines = job.stdout.splitlines()
    for name in EXPECTED:
        assert any(name in line and line.endswith("PASS") for line in lines), (name, job.stdout)
    assert lines[-1].endswith("checks, 0 failed")
    assert (tmp_path / "results.jsonl").read_text().count('"pass": true') == len(lines) - 1


def test_named_entries_run_alone_and_print_their_lines(tmp_path):
    """Entries named on the command line run and nothing else (the quick tier's smoke run; the
    full tier runs every CPU entry): one on one rank, one on two through mpiexec."""
    job = _run(tmp_path, "--cpu", "collectives-1-rank", "optimizer-2-ranks")
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    lines = job.stdout.splitlines()
    for name in ("collectives correct (1 rank, cpu)", "optimizer correct"):
        assert any(name in line and line.endswith("PASS") for line in lines), (name, job.stdout)
    assert not any("resnet" in line or "collectives correct (2 ranks" in line for line in lines), job.stdout
    assert lines[-1].endswith("checks, 0 failed")
    assert (tmp_path / "results.jsonl").read_text().count('"pass": true') == len(lines) - 1


def test_a_run_that_reports_nothing_is_a_fail_line_and_a_non_zero_exit(tmp_path):
    """The budget: with 3 s left every entry is a FAIL line (never run), the command exits 1."""
    job = _run(tmp_path, "--cpu", env={"GPU_CHECKS_BUDGET_S": "3"})
    assert job.returncode == 1
    assert "not run: the budget was spent" in job.stdout and job.stdout.splitlines()[-1].endswith("failed")
    assert " 0 failed" not in job.stdout.splitlines()[-1]
