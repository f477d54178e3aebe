"""One launch plan on every path, for real (issue 58): on the local site, `wml submit`, ddlrun run
by hand, a packed `wml sweep`, a chain segment and the Python API's `submit` each start 2 ranks on
2 emulated nodes through ddlrun and MPICH's mpiexec, and every rank reports its command and its
environment.  Every path must give the same: the site profile's default (``environment:``), the
fabric page's value unless the user exported another before the job (the user's wins), the value
given with ``--export``, the run record's directory, a sweep's parameters, and the same python:
this one bare, the image's in a container (Charliecloud), the env's with ``--env``.

The site is the local one with an ``environment:`` and a ``fabric:`` section of its own
(``local-matrix``, written per test), so the fabric's one rule is exercised where it runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest

PROBE = """\
import json, os, sys
keep = ("MATRIX_", "NCCL_", "MY_", "WML_PARAM_", "WML_JOB_DIR", "DDL_STATS_DIR", "OMPI_MCA_")
env = {k: v for k, v in os.environ.items() if k.startswith(keep)}
print("PROBE " + json.dumps({"rank": os.environ.get("RANK"), "size": os.environ.get("WORLD_SIZE"),
                             "python": sys.executable, "argv": sys.argv[1:], "env": env}), flush=True)
"""

SITE = """\
name: local-matrix
description: this machine, with a site environment and a fabric section (tests/launch)
scheduler: local
launcher: mpiexec
platform: linux-64
node: {sockets: 1, cores_per_socket: 1, threads_per_core: 1, gpus_per_socket: 0, detect: true}
total_nodes: 64
gpu_binding: per-rank
environment: {MATRIX_SITE_DEFAULT: from-the-profile}
chain: {scheduler_warning: false, signal_margin: "10s"}
sweep: {default: packed}
fabric:
  library: nccl
  network: loopback
  settings:
    - env: {NCCL_MATRIX: from-the-page}
      page: https://example.org/matrix-fabric
      checked: "2026-11-29"
