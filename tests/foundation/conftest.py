"""Fixtures of the foundation tests."""
from __future__ import annotations

import pytest


@pytest.fixture
def program(tmp_path):
    """A training script for the job scripts to run (golden files name it /work/proj/train.py)."""
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p
