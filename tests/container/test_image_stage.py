"""An image file copied to node-local storage once per node before any rank starts (issue 49,
item 3), with a real runtime: Charliecloud's ch-run reading a SquashFS image (mksquashfs of the
cached Debian image; ch-run mounts it with squashfuse).  The node-local place is under the test's
directory, which is bound into the container, so each rank sees the copy it runs from."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.missing import skip_unless_ci

from wmlce_tools.container.charliecloud import wml_dir
from helpers import images

from .test_charliecloud_job import CACHE, MARKER, debian_image  # noqa: F401  (the fixture)

PROBE = """\
import json, os, sys
copies = sorted(n for n in os.listdir(sys.argv[1]) if n.startswith("wml-image-"))
print("PROBE " + json.dumps({"rank": os.environ["RANK"], "marker": open("/wml-marker").read().strip(),
      "copies": copies}), flush=True)
"""


@pytest.fixture(scope="session")
def squash_image(debian_image):
    """The Debian image as one SquashFS file, made once per machine beside the cached images."""
    try:
        return images.squash_image()
    except images.ImageUnavailable as e:
        skip_unless_ci(str(e))


@pytest.fixture
def ddlrun(isolated_env, debian_image, tmp_path):
    (debian_image / str(tmp_path).lstrip("/")).mkdir(parents=True, exist_ok=True)   # the workdir, bound
    (tmp_path / "probe.py").write_text(PROBE)
    env = {**isolated_env, "USER": os.environ.get("USER") or "root", "WML_STAGE_PLACE": str(tmp_path / "local"),
           "WML_JOB_ID": "4242"}

    def run(*args, timeout=120):
        return subprocess.run([sys.executable, "-m", "wmlce_tools.ddlrun.cli", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=timeout)
    return run


def probes(text):
    return [json.loads(l.split("PROBE ", 1)[1]) for l in text.splitlines() if "PROBE {" in l]


def test_ranks_run_from_the_node_local_copy_removed_at_the_end(ddlrun, squash_image, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    other = local / "wml-image-bookworm-python3-000000000000.sqfs"     # an older version nobody uses
    other.write_bytes(b"old")
    out = ddlrun("-n", "2", "--emulate-nodes", "2", "--container", str(squash_image), "--stage-image", "on",
                 "--", "python3", "probe.py", str(local))
    assert out.returncode == 0, out.stderr
    ranks = sorted(probes(out.stdout), key=lambda p: p["rank"])
    assert [p["rank"] for p in ranks] == ["0", "1"]
    copy = ranks[0]["copies"]
    assert len(copy) == 1 and copy[0].startswith("wml-image-bookworm-python3-") and copy[0].endswith(".sqfs")
    assert all(p["copies"] == copy and p["marker"] == MARKER for p in ranks)   # one copy for the host's nodes
    # wml's packages reach the image through mount points under ch-run's /tmp (the image has none of wml's)
    assert f" {local}/{copy[0]} -- env PYTHONPATH={wml_dir()} python3 -m wmlce_tools.ddlrun.rankexec" in out.stderr
    assert f"the image {squash_image} is copied to {local}/{copy[0]} on each node" in out.stderr
    assert not list(local.glob("wml-image-*")) and not list(local.glob(".wml-image-*.wml-tmp-*"))   # removed
    assert os.listdir(local) == []      # nor its lock file, nor the users' directory (issue 60)


def test_a_copy_another_job_uses_is_kept_and_a_complete_copy_reused(ddlrun, squash_image, tmp_path):
    from wmlce_tools.container.stage import ImageCopy, stage_here

    st = squash_image.stat()
    c = ImageCopy(source=str(squash_image), place=str(tmp_path / "local"), size=st.st_size,
                  mtime_ns=st.st_mtime_ns, job="other-job")
    copy = stage_here(c)
    inode = copy.stat().st_ino
    out = ddlrun("-n", "1", "--container", str(squash_image), "--stage-image", "on", "--", "python3", "probe.py",
                 str(tmp_path / "local"))
    assert out.returncode == 0, out.stderr
    assert probes(out.stdout)[0]["copies"] == [copy.name]
    assert copy.stat().st_ino == inode              # reused, not copied again; kept: the other job uses it


def test_copy_on_every_node_through_the_launcher(squash_image, tmp_path, monkeypatch, isolated_env):
    """As a multi-node job does it: the site's launcher (mpiexec) runs the copy once per node (two
    emulated nodes on this host race for its lock: one copies, the other finds it complete)."""
    from wmlce_tools.ddlrun.plan import DdlrunOptions, build_plan, stage_image_nodes

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("USER", os.environ.get("USER") or "root")
    monkeypatch.setenv("WML_STAGE_PLACE", str(tmp_path / "local"))
    plan = build_plan(DdlrunOptions(program=("python3", "x.py"), np=2, emulate_nodes=2, container=str(squash_image),
                                    stage_image="on"), os.environ)
    stage_image_nodes(plan, per_node=True)
    copies = list((tmp_path / "local").glob("wml-image-*"))
    assert [str(p) for p in copies] == [plan.container.image]
    assert copies[0].stat().st_size == squash_image.stat().st_size
    stage_image_nodes(plan, release=True, per_node=True)
    assert not list((tmp_path / "local").glob("wml-image-*"))


def test_an_image_that_cannot_be_copied_is_one_line(ddlrun, debian_image, tmp_path):
    out = ddlrun("-n", "1", "--container", str(debian_image), "--stage-image", "on", "--", "python3", "probe.py", "/")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"ddlrun: error: --stage-image on: the image {debian_image} is a directory; only an image file "
        "(.sif, SquashFS) is copied to node-local storage"]


def test_submit_on_a_site_that_stages_images(run_wml, squash_image, debian_image, tmp_path):
    """The local site's profile says so (container.stage: true): a submitted 2-node job's ranks
    run from the node-local copy; a directory image is read where it is."""
    (debian_image / str(tmp_path).lstrip("/")).mkdir(parents=True, exist_ok=True)
    (tmp_path / "probe.py").write_text(PROBE)
    local = tmp_path / "local"
    env = {"USER": os.environ.get("USER") or "root", "WML_STAGE_PLACE": str(local)}
    out = run_wml("submit", "--container", str(squash_image), "-N", "2", "probe.py", str(local), env=env, timeout=180)
    assert out.returncode == 0, out.stderr
    log = next((tmp_path / "wml-jobs").glob("*/output.log")).read_text()
    assert f"ddlrun: the image {squash_image} is copied to {local}/wml-image-bookworm-python3-" in log
    ranks = probes(log)
    assert len(ranks) == 2 and all(p["marker"] == MARKER and len(p["copies"]) == 1 for p in ranks)
    assert not list(local.glob("wml-image-*"))                          # removed at the end
    assert not list(local.glob(".wml-image-*"))                         # and its lock file


def test_submit_and_sweep_take_stage_image(run_wml, squash_image, debian_image, tmp_path):
    """`wml submit`/`wml sweep` have ddlrun's --stage-image (issue 60): off reads the image where
    it is though the local site copies image files; the job script hands it to ddlrun."""
    (tmp_path / "probe.py").write_text(PROBE)
    local = tmp_path / "local"
    env = {"USER": os.environ.get("USER") or "root", "WML_STAGE_PLACE": str(local)}
    out = run_wml("submit", "--stage-image", "off", "--container", str(squash_image), "-N", "2", "probe.py",
                  str(tmp_path), env=env, timeout=180)
    assert out.returncode == 0, out.stderr
    log = next((tmp_path / "wml-jobs").glob("*/output.log")).read_text()
    ranks = probes(log)
    assert len(ranks) == 2 and all(p["marker"] == MARKER and p["copies"] == [] for p in ranks), log
    assert "is copied to" not in log and not local.exists()
    script = next((tmp_path / "wml-jobs").glob("*/job.sh")).read_text()
    assert f"--stage-image off -- python3 {tmp_path}/probe.py" in script
    sweep = run_wml("sweep", "--dry-run", "--stage-image", "on", "--container", str(squash_image),
                    "--param", "x=1,2", "probe.py", "{x}", env=env)
    assert sweep.returncode == 0, sweep.stderr
    assert "--stage-image on --" in sweep.stdout
    bad = run_wml("submit", "--stage-image", "on", "probe.py", env=env)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "wml: error: --stage-image on goes with --container IMAGE (the image file is what is copied)"]


def test_a_removed_lock_file_still_locks(tmp_path):
    """The last user removes the lock file while holding it (no `.wml-image-*.lock` stays behind);
    a job that was waiting for that file then locks the file now at the path, so it and a job
    arriving later never hold the lock at once."""
    import threading
    import time

    from wmlce_tools.locks import file_lock

    path = tmp_path / ".wml-image-x.lock"
    inside, most, lock = [0], [0], threading.Lock()

    def hold(seconds):
        with file_lock(path, "test", timeout_s=30):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(seconds)
            with lock:
                inside[0] -= 1

    with file_lock(path, "test") as held:
        waiter = threading.Thread(target=hold, args=(0.5,))
        waiter.start()
        time.sleep(0.5)                 # the waiter now waits on this file
        held.remove_file = True
    assert waiter.is_alive()
    time.sleep(0.3)                     # the waiter has the lock (on the file at the path, made anew)
    hold(0.2)                           # a later job: after the waiter, not beside it
    waiter.join(10)
    assert most[0] == 1
