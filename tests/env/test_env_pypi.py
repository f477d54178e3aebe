"""PyPI environments (issue 54): a spec of pip requirements locked once by uv for linux-64 and
linux-aarch64 into one PEP 751 pylock.toml, from the package registry; a relocatable venv
created from it atomically, verified (the MPI library mpi4py loads named, and checked against a
site's), cloned, packed, staged with --stage-env and running a 2-rank MPI job; uv's package
cache checked before use; bad input in one line each.

These tests reach PyPI (the registry the project installs from); the wheels are cached for the
session in $WML_PKGS_DIR/uv, so numpy, mpi4py and mpich are downloaded once.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

#: this machine's python installation (what a site module's python stands for)
BASE_PYTHON = str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")

SMALL = """\
name: small
kind: pypi
python: "3.11"
platforms: [linux-64, linux-aarch64]
requirements: [numpy, mpi4py >=4, mpich]
imports: [numpy, mpi4py]
"""

PROGRAM = """\
import json, os, sys
from mpi4py import MPI
import numpy
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
open(os.path.join(sys.argv[1], "rank%d" % comm.Get_rank()), "w").write(json.dumps(
    {"size": comm.Get_size(), "total": total, "prefix": sys.prefix, "numpy": numpy.__file__}))
"""


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def test_lock_torch_numpy_mpi4py_for_x86_64_and_aarch64_into_one_pylock(run_wml, tmp_path):
    r = run_wml("env", "lock", "pypi-torch", timeout=600)
    assert r.returncode == 0, r.stderr
    lock = tomllib.loads((tmp_path / "pylock.toml").read_text())
    assert lock["lock-version"] == "1.0" and lock["created-by"] == "uv"
    assert lock["environments"] == ["sys_platform == 'linux' and platform_machine == 'x86_64'",
                                    "sys_platform == 'linux' and platform_machine == 'aarch64'"]
    assert lock["tool"]["wml"]["platforms"] == ["linux-64", "linux-aarch64"]
    by_name = {p["name"]: p for p in lock["packages"]}
    assert {"torch", "numpy", "mpi4py"} <= set(by_name)
    torch_wheels = [w["url"] for w in by_name["torch"]["wheels"]]
    assert any("x86_64" in u for u in torch_wheels) and any("aarch64" in u for u in torch_wheels)
    assert all(w["hashes"]["sha256"] for w in by_name["torch"]["wheels"])
    assert "linux-64: locked" in r.stderr and "linux-aarch64: locked" in r.stderr


@pytest.fixture
def small_spec(tmp_path) -> Path:
    spec = tmp_path / "small.yaml"
    spec.write_text(SMALL)
    return spec


def site_dir(tmp_path, library: str) -> Path:
    """A site whose MPI is ``library`` (the mpich wheel's, in the venv), for verify --site."""
    d = tmp_path / "sites"
    d.mkdir()
    local = (Path(__file__).parents[2] / "site_configs" / "local.yaml").read_text()
    (d / "pipmpich.yaml").write_text(local.replace("name: local", "name: pipmpich") + (
        f"\nmpi_in_env:\n  method: build\n  library: {library}\n"))
    return d


def test_a_venv_from_a_pylock_lives_like_a_conda_env(run_wml, small_spec, tmp_path):
    r = run_wml("env", "lock", str(small_spec), "-f", str(tmp_path / "pylock.toml"), timeout=600)
    assert r.returncode == 0, r.stderr
    r = run_wml("env", "create", "pylock.toml", "--name", "small", timeout=600)
    assert r.returncode == 0, r.stderr
    venv = Path(r.stdout.strip())
    assert (venv / "pyvenv.cfg").is_file() and (venv / "share" / "wml" / "pylock.toml").is_file()
    assert not list(venv.parent.glob(".small.wml-staging-*"))
    assert "created venv" in r.stderr and "hard-linked" in r.stderr

    # verify: by name, the files, the imports, and the MPI library mpi4py loads
    env = {"WML_SITE_PATH": str(site_dir(tmp_path, f"{venv}/lib/libmpi"))}   # the mpich wheel's library
    r = run_wml("env", "verify", "small", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"MPI library: {venv}/lib/libmpi" in r.stdout and "MPICH" in r.stdout
    assert "2 imports" in r.stdout
    r = run_wml("env", "verify", "small", "--site", "pipmpich", env=env)
    assert r.returncode == 0 and "the MPI library is pipmpich's" in r.stdout, r.stdout + r.stderr
    r = run_wml("env", "verify", "small", "--site", "frontier", env=env)
    assert r.returncode == 1 and "not site frontier's MPI (a library whose path holds '/opt/cray/pe/mpich')" in r.stdout
    assert len(_lines(r.stderr)) == 1 and "not site frontier's MPI" in r.stderr

    # clone: a new relocatable venv, every script on its own python
    r = run_wml("env", "clone", "small", "small2", timeout=600)
    assert r.returncode == 0, r.stderr
    clone = Path(r.stdout.strip())
    r = run_wml("env", "verify", str(clone), "--import", "numpy")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "relocatable = true" in (clone / "pyvenv.cfg").read_text()

    # pack: a tar.gz that runs where it is unpacked
    r = run_wml("env", "pack", "small", "-o", str(tmp_path / "small.tar.gz"))
    assert r.returncode == 0, r.stderr
    moved = tmp_path / "elsewhere" / "venv"
    moved.mkdir(parents=True)
    with tarfile.open(tmp_path / "small.tar.gz") as tar:
        tar.extractall(moved, filter="tar")
    out = subprocess.run([str(moved / "bin" / "python"), "-c", "import sys, numpy; print(sys.prefix, numpy.__file__)"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and str(moved) in out.stdout.split()[1], out.stderr

    # a 2-rank job from the venv, staged to each (emulated) node's local directory
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    results = tmp_path / "out"
    results.mkdir()
    r = run_wml("submit", "--nodes", "2", "--env", "small", "--stage-env", "--", "python", str(prog), str(results),
                env={"WML_STAGE_PLACE": f"{tmp_path}/node-local/{{node}}"}, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    ranks = [json.loads(p.read_text()) for p in sorted(results.glob("rank*"))]
    assert len(ranks) == 2 and all(x["size"] == 2 and x["total"] == 3 for x in ranks)
    assert all(x["prefix"].startswith(f"{tmp_path}/node-local/") for x in ranks)
    assert all(x["numpy"].startswith(x["prefix"]) for x in ranks)


def test_uv_cache_damaged_through_a_hard_link_is_fetched_again(run_wml, small_spec, tmp_path):
    r = run_wml("env", "lock", str(small_spec), "-f", str(tmp_path / "pylock.toml"), "-p", "linux-64", timeout=600)
    assert r.returncode == 0, r.stderr
    r = run_wml("env", "create", "pylock.toml", "--prefix", str(tmp_path / "a"), "--link", "hardlink", timeout=600)
    assert r.returncode == 0, r.stderr
    target = next((tmp_path / "a").glob("lib/python*/site-packages/mpi4py/__init__.py"))
    assert target.stat().st_nlink > 1               # the same file as uv's cache entry
    with target.open("a") as f:
        f.write("# edited in place\n")
    r = run_wml("env", "create", "pylock.toml", "--prefix", str(tmp_path / "b"), "--system-site-packages",
                "--python", BASE_PYTHON, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "include-system-site-packages = true" in (tmp_path / "b" / "pyvenv.cfg").read_text()
    assert "uv's cache copy of mpi4py-" in r.stderr and "mpi4py/__init__.py (sha256 mismatch)" in r.stderr
    fresh = next((tmp_path / "b").glob("lib/python*/site-packages/mpi4py/__init__.py"))
    assert "edited in place" not in fresh.read_text()
    r = run_wml("env", "verify", str(tmp_path / "b"))
    assert r.returncode == 0, r.stdout


def test_a_lock_for_another_platform_is_one_line_and_creates_nothing(run_wml, tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("numpy\n")
    r = run_wml("env", "lock", str(req), "-p", "linux-aarch64", timeout=600)
    assert r.returncode == 0, r.stderr
    r = run_wml("env", "create", "pylock.toml", "--prefix", str(tmp_path / "v"))
    assert r.returncode != 0 and len(_lines(r.stderr)) == 1 and "Traceback" not in r.stderr
    assert "was locked for linux-aarch64, not this linux-64 machine" in r.stderr
    assert not (tmp_path / "v").exists() and not list(tmp_path.glob(".v.wml-staging-*"))


def test_an_unreachable_index_is_one_line(run_wml, tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("numpy\n")
    r = run_wml("env", "lock", str(req), "--index", "http://127.0.0.1:9/simple", timeout=300)
    assert r.returncode != 0 and len(_lines(r.stderr)) == 1 and "Traceback" not in r.stderr
    assert "index http://127.0.0.1:9/simple is unreachable" in r.stderr
    assert not (tmp_path / "pylock.toml").exists()


def test_an_index_without_aarch64_wheels_is_one_line(run_wml, tmp_path, wheel):
    """A local PEP 503 index holding only an x86_64 wheel of a package: locking it for
    linux-aarch64 names the package."""
    name = "wml-hello"
    x86 = wheel.name.replace("py3-none-any", "py3-none-manylinux_2_17_x86_64")
    pkg_dir = tmp_path / "index" / name
    pkg_dir.mkdir(parents=True)
    (pkg_dir / x86).write_bytes(wheel.read_bytes())
    (pkg_dir / "index.html").write_text(f'<html><body><a href="{x86}">{x86}</a></body></html>\n')
    (tmp_path / "index" / "index.html").write_text(f'<html><body><a href="{name}/">{name}</a></body></html>\n')
    req = tmp_path / "requirements.txt"
    req.write_text("wml-hello\n")
    index = (tmp_path / "index").as_uri()
    r = run_wml("env", "lock", str(req), "--index", index, "-p", "linux-64", "-p", "linux-aarch64", timeout=300)
    assert r.returncode != 0 and len(_lines(r.stderr)) == 1, r.stderr
    assert f"index {index} has no linux-aarch64 wheel (and no sdist) of wml-hello 0.1" in r.stderr
    r = run_wml("env", "lock", str(req), "--index", index, "-p", "linux-64", timeout=300)
    assert r.returncode == 0, r.stderr
