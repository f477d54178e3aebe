"""Every command in the README's shell blocks, from a fresh directory: those that need no cluster
run as written; a submit to a cluster site runs as its --dry-run (the options, the site and the
program are checked as a submit there checks them); the rest are named here with why they are
not run.  A command the README gains is classified here or this test fails.  The output the
README shows under a command that runs here is what it prints (``...`` where lines are left
out); the programs are the clone's own (a newcomer has no train.py); the test suite's figures
are ones that do not go stale."""
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
#: commands that need an env made first
NEEDS_ENV = ("--env ./.venv", "--env my-env")
#: local jobs that train for minutes: run by CI's own steps (the main job) and tests/frameworks
TRAINS = ("examples/train_digits.py", "examples/tf_keras_digits.py", "examples/horovod_keras_digits.py",
          "examples/horovod_torch_digits.py", "ddlrun -n 4", "WML_HOROVOD=1 ddlrun", "ddlrun --horovod -n 4",
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
    if any(s in cmd for s in NEEDS_ENV):
        return "needs a prepared env (wml env create, python -m venv)"
    words = shlex.split(cmd)
    if words[:2] in (["wml", "submit"], ["wml", "sweep"]) and "--dry-run" not in words:
        site = words[words.index("--site") + 1] if "--site" in words else "local"
        if site not in ("local", "local-slurm"):
            return "dry-run"
    if words[0] in ("wml", "ddlrun") and ("--dry-run" in words or words[:2] == ["wml", "render"]):
        return "run"
    if any(s in cmd for s in TRAINS):
        return "a local job that trains (minutes)"
    if words[:2] in (["wml", "submit"], ["wml", "sweep"]):
        return "a local job"
    if words[0] in ("wml", "ddlrun"):
        return "run"
    return "not a wml command"


COMMANDS = list(dict.fromkeys(readme_commands()))


def readme_samples():
    """{command: the output lines the README shows under it} for the console blocks, up to a
    command of NOT_HERE in the block (after ``eval "$(scripts/local-slurm env)"`` the commands
    see a Slurm cluster)."""
    text = (ROOT / "README.md").read_text()
    out = {}
    for body in re.findall(r"```console\n(.*?)```", text, re.S):
        cmd = None
        for line in re.sub(r"\\\n\s*", " ", body).splitlines():
            if line.startswith("$ "):
                cmd = re.split(r"\s{2,}#|\s#\s", line[2:])[0].strip()
                if any(cmd.startswith(start) for start in NOT_HERE):
                    break
            elif cmd is not None:
                out.setdefault(cmd, []).append(line)
    return out


SAMPLES = readme_samples()
#: where the README's examples live: a clone at /home/me/wml, its venv inside
README_PATHS = ("/home/me/wml/.venv", "/home/me/wml")


def as_in_readme(text: str, cwd: Path) -> str:
    """Real output with this machine's paths spelled as the README spells them."""
    for path, name in ((sys.prefix, README_PATHS[0]), (str(ROOT), README_PATHS[1]), (str(cwd), README_PATHS[1])):
        text = text.replace(path, name)
    return text


def check_sample(sample, real):
    """Each line the README shows is a real line (one that ends in " ..." the start of one), in
    order; a line "..." stands for lines left out, and only there are lines left out."""
    pos, gap = 0, False
    for line in sample:
        line = re.split(r"\s{2,}#\s", line)[0].rstrip()      # the README's note after a line
        if line == "...":
            gap = True
            continue
        head = line[:-4] if line.endswith(" ...") else None
        at = next((k for k in range(pos, len(real))
                   if (real[k].startswith(head) if head is not None else real[k] == line)), None)
        assert at is not None, f"README shows {line!r}, which is not in the output (after line {pos}):\n" + \
            "\n".join(real)
        assert gap or at == pos, f"README leaves out lines before {line!r} without a '...': {real[pos:at]}"
        pos, gap = at + 1, False
    assert gap or pos == len(real), f"README leaves out the last lines without a '...': {real[pos:]}"


@pytest.fixture
def fresh(tmp_path, isolated_env):
    """A directory as a user has it after the README's install: the programs it names."""
    for name in ("examples", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
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
    if cmd in SAMPLES and how(cmd) == "run":
        check_sample(SAMPLES[cmd], as_in_readme(proc.stdout, cwd).splitlines())


def test_a_job_scripts_lines_are_shown_under_a_command_that_prints_them():
    """``wml submit`` to a cluster prints what the scheduler said, not the script: the README
    shows script lines under ``wml render`` or ``--dry-run``, whose output is checked above."""
    for cmd, sample in SAMPLES.items():
        if how(cmd) == "dry-run":
            assert not any(line.startswith("#") for line in sample), f"README: $ {cmd}\n" + "\n".join(sample)


def test_the_test_suites_figures_do_not_go_stale():
    """No test count or measured time in the README (they were stale within a day); the bound
    it gives is the one CI (.ci/run) enforces."""
    text = (ROOT / "README.md").read_text()
    para = text[text.index("bash scripts/test\n```"):text.index("---")]
    assert not re.search(r"\b\d[\d,]* tests\b|\b\d[\d,]* s\b", para), para
    bound = re.search(r"under (\d+) minutes", para, re.I)
    assert bound, para
    assert f"limit_min={bound.group(1)}" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("apt-get") is None, reason="scripts/test unpacks as root with apt")
def test_scripts_test_unpacks_a_package_without_apts_root_warning(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "unpack-deb"), "environment-modules", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "unsandboxed" not in proc.stderr and proc.stderr.strip() == "", proc.stderr
    assert list((tmp_path / "d").rglob("modulecmd.tcl"))
