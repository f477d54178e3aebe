"""The layering of ddl_runtime and wmlce_tools (pyproject.toml [tool.importlinter], docs/ARCHITECTURE.md
"Layers"): `lint-imports` keeps every contract on the tree as it is, and breaks, naming the import,
when a copy of the tree gets an upward import, a circle, or a wmlce_tools import of a runtime room."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


@pytest.fixture
def tree(tmp_path):
    """A copy of the packages and the contracts, linted on its own (not the installed wml)."""
    for top in ("ddl_runtime", "wmlce_tools"):
        shutil.copytree(REPO / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=120)


def add_line(path: Path, line: str) -> None:
    """`line` after the module's docstring and __future__ import, before its other imports."""
    text = path.read_text()
    anchor = "from __future__ import annotations\n"
    assert anchor in text, path
    path.write_text(text.replace(anchor, anchor + line + "\n", 1))


def test_the_tree_keeps_every_contract(tree):
    result = lint(tree)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_the_layers(tree):
    # the engine reaching up into the collectives
    add_line(tree / "ddl_runtime" / "engine" / "buffers.py", "from ..collectives import ops  # noqa: F401")
    result = lint(tree)
    assert result.returncode != 0
    assert "ddl_runtime: each room imports only the rooms below it BROKEN" in result.stdout
    assert "ddl_runtime.engine.buffers -> ddl_runtime.collectives.ops" in result.stdout


def test_a_lazy_upward_import_breaks_them_too(tree):
    # what runtime.py did before it took hooks: a lazy import of checkpoint/stop.py at init
    runtime = tree / "ddl_runtime" / "state" / "runtime.py"
    text = runtime.read_text()
    anchor = "        for hook in list(_hooks.AT_INIT):\n"
    assert anchor in text
    runtime.write_text(text.replace(anchor, "        from ..checkpoint import stop  # noqa: F401\n" + anchor, 1))
    result = lint(tree)
    assert result.returncode != 0
    assert "ddl_runtime.state.runtime -> ddl_runtime.checkpoint.stop" in result.stdout


def test_a_circle_inside_a_room_breaks_the_acyclic_contract(tree):
    # negotiation.py and negotiated.py importing each other, as they did before
    add_line(tree / "ddl_runtime" / "collectives" / "negotiation.py", "from . import negotiated  # noqa: F401")
    result = lint(tree)
    assert result.returncode != 0
    assert "no two modules of a room import each other, directly or around a" in result.stdout
    assert "BROKEN" in result.stdout and "ddl_runtime.collectives" in result.stdout


def test_wmlce_tools_may_not_import_a_runtime_room(tree):
    add_line(tree / "wmlce_tools" / "ddlrun" / "plan.py", "from ddl_runtime.collectives import ops  # noqa: F401")
    result = lint(tree)
    assert result.returncode != 0
    assert "wmlce_tools uses only ddl_runtime's stated modules BROKEN" in result.stdout
    assert "wmlce_tools.ddlrun.plan -> ddl_runtime.collectives.ops" in result.stdout


def test_ddl_runtime_may_not_import_wmlce_tools(tree):
    add_line(tree / "ddl_runtime" / "core" / "jobenv.py", "import wmlce_tools.layout  # noqa: F401")
    result = lint(tree)
    assert result.returncode != 0
    assert "ddl_runtime never imports wmlce_tools BROKEN" in result.stdout


def test_the_top_of_ddl_runtime_holds_only_its_public_modules():
    top = sorted(p.stem for p in (REPO / "ddl_runtime").glob("*.py"))
    assert len(top) <= 8, top
    assert set(top) <= {"__init__", "__main__", "bench", "errors", "keras", "resnet50", "tensorflow", "timeline",
                        "torch"}, top


def test_an_upward_import_breaks_wmlce_tools_layers(tree):
    # what the job side had before its layers: a scheduler reaching up into the job registry
    add_line(tree / "wmlce_tools" / "schedulers" / "slurm.py", "from ..jobs import registry  # noqa: F401")
    result = lint(tree)
    assert result.returncode != 0
    assert "wmlce_tools: each layer imports only the layers below it BROKEN" in result.stdout
    assert "wmlce_tools.schedulers.slurm -> wmlce_tools.jobs.registry" in result.stdout


def test_a_lazy_upward_import_breaks_wmlce_tools_layers_too(tree):
    # a chain's record reaching up into the submission inside a function (as submission.py
    # and chain/ once imported each other)
    record = tree / "wmlce_tools" / "chain" / "record.py"
    record.write_text(record.read_text() + "\n\ndef _later():\n    from ..runs import submission  # noqa: F401\n")
    result = lint(tree)
    assert result.returncode != 0
    assert "wmlce_tools.chain.record -> wmlce_tools.runs.submission" in result.stdout


def test_each_wmlce_tools_package_says_what_it_may_import():
    for init in sorted((REPO / "wmlce_tools").glob("*/__init__.py")):
        doc = init.read_text().split('"""')[1]
        assert "may import" in doc.lower(), init
