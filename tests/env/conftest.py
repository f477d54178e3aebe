"""Fixtures for the ``wml env`` tests: a real local conda channel, built offline, and envs."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from env_helpers import Cli  # noqa: E402
from local_channel import build_channel, build_wheel  # noqa: E402



@pytest.fixture(scope="session")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_channel(tmp_path_factory.mktemp("channel") / "wmltest")


@pytest.fixture(scope="session")
def channel_url(channel: Path) -> str:
    return channel.as_uri()


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def second_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another wheel, to install the way an index install happens (no direct_url.json)."""
    return build_wheel(tmp_path_factory.mktemp("wheel2"), name="wml_extra", version="1.2")


@pytest.fixture(scope="session")
def pkgs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pkgs")


@pytest.fixture(autouse=True)
def isolated_env_dirs(tmp_path: Path, pkgs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    envs = tmp_path / "wml-envs"
    monkeypatch.setenv("WML_ENVS_DIR", str(envs))
    monkeypatch.setenv("WML_PKGS_DIR", str(pkgs_dir))
    monkeypatch.setenv("CONDA_ENVS_PATH", str(tmp_path / "conda-envs"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.delenv("CONDA_ROOT", raising=False)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: pip must never wait on a network
    return envs


SPEC_TEMPLATE = """\
name: {name}
version: "0.1"
channels:
  - {channel}
platforms: [linux-64, linux-ppc64le]
virtual_packages:
  __glibc: "2.28"
packages:
  - wml-greet
  - wml-pyutil
  - python 3.11.*        # [linux64]
  - python               # [ppc64le]
  - {{spec: "wml-base >=2", platforms: [linux-64, linux-ppc64le]}}
{extra}imports: [wml_conda_owned, wml_pyutil]
"""


@pytest.fixture
def write_spec(tmp_path: Path, channel_url: str):
    def write(name: str = "fixture", extra: str = "", channel: str | None = None,
              filename: str | None = None) -> Path:
        path = tmp_path / (filename or f"{name}.yaml")
        path.write_text(SPEC_TEMPLATE.format(name=name, channel=channel or channel_url,
                                             extra=textwrap.dedent(extra)))
        return path
    return write


@pytest.fixture
def spec_file(write_spec) -> Path:
    return write_spec()


@pytest.fixture
def cli() -> Cli:
    return Cli()


@pytest.fixture
def lockfile(tmp_path: Path, spec_file: Path, cli: Cli) -> Path:
    out = tmp_path / "conda-lock.yml"
    cli("env", "lock", spec_file, "--lockfile", out)
    return out


@pytest.fixture
def created_env(lockfile: Path, cli: Cli, isolated_env_dirs: Path) -> Path:
    cli("env", "create", lockfile, "--name", "src", "--no-progress")
    return isolated_env_dirs / "src"
