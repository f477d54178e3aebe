"""An image file copied to node-local storage once per node before any rank starts, as
``--stage-env`` copies an environment: where the site's profile says so (``container.stage:
true``) or ``ddlrun --stage-image on``, into the site's node-local place (``stage_env.place``;
``$WML_STAGE_PLACE`` overrides it).  The ranks then read the image from the node's disk, not
from the shared file system (one reader per node, not one per rank).

Only an image *file* is copied (a .sif, a SquashFS .sqfs/.sqsh): a directory image or one the
runtime pulls (docker://...) is read where it is.  On each node, under a per-node lock (two jobs
on one node never race): copies of an older version of the same image that no job uses are
removed; a complete copy of this version (its name carries the shared file's size and mtime) is
reused; else the free space is checked, the file copied into a hidden name beside the target,
its size checked and it is renamed into place: a rank never sees a half-made copy.  Each job
using a copy leaves a marker (``.wml-image-users/<copy>/<job>``); at the end of ddlrun the job
removes its marker and the copy once no job uses it.

The copy has one path on every node (the ranks' command line is one): the place's ``{node}``
(emulated nodes sharing one host) is the word ``images`` here, so emulated nodes share the
host's one copy, under the host's one lock.

    python -m wmlce_tools.container.stage stage|release PAYLOAD    (one node's part; PAYLOAD: JSON)
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from ..errors import WmlError
from ..locks import file_lock
from ..site.schema import SiteProfile
from .launch import ContainerLaunch, _expand, is_path_image

NODE_TOKEN = "{node}"
USERS = ".wml-image-users"
#: overrides the site profile's place (tests; a user's own node-local directory), as for --stage-env
PLACE_VAR = "WML_STAGE_PLACE"
MODES = ("on", "off")


@dataclass(frozen=True)
class ImageCopy:
    """One job's copy of an image file on each of its nodes."""

    source: str            # the image on the shared file system
    place: str             # the node-local directory ($VARIABLES expanded on each node)
    size: int
    mtime_ns: int
    job: str

    @property
    def name(self) -> str:
        p = Path(self.source)
        key = hashlib.sha256(f"{p}\0{self.size}\0{self.mtime_ns}".encode()).hexdigest()[:12]
        return f"wml-image-{p.stem}-{key}{p.suffix}"

    def directory(self, env: Optional[Mapping[str, str]] = None) -> Path:
        where = _expand(self.place, os.environ if env is None else env)
        if "$" in where:
            raise WmlError(f"the place {self.place} names a variable that is not set there")
        return Path(where)

    def target(self, env: Optional[Mapping[str, str]] = None) -> Path:
        return self.directory(env) / self.name


def plan_copy(site: SiteProfile, cont: ContainerLaunch, mode: Optional[str], env: Mapping[str, str],
              job: str) -> Optional[ImageCopy]:
    """The job's copy, or None: the ranks read the image where it is.  ``mode``: ``--stage-image``
    (None: the site's ``container.stage``).  Asked for by name, an image that cannot be copied
    is an error; by the site's default, it is read where it is."""
    if mode is not None and mode not in MODES:
        raise WmlError(f"--stage-image {mode!r}: give on or off")
    wanted = mode == "on" if mode is not None else bool(site.container is not None and site.container.stage)
    if not wanted:
        return None
    asked = mode == "on"
    place = env.get(PLACE_VAR) or (site.stage_env.place if site.stage_env is not None else None)
    if place is None:
        raise WmlError(f"--stage-image: site {site.name} names no node-local storage (its profile has no stage_env)")
    if not place.startswith(("/", "$")):
        raise WmlError(f"${PLACE_VAR}={place!r}: give an absolute directory")
    image = cont.image
    why = None
    if not is_path_image(cont.runtime, image) or image.endswith(".toml"):
        why = f"the image {image} is not a file on the nodes ({cont.runtime} finds it itself)"
    elif os.path.isdir(image):
        why = f"the image {image} is a directory; only an image file (.sif, SquashFS) is copied to node-local storage"
    elif not os.path.isfile(image):
        return None                           # the container check says the image does not exist
    if why is not None:       # the site's default copies image files only: the others are read in place
        if asked:
            raise WmlError(f"--stage-image on: {why}")
        return None
    st = os.stat(image)
    return ImageCopy(source=image, place=place.replace(NODE_TOKEN, "images"), size=st.st_size,
                     mtime_ns=st.st_mtime_ns, job=job)


