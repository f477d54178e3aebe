"""Every ``wml`` command starts fast (issue 60 item 15): none imports numpy, torch, TensorFlow or
the runtime's checkpointing (``ddl_runtime.checkpoint``'s saving and loading, which pull numpy).
A command that makes no chain does not import ``ddl_runtime.checkpoint`` at all; one that does
(``--chain N``) reads only the names job and runtime share (``ddl_runtime.checkpoint.protocol``).
Each command runs as a user runs it, in its own interpreter, and names the modules it had
imported when it ended."""
from __future__ import annotations

import json
import sys

import pytest

#: runs ``python -m wmlce_tools ARGS...`` and writes the modules imported by the end to $WML_TEST_MODULES
DRIVER = """\
import atexit, json, os, runpy, sys
out = os.environ.pop("WML_TEST_MODULES")
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["wml", *sys.argv[1:]]
runpy.run_module("wmlce_tools", run_name="__main__", alter_sys=True)
"""

HEAVY = ("numpy", "torch", "tensorflow", "keras", "ddl_runtime.checkpoint.saving", "ddl_runtime.checkpoint.store",
         "ddl_runtime.checkpoint.rng", "ddl_runtime.checkpoint.torch", "ddl_runtime.checkpoint.tensorflow",
         "ddl_runtime.checkpoint.keras", "ddl_runtime.checkpoint.variables", "ddl_runtime.checkpoint.boundary")

COMMANDS = [
    ("--help",),
    ("render", "--site", "summit", "--nodes", "18", "-P", "abc", "train.py"),
    ("render", "--nodes", "2", "train.py"),
    ("render", "--site", "frontier", "-N", "2", "-A", "abc", "-t", "2h", "--chain", "3", "train.py"),
    ("submit", "--dry-run", "--site", "theta", "--nodes", "128", "train.py"),
    ("submit", "--dry-run", "--site", "polaris", "-A", "abc", "-t", "1h", "--chain", "2", "train.py"),
    ("submit", "--site", "local", "train.py"),
    ("sweep", "run", "--dry-run", "--site", "perlmutter", "-A", "abc", "--param", "lr=1,2", "train.py", "{lr}"),
    ("jobs",),
    ("site", "list"),
    ("site", "show", "frontier"),
    ("env", "specs"),
    ("report", "--help"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a)[:60])
def test_a_command_imports_nothing_heavy_it_does_not_need(args, isolated_env, tmp_path):
    import subprocess

    (tmp_path / "train.py").write_text("print('trained')\n")
    (tmp_path / "driver.py").write_text(DRIVER)
    modules_file = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), *args], cwd=tmp_path,
                          env={**isolated_env, "WML_TEST_MODULES": str(modules_file)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    modules = json.loads(modules_file.read_text())
    heavy = HEAVY if "--chain" in args else (*HEAVY, "ddl_runtime.checkpoint")
    heavy = [m for m in modules if m in heavy or m.startswith(tuple(h + "." for h in heavy))]
    assert not heavy, f"wml {' '.join(args)} imported {', '.join(heavy[:8])}"


def test_job_options_annotations_are_evaluated_once(tmp_path):
    """JobOptions' annotations (37 fields, each a typer.Option) are evaluated once for the whole
    command line, not once per field (which took 0.4-0.5 s of every start)."""
    import subprocess

    probe = """\
import typing
calls = []
real = typing.get_type_hints
def counted(obj, *a, **k):
    calls.append(getattr(obj, "__name__", repr(obj)))
    return real(obj, *a, **k)
typing.get_type_hints = counted
import wmlce_tools.cli as cli
from wmlce_tools.options import JobOptions
cli.app  # the commands, each with the job options
JobOptions(nodes=2, module=["a"])
print(calls.count("JobOptions"))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) <= 1
