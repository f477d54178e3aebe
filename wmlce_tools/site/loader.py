"""Read a site YAML file into a validated ``SiteProfile``; errors name file, line and key."""
from __future__ import annotations

import glob
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import msgspec

from .. import plugins
from ..cache import cache_dir, write_atomically
from ..errors import WmlError
from .schema import SiteProfile, to_builtins

# yaml is imported only when a file must really be parsed: validated profiles are kept in
# wml's cache (as JSON, keyed by path, mtime and size), which keeps `wml render` fast.


class SiteFileError(WmlError):
    """A site YAML file that does not follow the schema."""


def _line_of(node: Any, loc: Sequence[Any]) -> Optional[int]:
    """Follow ``loc`` (keys and list indexes) through the composed YAML; return the
    1-based line of the deepest node found."""
    import yaml

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


def _format_validation(path: Path, root: Any, err: msgspec.ValidationError) -> str:
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


def _schema_stamp() -> list:
    """The schema's source file (mtime, size): a profile cached under another schema would
    carry that schema's defaults, so a changed schema empties the cache."""
    from . import schema

    try:
        st = Path(schema.__file__).stat()
        return [st.st_mtime_ns, st.st_size]
    except OSError:
        return []


class _ProfileCache:
    """Validated profiles on disk: {"schema": stamp, "entries": {path: [mtime_ns, size,
    profile as JSON data]}}."""

    def __init__(self) -> None:
        d = cache_dir()
        self.path = d / "site-profiles.json" if d else None
        self.entries: Dict[str, list] = {}
        self.schema = _schema_stamp()
        self.dirty = False
        if self.path is not None and self.path.exists():
            try:
                data = msgspec.json.decode(self.path.read_bytes())
            except (OSError, msgspec.DecodeError):
                data = {}
            if isinstance(data, dict) and data.get("schema") == self.schema and isinstance(data.get("entries"), dict):
                self.entries = data["entries"]

    def get(self, p: Path, stamp: Tuple[int, int]) -> Optional[SiteProfile]:
        e = self.entries.get(str(p))
        if e is None or (e[0], e[1]) != stamp:
            return None
        try:
            return msgspec.convert(e[2], SiteProfile)
        except msgspec.ValidationError:  # written by another wml version
            return None

    def put(self, p: Path, stamp: Tuple[int, int], profile: SiteProfile) -> None:
        self.entries[str(p)] = [stamp[0], stamp[1], to_builtins(profile)]
        self.dirty = True

    def flush(self) -> None:
        if self.dirty and self.path is not None:
            write_atomically(self.path, msgspec.json.encode({"schema": self.schema, "entries": self.entries}))
            self.dirty = False


@lru_cache(maxsize=1)
def _profile_cache() -> _ProfileCache:
    return _ProfileCache()


def load_site_file(path: str | os.PathLike, use_cache: bool = True) -> SiteProfile:
    """Load and validate one site file (from wml's cache while the file is unchanged)."""
    p = Path(path).absolute()
    try:
        st = p.stat()
    except OSError:
        return _parse(p)
    stamp = (st.st_mtime_ns, st.st_size)
    if not use_cache:
        return _parse(p)
    cache = _profile_cache()
    profile = cache.get(p, stamp)
    if profile is None:
        profile = _parse(p)
        cache.put(p, stamp, profile)
    return profile


def flush_cache() -> None:
    _profile_cache().flush()


def _parse(p: Path) -> SiteProfile:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SiteFileError(f"{p}: no such site file") from None
    except OSError as e:
        raise SiteFileError(f"{p}: cannot read: {e.strerror}") from None
    try:
        root = yaml.compose(text, Loader=loader)
        data = yaml.load(text, Loader=loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else "?"
        raise SiteFileError(f"{p}:{line}: invalid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise SiteFileError(f"{p}: invalid YAML: {e}") from None
    if not isinstance(data, dict):
        raise SiteFileError(f"{p}:1: a site file must be a mapping of keys (name, scheduler, node, ...)")
    for kind in ("scheduler", "launcher"):   # names: wml's own or a plugin's, known only at run time
        name = data.get(kind)
        if isinstance(name, str) and not plugins.known(kind, name):
            raise SiteFileError(f"{p}:{_line_of(root, [kind])}: {kind}: {plugins.unknown_message(kind, name)}")
    try:
        return msgspec.convert(data, SiteProfile)
    except msgspec.ValidationError as e:
        raise SiteFileError(_format_validation(p, root, e)) from None


def site_files(directory: str | os.PathLike) -> list[Path]:
    return sorted(Path(f) for f in glob.glob(os.path.join(os.fspath(directory), "*.y*ml")))
