"""What wml remembers about an env it made: ``<prefix>/conda-meta/wml/env.json`` (a venv:
``<prefix>/share/wml/env.json``).

It lives in a subdirectory so that tools reading ``conda-meta/*.json`` as package records
(conda, rattler) never see it.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class EnvInfo(BaseModel):
    name: str
    platform: str
    source: str = ""                      # spec or lockfile it came from
    imports: list[str] = Field(default_factory=list)
    pip: list[str] = Field(default_factory=list)
    cloned_from: str | None = None
    pip_not_reproduced: list[str] = Field(default_factory=list)

    @staticmethod
    def path(prefix: Path) -> Path:
        """``conda-meta/wml/env.json``; in a virtualenv (no conda-meta) ``share/wml/env.json``."""
        if (prefix / "pyvenv.cfg").is_file() and not (prefix / "conda-meta").is_dir():
            return prefix / "share" / "wml" / "env.json"
        return prefix / "conda-meta" / "wml" / "env.json"

    def write(self, prefix: Path) -> None:
        p = self.path(prefix)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.model_dump_json(indent=2) + "\n")

    @classmethod
    def read(cls, prefix: Path) -> "EnvInfo | None":
        p = cls.path(prefix)
        if not p.is_file():
            return None
        try:
            return cls.model_validate_json(p.read_text())
        except ValueError:
            return None


def lockfile_copy(prefix: Path) -> Path:
    return prefix / "conda-meta" / "wml" / "conda-lock.yml"
