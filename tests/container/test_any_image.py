"""Issue 60 (points 6 and 58.4), with real Charliecloud: any image ch-run can run is usable, not
only one `wml env image` made: a Debian rootfs with python3 and nothing of wml's (no /opt/wml,
no directory for the job), at a path with a space in it.  wml reaches its own packages through
mount points under ch-run's own /tmp; a job directory under /tmp needs no bind; with $TMPDIR
set (ch-run's /tmp is then $TMPDIR) it still works, and the mkdir wml advises for a directory
outside /tmp works as written; the ranks run the image's python even with a host venv first on
PATH; bad images are one line at submit, before anything is copied.

The image is a hard-linked copy of the cached Debian image (test_charliecloud_job's fixture),
made per test in its own directory: the cached image is never written."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .test_charliecloud_job import MARKER, debian_image  # noqa: F401  (the fixture)

PROBE = """\
import json, os, sys
print("PROBE " + json.dumps({"rank": os.environ["RANK"], "marker": open("/wml-marker").read().strip(),
      "python": sys.executable, "prefix": sys.prefix, "cwd": os.getcwd(), "virtual_env": os.environ.get("VIRTUAL_ENV")}),
      flush=True)
"""


@pytest.fixture
def plain_image(debian_image, tmp_path_factory):
    """The Debian image without any directory of wml's or of a job's, at a path with a space."""
    img = tmp_path_factory.mktemp("any") / "plain image"
    subprocess.run(["cp", "-al", str(debian_image), str(img)], check=True, timeout=120)
    shutil.rmtree(img / "opt" / "wml", ignore_errors=True)   # (the cached images have none; an older cache did)
    for entry in (img / "tmp").iterdir():
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    assert not (img / "opt" / "wml").exists() and not any((img / "tmp").iterdir())
    return img


@pytest.fixture
def workdir():
    """A job directory under /tmp itself (whatever $TMPDIR says), not in the image."""
    d = Path(tempfile.mkdtemp(prefix="wml-any-image-", dir="/tmp"))
    (d / "probe.py").write_text(PROBE)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def wml(isolated_env, cwd, *args, env=None, timeout=180):
    e = {k: v for k, v in isolated_env.items() if k != "TMPDIR"}
    e.update(USER=os.environ.get("USER") or "root", WML_JOBS_DIR=str(Path(cwd) / "wml-jobs"))
    e.update(env or {})
    e = {k: v for k, v in e.items() if v is not None}
    return subprocess.run([sys.executable, "-m", "wmlce_tools", *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout)


def ranks(cwd):
    log = next((Path(cwd) / "wml-jobs").glob("*/output.log")).read_text()
    got = [json.loads(l.split("PROBE ", 1)[1]) for l in log.splitlines() if "PROBE {" in l]
    return sorted(got, key=lambda p: p["rank"]), log


def test_any_image_from_a_directory_under_tmp(isolated_env, plain_image, workdir):
    out = wml(isolated_env, workdir, "submit", "--nodes", "2", "--container", str(plain_image), "probe.py")
    got, log = ranks(workdir)
    assert out.returncode == 0, log
    assert [p["rank"] for p in got] == ["0", "1"], log
    for p in got:
        assert p["marker"] == MARKER and p["python"] == "/usr/bin/python3" and p["cwd"] == str(workdir)
    assert not (plain_image / "opt" / "wml").exists() and not any((plain_image / "tmp").iterdir())   # nothing made in it


def test_tmpdir_set(isolated_env, plain_image, workdir, tmp_path):
    """ch-run binds $TMPDIR at the container's /tmp: the job directory under the host's /tmp and
    wml's packages reach the ranks through mount points wml makes in $TMPDIR."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    out = wml(isolated_env, workdir, "submit", "--nodes", "2", "--container", str(plain_image), "probe.py",
              env={"TMPDIR": str(tmpdir)})
    got, log = ranks(workdir)
    assert out.returncode == 0, log
    assert [p["rank"] for p in got] == ["0", "1"] and all(p["cwd"] == str(workdir) for p in got), log


