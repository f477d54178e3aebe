"""Wall time of a 2-rank job on the local site with and without `--container` (issue 49), in one
run, the two interleaved: `wml submit -N 2 probe.py` (2 emulated nodes, mpiexec) against the same
with `--container IMAGE`, where each rank runs in a Charliecloud container (ch-run) of a Debian
bookworm image with python3 (the test suite's, built once by tests/container: mmdebstrap).  The
container run includes ddlrun's check before the launch (one ch-run of the image's python on the
launch node: runtime, image, the program's imports).

    USER=$(id -un) python benchmarks/container_job.py [--image DIR] [--repeat 5]

Reports median and max wall time of each and their ratio.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = "import os\nprint(os.environ['RANK'], open('/etc/os-release').readline().strip())\n"


def timed(argv, cwd, env) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv[3:8])}... failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default=str(Path(tempfile.gettempdir()) / "wml-test-images" / "bookworm-python3"))
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    image = Path(a.image)
    if not (image / "usr/bin/python3").exists():
        sys.exit(f"no image at {image}: run tests/container/test_charliecloud_job.py once (it builds it), or give --image")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "probe.py").write_text(PROBE)
        (image / str(work).lstrip("/")).mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "USER": os.environ.get("USER") or "root", "WML_JOBS_DIR": str(work / "jobs")}
        base = [sys.executable, "-m", "wmlce_tools", "submit", "-N", "2"]
        runs = {"host": base + ["probe.py"], "container": base + ["--container", str(image), "probe.py"]}
        times = {k: [] for k in runs}
        timed(runs["container"], work, env)          # warm the page cache once
        for _ in range(a.repeat):
            for k, argv in runs.items():
                times[k].append(timed(argv, work, env))
        for k, t in times.items():
            print(f"{k:10s} median {statistics.median(t):.2f} s  max {max(t):.2f} s  ({a.repeat} runs)")
        print(f"container / host (median): {statistics.median(times['container']) / statistics.median(times['host']):.2f}")


if __name__ == "__main__":
    main()
