"""wml env clone: conda records reinstalled, unowned files relocated, pip packages rebuilt."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from env_helpers import run_wml


def pip_into(prefix: Path, *args: str) -> None:
    """A real pip install into the env, with the env's own interpreter."""
    subprocess.run([sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"),
                    "install", "-q", "--no-deps", "--disable-pip-version-check", *args],
                   check=True)


@pytest.fixture
def source_env(created_env: Path, wheel: Path, second_wheel: Path) -> Path:
    pip_into(created_env, str(wheel))                                   # direct_url.json: file://
    pip_into(created_env, "--no-index", "--find-links", str(second_wheel.parent), "wml-extra")
    (created_env / "etc" / "site.cfg").write_text(f"data_dir={created_env}/share/data\n")
    (created_env / "bin" / "user-tool").write_text(f"#!/bin/sh\necho tool in {created_env}\n")
    os.chmod(created_env / "bin" / "user-tool", 0o755)
    os.symlink(created_env / "etc" / "site.cfg", created_env / "share" / "site.cfg")
    return created_env


def test_clone_rebuilds_pip_packages_and_rewrites_prefix(source_env: Path, cli, isolated_env_dirs: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         second_wheel: Path):
    # wml-extra was installed from a find-links dir: pip can get it again from there
    monkeypatch.setenv("PIP_FIND_LINKS", str(second_wheel.parent))
    res = cli("env", "clone", "src", "dst", "--no-progress")
    dst = isolated_env_dirs / "dst"
    assert "2 pip packages reinstalled" in res.output
    assert "warning" not in res.output
    # conda programs see the new prefix
    out = subprocess.run([dst / "bin" / "wml-greet"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"greet from {dst}"
    # files nothing owns are copied with the prefix rewritten
    assert (dst / "etc" / "site.cfg").read_text() == f"data_dir={dst}/share/data\n"
    tool = subprocess.run([dst / "bin" / "user-tool"], capture_output=True, text=True, check=True)
    assert tool.stdout.strip() == f"tool in {dst}"
    assert os.readlink(dst / "share" / "site.cfg") == str(dst / "etc" / "site.cfg")
    # pip packages were reinstalled by pip with the clone's python: their scripts are the clone's
    hello = dst / "bin" / "wml-hello"
    assert hello.read_text().splitlines()[0] == f"#!{dst}/bin/python"
    # the original can go away: the clone does not depend on it
    shutil.rmtree(source_env)
    out = subprocess.run([hello], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"hello from {dst}"
    extra = subprocess.run([dst / "bin" / "wml-extra"], capture_output=True, text=True, check=True)
    assert extra.stdout.strip() == f"hello from {dst}"
    installer = (next((dst / "lib").glob("python*/site-packages/wml_hello-*.dist-info")) / "INSTALLER")
    assert installer.read_text().strip() == "pip"
    verify = cli("env", "verify", "dst")
    assert "OK" in verify.output


def test_clone_reports_pip_packages_it_cannot_reproduce(source_env: Path, cli, isolated_env_dirs: Path):
    # no index and no find-links: wml-extra (an index-style install) cannot be fetched again
    res = cli("env", "clone", "src", "dst2", "--no-progress")
    dst = isolated_env_dirs / "dst2"
    assert "1 pip packages reinstalled" in res.output
    assert "warning: pip package wml-extra==1.2 not reproduced" in res.output
    # it is still there (copied, prefix rewritten) so the env is as complete as it can be
    script = dst / "bin" / "wml-extra"
    assert script.read_text().splitlines()[0] == f"#!{dst}/bin/python"
    info = (dst / "conda-meta" / "wml" / "env.json").read_text()
    assert "wml-extra==1.2" in info


def test_clone_refuses_existing_destination(created_env: Path, cli, isolated_env_dirs: Path):
    cli("env", "clone", "src", "dst", "--no-progress")
    (isolated_env_dirs / "dst" / "keep").write_text("x")
    proc = run_wml("env", "clone", "src", "dst")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"wml: error: {isolated_env_dirs / 'dst'} already exists (use --force to replace it)"
    assert (isolated_env_dirs / "dst" / "keep").exists()
    cli("env", "clone", "src", "dst", "--force", "--no-progress")
    assert not (isolated_env_dirs / "dst" / "keep").exists()


def test_clone_by_path_from_a_readonly_site_env(created_env: Path, cli, tmp_path: Path):
    site = tmp_path / "site" / "ibm-wml-ce-1.6.2"
    cli("env", "clone", created_env, site, "--no-progress")
    for p in sorted(site.rglob("*"), reverse=True):
        if not p.is_symlink():
            p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        dst = tmp_path / "mine"
        cli("env", "clone", site, dst, "--no-progress")
        out = subprocess.run([dst / "bin" / "wml-core"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == f"wml-core linux-64 prefix={dst}"
    finally:
        for p in site.rglob("*"):
            if not p.is_symlink():
                p.chmod(0o755)


def test_clone_unknown_source(cli):
    res = cli("env", "clone", "no-such-env", "x", ok=False)
    assert res.exit_code == 2 and "unknown environment 'no-such-env'" in res.output


def test_clone_ppc64le_env_files_only(lockfile: Path, cli, tmp_path: Path):
    src = tmp_path / "ppc"
    cli("env", "create", lockfile, "--prefix", src, "-p", "linux-ppc64le", "--no-progress")
    dst = tmp_path / "ppc2"
    cli("env", "clone", src, dst, "--no-progress")
    assert f"prefix={dst}" in (dst / "bin" / "wml-core").read_text()


def test_verify_catches_what_a_plain_copy_breaks(source_env: Path, tmp_path: Path, cli):
    """The WML CE pitfall: copying an env (as `conda create --clone` did for pip packages)
    leaves pip's scripts on the old env's python; verify says so, wml's clone does not."""
    copied = tmp_path / "copied"
    shutil.copytree(source_env, copied, symlinks=True)
    proc = run_wml("env", "verify", copied)
    assert proc.returncode == 1
    assert (f"wml-hello==0.1 (pip): bin/wml-hello: runs {source_env}/bin/python, "
            "not this env's python") in proc.stdout
    cloned = tmp_path / "cloned"
    cli("env", "clone", source_env, cloned, "--no-progress")
    assert "OK" in cli("env", "verify", cloned).output
