"""What wml needs to know of Charliecloud's ``ch-run`` to run a rank in *any* image it can run
(ch-run(1) of Charliecloud 0.31, Debian 12's, read 2026-11-29; https://hpc.github.io/charliecloud/ch-run.html):

- IMAGE is a directory, a SquashFS file, or the name of an image in ch-image's storage
  (``-s DIR``, else $CH_IMAGE_STORAGE, else /var/tmp/$USER.ch; the image under ``img/``, its
  name with ``/`` as ``%`` and ``:`` as ``+``, as ch-image's ``ref_to_pathstr``).  A path that
  exists is a path, as ch-run takes it.
- A bind's destination must be a directory that exists ("With a read-only image (the default),
  DST must exist").  ch-run binds the host's /tmp, or $TMPDIR when set, at the container's /tmp
  itself (unless ``-t``/``--private-tmp``): a destination under /tmp is a directory of that host
  directory, which wml makes on each node (``make_mount_points``).  So wml reaches its own code
  through mount points under /tmp (``WML_DIR``) and an image needs none of wml's directories;
  a job directory under /tmp needs no bind at all when the two /tmp are one.
- The host's environment passes through unaltered, PATH included, except what ``--set-env``
  (no argument: the image's /ch/environment, which ch-image writes from the image's ENV) and
  ``--unset-env`` change, in the order given.  So each rank gets the image's PATH: the image's
  /ch/environment when it has one, else the usual system PATH (with /opt/env/bin first where
  wml's ``wml env image`` puts the env), and a host env's markers (VIRTUAL_ENV, PYTHONHOME,
  CONDA_PREFIX) are unset: a python on the host's PATH is never the ranks'.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import List, Mapping, Optional, Sequence

from ..errors import WmlError

PRIVATE_TMP = ("-t", "--private-tmp")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"   # Docker's and Apptainer's default
ENV_PREFIX_BIN = "/opt/env/bin"          # where `wml env image` installs the env (env/image.py)
HOST_PYTHON_VARS = ("PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV")
SQUASHFS_MAGIC = b"hsqs"


def wml_dir() -> str:
    """Where wml's packages are bound inside: mount points under ch-run's /tmp, one per user."""
    return f"/tmp/wml-mnt-{os.getuid()}"


def shared_tmp(flags: Sequence[str], env: Mapping[str, str]) -> Optional[str]:
    """The host directory ch-run binds at the container's /tmp ($TMPDIR, else /tmp); None with
    ``-t``/``--private-tmp`` (a tmpfs of its own)."""
    if any(f in PRIVATE_TMP for f in flags):
        return None
    return env.get("TMPDIR") or "/tmp"


def under_tmp(path: str) -> bool:
    return path == "/tmp" or path.startswith("/tmp/")


def visible_as_is(src: str, dst: str, tmp: Optional[str]) -> bool:
    """A bind ch-run's own /tmp already makes: the same path under /tmp on both sides."""
    return tmp == "/tmp" and src == dst and under_tmp(dst)


def host_mount_point(dst: str, tmp: Optional[str]) -> Optional[str]:
    """The host directory that is ``dst`` inside, for a destination under the shared /tmp."""
    if tmp is None or not under_tmp(dst):
        return None
    return os.path.join(tmp, dst[len("/tmp"):].lstrip("/")).rstrip("/") or "/"


def make_mount_points(hosts: Sequence[str]) -> None:
    """Make the host directories that are mount points under the shared /tmp, on this node."""
    for host in hosts:
        try:
            os.makedirs(host, exist_ok=True)
        except OSError as e:
            raise WmlError(f"cannot make {host}, a mount point in ch-run's /tmp: {e.strerror}") from None


def storage_dir(flags: Sequence[str], env: Mapping[str, str]) -> Path:
    """ch-image's storage directory as ch-run finds it."""
    for i, f in enumerate(flags):
        if f in ("-s", "--storage") and i + 1 < len(flags):
            return Path(flags[i + 1])
        if f.startswith("--storage="):
            return Path(f.split("=", 1)[1])
    if env.get("CH_IMAGE_STORAGE"):
        return Path(env["CH_IMAGE_STORAGE"])
    return Path(f"/var/tmp/{env.get('USER') or 'USER'}.ch")


def stored_image(name: str, flags: Sequence[str], env: Mapping[str, str]) -> Path:
    """The directory of image ``name`` in ch-image's storage (there or not)."""
    return storage_dir(flags, env) / "img" / name.replace("/", "%").replace(":", "+")


def is_squashfs(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == SQUASHFS_MAGIC
    except OSError:
        return False


def image_root(image: str, flags: Sequence[str], env: Mapping[str, str]) -> Optional[Path]:
    """The image's tree on this host: the directory, or the stored image's; None for a SquashFS
    file (or an image not here)."""
    if image.startswith("/") or os.path.exists(image):
        return Path(image) if os.path.isdir(image) else None
    stored = stored_image(image, flags, env)
    return stored if stored.is_dir() else None


@functools.lru_cache(maxsize=64)
def _squash_has(image: str, mtime_ns: int, rel: str) -> bool:
    """Whether a SquashFS image holds ``rel`` (unsquashfs' listing of that one path)."""
    exe = shutil.which("unsquashfs")
    if exe is None:
        return False
    try:
        out = subprocess.run([exe, "-l", "-d", "", image, rel], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.strip().lstrip("/") == rel for line in out.stdout.splitlines())


def image_has(image: str, rel: str, flags: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether the image holds the path ``rel`` (relative to its root)."""
    root = image_root(image, flags, env)
    if root is not None:
        return (root / rel).exists()
    if image.startswith("/") and os.path.isfile(image):
        return _squash_has(image, os.stat(image).st_mtime_ns, rel)
    return False


def env_flags(image: str, flags: Sequence[str], env: Mapping[str, str]) -> List[str]:
    """ch-run's options that give a rank the image's environment, not the host's PATH."""
    path = SYSTEM_PATH
    if image_has(image, ENV_PREFIX_BIN.lstrip("/"), flags, env):
        path = f"{ENV_PREFIX_BIN}:{path}"
    out = [f"--unset-env={v}" for v in HOST_PYTHON_VARS] + [f"--set-env=PATH={path}"]
    if image_has(image, "ch/environment", flags, env):
        out.append("--set-env")          # the image's /ch/environment (its ENV, PATH included) last: it wins
    return out


def check_image_here(image: str, flags: Sequence[str], env: Mapping[str, str]) -> Optional[str]:
    """Why ch-run could not run ``image`` on this host (None: it can): ``$USER`` unset, a path that
    is not there, a file that is not SquashFS, a name not in ch-image's storage."""
    if not env.get("USER"):
        return "ch-run needs $USER set (it names the user inside the container); export USER=$(id -un)"
    if os.path.exists(image):
        if os.path.isfile(image) and not is_squashfs(image):
            return (f"{image} is a file but not a SquashFS image (ch-run runs an image directory, a SquashFS "
                    "file or an image in ch-image's storage)")
        return None
    if image.startswith(("/", "./", "../", "~")):
        return f"no such image {image}"
    if not stored_image(image, flags, env).is_dir():
        return (f"no directory or SquashFS file {image} here, and no image {image} in ch-image's storage "
                f"{storage_dir(flags, env)} (ch-image list)")
    return None
