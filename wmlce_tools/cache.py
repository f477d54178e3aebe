"""wml's cache directory (``$WML_CACHE_DIR``, else ``$XDG_CACHE_HOME/wml``, else
``~/.cache/wml``): parsed site profiles and compiled job templates, so that ``wml render`` does
not re-read YAML or re-compile Jinja on every call.  Everything here can be deleted at any
time; a cache that cannot be written is simply not used."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

from ._version import __version__


def cache_dir(create: bool = True) -> Optional[Path]:
    base = os.environ.get("WML_CACHE_DIR")
    if base:
        d = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        d = (Path(xdg) if xdg else Path.home() / ".cache") / "wml"
    d = d / __version__
    if create:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
    return d


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (readers never see half a file); errors are ignored."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)  # type: ignore[possibly-undefined]
        except (OSError, NameError):
            pass
