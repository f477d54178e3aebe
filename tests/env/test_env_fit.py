"""Environments as a user meets them on a real site (issue 60, items 8-12): a GPU stack that does
not fit the site's GPUs is refused; a PyPI spec mixing CUDA majors is refused as a conda one is;
a lock is told by its content, whatever its file name; ``wml env repair`` on a venv says what
repairs it; a pylock.toml for Linux platforms carries only the wheels they install.

The pylock test reaches PyPI, as tests/env/test_env_pypi.py does (uv's cache is shared)."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest


def one_line_error(r, *fragments):
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------ 8: the site's GPUs

@pytest.mark.parametrize("spec, site, built, gpus, fits", [
    ("conda-forge-pytorch-cuda12", "frontier", "CUDA 12 (", "AMD's, which run ROCm builds", "pytorch-rocm"),
    ("pypi-torch", "frontier", "CUDA (torch from PyPI, whose Linux wheels are CUDA builds)", "AMD's", "pytorch-rocm"),
    ("pytorch-rocm", "polaris", "ROCm (https://download.pytorch.org/whl/rocm7.1)", "NVIDIA's, which run CUDA builds",
     "conda-forge-pytorch-cuda12"),
    ("pytorch-xpu", "polaris", "XPU (", "NVIDIA's", "conda-forge-pytorch-cuda12"),
    ("conda-forge-pytorch-cuda12", "aurora", "CUDA 12 (", "Intel's, which run XPU builds", "pytorch-xpu"),
])
def test_a_gpu_stack_the_site_cannot_run_is_refused(run_wml, isolated_env_dirs, spec, site, built, gpus, fits):
    envs = {"WML_ENVS_DIR": str(isolated_env_dirs)}
    r = run_wml("env", "create", spec, "--site", site, "--dry-run", "-n", "x", env=envs)
    line = one_line_error(r, f"spec {spec!r} is built for {built}", f"site {site}'s GPUs are {gpus}")
    assert fits in line.split("bundled: ", 1)[1]
    r = run_wml("env", "create", spec, "--site", site, "-n", "x", env=envs)           # not only the dry run
    one_line_error(r, f"site {site}'s GPUs are")
    assert not isolated_env_dirs.exists() or not list(isolated_env_dirs.iterdir())


def test_a_gpu_stack_that_fits_the_site_goes_on(run_wml):
    r = run_wml("env", "create", "pytorch-rocm", "--site", "frontier", "--dry-run", "-n", "x")
    assert r.returncode == 0, r.stderr
    r = run_wml("env", "create", "conda-forge-pytorch-cuda12", "--site", "polaris", "--dry-run", "-n", "x")
    assert r.returncode == 0, r.stderr


def test_a_lock_built_for_other_gpus_is_refused_too(run_wml, tmp_path):
    (tmp_path / "cuda.toml").write_text(
        'lock-version = "1.0"\ncreated-by = "hand"\n\n[[packages]]\nname = "nvidia-cublas-cu12"\nversion = "12.6.4.1"\n'
        'wheels = [{ url = "https://example.org/nvidia_cublas_cu12-12.6.4.1-py3-none-manylinux_2_27_x86_64.whl", '
        'hashes = { sha256 = "00" } }]\n')
    r = run_wml("env", "create", "cuda.toml", "--site", "frontier", "--dry-run", "-n", "x")
    one_line_error(r, "lock cuda.toml is built for CUDA 12 (nvidia-cublas-cu12", "site frontier's GPUs are AMD's")


# ------------------------------------------------------------------ 9: CUDA majors in a PyPI spec

@pytest.mark.parametrize("reqs, a, b", [
    (["nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime-cu12"], "CUDA 11 (nvidia-cuda-runtime-cu11)",
     "CUDA 12 (nvidia-cuda-runtime-cu12)"),
    (["cupy-cuda11x", "nvidia-cublas-cu12"], "CUDA 11 (cupy-cuda11x)", "CUDA 12 (nvidia-cublas-cu12)"),
])
def test_a_pypi_spec_mixing_cuda_majors_is_refused_as_a_conda_one_is(run_wml, tmp_path, reqs, a, b):
    spec = tmp_path / "mixed.yaml"
    spec.write_text("name: mixed\nkind: pypi\npython: '3.11'\nplatforms: [linux-64]\nrequirements:\n"
                    + "".join(f"  - {r}\n" for r in reqs))
    r = run_wml("env", "lock", str(spec), "-f", str(tmp_path / "pylock.toml"))
    one_line_error(r, "mixes incompatible accelerator builds", a, b)
    assert not (tmp_path / "pylock.toml").exists()
    (tmp_path / "requirements.txt").write_text("".join(f"{r}\n" for r in reqs))
    r = run_wml("env", "create", "requirements.txt", "-n", "x", "--dry-run")
    one_line_error(r, "requirements.txt", "mixes incompatible accelerator builds", a, b)


# ------------------------------------------------------------------ 10 + 12: a pylock.toml of any name, Linux wheels only

SMALL = """\
name: small
kind: pypi
python: "3.11"
platforms: [linux-64, linux-aarch64]
requirements: [numpy, mpi4py >=4, mpich]
"""


def test_a_lock_of_any_name_is_told_by_its_content_and_holds_only_linux_wheels(run_wml, tmp_path):
    (tmp_path / "spec.yaml").write_text(SMALL)
    r = run_wml("env", "lock", "spec.yaml", "-f", "arm.toml", timeout=600)
    assert r.returncode == 0, r.stderr
    lock = tomllib.loads((tmp_path / "arm.toml").read_text())
    wheels = [Path(w["url"]).name for p in lock["packages"] for w in p.get("wheels", [])]
    assert {p["name"] for p in lock["packages"]} == {"numpy", "mpi4py", "mpich"} and wheels
    foreign = [w for w in wheels if not ("-any.whl" in w or ("linux" in w and ("x86_64" in w or "aarch64" in w)))]
    assert not foreign, foreign[:5]
    assert any("x86_64" in w for w in wheels) and any("aarch64" in w for w in wheels)

    r = run_wml("env", "create", "arm.toml", "-n", "arm", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "would create venv" in r.stdout and "from arm.toml: uv pip sync (4 packages)" in r.stdout
    r = run_wml("env", "create", "arm.toml", "-n", "arm", timeout=600)
    assert r.returncode == 0, r.stderr
    venv = Path(r.stdout.strip())
    out = subprocess.run([str(venv / "bin" / "python"), "-c", "import numpy, mpi4py; print('ok')"],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


# ------------------------------------------------------------------ 11: repair of a venv

def test_repair_of_a_venv_says_what_repairs_it_by_name_and_by_path(run_wml, tmp_path, isolated_env_dirs):
    venv = isolated_env_dirs / "plain"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    envs = {"WML_ENVS_DIR": str(isolated_env_dirs)}
    for ref in ("plain", str(venv)):
        r = run_wml("env", "repair", ref, env=envs)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"{venv}: nothing to repair (")
    target = next(venv.glob("lib/python*/site-packages/pip/__init__.py"))
    target.write_text(target.read_text() + "# edited\n")
    for ref in ("plain", str(venv)):
        line = one_line_error(run_wml("env", "repair", ref, env=envs), f"{venv} is a virtualenv", "pip==",
                              f"to repair: {venv}/bin/python -m pip install --force-reinstall --no-deps pip==")
        assert "unknown environment" not in line and "not a conda environment" not in line
    (venv / "share" / "wml").mkdir(parents=True)          # a venv wml env create made keeps its lock
    (venv / "share" / "wml" / "pylock.toml").write_text('lock-version = "1.0"\n')
    one_line_error(run_wml("env", "repair", "plain", env=envs),
                   f"to repair: wml env create {venv}/share/wml/pylock.toml --prefix {venv} --force")
