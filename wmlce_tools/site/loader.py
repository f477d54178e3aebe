"""Read a site YAML file into a validated ``SiteProfile``; errors name file, line and key."""
from __future__ import annotations

import glob
import re
from functools import lru_cache
import os
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml
import msgspec

from ..errors import WmlError
from .schema import SiteProfile


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SiteFileError(WmlError):
    """A site YAML file that does not follow the schema."""


def _line_of(node: Optional[yaml.Node], loc: Sequence[Any]) -> Optional[int]:
    """Follow ``loc`` (keys and list indexes) through the composed YAML; return the
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


_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"unknown field `(?P<key>[^`]+)`")


def _format_validation(path: Path, root: Optional[yaml.Node], err: msgspec.ValidationError) -> str:
    m = _AT.match(str(err))
    msg, raw = m.group("msg"), m.group("path") or ""
    loc: list[Any] = []
    for key, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", raw):  # `$.queues.batch.walltime_bins[0]`
        loc.append(key if key else int(index))
    unknown = _UNKNOWN.search(msg)
    if unknown:
        loc.append(unknown.group("key"))
        msg = "unknown key"
    key = ".".join(str(p) for p in loc) or "(top level)"
    return f"{path}:{_line_of(root, loc)}: {key}: {msg}"


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
        profile = msgspec.convert(data, SiteProfile)
    except msgspec.ValidationError as e:
        raise SiteFileError(_format_validation(p, root, e)) from None
    return profile


def site_files(directory: str | os.PathLike) -> list[Path]:
    return sorted(Path(f) for f in glob.glob(os.path.join(os.fspath(directory), "*.y*ml")))
