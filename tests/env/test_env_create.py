"""wml env create: real installs from the local channel, atomic on failure and interruption."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from env_helpers import run_wml


def _staging_leftovers(parent: Path) -> list[Path]:
    return [p for p in parent.iterdir() if ".wml-staging-" in p.name] if parent.exists() else []


def test_create_linux64_and_run_programs(created_env: Path):
    out = subprocess.run([created_env / "bin" / "wml-greet"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"greet from {created_env}"
    core = subprocess.run([created_env / "bin" / "wml-core"], capture_output=True, text=True, check=True)
    assert core.stdout.strip() == f"wml-core linux-64 prefix={created_env}"
    assert (created_env / "share/wml-core/config.txt").read_text() == f"prefix={created_env}\n"
    py = subprocess.run([created_env / "bin" / "python", "-c",
                         "import sys, wml_conda_owned, wml_pyutil; print(sys.prefix, wml_pyutil.__file__)"],
                        capture_output=True, text=True, check=True)
    where, pyutil = py.stdout.split()
    assert where == str(created_env)
    # the noarch: python package went into this python's site-packages
    assert pyutil == str(created_env / "lib/python{0}.{1}/site-packages/wml_pyutil/__init__.py".format(*sys.version_info))
    assert not _staging_leftovers(created_env.parent)


def test_create_ppc64le_lays_out_files(lockfile: Path, cli, tmp_path: Path):
    target = tmp_path / "ppc"
    cli("env", "create", lockfile, "--prefix", target, "--platform", "linux-ppc64le", "--no-progress")
    text = (target / "bin" / "wml-core").read_text()
    assert f"wml-core linux-ppc64le prefix={target}" in text
    assert "placeholder" not in text


def _interpreter(script: Path) -> str:
    """The interpreter a pip-installed script runs: its shebang, or where the prefix is longer than
    a shebang may be (127 bytes on Linux), the one pip's ``#!/bin/sh`` trampoline execs."""
    lines = script.read_text().splitlines()
    if lines[0] != "#!/bin/sh":
        return lines[0][2:]
    match = re.match(r"^'''exec' \"?([^\" ]+)\"? ", lines[1])
    assert match, lines[:3]
    return match.group(1)


