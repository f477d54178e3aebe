"""A real conda env for the staging tests (tests/stage, tests/slurm): ``wml env create`` from the
offline local channel (tests/env/local_channel.py), with a text file and a script naming its
prefix (relocated on the node) and a small Python package the programs import."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "env"))
from local_channel import build_channel  # noqa: E402

SPEC = """\
name: stagetest
version: "0.1"
channels:
  - {channel}
platforms: [linux-64]
virtual_packages:
  __glibc: "2.28"
packages:
  - wml-greet
  - wml-pyutil
  - python 3.11.*
  - wml-base >=2
"""


def make_env(root: Path, name: str = "stagetest", bulk_files: int = 0) -> Path:
    channel = build_channel(root / "channel" / "wmltest")
    spec = root / f"{name}.yaml"
    spec.write_text(SPEC.format(channel=channel.as_uri()))
    env = dict(os.environ, WML_ENVS_DIR=str(root / "envs"), WML_PKGS_DIR=str(root / "pkgs"))
    subprocess.run([sys.executable, "-m", "wmlce_tools", "env", "create", str(spec), "--name", name,
                    "--no-progress"], check=True, env=env, capture_output=True, timeout=300)
    prefix = root / "envs" / name
    site = next((prefix / "lib").glob("python3*")) / "site-packages"
    pkg = site / "stagedpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import os\nHERE = os.path.dirname(__file__)\n")
    (prefix / "etc" / "where.txt").write_text(f"installed in {prefix}\n")
    script = prefix / "bin" / "stage-hello"
    script.write_text(f"#!{prefix}/bin/python\nimport sys\nprint('hello from', sys.prefix)\n")
    script.chmod(0o755)
    for i in range(bulk_files):          # an env big enough to be caught mid-unpack
        d = site / "bulk" / f"d{i // 500}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.py").write_bytes(os.urandom(2048))
    return prefix