def _users(target: Path) -> Path:
    return target.parent / USERS / target.name


def stage_here(c: ImageCopy, env: Optional[Mapping[str, str]] = None) -> Path:
    """Make (or reuse) this node's copy; return its path."""
    where = c.directory(env)
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WmlError(f"cannot create {where}: {exc.strerror}") from None
    target = where / c.name
    stem = Path(c.source).stem
    with file_lock(where / f".wml-image-{stem}.lock", f"copying the image {c.source}", who="wml") as held:
        try:
            _make_copy(c, where, target, stem)
        except BaseException:        # nothing of this image left here: neither is its lock file
            held.remove_file = not _leftovers(where, stem)
            raise
        _users(target).mkdir(parents=True, exist_ok=True)
        (_users(target) / c.job).touch()
    return target


def _leftovers(where: Path, stem: str) -> bool:
    """Whether a copy of this image (any version) is still in the place."""
    return any(where.glob(f"wml-image-{stem}-*"))


def _make_copy(c: ImageCopy, where: Path, target: Path, stem: str) -> None:
    """Under the lock: older unused versions removed, then a complete copy made (or reused)."""
    for old in where.glob(f"wml-image-{stem}-*"):     # an older version of this image nobody uses
        if old != target and len(old.name) == len(target.name) and not _in_use(old):
            old.unlink(missing_ok=True)
    if not (target.is_file() and target.stat().st_size == c.size):
        free = shutil.disk_usage(where).free
        if free < c.size:
            raise WmlError(f"{where} has {free / 2**30:.2f} GiB free; the image {c.source} needs "
                           f"{c.size / 2**30:.2f} GiB")
        tmp = where / f".{c.name}.wml-tmp-{os.getpid()}"
        try:
            shutil.copyfile(c.source, tmp)
            got = tmp.stat().st_size
            if got != c.size:
                raise WmlError(f"the copy of {c.source} has {got} bytes, not {c.size} (did it change while copied?)")
            os.replace(tmp, target)
        except OSError as exc:
            raise WmlError(f"copying {c.source} into {where} failed: {exc.strerror or exc}") from None
        finally:
            tmp.unlink(missing_ok=True)


def _in_use(copy: Path) -> bool:
    try:
        return bool(os.listdir(_users(copy)))
    except OSError:
        return False


def release_here(c: ImageCopy, env: Optional[Mapping[str, str]] = None) -> None:
    """The end of the job's use: drop its marker, remove the copy once no job uses it."""
    try:
        target = c.target(env)
    except WmlError:
        return
    if not target.parent.is_dir():
        return
    stem = Path(c.source).stem
    with file_lock(target.parent / f".wml-image-{stem}.lock", f"cleaning up {target}", who="wml") as held:
        with contextlib.suppress(FileNotFoundError):
            (_users(target) / c.job).unlink()
        if not _in_use(target):
            with contextlib.suppress(OSError):
                _users(target).rmdir()
            target.unlink(missing_ok=True)
        if not _leftovers(target.parent, stem):     # the last copy gone: its lock and the users' directory too
            held.remove_file = True
            with contextlib.suppress(OSError):
                (target.parent / USERS).rmdir()


def payload(c: ImageCopy) -> str:
    return json.dumps(asdict(c))


def main(argv: Sequence[str]) -> int:
    from .nodecheck import TAG

    host = socket.gethostname()
    try:
        c = ImageCopy(**json.loads(argv[1]))
        if argv[0] == "stage":
            stage_here(c)
        else:
            release_here(c)
    except WmlError as e:
        print(f"{TAG}fail {host}: {e}", flush=True)
        return 0
    print(f"{TAG}ok {host}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