def test_create_from_spec_with_pip_section(write_spec, wheel: Path, cli, isolated_env_dirs: Path):
    spec = write_spec(name="withpip", extra=f"pip:\n  - wml-hello @ {wheel.as_uri()}\n")
    res = cli("env", "create", spec, "--name", "withpip", "--no-progress")
    prefix = isolated_env_dirs / "withpip"
    assert "1 pip packages" in res.output
    script = prefix / "bin" / "wml-hello"
    assert _interpreter(script) == f"{prefix}/bin/python"  # not the staging dir
    out = subprocess.run([script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"hello from {prefix}"
    assert (prefix / "conda-meta/wml/conda-lock.yml").is_file()


def test_existing_target_needs_force(created_env: Path, lockfile: Path, cli):
    marker = created_env / "marker"
    marker.write_text("x")
    res = cli("env", "create", lockfile, "--name", "src", ok=False)
    assert res.exit_code == 2 and "already exists" in res.output
    assert marker.exists()
    cli("env", "create", lockfile, "--name", "src", "--force", "--no-progress")
    assert not marker.exists() and (created_env / "bin/wml-greet").exists()


def test_failing_link_leaves_nothing(write_spec, tmp_path: Path):
    spec = write_spec(name="broken")
    spec.write_text(spec.read_text().replace("  - wml-greet\n", "  - wml-greet\n  - wml-broken  # [linux64]\n"))
    target = tmp_path / "envs" / "deep" / "broken"
    proc = run_wml("env", "create", spec, "--prefix", target)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"wml: error: installing into {target} failed")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not target.exists()
    assert not (tmp_path / "envs").exists()  # parents it made are gone too


def test_failing_pip_section_leaves_nothing(write_spec, tmp_path: Path):
    spec = write_spec(name="badpip", extra="pip:\n  - definitely-not-on-any-index==9.9\n")
    target = tmp_path / "badpip"
    proc = run_wml("env", "create", spec, "--prefix", target)
    assert proc.returncode == 2
    assert "pip install of the spec's pip section failed" in proc.stderr
    assert not target.exists() and not _staging_leftovers(tmp_path)


SLOW_BACKEND = '''
import os, time
from pathlib import Path
def _wait(*a, **k):
    Path(os.environ["WML_TEST_MARKER"]).write_text(str(os.getpid()))
    time.sleep(120)
    return []
get_requires_for_build_wheel = _wait
def build_wheel(*a, **k):
    raise RuntimeError("never reached")
'''


@pytest.fixture
def slow_pip_spec(tmp_path: Path, write_spec) -> Path:
    """A spec whose pip section builds a local project with an in-tree backend that hangs."""
    proj = tmp_path / "slowpkg"
    proj.mkdir()
    (proj / "slow_backend.py").write_text(SLOW_BACKEND)
    (proj / "pyproject.toml").write_text(
        "[build-system]\nrequires = []\nbuild-backend = 'slow_backend'\nbackend-path = ['.']\n"
        "[project]\nname = 'slowpkg'\nversion = '1.0'\n")
    return write_spec(name="slow", extra=f"pip:\n  - slowpkg @ {proj.as_uri()}\n")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_interrupted_create_leaves_nothing_at_target(slow_pip_spec: Path, tmp_path: Path, cli, sig):
    target = tmp_path / "envs" / "slow"
    (tmp_path / "envs").mkdir()
    marker = tmp_path / "building"
    env = dict(os.environ, WML_TEST_MARKER=str(marker))
    proc = subprocess.Popen([sys.executable, "-m", "wmlce_tools.env.cli", "env", "create",
                             str(slow_pip_spec), "--prefix", str(target)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.time() + 90
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, "create never reached its pip step"
            time.sleep(0.1)
        # the conda part is installed by now, in the staging dir, and pip is building
        assert _staging_leftovers(target.parent)
        assert not target.exists()
        if sig == signal.SIGKILL:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGTERM)  # just wml; it must clean up
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        os.killpg(proc.pid, signal.SIGKILL) if _group_alive(proc.pid) else None
    assert not target.exists()
    if sig == signal.SIGTERM:
        assert proc.returncode == 2
        assert "interrupted" in proc.stderr.read().decode()
        assert not _staging_leftovers(target.parent)
    # the next create in the same place works and removes what a killed one left behind
    spec_ok = slow_pip_spec.with_name("ok.yaml")
    spec_ok.write_text(slow_pip_spec.read_text().split("pip:")[0] + "imports: []\n")
    cli("env", "create", spec_ok, "--prefix", target, "--no-progress")
    assert (target / "bin" / "wml-greet").exists()
    assert not _staging_leftovers(target.parent)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_unwritable_target(lockfile: Path, tmp_path: Path):
    afile = tmp_path / "a-file"
    afile.write_text("")
    proc = run_wml("env", "create", lockfile, "--prefix", afile / "env")
    assert proc.returncode == 2 and "is not a directory" in proc.stderr
    proc = run_wml("env", "create", lockfile, "--prefix", "/proc/wml-test-env")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("wml: error: cannot create /proc/wml-test-env")
    assert proc.stderr.count("\n") == 1
    if os.geteuid() != 0:  # root ignores permission bits
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        proc = run_wml("env", "create", lockfile, "--prefix", ro / "env")
        assert proc.returncode == 2 and "not writable" in proc.stderr


def test_lockfile_without_platform(lockfile: Path, tmp_path: Path, spec_file: Path, cli):
    only_ppc = tmp_path / "ppc-lock.yml"
    cli("env", "lock", spec_file, "-f", only_ppc, "-p", "linux-ppc64le")
    res = cli("env", "create", only_ppc, "--prefix", tmp_path / "x", ok=False)
    assert res.exit_code == 2 and "has no 'linux-64' section" in res.output
    assert not (tmp_path / "x").exists()


def test_create_needs_name_or_prefix(lockfile: Path, cli):
    res = cli("env", "create", lockfile, ok=False)
    assert res.exit_code == 2 and "exactly one of --name or --prefix" in res.output


def test_create_installs_pip_entries_of_a_conda_lock_file(lockfile: Path, wheel: Path, tmp_path: Path, cli):
    """A lockfile that conda-lock itself made with a pip package (manager: pip) installs too."""
    import hashlib

    from conda_lock.lockfile import parse_conda_lock_file, write_conda_lock_file
    from conda_lock.lockfile.v2prelim.models import HashModel, LockedDependency

    parsed = parse_conda_lock_file(lockfile)
    parsed.package.append(LockedDependency(
        name="wml-hello", version="0.1", manager="pip", platform="linux-64", dependencies={},
        url=wheel.as_uri(), hash=HashModel(sha256=hashlib.sha256(wheel.read_bytes()).hexdigest()),
        categories={"main"}))
    with_pip = tmp_path / "pip-lock.yml"
    write_conda_lock_file(parsed, with_pip, metadata_choices=None)
    target = tmp_path / "env"
    res = cli("env", "create", with_pip, "--prefix", target, "--no-progress")
    assert "1 pip packages" in res.output
    out = subprocess.run([target / "bin" / "wml-hello"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"hello from {target}"


def test_rich_reporter_follows_rattler_callbacks(lockfile: Path, tmp_path: Path):
    """rattler drives the progress display: every operation is counted, none raises."""
    import asyncio
    import io

    from rich.console import Console
    from rich.progress import Progress
    from rattler import install

    from wmlce_tools.env.lock import locked_env
    from wmlce_tools.env.progress import RichInstallReporter

    locked = locked_env(lockfile, "linux-64")
    out = io.StringIO()
    with Progress(console=Console(file=out, force_terminal=True, width=100)) as progress:
        reporter = RichInstallReporter(progress, "test")
        asyncio.run(install(locked.records, target_prefix=tmp_path / "env",
                            cache_dir=tmp_path / "cache", reporter=reporter, show_progress=False))
        task = progress.tasks[0]
        assert task.total == len(locked.records) and task.completed == task.total
    assert "test: done" in out.getvalue()


def test_pip_section_comes_from_the_specs_pip_index(write_spec, wheel: Path, cli, isolated_env_dirs: Path,
                                                    tmp_path: Path, monkeypatch):
    """pip_index (PyTorch's ROCm / XPU wheel index in the curated specs): the pip section is
    installed from that index; the lock keeps it."""
    monkeypatch.delenv("PIP_NO_INDEX")
    index = tmp_path / "index"
    (index / "wml-hello").mkdir(parents=True)
    (index / "wml-hello" / wheel.name).write_bytes(wheel.read_bytes())
    (index / "wml-hello" / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    spec = write_spec(name="idx", extra=f"pip: [wml-hello==0.1]\npip_index: {index.as_uri()}\n")
    cli("env", "lock", spec, "-p", "linux-64", "-f", tmp_path / "idx.yml")
    assert f"wml.pip_index: {index.as_uri()}" in (tmp_path / "idx.yml").read_text()
    res = cli("env", "create", tmp_path / "idx.yml", "--name", "idx", "--no-progress")
    assert "1 pip packages" in res.output
    assert (isolated_env_dirs / "idx" / "bin" / "wml-hello").is_file()
