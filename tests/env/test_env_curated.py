"""The curated specs of today (issue 54): each validates, names its source and the day it was
checked; the WML CE 1.6.2 ones are marked legacy; ``wml env specs`` lists them, today's first;
every conda spec is solved by py-rattler for each of its platforms (linux-aarch64 included)
against a local channel with the real packages' names, versions and dependencies
(curated_channel.py); polaris's external-MPI route pins MPICH to the placeholder build; a spec
mixing CUDA builds is one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from curated_channel import FIXTURE_FOR, build_curated_channels

from wmlce_tools.env.lock import lock
from wmlce_tools.env.spec import bundled_spec_paths, load_spec

TODAY = {"open-ce-pytorch", "open-ce-tensorflow", "conda-forge-pytorch-cuda12", "pytorch-rocm", "pytorch-xpu",
         "pypi-torch", "wml-runtime"}
LEGACY = {"wml-ce-pytorch", "wml-ce-tensorflow", "wml-ce-rapids", "wml-ce-horovod-ddl"}


@pytest.fixture(scope="module")
def curated(tmp_path_factory) -> dict[str, Path]:
    return build_curated_channels(tmp_path_factory.mktemp("curated"))


def _specs():
    return {load_spec(p).name: load_spec(p) for p in bundled_spec_paths()}


def test_every_curated_spec_names_its_source_and_date_and_the_wml_ce_ones_are_legacy():
    specs = _specs()
    assert TODAY | LEGACY <= set(specs)
    for name, s in specs.items():
        assert s.origin.startswith(("http", "this repository")) and s.checked, name
        assert s.legacy == (name in LEGACY), name
    assert set(specs["open-ce-pytorch"].platforms) == {"linux-64", "linux-ppc64le"}
    assert set(specs["conda-forge-pytorch-cuda12"].platforms) == {"linux-64", "linux-aarch64"}
    assert set(specs["pypi-torch"].platforms) == {"linux-64", "linux-aarch64"}
    assert specs["pytorch-rocm"].pip_index == "https://download.pytorch.org/whl/rocm7.1"
    assert specs["pytorch-xpu"].pip_index == "https://download.pytorch.org/whl/xpu"


def test_wml_env_specs_lists_todays_stacks_first_with_platforms_purpose_and_source(run_wml):
    r = run_wml("env", "specs", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    names = [row["name"] for row in rows]
    assert all(names.index(t) < names.index(legacy) for t in TODAY for legacy in LEGACY)
    row = next(row for row in rows if row["name"] == "conda-forge-pytorch-cuda12")
    assert row["platforms"] == ["linux-64", "linux-aarch64"] and row["kind"] == "conda"
    assert "pytorch-cpu-feedstock" in row["source"] and row["checked"] == "2026-11-28" and "CUDA 12" in row["purpose"]
    assert next(row for row in rows if row["name"] == "pypi-torch")["kind"] == "pypi"
    assert all(row["legacy"] for row in rows if row["name"] in LEGACY)


@pytest.mark.parametrize("name", sorted(n for n in TODAY if n != "pypi-torch"))
def test_each_conda_spec_solves_for_every_platform_against_its_channels_fixture(name, curated, tmp_path):
    spec = load_spec(next(p for p in bundled_spec_paths() if load_spec(p).name == name))
    assert all(c in FIXTURE_FOR for c in spec.channels), spec.channels
    channels = list(dict.fromkeys(curated[FIXTURE_FOR[c]].as_uri() for c in spec.channels))
    result = lock(spec, tmp_path / "conda-lock.yml", channels=channels)
    assert result.solved == spec.platforms
    text = (tmp_path / "conda-lock.yml").read_text()
    for plat in spec.platforms:
        assert result.packages[plat] >= 2 and f"platform: {plat}" in text
    if name == "open-ce-pytorch":
        assert "pytorch-base-2.1.2-cuda12.2_py311_1" in text and "cudatoolkit-12.2.0" in text
    if name == "conda-forge-pytorch-cuda12":   # the CUDA build on both, never the cpu one
        assert "pytorch-2.9.1-cuda126_mkl_py312" in text and "pytorch-2.9.1-cuda126_generic_py312" in text
        assert "_cpu_" not in text and "libtorch" in text


def test_polaris_external_mpi_route_solves_to_the_placeholder_mpich_pinned_to_3_4(curated, tmp_path):
    from wmlce_tools.env.site_mpi import apply_to_spec, plan_for
    from wmlce_tools.site.registry import get_site

    spec = load_spec(next(p for p in bundled_spec_paths() if p.stem == "conda-forge-pytorch-cuda12"))
    plan = plan_for(get_site("polaris"), spec)
    site_spec = apply_to_spec(plan, spec)
    assert site_spec.channels[0] == "conda-forge/label/mpi-external"
    channels = list(dict.fromkeys(curated[FIXTURE_FOR[c]].as_uri() for c in site_spec.channels))
    lock(site_spec, tmp_path / "conda-lock.yml", channels=channels, platforms=["linux-aarch64"])
    text = (tmp_path / "conda-lock.yml").read_text()
    assert "mpich-3.4.3-external_0" in text and "mpi4py-3.1.6-py312_mpich" in text
    assert "mpich-4.3.2-h_100" not in text and "openmpi" not in text


def test_a_spec_mixing_cuda_builds_is_one_line(tmp_path, run_wml):
    spec = tmp_path / "mixed.yaml"
    spec.write_text("name: mixed\nchannels: [conda-forge]\nplatforms: [linux-64, linux-aarch64]\n"
                    "packages:\n  - cudatoolkit 11.8.*\n  - pytorch * cuda126*\n")
    r = run_wml("env", "lock", str(spec))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0
    assert "mixes incompatible accelerator builds: CUDA 11 (cudatoolkit 11.8.*) and CUDA 12 (pytorch * cuda126*)" in r.stderr
    rocm = tmp_path / "rocm.yaml"
    rocm.write_text("name: rocm\nchannels: [conda-forge]\nplatforms: [linux-64]\npackages: [python, cuda-version 12.6.*]\n"
                    "pip: [torch==2.10.0]\npip_index: https://download.pytorch.org/whl/rocm7.1\n")
    r = run_wml("env", "create", str(rocm), "-n", "x", "--dry-run")
    assert r.returncode != 0 and "CUDA 12" in r.stderr and "ROCm" in r.stderr and r.stderr.count("\n") == 1


def test_a_platform_the_channel_lacks_is_one_line(curated, tmp_path, run_wml):
    """Open-CE builds no aarch64 packages: asking its spec for linux-aarch64 is refused by the
    spec; a spec that names linux-aarch64 over a channel without it fails the solve in one line."""
    spec = tmp_path / "oce.yaml"
    spec.write_text(f"name: oce\nchannels: [{curated['open-ce'].as_uri()}]\nplatforms: [linux-aarch64]\n"
                    "packages: [pytorch 2.1.2]\n")
    r = run_wml("env", "lock", str(spec), "-f", str(tmp_path / "l.yml"))
    assert r.returncode != 0 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert "linux-aarch64" in r.stderr and "pytorch" in r.stderr
    assert not (tmp_path / "l.yml").exists()
    r = run_wml("env", "lock", "open-ce-pytorch", "-p", "linux-aarch64")
    assert r.returncode != 0 and "not one of spec 'open-ce-pytorch'" in r.stderr


def test_frontier_and_polaris_dry_runs_show_their_mpi_routes(run_wml):
    r = run_wml("env", "create", "pytorch-rocm", "--site", "frontier", "--dry-run", "-n", "rocm")
    assert r.returncode == 0, r.stderr
    assert "MPICC='cc -shared' pip install --no-binary=mpi4py --no-cache-dir mpi4py" in r.stdout
    assert "module load PrgEnv-gnu cray-mpich" in r.stdout
    assert "--index-url https://download.pytorch.org/whl/rocm7.1" in r.stdout
    r = run_wml("env", "create", "conda-forge-pytorch-cuda12", "--site", "polaris", "--dry-run", "-n", "cf",
                "-p", "linux-aarch64")
    assert r.returncode == 0, r.stderr
    assert "channels: conda-forge/label/mpi-external, conda-forge" in r.stdout and "mpich 3.4.*" in r.stdout
    assert "(linux-aarch64)" in r.stdout
    r = run_wml("env", "create", "conda-forge-pytorch-cuda12", "--site", "local", "--dry-run", "-n", "cf")
    assert r.returncode != 0 and "site local does not say how its MPI goes into an environment" in r.stderr


def test_the_schema_has_mpi_in_env_and_an_external_route_needs_a_version(tmp_path, run_wml):
    site = Path(__file__).parents[2] / "site_configs" / "polaris.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(site.read_text().replace('  version: "3.4.*"\n', ""))
    r = run_wml("site", "validate", str(bad))
    assert r.returncode != 0 and "external needs the version" in (r.stdout + r.stderr)
    r = subprocess.run([sys.executable, "-m", "wmlce_tools", "site", "schema"], capture_output=True, text=True)
    assert "mpi_in_env" in r.stdout


def test_create_with_site_puts_the_external_mpi_placeholder_in_the_env(curated, tmp_path, run_wml):
    """wml env create --site S, external route, end to end: the site's channel first, the
    placeholder MPICH pinned to the site's version, an mpi4py built for it, installed."""
    sites = tmp_path / "sites"
    sites.mkdir()
    local = (Path(__file__).parents[2] / "site_configs" / "local.yaml").read_text()
    (sites / "ext.yaml").write_text(local.replace("name: local", "name: ext") + (
        f"\nmpi_in_env:\n  method: external\n  version: \"3.4.*\"\n  channel: {curated['mpi-external'].as_uri()}\n"
        "  library: /opt/cray/pe/mpich\n"))
    spec = tmp_path / "mpi.yaml"
    spec.write_text(f"name: mpi\nchannels: [{curated['conda-forge'].as_uri()}]\nplatforms: [linux-64, linux-aarch64]\n"
                    "packages: [python 3.12.*, mpi4py]\n")
    r = run_wml("env", "create", str(spec), "--prefix", str(tmp_path / "env"), "--site", "ext", "--no-progress",
                env={"WML_SITE_PATH": str(sites)}, timeout=300)
    assert r.returncode == 0, r.stderr
    meta = sorted(p.name for p in (tmp_path / "env" / "conda-meta").glob("*.json"))
    assert "mpich-3.4.3-external_0.json" in meta and "mpi4py-3.1.6-py312_mpich_h_0.json" in meta, meta
    assert not any(m.startswith(("openmpi", "mpich-4")) for m in meta)
