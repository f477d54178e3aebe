"""Helpers shared by the tests/env test modules (imported by name, not via conftest)."""
from __future__ import annotations

import os
import subprocess
import sys

from typer.testing import CliRunner

from wmlce_tools.env.cli import _standalone


class Cli:
    """Runs the env/module typer apps in-process (CliRunner)."""

    def __init__(self) -> None:
        self.app = _standalone()
        self.runner = CliRunner()

    def __call__(self, *args: str, ok: bool = True):
        result = self.runner.invoke(self.app, [str(a) for a in args])
        if ok and result.exit_code != 0:
            raise AssertionError(f"wml {' '.join(map(str, args))} failed ({result.exit_code}):\n"
                                 f"{result.output}\n{result.exception!r}")
        return result



def run_wml(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    """The standalone CLI in a real subprocess (what a user sees, exit status included)."""
    return subprocess.run([sys.executable, "-m", "wmlce_tools.env.cli", *map(str, args)],
                          capture_output=True, text=True, env=env or dict(os.environ), **kw)
