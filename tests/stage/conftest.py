"""Fixtures of the staging tests: a real conda env (tests/helpers/stage_env.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers.stage_env import make_env


@pytest.fixture(scope="session")
def shared_env(tmp_path_factory) -> Path:
    """The env on the "shared file system" (a session-wide one: tests must not change it)."""
    return make_env(tmp_path_factory.mktemp("shared"))
