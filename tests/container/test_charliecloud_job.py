"""A job's ranks inside a real container: Charliecloud's ch-run (unprivileged, user namespaces)
running an image made from Debian's packages alone (mmdebstrap of bookworm with python3; no
image registry).  The image is built once per machine and kept under the temporary directory
(``wml-test-images``, tests/helpers/images.py; scripts/test builds it before pytest), without
device nodes; it has no torch, no numpy, no wml: wml's rank shim and ddl_runtime are
bound in read-only.  Each rank reads a file only the image has."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.missing import skip_unless_ci

from wmlce_tools.container.charliecloud import wml_dir

from helpers import images
from helpers.images import CACHE, MARKER  # noqa: F401  (test_image_stage, test_env_image)

PROBE = """\
import json, os, sys
import ddl_runtime.core.jobenv
print("PROBE " + json.dumps({"rank": os.environ["RANK"], "world": os.environ["WORLD_SIZE"],
      "local": os.environ["LOCAL_RANK"], "os": open("/etc/os-release").readline().strip(),
      "marker": open("/wml-marker").read().strip(), "python": sys.executable,
      "arg": sys.argv[1:]}), flush=True)
"""

ALLREDUCE = """\
import json
import numpy as np
import ddl_runtime as ddl
ddl.init()
x = np.arange(4, dtype=np.float64) * (ddl.rank() + 1)
print("PROBE " + json.dumps({"rank": str(ddl.rank()), "size": ddl.size(), "sum": ddl.allreduce(x, op="sum").tolist(),
      "numpy": np.__file__, "marker": open("/wml-marker").read().strip()}), flush=True)
ddl.finalize()
"""

TRAIN = """\
import hashlib, json
import torch
import ddl_runtime.torch as ddl
ddl.init()
torch.manual_seed(1234 + ddl.rank())            # each rank its own initial weights: the broadcast makes them one
model = torch.nn.Linear(8, 1)
opt = ddl.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=model.named_parameters())
ddl.broadcast_parameters(model.state_dict(), root_rank=0)
x = torch.randn(64, 8, generator=torch.Generator().manual_seed(ddl.rank()))   # each rank its own data
y = x @ torch.arange(8, dtype=torch.float32) + 0.5
for _ in range(20):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x).squeeze(1), y).backward()
    opt.step()
print("PROBE " + json.dumps({"rank": str(ddl.rank()), "size": ddl.size(), "torch": torch.__file__,
      "params": hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest(),
      "marker": open("/wml-marker").read().strip()}), flush=True)
