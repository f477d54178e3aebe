"""How package files get from the package cache into an env, and how the cache is checked.

py-rattler installs from a package cache of extracted packages.  By default it hard-links the
cached files into the env, so an edit made in place in one env changes the cache, and with it
every env created afterwards (and every env already linked to the same file).  Two guards:

- **Link policy** (``--link`` on ``wml env create``/``clone``/``repair``, setting
  ``WML_ENV_LINK``), handed to rattler through its ``Config`` (``allow-hard-links``,
  ``allow-ref-links``):

  ``auto`` (default)  hard links (or reflinks, where the filesystem has them) when the env is
                      on a local filesystem; **copies** when it is on a shared/network
                      filesystem (NFS, Lustre, GPFS, BeeGFS, CephFS, CIFS, ...) -- there an
                      env is used from many nodes and outlives caches -- and, as rattler does
                      anyway, when the env and the cache are on different filesystems;
  ``hardlink``        hard links wherever possible (least disk and time; edits are shared);
  ``reflink``         copy-on-write clones (btrfs, XFS); plain copies where not supported;
  ``copy``            always copies: envs never share a file with the cache.

- **Cache check** (setting ``WML_CACHE_CHECK``): rattler's ``PackageCache`` validation of every
  cached package the install uses, before linking.  ``full`` (default) hashes each cached file
  against the package's ``paths.json`` and re-extracts a damaged package from its archive;
  ``fast`` checks only that the files exist; ``skip`` trusts the cache.  The cost of ``full``
  is in BENCHMARKS.md ("Package cache check").
"""
from __future__ import annotations

import enum
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from wmlce_tools.errors import WmlError

#: filesystem types (``stat -f -c %T``) shared between nodes: ``auto`` copies there
SHARED_FS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cifs", "smb", "smb2", "afs", "panfs",
             "fuse.glusterfs", "glusterfs", "fuse.sshfs", "9p", "wekafs", "fuse.dvs", "dvs")


class LinkPolicy(str, enum.Enum):
    auto = "auto"
    hardlink = "hardlink"
    reflink = "reflink"
    copy = "copy"


CACHE_CHECKS = ("full", "fast", "skip")


@dataclass(frozen=True)
class LinkChoice:
    """What the install will do, and why (said by ``wml env create -v`` and in errors)."""

    policy: LinkPolicy          # the resolved policy: never auto
    reason: str


def link_policy(flag: Optional[str] = None) -> LinkPolicy:
    """``--link`` > ``WML_ENV_LINK`` > auto.  Also checks ``WML_CACHE_CHECK`` (read later, at
    install time), so that a bad value of either fails before any solve or download."""
    cache_check()
    raw = flag if flag is not None else os.environ.get("WML_ENV_LINK", "")
    where = "--link" if flag is not None else "WML_ENV_LINK"
    if not raw:
        return LinkPolicy.auto
    try:
        return LinkPolicy(raw.strip().lower())
    except ValueError:
        raise WmlError(f"{where}={raw!r}: expected one of {', '.join(p.value for p in LinkPolicy)}") from None


def cache_check() -> str:
    raw = os.environ.get("WML_CACHE_CHECK", "").strip().lower() or "full"
    if raw not in CACHE_CHECKS:
        raise WmlError(f"WML_CACHE_CHECK={os.environ['WML_CACHE_CHECK']!r}: expected one of {', '.join(CACHE_CHECKS)}")
    return raw


def fs_type(path: Path) -> str:
    """The filesystem type name of ``path`` (or its nearest existing parent), '' if unknown."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        out = subprocess.run(["stat", "-f", "-c", "%T", str(p)], capture_output=True, text=True, timeout=10,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _device(path: Path) -> Optional[int]:
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return os.stat(p).st_dev
    except OSError:
        return None


def choose(policy: LinkPolicy, target: Path, cache: Path) -> LinkChoice:
    """Resolve ``auto`` for an env at ``target`` installed from ``cache``."""
    if policy != LinkPolicy.auto:
        return LinkChoice(policy, f"--link/WML_ENV_LINK {policy.value}")
    kind = fs_type(target.parent)
    if kind and (kind in SHARED_FS or kind.split(".")[-1] in SHARED_FS):
        return LinkChoice(LinkPolicy.copy, f"{target.parent} is on a shared filesystem ({kind})")
    dev_t, dev_c = _device(target.parent), _device(cache)
    if dev_t is not None and dev_c is not None and dev_t != dev_c:
        return LinkChoice(LinkPolicy.copy, f"{target.parent} and the package cache {cache} are on different filesystems")
    return LinkChoice(LinkPolicy.hardlink, "env and package cache share a local filesystem")


def default_cache_dir() -> Path:
    """Where rattler keeps extracted packages when WML_PKGS_DIR is not set (rattler's own
    default: ``$RATTLER_CACHE_DIR`` else the user cache dir's ``rattler/cache``, then ``pkgs``)."""
    base = os.environ.get("RATTLER_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "rattler", "cache")
    return Path(base) / "pkgs"


def package_cache_dir() -> Path:
    value = os.environ.get("WML_PKGS_DIR")
    return Path(value).expanduser().absolute() if value else default_cache_dir()


def rattler_install_options(choice: LinkChoice, cache: Path) -> dict[str, Any]:
    """``package_cache`` and ``config`` keyword arguments for ``rattler.install``."""
    from rattler import Config, PackageCache, ValidationMode

    config = Config()
    config.set("allow-hard-links", "true" if choice.policy == LinkPolicy.hardlink else "false")
    config.set("allow-ref-links", "true" if choice.policy in (LinkPolicy.hardlink, LinkPolicy.reflink) else "false")
    mode = getattr(ValidationMode, cache_check())()
    return {"package_cache": PackageCache.new_layered([cache], validation_mode=mode), "config": config}
