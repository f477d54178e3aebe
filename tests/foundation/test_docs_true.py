"""What the README and wml's own docstrings say is so (issue 60 item 16): the variables the
README says the Frontier script sets are the ones `wml render --site frontier` writes, and every
``wmlce_tools/...`` or ``ddl_runtime/...`` file the docs point to exists."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _frontier_paragraph() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("$ wml render --site frontier --nodes 2")
    after = text.index("```", start) + len("```\n\n")       # the paragraph after the console block
    return text[after:text.index("\n\n", after)]


def test_the_frontier_sample_names_only_what_the_script_sets(run_wml, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    script = run_wml("render", "--site", "frontier", "--nodes", "2", "-P", "abc123", "-t", "30m", "train.py").stdout
    said = re.findall(r"`([A-Z][A-Z0-9_]+)=([^`\s]+)`", _frontier_paragraph())
    assert said, _frontier_paragraph()
    # the ranks' variables: the script's table of what ddlrun gives every rank ("#     NAME=VALUE  <- page")
    exported = dict(re.findall(r'^#\s+([A-Z][A-Z0-9_]+)=(\S+)  <- ', script, re.M))
    for name, value in said:
        assert exported.get(name) == value or (name, value) in {("NCCL_NET", "Socket")}, \
            f"README: {name}={value}; the script: {exported.get(name)}"
    modules = re.findall(r"^module load (\S+)", script, re.M)
    for word in re.search(r"loads `([^`]+)`", _frontier_paragraph()).group(1).split():
        assert word in modules, (word, modules)


def test_every_file_the_docs_point_to_exists():
    docs = [REPO / "README.md", REPO / "docs" / "ARCHITECTURE.md"]
    docs += sorted((REPO / "wmlce_tools").rglob("*.py")) + sorted((REPO / "ddl_runtime").rglob("*.py"))
    missing = []
    for doc in docs:
        for ref in re.findall(r"\b((?:wmlce_tools|ddl_runtime)/[\w/]+\.py)\b", doc.read_text()):
            if not (REPO / ref).exists():
                missing.append(f"{doc.relative_to(REPO)}: {ref}")
    assert not missing, missing
