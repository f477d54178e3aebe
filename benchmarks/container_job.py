"""Wall time of a 2-rank job on the local site with and without `--container` (issue 49), in one
run, the two interleaved: `wml submit -N 2 probe.py` (2 emulated nodes, mpiexec) against the same
with `--container IMAGE`, where each rank runs in a Charliecloud container (ch-run) of a Debian
bookworm image with python3 (the test suite's, built once by tests/container: mmdebstrap).  The
container run includes ddlrun's check before the launch (one ch-run of the image's python on the
launch node: runtime, image, the program's imports).

    USER=$(id -un) python benchmarks/container_job.py [--image DIR] [--repeat 5]
    USER=$(id -un) python benchmarks/container_job.py --torch [--repeat 3]

--torch: the issue's job instead, a 2-rank torch DistributedOptimizer script (20 SGD steps of a
linear model, ddl_runtime.torch) on one emulated node: on the host with this venv's torch and
pip's MPICH, against each rank in the test suite's torch image (Debian's python, numpy and
mpi4py with Open MPI 4.1.4, torch 2.13.0 installed by pip) launched by Debian's Open MPI mpiexec.

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

TRAIN = """\
import torch
import ddl_runtime.torch as ddl
ddl.init()
torch.manual_seed(1234 + ddl.rank())
model = torch.nn.Linear(8, 1)
opt = ddl.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=model.named_parameters())
ddl.broadcast_parameters(model.state_dict(), root_rank=0)
x = torch.randn(64, 8, generator=torch.Generator().manual_seed(ddl.rank()))
y = x @ torch.arange(8, dtype=torch.float32) + 0.5
for _ in range(20):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x).squeeze(1), y).backward()
    opt.step()
"""
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
    ap.add_argument("--torch", action="store_true", help="the 2-rank torch DistributedOptimizer job")
    a = ap.parse_args()
    if a.torch and a.image == ap.get_default("image"):
        a.image += "-mpi4py-torch"
    image = Path(a.image)
    if not (image / "usr/bin/python3").exists():
        sys.exit(f"no image at {image}: run tests/container/test_charliecloud_job.py once (it builds it), or give --image")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "probe.py").write_text(TRAIN if a.torch else PROBE)
        (image / str(work).lstrip("/")).mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "USER": os.environ.get("USER") or "root", "WML_JOBS_DIR": str(work / "jobs")}
        base = [sys.executable, "-m", "wmlce_tools", "submit", *(["--ranks-per-node", "2"] if a.torch else ["-N", "2"])]
        runs = {"host": base + ["probe.py"], "container": base + ["--container", str(image), "probe.py"]}
        envs = {"host": env, "container": env}
        if a.torch:       # the image's mpi4py is Debian's Open MPI: the host's Open MPI launches it
            envs["container"] = {**env, "WML_MPIEXEC": "/usr/bin/mpiexec", "OMPI_ALLOW_RUN_AS_ROOT": "1",
                                 "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        times = {k: [] for k in runs}
        for k, argv in runs.items():                  # warm the page cache once
            timed(argv, work, envs[k])
        for _ in range(a.repeat):
            for k, argv in runs.items():
                times[k].append(timed(argv, work, envs[k]))
        for k, t in times.items():
            print(f"{k:10s} median {statistics.median(t):.2f} s  max {max(t):.2f} s  ({a.repeat} runs)")
        print(f"container / host (median): {statistics.median(times['container']) / statistics.median(times['host']):.2f}")


if __name__ == "__main__":
    main()
