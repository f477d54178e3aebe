"""Every command in the README's shell blocks, from a fresh directory: those that need no cluster
run as written; a submit to a cluster site runs as its --dry-run (the options, the site and the
program are checked as a submit there checks them); the rest are named here with why they are
not run.  A command the README gains is classified here or this test fails."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

#: commands not run here, by the words they start with, and why
NOT_HERE = {
    "python3 -m venv": "the install itself (scripts/test and CI do it)",
    "bash scripts/test": "the whole test suite",
    "pip install": "an install",
    "scripts/local-slurm": "starts a real Slurm (tests/slurm do)",
    'eval "$(scripts/local-slurm env)"': "needs scripts/local-slurm started",
    "cd ../shared": "Horovod's suites live outside a clone (README says so)",
    "ddlrun --horovod -n 2 python -m pytest": "Horovod's suites live outside a clone",
    "wml env ": "builds conda envs from channels (tests/env do, offline)",
    "wml module write my-env": "needs the env made above",
    "wml status ": "a job id of the submit above",
    "wml logs ": "a job id of the submit above",
    "wml cancel ": "a job id of the submit above",
}
#: local jobs that train for minutes: run by CI's own steps (the main job) and tests/frameworks
SLOW = ("examples/train_digits.py", "examples/tf_keras_digits.py", "examples/horovod_keras_digits.py",
        "ddlrun -n 4", "WML_HOROVOD=1 ddlrun", "ddlrun --horovod -n 4", "--env ./.venv", "--env my-env",
        "--site local-slurm", "tests/jobs/programs/ddl_check.py")


def readme_commands():
    text = (ROOT / "README.md").read_text()
    for lang, body in re.findall(r"```(bash|console|sh)\n(.*?)```", text, re.S):
        body = re.sub(r"\\\n\s*", " ", body)          # a command continued on the next line
        for line in body.splitlines():
            cmd = line[2:] if line.startswith("$ ") else (line if lang != "console" else "")
            cmd = re.split(r"\s{2,}#|\s#\s", cmd)[0].strip()
            if cmd and not cmd.startswith("#"):
                yield cmd


def how(cmd: str):
    """'run', 'dry-run', or why it is not run here."""
    for start, why in NOT_HERE.items():
        if cmd.startswith(start):
            return why
    if "..." in cmd or re.search(r"\bRUN\b", cmd):
        return "a placeholder in the text (...: the options above; RUN: a sweep's id)"
    if "grid.yaml" in cmd:
        return "needs the grid.yaml the text shows"
    if any(s in cmd for s in SLOW):
        return "a local job that trains (minutes) or needs a prepared env"
    words = shlex.split(cmd)
    if words[:2] in (["wml", "submit"], ["wml", "sweep"]) and "--dry-run" not in words:
        site = words[words.index("--site") + 1] if "--site" in words else "local"
        return "dry-run" if site not in ("local", "local-slurm") else "a local job"
    if words[0] in ("wml", "ddlrun"):
        return "run"
    return "not a wml command"


COMMANDS = list(dict.fromkeys(readme_commands()))


@pytest.fixture
def fresh(tmp_path, isolated_env):
    """A directory as a user has it after the README's install: the programs it names."""
    for name in ("examples", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    for prog in ("train.py", "train_hvd.py"):
        (tmp_path / prog).write_text("print('hi')\n")
    shutil.copy(ROOT / "site_configs" / "slurm-gpu.yaml", tmp_path / "mysite.yaml")
    env = dict(isolated_env)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return tmp_path, env


def test_every_readme_command_is_classified():
    assert len(COMMANDS) > 30
    for cmd in COMMANDS:
        assert how(cmd) in ("run", "dry-run") or isinstance(how(cmd), str)


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if how(c) in ("run", "dry-run")])
def test_readme_command_runs(cmd, fresh):
    cwd, env = fresh
    words = shlex.split(cmd)
    if how(cmd) == "dry-run":
        words.insert(2, "--dry-run")
    exe = [sys.executable, "-m", "wmlce_tools"] if words[0] == "wml" else \
        [sys.executable, "-c", "from wmlce_tools.ddlrun.cli import main; main()"]
    proc = subprocess.run([*exe, *words[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"README: $ {cmd}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