container:
  runtime: charliecloud
  runtimes:
    charliecloud:
      env: {OMPI_MCA_btl_vader_single_copy_mechanism: none}
      docs: [https://hpc.github.io/charliecloud/ch-run.html]
      checked: "2026-11-28"
"""


@pytest.fixture
def matrix(tmp_path, isolated_env):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "local-matrix.yaml").write_text(SITE)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = dict(isolated_env, WML_SITE_PATH=str(sites), WML_SITE="local-matrix", NCCL_MATRIX="exported-by-me")
    return tmp_path, probe, env


def _run(argv: List[str], env: Dict[str, str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def _probes(text: str) -> List[dict]:
    out = []
    for line in text.splitlines():
        i = line.find("PROBE ")
        if i >= 0:
            out.append(json.loads(line[i + len("PROBE "):]))
    return sorted(out, key=lambda r: r["rank"])


def _wml(*args: str) -> List[str]:
    return [sys.executable, "-m", "wmlce_tools", *args]


def _job_output(root: Path, pattern: str = "**/output.log") -> str:
    logs = sorted(root.glob(pattern))
    assert logs, f"no output.log under {root}"
    return "\n".join(p.read_text() for p in logs)


def run_path(path: str, tmp: Path, probe: Path, env: Dict[str, str], opts: List[str]) -> List[dict]:
    """Run the probe on ``path`` with the job options ``opts``; every rank's report."""
    jobs = tmp / f"jobs-{path.replace(' ', '-')}"
    env = dict(env, WML_JOBS_DIR=str(jobs))
    if path == "job script":
        p = _run(_wml("submit", "--nodes", "2", *opts, str(probe), "x"), env, tmp)
        assert p.returncode == 0, p.stdout + p.stderr
        return _probes(_job_output(jobs))
    if path == "chain segment":
        p = _run(_wml("submit", "--chain", "1", "-t", "120s", "--nodes", "2", *opts, str(probe), "x"), env, tmp)
        assert p.returncode == 0, p.stdout + p.stderr
        return _probes(_job_output(jobs))
    if path == "packed sweep":
        p = _run(_wml("sweep", "--nodes", "2", "--param", "p=1", *opts, str(probe), "x"), env, tmp)
        assert p.returncode == 0, p.stdout + p.stderr
        return _probes(_job_output(jobs, "**/trials/0/output.log"))
    if path == "python api":
        code = textwrap.dedent(f"""
            import json, sys
            from wmlce_tools import submit
            opts = json.loads(sys.argv[1])
            job = submit([{str(probe)!r}, "x"], nodes=2, **opts)
            print("STATE", job.wait(timeout=200))
            print(job.logs())
        """)
        p = _run([sys.executable, "-c", code, json.dumps(_api_options(opts))], env, tmp)
        assert p.returncode == 0 and "STATE COMPLETED" in p.stdout, p.stdout + p.stderr
        return _probes(p.stdout.split("STATE COMPLETED", 1)[1])       # the trial's log, as job.logs() gives it
    if path == "ddlrun by hand":
        xs = [a for o, a in zip(opts, opts[1:]) if o == "--export"]
        cont = [a for o, a in zip(opts, opts[1:]) if o == "--container"]
        argv = [sys.executable, "-m", "wmlce_tools.ddlrun.cli", "-n", "2", "--emulate-nodes", "2",
                *[w for x in xs for w in ("-x", x)], *(["--container", cont[0]] if cont else []),
                "--", *(["python3"] if cont else [sys.executable]), str(probe), "x"]
        p = _run(argv, dict(env, WML_JOB_DIR=str(jobs)), tmp)
        assert p.returncode == 0, p.stdout + p.stderr
        return _probes(p.stdout)
    raise AssertionError(path)


def _api_options(opts: List[str]) -> dict:
    out: dict = {}
    for o, a in zip(opts, opts[1:]):
        if o == "--export":
            out.setdefault("export", []).append(a)
        elif o in ("--container", "--env"):
            out[o[2:]] = a
    return out


PATHS = ["job script", "ddlrun by hand", "packed sweep", "chain segment", "python api"]


def _check(ranks: List[dict], path: str, python: str, exported: bool = True) -> None:
    assert [r["rank"] for r in ranks] == ["0", "1"] and {r["size"] for r in ranks} == {"2"}, (path, ranks)
    for r in ranks:
        env = r["env"]
        assert r["argv"] == ["x"], path
        assert r["python"] == python, (path, r["python"])
        assert env.get("MATRIX_SITE_DEFAULT") == "from-the-profile", (path, env)
        assert env.get("NCCL_MATRIX") == ("exported-by-me" if exported else "from-the-page"), (path, env)
        assert env.get("MY_GIVEN") == "given with --export", (path, env)
        assert env.get("WML_JOB_DIR") or env.get("DDL_STATS_DIR"), (path, env)     # the run record's place
        if path == "packed sweep":
            assert env.get("WML_PARAM_P") == "1" and env["DDL_STATS_DIR"].endswith("trials/0/stats"), env


@pytest.mark.parametrize("path", PATHS)
def test_every_path_gives_the_ranks_the_same(path, matrix):
    tmp, probe, env = matrix
    ranks = run_path(path, tmp, probe, env, ["--export", "MY_GIVEN=given with --export"])
    _check(ranks, path, sys.executable)


@pytest.mark.parametrize("path", ["job script", "packed sweep"])
def test_the_pages_value_where_the_user_set_none(path, matrix):
    tmp, probe, env = matrix
    env = {k: v for k, v in env.items() if k != "NCCL_MATRIX"}
    ranks = run_path(path, tmp, probe, env, ["--export", "MY_GIVEN=given with --export"])
    _check(ranks, path, sys.executable, exported=False)


@pytest.fixture(scope="module")
def image():
    from helpers import images

    return images.debian("bookworm-python3")      # Debian's python3 alone; scripts/test builds it before pytest


@pytest.mark.parametrize("path", PATHS)
def test_every_path_runs_the_images_python_in_a_container(path, matrix, image):
    """Charliecloud on every path: the image's python runs the probe (never this host's venv),
    with the same variables; the runtime's own setting (Open MPI's) reaches every rank."""
    tmp, probe, env = matrix
    env = dict(env, USER=env.get("USER") or "root")
    ranks = run_path(path, tmp, probe, env, ["--export", "MY_GIVEN=given with --export", "--container", str(image)])
    _check(ranks, path, "/usr/bin/python3")
    assert all(r["env"].get("OMPI_MCA_btl_vader_single_copy_mechanism") == "none" for r in ranks), ranks


@pytest.mark.parametrize("path", ["job script", "packed sweep", "chain segment", "python api"])
def test_every_path_runs_the_envs_python(path, matrix):
    """``--env VENV``: the ranks' python is the venv's on every path that activates it."""
    tmp, probe, env = matrix
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    ranks = run_path(path, tmp, probe, env, ["--export", "MY_GIVEN=given with --export", "--env", str(venv)])
    _check(ranks, path, str(venv / "bin" / "python"))
