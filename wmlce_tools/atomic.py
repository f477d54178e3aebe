"""Files replaced whole: a reader sees the old content or the new, never half of one."""
import json
import os
import tempfile
from pathlib import Path


def write_json_atomic(path: Path, data: dict, indent: int = 2) -> None:
    """Replace ``path`` whole (temp file in the same directory, then rename)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=indent)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` whole with ``text`` (temp file in the same directory, then rename)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
