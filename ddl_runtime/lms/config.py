"""WML CE's LMS settings (``torch.cuda.set_enabled_lms`` and its twins): no torch import here."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_LIMIT = 0            # WML CE's default; wml: all the memory this process may use
DEFAULT_SIZE = 1 << 20       # WML CE's default: tensors under 1 MB are never swapped


@dataclass
class Settings:
    enabled: bool = False
    limit: int = DEFAULT_LIMIT
    size: int = DEFAULT_SIZE


SETTINGS = Settings()
