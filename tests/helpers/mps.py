"""The MPS tests' stand-in ``nvidia-cuda-mps-control`` (tests/ddlrun/programs/fake_mps_control.py)
put on PATH, and the journal it and the ranks (tests/ddlrun/programs/mps_rank.py) write."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

PROGRAMS = Path(__file__).resolve().parents[1] / "ddlrun" / "programs"
FAKE_CONTROL = PROGRAMS / "fake_mps_control.py"
MPS_RANK = PROGRAMS / "mps_rank.py"


def fake_mps_bin(where: Path) -> Path:
    """A directory holding ``nvidia-cuda-mps-control``: the stand-in, run by this interpreter."""
    bindir = where / "fake-mps-bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "nvidia-cuda-mps-control"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_CONTROL} \"$@\"\n")
    exe.chmod(0o755)
    return bindir


def short_place() -> str:
    """A node-local place with a short path (a UNIX socket's path has at most 107 bytes)."""
    return tempfile.mkdtemp(prefix="wmlmps", dir="/tmp")


def journal(path: Path) -> List[Dict]:
    """Every entry, in time order."""
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(entries, key=lambda e: e["t"])


def kinds(entries: List[Dict]) -> List[str]:
    """start, ask:<command> (the client), rank, in order (the daemon's own lines left out)."""
    out = []
    for e in entries:
        if e["event"] == "start":
            out.append("start")
        elif e["event"] == "client":
            out.append(f"ask:{e['cmd']}")
        elif e["event"] == "rank":
            out.append("rank")
    return out


def env_for(bindir: Path, journal_path: Path, place: str, **extra: str) -> Dict[str, str]:
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "FAKE_MPS_JOURNAL": str(journal_path),
            "WML_STAGE_PLACE": place, **extra}
