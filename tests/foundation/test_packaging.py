"""What a non-editable `pip install .` ships: every Python package, and the data the CLI reads."""
from __future__ import annotations

import os
from pathlib import Path

from setuptools import find_packages

REPO = Path(__file__).resolve().parents[2]


def test_every_source_directory_is_a_package_that_setup_ships():
    shipped = set(find_packages(where=str(REPO), include=["wmlce_tools", "wmlce_tools.*", "ddl_runtime", "ddl_runtime.*"]))
    for top in ("wmlce_tools", "ddl_runtime"):
        for d in (REPO / top).rglob("*"):
            if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py")):
                name = ".".join(d.relative_to(REPO).parts)
                assert name in shipped, f"{name} has modules but no __init__.py: pip install . would leave it out"


def test_data_directories_are_mapped_into_the_package():
    setup_text = (REPO / "setup.py").read_text()
    for data in ("templates", "site_configs", "env_specs"):
        assert f'"wmlce_tools.{data}": "{data}"' in setup_text
        assert (REPO / data / "__init__.py").exists()


def test_env_commands_without_the_env_extra_say_what_to_install(run_wml, monkeypatch, tmp_path):
    """`wml env` with py-rattler missing: one line naming the extra, not a traceback."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "rattler.py").write_text("raise ModuleNotFoundError(\"No module named 'rattler'\", name='rattler')\n")
    spec = REPO / "env_specs" / "wml-runtime.yaml"
    proc = run_wml("env", "lock", str(spec), env={"PYTHONPATH": f"{blocker}{os.pathsep}{REPO}"})   # this checkout's wml
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "pip install '.[env]'" in proc.stderr
