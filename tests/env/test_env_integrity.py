"""No silently corrupted environments (issue 14 part 1), with real rattler installs from the
local channel: a file edited in place in one env (hard-linked to the package cache) must not
reach the envs built after it; verify says the file is shared and how to repair; the link
policy is the user's choice."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from env_helpers import run_wml  # noqa: E402
from local_channel import build_channel  # noqa: E402

DATA = "share/wml-base/VERSION"          # a plain data file of wml-base 2.0 ("2.0\n")


@pytest.fixture
def own_cache(tmp_path, monkeypatch) -> Path:
    """A package cache for this test alone (these tests damage it on purpose)."""
    pkgs = tmp_path / "pkgs"
    monkeypatch.setenv("WML_PKGS_DIR", str(pkgs))
    monkeypatch.delenv("WML_ENV_LINK", raising=False)
    monkeypatch.delenv("WML_CACHE_CHECK", raising=False)
    return pkgs


def wml(*args, ok=True, cwd=None):
    proc = run_wml(*args, cwd=cwd)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def one_error_line(proc) -> str:
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("wml: error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_an_edit_in_one_env_does_not_reach_the_next(lockfile, own_cache, tmp_path):
    """The issue's steps: create A, append a line to a data file in A, create B."""
    a, b = tmp_path / "A", tmp_path / "B"
    created = wml("env", "create", lockfile, "--prefix", a, "--no-progress")
    assert "hard-linked from the package cache" in created.stderr
    assert os.stat(a / DATA).st_nlink > 1          # the hazard is there: A shares the cache's file
    with open(a / DATA, "a") as f:
        f.write("a line added in env A\n")

    # verify A: the mismatch, that the file is the package cache's too, and the way out
    v = wml("env", "verify", a, ok=False)
    assert v.returncode == 1
    assert f"wml-base-2.0-0: {DATA}: sha256 mismatch; hard-linked with the package cache ({own_cache}" in v.stdout
    assert "a hard-linked file edited in place shows the edit in every env sharing it" in v.stdout
    assert one_error_line(v).endswith(f"; to repair: wml env repair {a} (puts the packages' own files back), "
                                      "or re-create the env")

    wml("env", "create", lockfile, "--prefix", b, "--no-progress")
    assert (b / DATA).read_text() == "2.0\n"      # B carries none of A's edit
    assert f"{b}: OK (" in wml("env", "verify", b).stdout
    assert (a / DATA).read_text() == "2.0\na line added in env A\n"   # A's own edit is left to its owner
    assert not os.path.samefile(a / DATA, b / DATA)

    # repair puts A's file back; A verifies again
    r = wml("env", "repair", a, "--no-progress")
    assert "repaired 1 file(s) in 1 package(s) (wml-base-2.0-0)" in r.stdout
    assert f"restored wml-base-2.0-0: {DATA} (sha256 mismatch)" in r.stderr
    assert (a / DATA).read_text() == "2.0\n"
    assert "OK (" in wml("env", "verify", a).stdout
    assert "nothing to repair" in wml("env", "repair", a, "--no-progress").stdout


def test_clone_of_an_env_with_an_edited_file_is_clean(lockfile, own_cache, tmp_path):
    a, c = tmp_path / "A", tmp_path / "C"
    wml("env", "create", lockfile, "--prefix", a, "--no-progress")
    with open(a / DATA, "a") as f:
        f.write("edited\n")
    wml("env", "clone", a, c, "--no-progress")
    assert (c / DATA).read_text() == "2.0\n"
    assert "OK (" in wml("env", "verify", c).stdout


def test_damaged_cache_whose_channel_is_gone_fails_naming_package_and_file(tmp_path, own_cache, write_spec):
    chan = build_channel(tmp_path / "chan" / "wmltest")
    lock = tmp_path / "lock.yml"
    wml("env", "lock", write_spec(channel=chan.as_uri()), "--lockfile", lock)
    a, b = tmp_path / "A", tmp_path / "B"
    wml("env", "create", lock, "--prefix", a, "--no-progress")
    with open(a / DATA, "a") as f:
        f.write("edited\n")
    shutil.rmtree(chan)                            # the archive cannot be fetched again
    line = one_error_line(wml("env", "create", lock, "--prefix", b, "--no-progress", ok=False))
    assert (f"the package cache's copy of wml-base-2.0-0 is damaged ({DATA}: sha256 mismatch) "
            f"and could not be fetched again") in line
    assert f"remove {own_cache / 'wml-base-2.0-0'} or make its channel reachable" in line
    assert not b.exists() and not list(tmp_path.glob(".B*"))   # nothing half-written


def test_link_copy_gives_an_env_files_of_its_own(lockfile, own_cache, tmp_path, monkeypatch):
    a, b = tmp_path / "A", tmp_path / "B"
    out = wml("env", "create", lockfile, "--prefix", a, "--no-progress", "--link", "copy")
    assert "files copied from the package cache: --link/WML_ENV_LINK copy" in out.stderr
    assert os.stat(a / DATA).st_nlink == 1
    with open(a / DATA, "a") as f:
        f.write("edited\n")
    assert (own_cache / "wml-base-2.0-0" / DATA).read_text() == "2.0\n"     # the cache never saw it
    monkeypatch.setenv("WML_ENV_LINK", "copy")                                  # the setting
    wml("env", "create", lockfile, "--prefix", b, "--no-progress")
    assert os.stat(b / DATA).st_nlink == 1


@pytest.mark.parametrize("args, env, message", [
    (["--link", "symlink"], {}, "--link='symlink': expected one of auto, hardlink, reflink, copy"),
    ([], {"WML_ENV_LINK": "sometimes"}, "WML_ENV_LINK='sometimes': expected one of auto, hardlink, reflink, copy"),
    ([], {"WML_CACHE_CHECK": "paranoid"}, "WML_CACHE_CHECK='paranoid': expected one of full, fast, skip"),
])
def test_bad_link_settings_are_one_line(lockfile, own_cache, tmp_path, monkeypatch, args, env, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    line = one_error_line(wml("env", "create", lockfile, "--prefix", tmp_path / "X", "--no-progress", *args, ok=False))
    assert message in line and not (tmp_path / "X").exists()


def test_auto_copies_on_a_shared_filesystem(tmp_path, monkeypatch):
    from wmlce_tools.env import linking

    monkeypatch.setattr(linking, "fs_type", lambda p: "nfs")
    choice = linking.choose(linking.LinkPolicy.auto, tmp_path / "env", tmp_path / "pkgs")
    assert choice.policy == linking.LinkPolicy.copy and "shared filesystem (nfs)" in choice.reason
    monkeypatch.setattr(linking, "fs_type", lambda p: "ext2/ext3")
    assert linking.choose(linking.LinkPolicy.auto, tmp_path / "env", tmp_path / "pkgs").policy == linking.LinkPolicy.hardlink
    assert linking.choose(linking.LinkPolicy.reflink, tmp_path / "env", tmp_path / "pkgs").policy == linking.LinkPolicy.reflink
