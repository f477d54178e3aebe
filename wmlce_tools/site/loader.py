"""Read a site YAML file into a validated ``SiteProfile``; errors name file, line and key."""
from __future__ import annotations

import glob
from functools import lru_cache
import os
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml
from pydantic import ValidationError

from ..errors import WmlError
from .schema import SiteProfile


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SiteFileError(WmlError):
    """A site YAML file that does not follow the schema."""


def _line_of(node: Optional[yaml.Node], loc: Sequence[Any]) -> Optional[int]:
    """Follow ``loc`` (a pydantic error location) through the composed YAML; return the
    1-based line of the deepest node found."""
    line = node.start_mark.line + 1 if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == str(key):
                    line = k.start_mark.line + 1
                    node = v
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _format_validation(path: Path, root: Optional[yaml.Node], err: ValidationError) -> str:
    first = err.errors()[0]
    loc = [p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-after"))]
    key = ".".join(str(p) for p in loc) or "(top level)"
    line = _line_of(root, loc)
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    more = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"{path}:{line}: {key}: {msg}{more}"


def load_site_file(path: str | os.PathLike) -> SiteProfile:
    """Load and validate one site file (cached while the file is unchanged)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return _load(p, 0, 0)
    return _load(p, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=256)
def _load(p: Path, _mtime_ns: int, _size: int) -> SiteProfile:
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SiteFileError(f"{p}: no such site file") from None
    except OSError as e:
        raise SiteFileError(f"{p}: cannot read: {e.strerror}") from None
    try:
        root = yaml.compose(text, Loader=_Loader)
        data = yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else "?"
        raise SiteFileError(f"{p}:{line}: invalid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise SiteFileError(f"{p}: invalid YAML: {e}") from None
    if not isinstance(data, dict):
        raise SiteFileError(f"{p}:1: a site file must be a mapping of keys (name, scheduler, node, ...)")
    try:
        profile = SiteProfile.model_validate(data)
    except ValidationError as e:
        raise SiteFileError(_format_validation(p, root, e)) from None
    return profile


def site_files(directory: str | os.PathLike) -> list[Path]:
    return sorted(Path(f) for f in glob.glob(os.path.join(os.fspath(directory), "*.y*ml")))
