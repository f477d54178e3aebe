"""The container tests' images, built once per machine and kept in a cache
(``$WML_TEST_IMAGES``, default ``<tmp>/wml-test-images``):

- Debian bookworm root filesystems made by mmdebstrap from Debian's packages alone (no image
  registry), each an image directory for Charliecloud's ch-run, **without device nodes**: ch-run
  binds the host's /dev over the image's (an empty directory here), and a device file in an
  image directory makes ``ch-image import`` read /dev/full without end until the disk is full.
  An image cached by an older version with /dev nodes has them removed when it is next used.
- what the tests derive from them: torch installed into the mpi4py image, the Debian image as one
  SquashFS file, and ch-image's storage holding the python3-venv image as a base.

``python tests/helpers/images.py`` (scripts/test runs it before pytest, so that no test's time
limit covers a build) builds what is missing, one progress line per image; the tests' fixtures
call the same functions, which find the cache filled.  A tool that is missing here is a line,
and the fixture that needs it skips (fails in CI: helpers/missing.py).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

CACHE = Path(os.environ.get("WML_TEST_IMAGES") or Path(tempfile.gettempdir()) / "wml-test-images")
MARKER = "only-in-the-wml-test-image"
TORCH = "torch==2.13.0"       # as scripts/test installs it on the host (the image's python is 3.11 too)

#: name: the Debian packages mmdebstrap puts in (beside minbase)
DEBIAN = {
    "bookworm-python3": "python3",
    "bookworm-python3-mpi4py": "python3,python3-numpy,python3-mpi4py",   # Open MPI 4.1.4, as the host's
    "bookworm-python3-venv": "python3,python3-venv",
}


class ImageUnavailable(Exception):
    """A tool is missing or a build failed: the reason, in one line."""


def _say(text: str) -> None:
    sys.stderr.write(f"wml test images: {text}\n")
    sys.stderr.flush()


@contextmanager
def _locked(say: Optional[Callable[[str], None]]) -> Iterator[None]:
    """One build at a time on this machine (pytest's workers, other checkouts' runs)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say:
                say(f"waiting for another process's build ({CACHE / 'lock'})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _need(tool: str, package: str) -> None:
    if shutil.which(tool) is None:
        raise ImageUnavailable(f"{tool} is not installed (apt-get install {package}; scripts/test installs it)")


def _run_cleanly(argv: list[str], what: str, timeout: float, say: Optional[Callable[[str], None]]) -> str:
    """Run a builder, saying every minute that it still runs; past ``timeout`` (or when this
    process is interrupted, e.g. by a test's time limit) it gets SIGTERM first: mmdebstrap then
    unmounts the /proc, /sys and /dev it mounted in its chroot, which a SIGKILL leaves behind.
    Returns its stderr's last line when it fails."""
    import signal

    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            while True:
                try:
                    rc = proc.wait(timeout=60)
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() - start > timeout:
                        raise ImageUnavailable(f"{what} took more than {timeout:.0f} s") from None
                    if say:
                        say(f"still {what} ({time.monotonic() - start:.0f} s)")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        if rc == 0:
            return ""
        err.seek(0)
        return (err.read().strip().splitlines() or [f"exit status {rc}"])[-1]


def device_files(root: Path) -> list[Path]:
    """The block and character devices (and FIFOs, sockets) under ``root``."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            p = Path(dirpath) / name
            try:
                mode = os.lstat(p).st_mode
            except OSError:
                continue
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                out.append(p)
    return out


def _without_devices(img: Path, say: Optional[Callable[[str], None]] = None) -> None:
    """Remove the device nodes an image directory holds (under its /dev, as mmdebstrap made them)."""
    nodes = device_files(img / "dev")
    for p in nodes:
        p.unlink()
    (img / "dev").mkdir(exist_ok=True)
    if nodes and say:
        say(f"removed {len(nodes)} device node(s) from {img.name}/dev (cached by an older version)")


def debian(name: str, say: Optional[Callable[[str], None]] = None) -> Path:
    """The image directory ``name`` (a key of DEBIAN), built by mmdebstrap once per machine."""
    img = CACHE / name
    _need("ch-run", "charliecloud-runtime")          # what runs it
    if (img / "wml-marker").exists() and not device_files(img / "dev"):
        return img
    with _locked(say):
        if (img / "wml-marker").exists():          # built meanwhile, or cached with its /dev nodes
            _without_devices(img, say)
            return img
        _need("mmdebstrap", "mmdebstrap")
        if say:
            say(f"building {name} (mmdebstrap of Debian bookworm with {DEBIAN[name]}; about a minute) ...")
        start = time.monotonic()
        tar = CACHE / f"{name}.tar"
        # --skip=output/dev: no /dev entries in the tarball (ch-run binds the host's /dev)
        try:
            failed = _run_cleanly(["mmdebstrap", "--variant=minbase", "--skip=output/dev",
                                   f"--include={DEBIAN[name]}", "bookworm", str(tar)], f"building {name}", 900, say)
        except BaseException:
            tar.unlink(missing_ok=True)
            raise
        if failed:
            tar.unlink(missing_ok=True)
            raise ImageUnavailable(f"mmdebstrap could not build the image (is the Debian archive reachable?): {failed}")
        shutil.rmtree(img, ignore_errors=True)
        img.mkdir()
        subprocess.run(["tar", "-xf", str(tar), "-C", str(img), "--exclude=./dev/*"], check=True, timeout=300)
        tar.unlink()
        _without_devices(img)
        (img / "wml-marker").write_text(MARKER + "\n")
        if say:
            say(f"built {name} in {time.monotonic() - start:.0f} s")
    return img


def torch_image(say: Optional[Callable[[str], None]] = None) -> Path:
    """The mpi4py image plus torch, installed into it by pip as scripts/test installs it on the host."""
    img = CACHE / "bookworm-python3-mpi4py-torch"
    if (img / "wml-marker").exists() and not device_files(img / "dev"):
        return img
    base = debian("bookworm-python3-mpi4py", say)
    with _locked(say):
        if (img / "wml-marker").exists():
            _without_devices(img, say)
            return img
        if say:
            say(f"building {img.name} (pip install {TORCH} into the mpi4py image; a few minutes) ...")
        start = time.monotonic()
        shutil.rmtree(img, ignore_errors=True)
        subprocess.run(["cp", "-a", str(base), str(img)], check=True, timeout=300)
        (img / "wml-marker").unlink()
        failed = _run_cleanly([sys.executable, "-m", "pip", "install", "-q", "--target",
                               str(img / "usr/local/lib/python3.11/dist-packages"), TORCH],
                              f"installing {TORCH} into {img.name}", 900, say)
        if failed:
            raise ImageUnavailable(f"pip could not install {TORCH} into the image: {failed}")
        (img / "wml-marker").write_text(MARKER + "\n")
        if say:
            say(f"built {img.name} in {time.monotonic() - start:.0f} s")
    return img


def squash_image(say: Optional[Callable[[str], None]] = None) -> Path:
    """The Debian image as one SquashFS file."""
    _need("mksquashfs", "squashfs-tools")
    sqfs = CACHE / "bookworm-python3.sqfs"
    if sqfs.exists():
        return sqfs
    img = debian("bookworm-python3", say)
    with _locked(say):
        if not sqfs.exists():
            if say:
                say(f"making {sqfs.name} (mksquashfs of bookworm-python3) ...")
            tmp = CACHE / "bookworm-python3.sqfs.tmp"
            subprocess.run(["mksquashfs", str(img), str(tmp), "-noappend", "-quiet", "-comp", "lz4"],
                           check=True, capture_output=True, timeout=600)
            os.replace(tmp, sqfs)
    return sqfs


def ch_storage(say: Optional[Callable[[str], None]] = None) -> Path:
    """ch-image's storage with a base image ``wml-base-venv``: the python3-venv image, imported
    from a tar (never its directory) without device nodes, with this machine's CA in pip's
    configuration (its HTTPS proxy)."""
    _need("ch-image", "charliecloud-builders")
    storage = CACHE / "ch-storage"
    if (storage / "img/wml-base-venv").is_dir():
        return storage
    img = debian("bookworm-python3-venv", say)
    with _locked(say):
        if not (storage / "img/wml-base-venv").is_dir():
            if say:
                say("importing bookworm-python3-venv into ch-image's storage as wml-base-venv ...")
            tar = CACHE / "wml-base-venv.tar"
            with tarfile.open(tar, "w") as t:
                t.add(img, arcname=".", filter=lambda m: None if m.isdev() or m.isfifo() else m)
                ca = "/etc/ssl/certs/ca-certificates.crt"
                if os.path.exists(ca):
                    t.add(ca, arcname="./etc/wml-host-ca.crt")
                    conf = CACHE / "pip.conf"
                    conf.write_text("[global]\ncert = /etc/wml-host-ca.crt\n")
                    t.add(conf, arcname="./etc/pip.conf")
            got = subprocess.run(["/usr/bin/python3", shutil.which("ch-image"), "-s", str(storage), "import", str(tar),
                                  "wml-base-venv"], capture_output=True, text=True, timeout=600,
                                 env={**os.environ, "USER": os.environ.get("USER") or "root"})
            tar.unlink()
            if got.returncode != 0:
                raise ImageUnavailable("ch-image import failed: " + (got.stderr.strip().splitlines() or ["?"])[-1])
    return storage


def main() -> int:
    """Build every image the container tests use; one line per image built, or why not."""
    start = time.monotonic()
    _say(f"the container tests' images, cached in {CACHE} (built once per machine)")
    steps = [(name, lambda n=name: debian(n, _say)) for name in DEBIAN]
    steps += [("bookworm-python3-mpi4py-torch", lambda: torch_image(_say)),
              ("bookworm-python3.sqfs", lambda: squash_image(_say)), ("ch-storage", lambda: ch_storage(_say))]
    for name, build in steps:
        try:
            build()
        except ImageUnavailable as e:
            _say(f"{name}: not built: {e} (the tests that need it say so)")
        except (subprocess.SubprocessError, OSError) as e:
            _say(f"{name}: not built: {e} (the tests that need it say so)")
    left = [p for name in (*DEBIAN, "bookworm-python3-mpi4py-torch") for p in device_files(CACHE / name / "dev")]
    if left:
        _say(f"device files left in the cache: {', '.join(map(str, left[:5]))}")
        return 1
    _say(f"ready ({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
