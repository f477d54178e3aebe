"""The env/module CLI stays cheap to import (`wml --help` must not load the solver stack)."""
from __future__ import annotations

import subprocess
import sys


def test_cli_import_does_not_load_heavy_libraries():
    code = ("import sys, wmlce_tools.env.cli, wmlce_tools.env.activation; "
            "print(sorted(m for m in ('rattler', 'conda_lock', 'conda_pack') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_lists_every_command():
    from env_helpers import Cli

    cli = Cli()
    text = cli("env", "--help").output
    for cmd in ("lock", "create", "clone", "verify", "list", "export", "pack"):
        assert cmd in text
    assert "write" in cli("module", "--help").output
