"""benchmarks/lms_bench.py --cpu: the GPU benchmark's code paths still run (no GPU figures)."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _bench(*args, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDL_", "WML_", "OMPI_", "PMI_"))}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "lms_bench.py"), *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=str(REPO))


def test_cpu_smoke_equal_and_two_ranks_pass():
    job = _bench("--cpu", "--only", "equal,ranks")
    lines = [line for line in job.stdout.splitlines() if line.startswith("DONE-WHEN")]
    assert job.returncode == 0 and len(lines) == 2, job.stdout + job.stderr
    assert all(line.endswith(": PASS") for line in lines), job.stdout
    assert "recomputed 0.0 MB" not in job.stdout or "swapped 0.0 MB" not in job.stdout   # LMS moved something


def test_unknown_section_is_one_line():
    job = _bench("--cpu", "--only", "speed", timeout=60)
    assert job.returncode == 2 and job.stderr.strip().splitlines()[-1].endswith(
        "--only speed: choose from throughput,gpt,overhead,largest,gpt_largest,equal,wmlce,ranks")
