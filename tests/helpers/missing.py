"""A test that needs a tool this machine lacks: skipped here, a failure in CI (``CI`` set), where
scripts/test installs every such tool, so that a missing install step cannot hide behind a skip."""
from __future__ import annotations

import os

import pytest


def skip_unless_ci(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI: {reason}")
    pytest.skip(reason)
