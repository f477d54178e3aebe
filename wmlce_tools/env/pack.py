"""``wml env pack``: conda-pack an env into a relocatable archive (or directory)."""
from __future__ import annotations

from pathlib import Path

from wmlce_tools.errors import WmlError

FORMATS = ("infer", "tar.gz", "tgz", "tar.bz2", "tbz2", "tar.xz", "txz", "tar", "zip", "squashfs",
           "no-archive")


def pack_env(prefix: Path, output: Path, fmt: str = "infer", dest_prefix: str | None = None,
             force: bool = False) -> Path:
    import conda_pack

    if fmt not in FORMATS:
        raise WmlError(f"unknown pack format {fmt!r} (one of {', '.join(FORMATS)})")
    output = Path(output).absolute()
    if output.exists() and not force:
        raise WmlError(f"{output} already exists (use --force to replace it)")
    if not output.parent.is_dir():
        raise WmlError(f"cannot write {output}: {output.parent} does not exist")
    try:
        conda_pack.pack(prefix=str(prefix), output=str(output), format=fmt,
                        dest_prefix=dest_prefix, force=force, verbose=False,
                        ignore_missing_files=False)
    except conda_pack.CondaPackException as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        text = " ".join(lines[:5])
        raise WmlError(f"conda-pack: {text[:300]}") from None
    return output
