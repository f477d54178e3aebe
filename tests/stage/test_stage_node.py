"""Staging on one node (``python -m wmlce_tools.stage unpack``), with its faults: too little
space, a staging killed half-way, a stale copy of an older env, two jobs on one node at once.

Everything is real: the env is made by ``wml env create``, the archive by tar, the unpack runs
as the job runs it (a subprocess per node); a node is named as ddlrun's emulated node 1.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.stage_env import make_env

from wmlce_tools.stage.archive import ensure_archive

NODE1 = {"DDL_EMULATE_NODES": "2", "GROUP_RANK": "1"}


def unpack(a, place: Path, job: str = "j1", popen: bool = False):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "DDL_", "GROUP_RANK"))}
    env.update(NODE1)
    cmd = [sys.executable, "-m", "wmlce_tools.stage", "unpack", "--manifest", str(a.manifest_path),
           "--place", str(place), "--job", job, "--archive", str(a.path)]
    if popen:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def release(a, place: Path, job: str, keep: bool = False):
    env = dict(os.environ, **NODE1)
    cmd = [sys.executable, "-m", "wmlce_tools.stage", "release", "--manifest", str(a.manifest_path),
           "--place", str(place), "--job", job, *(["--keep"] if keep else [])]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def copies(place: Path):
    return sorted(p.name for p in place.iterdir() if p.name.startswith(("wml-env-", ".wml-env-")) and p.is_dir())


def test_a_staged_copy_is_complete_relocated_and_reused(shared_env, tmp_path):
    a = ensure_archive(shared_env)
    place = tmp_path / "nvme"
    r = unpack(a, place)
    assert r.returncode == 0, r.stderr
    copy = place / f"wml-env-{shared_env.name}-{a.manifest.key}"
    assert copies(place) == [copy.name]
    # text files and shebangs name the copy, never the shared prefix
    assert (copy / "etc" / "where.txt").read_text() == f"installed in {copy}\n"
    out = subprocess.run([str(copy / "bin" / "stage-hello")], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"hello from {copy}"
    assert str(shared_env) not in (copy / "bin" / "stage-hello").read_text()
    # a second job on the node reuses the copy: nothing unpacked again
    inode = (copy / "etc" / "where.txt").stat().st_ino
    assert unpack(a, place, job="j2").returncode == 0
    assert (copy / "etc" / "where.txt").stat().st_ino == inode
    assert sorted(os.listdir(copy / ".wml-users")) == ["j1", "j2"]


def test_too_little_node_local_space_is_one_line_naming_the_node(shared_env, tmp_path):
    place = tmp_path / "small"
    place.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(place)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        a = ensure_archive(shared_env)
        r = unpack(a, place)
        assert r.returncode == 1
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("wml stage: node node1: ")
        assert "GiB free" in lines[0] and "needs" in lines[0], lines
        assert "Traceback" not in r.stderr
        assert copies(place) == []          # nothing half-written
    finally:
        subprocess.run(["umount", str(place)], check=True)


def test_a_staging_killed_half_way_never_leaves_a_copy_a_rank_could_start_on(tmp_path):
    env = make_env(tmp_path / "big", name="bigenv", bulk_files=12000)
    a = ensure_archive(env)
    place = tmp_path / "nvme"
    target = place / f"wml-env-bigenv-{a.manifest.key}"
    proc = unpack(a, place, popen=True)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:      # kill it once tar is writing the copy
            hidden = [p for p in place.glob(".wml-env-bigenv-*") if p.is_dir()] if place.is_dir() else []
            if hidden and any(hidden[0].rglob("f1*.py")):
                break
            assert proc.poll() is None, f"unpack ended before it could be killed: {proc.communicate()}"
            time.sleep(0.005)
        else:
            pytest.fail("the unpack never started writing")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert not target.exists(), "a half-unpacked copy took the name the ranks use"
    r = unpack(a, place)                       # the next job: cleans up and stages in full
    assert r.returncode == 0, r.stderr
    assert copies(place) == [target.name]
    assert json.loads((target / ".wml-staged.json").read_text())["key"] == a.manifest.key
    assert len(list((target / "lib").rglob("f*.py"))) == 12000


def test_a_stale_copy_of_an_older_env_is_replaced(tmp_path):
    env = make_env(tmp_path / "e", name="stale")
    old = ensure_archive(env)
    place = tmp_path / "nvme"
    assert unpack(old, place, job="j1").returncode == 0
    assert release(old, place, "j1", keep=True).returncode == 0       # kept for a next segment
    # the env changes (a package installed): a new key, a new archive
    (env / "conda-meta" / "extra-1.0-0.json").write_text("{}")
    (env / "etc" / "where.txt").write_text("changed\n")
    new = ensure_archive(env)
    assert new.manifest.key != old.manifest.key and not old.path.exists()
    r = unpack(new, place, job="j2")
    assert r.returncode == 0, r.stderr
    assert copies(place) == [f"wml-env-stale-{new.manifest.key}"]
    assert (place / f"wml-env-stale-{new.manifest.key}" / "etc" / "where.txt").read_text() == "changed\n"


def test_a_copy_with_this_key_but_no_completion_mark_is_made_again(shared_env, tmp_path):
    a = ensure_archive(shared_env)
    place = tmp_path / "nvme"
    assert unpack(a, place).returncode == 0
    copy = place / f"wml-env-{shared_env.name}-{a.manifest.key}"
    (copy / ".wml-staged.json").unlink()
    shutil.rmtree(copy / "etc")                 # damaged: an older wml, a user, a crash
    assert unpack(a, place, job="j2").returncode == 0
    assert (copy / "etc" / "where.txt").is_file() and (copy / ".wml-staged.json").is_file()


def test_a_marked_copy_that_lost_file_contents_is_made_again_not_used(shared_env, tmp_path):
    """The copy is made without an fsync: after a node lost power its marker may be on disk while
    a file's data is not (ext4 leaves it empty).  The next job checks every entry's size before
    it reuses the copy, and makes it again."""
    a = ensure_archive(shared_env)
    place = tmp_path / "nvme"
    assert unpack(a, place).returncode == 0
    copy = place / f"wml-env-{shared_env.name}-{a.manifest.key}"
    module = next((copy / "lib").glob("python3*/site-packages/stagedpkg/__init__.py"))
    size = module.stat().st_size
    module.write_bytes(b"")                   # what the crash left
    r = unpack(a, place, job="j2")
    assert r.returncode == 0, r.stderr
    assert module.stat().st_size == size
    out = subprocess.run([str(copy / "bin" / "stage-hello")], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"hello from {copy}"


def test_two_jobs_on_one_node_never_race(shared_env, tmp_path):
    """While one job stages (holds the node's lock), another waits: it neither unpacks beside it
    nor starts its ranks on a copy that is not complete."""
    a = ensure_archive(shared_env)
    place = tmp_path / "nvme"
    place.mkdir()
    fd = os.open(place / f".wml-env-{shared_env.name}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)              # the first job, staging
    try:
        proc = unpack(a, place, job="j2", popen=True)
        time.sleep(2.0)
        assert proc.poll() is None, proc.communicate()
        assert copies(place) == [], "the second job unpacked while the first held the node"
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert copies(place) == [f"wml-env-{shared_env.name}-{a.manifest.key}"]


def test_the_copy_goes_when_the_last_job_using_it_ends(shared_env, tmp_path):
    a = ensure_archive(shared_env)
    place = tmp_path / "nvme"
    assert unpack(a, place, job="j1").returncode == 0
    assert unpack(a, place, job="j2").returncode == 0
    copy = place / f"wml-env-{shared_env.name}-{a.manifest.key}"
    assert release(a, place, "j1").returncode == 0
    assert copy.is_dir()                        # j2 still runs from it
    assert release(a, place, "j2").returncode == 0
    assert not copy.exists()


def test_a_virtualenv_is_staged_and_runs_from_its_copy(tmp_path):
    """A venv (no conda-meta): keyed by pyvenv.cfg and its RECORDs, its scripts relocated."""
    venv = tmp_path / "shared" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    script = venv / "bin" / "hello"
    script.write_text(f"#!{venv}/bin/python\nimport sys\nprint(sys.prefix)\n")
    script.chmod(0o755)
    a = ensure_archive(venv)
    place = tmp_path / "nvme"
    assert unpack(a, place).returncode == 0
    copy = place / f"wml-env-venv-{a.manifest.key}"
    out = subprocess.run([str(copy / "bin" / "hello")], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == str(copy)
    assert str(venv) not in (copy / "bin" / "activate").read_text()


@pytest.mark.parametrize("key", ["CONDA_PREFIX", "VIRTUAL_ENV"])
def test_a_rank_on_an_emulated_node_runs_from_its_nodes_copy_of_a_conda_env_or_a_virtualenv(key):
    """The rank shim's step (ddlrun.place.rank_environment): on emulated nodes the job script's
    copy (node 0's) becomes this rank's node's, for a conda env (CONDA_PREFIX) and a virtualenv
    (VIRTUAL_ENV) alike, and PATH entries under the shared env or node 0's copy follow."""
    from wmlce_tools.ddlrun.place import FROM_VAR, NODE_PREFIX_VAR, rank_environment

    env = {key: "/nl/node0/wml-env-e-1", NODE_PREFIX_VAR: "/nl/{node}/wml-env-e-1", FROM_VAR: "/shared/e",
           "PATH": "/nl/node0/wml-env-e-1/bin:/shared/e/sbin:/usr/bin"}
    rank_environment(env, 1)
    assert env[key] == "/nl/node1/wml-env-e-1"
    assert env["PATH"] == "/nl/node1/wml-env-e-1/bin:/nl/node1/wml-env-e-1/sbin:/usr/bin"


@pytest.mark.parametrize("workers", [2, 3, 16])
def test_an_archive_unpacked_in_parallel_ranges_is_the_env_entry_for_entry(shared_env, tmp_path, workers):
    """A node splits the archive at the manifest's cuts between ``workers`` tar processes: the
    tree they make together is the env's, every entry with its kind, mode, size and bytes."""
    from wmlce_tools.stage.node import NodePlace, unpack as unpack_into

    a = ensure_archive(shared_env)
    assert a.manifest.cuts, "the manifest records where the archive may be split"
    dest = tmp_path / "copy"
    dest.mkdir()
    unpack_into(a.path, dest, NodePlace("node1", tmp_path), a.manifest, workers=workers)
    for rel, kind, size in a.manifest.entries:
        want, got = os.lstat(shared_env / rel), os.lstat(dest / rel)
        assert (got.st_mode, got.st_size) == (want.st_mode, want.st_size), rel
        if kind == "f":
            assert (dest / rel).read_bytes() == (shared_env / rel).read_bytes(), rel
        elif kind == "l":
            assert os.readlink(dest / rel) == os.readlink(shared_env / rel), rel


def test_an_archive_holding_a_hard_link_is_never_split(tmp_path):
    """A hard link's target may sit in an earlier range another tar has not unpacked yet."""
    from wmlce_tools.stage.archive import cuts

    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"f{i}").write_bytes(os.urandom(4096))
    os.link(src / "f0", src / "z-link")
    subprocess.run(["tar", "-C", str(src), "-cf", str(tmp_path / "a.tar"), "."], check=True)
    assert cuts(tmp_path / "a.tar") == []
    (src / "z-link").unlink()
    subprocess.run(["tar", "-C", str(src), "-cf", str(tmp_path / "b.tar"), "."], check=True)
    found = cuts(tmp_path / "b.tar")
    assert len(found) > 8 and found == sorted(set(found))