def test_the_advised_mkdir_works_with_tmpdir_set(isolated_env, plain_image, tmp_path):
    """A job directory outside /tmp must be a directory of the image: wml's line says the exact
    mkdir, and after it the job runs (with $TMPDIR set, as when the issue's mkdir did not help)."""
    base = Path("/var/tmp")
    if not os.access(base, os.W_OK):
        pytest.skip("/var/tmp is not writable here")
    work = Path(tempfile.mkdtemp(prefix="wml-any-image-", dir=base))
    try:
        (work / "probe.py").write_text(PROBE)
        env = {"TMPDIR": str(tmp_path)}
        out = wml(isolated_env, work, "submit", "--nodes", "2", "--container", str(plain_image), "probe.py", env=env)
        log = next((work / "wml-jobs").glob("*/output.log")).read_text()
        assert out.returncode != 0
        errors = [l for l in log.splitlines() if "error" in l]
        assert len(errors) == 1 and f"the image has no directory {work} to bind {work} onto" in errors[0], log
        advice = errors[0].split("ch-run mounts only onto directories that exist: ", 1)[1].split(", or work from", 1)[0]
        argv = shlex.split(advice)
        assert argv == ["mkdir", "-p", f"{plain_image}/{str(work).lstrip('/')}"]
        subprocess.run(argv, check=True)
        shutil.rmtree(work / "wml-jobs")
        again = wml(isolated_env, work, "submit", "--nodes", "2", "--container", str(plain_image), "probe.py", env=env)
        got, log = ranks(work)
        assert again.returncode == 0, log
        assert [p["rank"] for p in got] == ["0", "1"] and all(p["cwd"] == str(work) for p in got), log
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_host_venv_first_on_path_stays_outside(isolated_env, plain_image, workdir):
    """Issue 58, item 4: a venv made from /usr/bin/python3 (which the image has too) in the job's
    directory, which the container sees, first on PATH and active: the ranks still run the
    image's python, sys.prefix the image's /usr, no VIRTUAL_ENV."""
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("no /usr/bin/python3 on this host")
    venv = workdir / "hostvenv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to("/usr/bin/python3")
    (venv / "bin" / "python").symlink_to("python3")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    host = subprocess.run([str(venv / "bin" / "python3"), "-c", "import sys; print(sys.prefix)"],
                          capture_output=True, text=True, timeout=30)
    assert host.stdout.strip() == str(venv)            # it is a venv on the host
    env = {"PATH": f"{venv}/bin:{isolated_env['PATH']}", "VIRTUAL_ENV": str(venv),
           "WML_MPIEXEC": shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")}
    out = wml(isolated_env, workdir, "submit", "--nodes", "2", "--container", str(plain_image), "probe.py", env=env)
    got, log = ranks(workdir)
    assert out.returncode == 0, log
    assert [p["rank"] for p in got] == ["0", "1"], log
    for p in got:
        assert p["python"] == "/usr/bin/python3" and p["prefix"] == "/usr" and p["virtual_env"] is None, p


@pytest.mark.parametrize("image, message", [
    ("probe.py", "--container probe.py: not an image for charliecloud on local: a file that is not SquashFS"),
    ("no-such-image", "--container no-such-image (charliecloud): no directory or SquashFS file no-such-image here, "
                      "and no image no-such-image in ch-image's storage"),
    ("docker://debian:bookworm", "--container docker://debian:bookworm: ch-run pulls no image itself; pull it into "
                                 "ch-image's storage (ch-image pull debian:bookworm) and give its name "
                                 "(--container debian:bookworm)"),
])
def test_not_an_image_is_one_line_at_submit(isolated_env, workdir, tmp_path, image, message):
    place = tmp_path / "local"
    out = wml(isolated_env, workdir, "submit", "--nodes", "2", "--container", image, "probe.py",
              env={"WML_STAGE_PLACE": str(place), "CH_IMAGE_STORAGE": str(tmp_path / "storage")})
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
    assert not (workdir / "wml-jobs").exists() and not place.exists()      # nothing written, nothing copied


def test_user_unset_is_one_line(isolated_env, plain_image, workdir):
    (workdir / "img").symlink_to(plain_image)          # a path without a space (that is another test's)
    out = wml(isolated_env, workdir, "submit", "--nodes", "2", "--container", "img", "probe.py", env={"USER": None})
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "ch-run needs $USER set (it names the user inside the container); export USER=$(id -un)" in out.stderr


def test_env_with_a_container_is_refused(isolated_env, plain_image, workdir):
    """Issue 58, item 4: --env VENV with --container: one line (the env of this machine is not
    what the image's python runs)."""
    (workdir / "venv" / "bin").mkdir(parents=True)
    (workdir / "img").symlink_to(plain_image)
    out = wml(isolated_env, workdir, "submit", "--env", "venv", "--container", "img", "probe.py")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert f"--env venv with --container {workdir}/img: the ranks run the image's python" in out.stderr
    assert not (workdir / "wml-jobs").exists()