"""


def _build(name: str, packages: str = ""):
    """An image directory from Debian's packages (tests/helpers/images.py), built once per machine
    (scripts/test builds them before pytest)."""
    try:
        return images.debian(name)
    except images.ImageUnavailable as e:
        skip_unless_ci(str(e))


@pytest.fixture(scope="session")
def debian_image():
    return _build("bookworm-python3")


@pytest.fixture(scope="session")
def mpi_image():
    """python3 with Debian's numpy and mpi4py (Open MPI 4.1.4, as Debian's openmpi-bin on the host)."""
    return _build("bookworm-python3-mpi4py")


@pytest.fixture(scope="session")
def torch_image(mpi_image):
    """The mpi4py image plus torch, installed into it by pip as scripts/test installs it on the host
    (torch==2.13.0; the image's python is 3.11 like the host's, so the same wheel fits)."""
    try:
        return images.torch_image()
    except images.ImageUnavailable as e:
        skip_unless_ci(str(e))


@pytest.fixture
def job(run_wml, debian_image, tmp_path):
    (debian_image / str(tmp_path).lstrip("/")).mkdir(parents=True, exist_ok=True)   # the job's directory, bound
    (tmp_path / "allreduce.py").write_text(ALLREDUCE)
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "needs_torch.py").write_text("import torch\nprint('PROBE ran')\n")

    def run(*args, timeout=180, env=None):
        return run_wml(*args, env={"USER": os.environ.get("USER") or "root", **(env or {})}, timeout=timeout)
    return run


def probes(text):
    return [json.loads(l.split("PROBE ", 1)[1]) for l in text.splitlines() if "PROBE {" in l]


def test_two_ranks_run_in_the_image(job, debian_image, tmp_path):
    out = job("submit", "--container", str(debian_image), "-N", "2", "probe.py", "a b")
    assert out.returncode == 0, out.stderr
    log = next((tmp_path / "wml-jobs").glob("*/output.log")).read_text()
    ranks = sorted(probes(log), key=lambda p: p["rank"])
    assert [p["rank"] for p in ranks] == ["0", "1"] and {p["world"] for p in ranks} == {"2"}
    assert {p["local"] for p in ranks} == {"0"}                 # one rank on each emulated node
    for p in ranks:
        assert p["marker"] == MARKER and "bookworm" in p["os"]
        assert p["python"] == "/usr/bin/python3" and p["arg"] == ["a b"]
    assert "ch-run --unset-env=PYTHONHOME " in log      # the image's environment, not the host's PATH
    assert f" {debian_image} -- env PYTHONPATH={wml_dir()} python3 -m wmlce_tools.ddlrun.rankexec" in log


def test_image_without_torch_fails_before_any_rank(job, debian_image, tmp_path):
    out = job("submit", "--container", str(debian_image), "-N", "2", "needs_torch.py")
    assert out.returncode != 0
    log = next((tmp_path / "wml-jobs").glob("*/output.log")).read_text()
    assert "the image lacks torch, which python3" in log and "needs_torch.py imports" in log
    assert "PROBE ran" not in log and "rankexec" not in log          # no rank started
    errors = [l for l in log.splitlines() if "error" in l]
    assert len(errors) == 1 and "Traceback" not in log, log


def test_missing_image_is_refused_at_submit(job, tmp_path):
    out = job("submit", "--container", str(tmp_path / "no-image"), "-N", "2", "probe.py")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "no such image on this machine (charliecloud)" in out.stderr


def test_two_trial_sweep_in_the_image(job, debian_image, tmp_path):
    out = job("sweep", "--container", str(debian_image), "--param", "x=1,2", "--json", "probe.py", "{x}")
    assert out.returncode == 0, out.stderr
    run_dir = Path(json.loads(out.stdout.splitlines()[-1])["run_dir"])
    seen = {}
    for t in (0, 1):
        text = "".join(p.read_text() for p in sorted(set((run_dir / "trials" / str(t)).glob("*.log"))
                                                      | set((run_dir / "trials" / str(t)).glob("output*"))))
        got = probes(text)
        assert got and all(p["marker"] == MARKER for p in got), text
        seen[t] = {tuple(p["arg"]) for p in got}
    assert seen == {0: {("1",)}, 1: {("2",)}}


def test_chain_segment_runs_in_the_image(job, debian_image, tmp_path):
    out = job("submit", "--chain", "2", "-t", "20s", "--container", str(debian_image), "-N", "2", "probe.py")
    assert out.returncode == 0, out.stderr
    assert "finished in segment 1 of 2" in out.stderr + out.stdout
    logs = "".join(p.read_text() for p in (tmp_path / "wml-jobs").glob("*/segment-1/output.log"))
    got = probes(logs)
    assert sorted(p["rank"] for p in got) == ["0", "1"] and all(p["marker"] == MARKER for p in got), logs


def test_ddl_runtime_allreduce_in_the_image_through_the_hosts_open_mpi(job, mpi_image, tmp_path):
    """The image's MPI (Debian's Open MPI under mpi4py) talks to the host's Open MPI mpiexec:
    ddl_runtime, bound in, allreduces across the two containers; numpy is the image's."""
    if not os.path.exists("/usr/bin/mpiexec") or "OpenRTE" not in subprocess.run(
            ["/usr/bin/mpiexec", "--version"], capture_output=True, text=True).stdout:
        skip_unless_ci("Debian's Open MPI (openmpi-bin) is not installed; scripts/test installs it")
    (mpi_image / str(tmp_path).lstrip("/")).mkdir(parents=True, exist_ok=True)
    out = job("submit", "--container", str(mpi_image), "--ranks-per-node", "2", "allreduce.py",
              env={"WML_MPIEXEC": "/usr/bin/mpiexec", "OMPI_ALLOW_RUN_AS_ROOT": "1",
                   "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}, timeout=300)
    assert out.returncode == 0, out.stderr
    log = next((tmp_path / "wml-jobs").glob("*/output.log")).read_text()
    got = sorted(probes(log), key=lambda p: p["rank"])
    assert [p["rank"] for p in got] == ["0", "1"], log
    for p in got:      # both ranks end with the same sum: (1 + 2) x [0, 1, 2, 3]
        assert p["size"] == 2 and p["sum"] == [0.0, 3.0, 6.0, 9.0] and p["marker"] == MARKER
        assert p["numpy"].startswith("/usr/lib/python3/dist-packages/numpy")
    assert "cma-different-user-namespace" not in log and "btl_vader_single_copy_mechanism CMA" not in log


OPEN_MPI = {"WML_MPIEXEC": "/usr/bin/mpiexec", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def test_torch_distributed_optimizer_in_the_image_through_the_hosts_open_mpi(job, torch_image, tmp_path):
    """The issue's job: 2 ranks of a torch DistributedOptimizer script, each in the image (its own
    torch, numpy and mpi4py; wml's runtime bound in), end with identical parameters."""
    if not os.path.exists("/usr/bin/mpiexec") or "OpenRTE" not in subprocess.run(
            ["/usr/bin/mpiexec", "--version"], capture_output=True, text=True).stdout:
        skip_unless_ci("Debian's Open MPI (openmpi-bin) is not installed; scripts/test installs it")
    (torch_image / str(tmp_path).lstrip("/")).mkdir(parents=True, exist_ok=True)
    out = job("submit", "--container", str(torch_image), "--ranks-per-node", "2", "train.py", env=OPEN_MPI, timeout=300)
    assert out.returncode == 0, out.stderr
    log = next((tmp_path / "wml-jobs").glob("*/output.log")).read_text()
    got = sorted(probes(log), key=lambda p: p["rank"])
    assert [p["rank"] for p in got] == ["0", "1"], log
    assert got[0]["params"] == got[1]["params"]
    for p in got:
        assert p["marker"] == MARKER and p["torch"].startswith("/usr/local/lib/python3.11/dist-packages/torch/")


def test_check_on_every_node_through_the_launcher(job, debian_image, tmp_path, monkeypatch):
    """The per-node check as a multi-node job runs it: the site's launcher (mpiexec) starts it once
    per (emulated) node; a node whose image lacks a module the program imports is one line."""
    from wmlce_tools.ddlrun.plan import DdlrunOptions, build_plan, check_container_nodes
    from wmlce_tools.errors import WmlError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("USER", os.environ.get("USER") or "root")
    plan = build_plan(DdlrunOptions(program=("python3", "probe.py"), np=2, emulate_nodes=2,
                                    container=str(debian_image)), os.environ)
    check_container_nodes(plan, per_node=True)
    plan = build_plan(DdlrunOptions(program=("python3", "needs_torch.py"), np=2, emulate_nodes=2,
                                    container=str(debian_image)), os.environ)
    with pytest.raises(WmlError, match=r"on \S+: the image lacks torch, which python3 needs_torch.py imports"):
        check_container_nodes(plan, per_node=True)


def test_ddlrun_check_container(job, debian_image, tmp_path, isolated_env):
    env = {**isolated_env, "USER": os.environ.get("USER") or "root"}
    run = lambda img: subprocess.run([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--check", "--container", img, "-n", "2"],
                                     cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    ok = run(str(debian_image))
    assert ok.returncode == 0 and "(charliecloud): ready on 1 node(s)" in ok.stderr, ok.stderr
    assert ok.stderr.strip().splitlines()[-1] == "ddlrun: check passed"     # after the container's check
    bad = run(str(tmp_path / "nope"))
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].endswith(f"the image {tmp_path}/nope does not exist")
    assert "check passed" not in bad.stderr          # issue 60: not before the container's error


def test_image_mpi_other_than_the_launchers_is_one_line(job, mpi_image, tmp_path):
    """Open MPI in the image, MPICH's mpiexec (pip's) outside: the ranks would each start alone
    (two jobs of size 1); the check says so before any starts."""
    (mpi_image / str(tmp_path).lstrip("/")).mkdir(parents=True, exist_ok=True)
    out = job("submit", "--container", str(mpi_image), "--ranks-per-node", "2", "allreduce.py")
    assert out.returncode != 0
    log = next((tmp_path / "wml-jobs").glob("*/output.log")).read_text()
    errors = [l for l in log.splitlines() if "error" in l]
    assert len(errors) == 1 and "the image's MPI is 'Open MPI v4.1.4' (Open MPI) but the launcher is MPICH's mpiexec" in errors[0], log
    assert "PROBE" not in log and "rankexec" not in log
