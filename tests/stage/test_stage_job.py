"""``wml submit --nodes 2 --env E --stage-env`` on the local site (2 emulated nodes, each with its
own node-local directory): the ranks run from their node's copy, and ``strace -f -e
trace=%file`` on every rank counts no call under E's shared prefix (against many unstaged).
A node whose staging fails stops the job before any rank starts, with one line naming it;
``--stage-env=auto`` runs from the shared env instead, with one warning line.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

PROGRAM = """\
import json, os, sys
import stagedpkg
rank = os.environ["RANK"]
open(os.path.join(sys.argv[1], "rank" + rank), "w").write(json.dumps(
    {"prefix": sys.prefix, "pkg": stagedpkg.HERE, "conda_prefix": os.environ["CONDA_PREFIX"],
     "ld": os.environ.get("LD_LIBRARY_PATH", ""), "path": os.environ["PATH"]}))
"""


@pytest.fixture
def job(tmp_path, shared_env, run_wml):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    out = tmp_path / "out"
    out.mkdir()
    place = tmp_path / "node-local"

    def submit(*opts, strace=None, place_env=None):
        cmd = ["submit", "--nodes", "2", "--env", str(shared_env), *opts, "--"]
        if strace is not None:
            cmd += ["strace", "-f", "-qq", "-e", "trace=%file", "-ff", "-o", str(strace / "trace")]
        cmd += ["python", str(prog), str(out)]
        env = {"WML_STAGE_PLACE": place_env or f"{place}/{{node}}"}
        return run_wml(*cmd, env=env, timeout=600)

    submit.out, submit.place = out, place
    return submit


def ranks(out: Path):
    return {int(p.name[4:]): json.loads(p.read_text()) for p in out.glob("rank*")}


def shared_calls(trace_dir: Path, prefix: Path):
    """Per traced process: its file calls naming the shared prefix."""
    return {p.name: sum(str(prefix) in line for line in p.read_text().splitlines())
            for p in trace_dir.glob("trace.*")}


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_staged_ranks_make_no_call_under_the_shared_prefix(job, shared_env, tmp_path):
    staged, unstaged = tmp_path / "strace-staged", tmp_path / "strace-unstaged"
    staged.mkdir()
    unstaged.mkdir()
    r = job("--stage-env", strace=staged)
    assert r.returncode == 0, r.stdout + r.stderr
    got = ranks(job.out)
    assert sorted(got) == [0, 1]
    for rank, info in got.items():    # each rank runs from its own node's copy
        mine = job.place / f"node{rank}"
        assert Path(info["prefix"]).parent == mine and Path(info["conda_prefix"]) == Path(info["prefix"])
        assert info["pkg"].startswith(str(mine) + "/")
    calls = shared_calls(staged, shared_env)
    assert len(calls) >= 2 and set(calls.values()) == {0}, calls
    assert not any(job.place.glob("node*/wml-env-*")), "the copies outlived the job"

    for p in job.out.iterdir():
        p.unlink()
    r = job(strace=unstaged)          # the same job from the shared env: the import storm
    assert r.returncode == 0, r.stderr
    calls = shared_calls(unstaged, shared_env)
    assert sum(n > 20 for n in calls.values()) >= 2, calls


def test_ranks_path_and_ld_library_path_lead_to_their_copy(job, shared_env):
    """A library path into the shared env (a module, the user) becomes one into the rank's copy."""
    r = job("--stage-env", "--export", f"LD_LIBRARY_PATH={shared_env}/lib:/opt/other/lib")
    assert r.returncode == 0, r.stdout + r.stderr
    for rank, info in ranks(job.out).items():
        copy = info["prefix"]
        assert info["ld"] == f"{copy}/lib:/opt/other/lib"
        assert info["path"].split(":")[0] == f"{copy}/bin" and str(shared_env) not in info["path"]


def test_a_node_whose_staging_fails_stops_the_job_before_any_rank(job, tmp_path):
    job.place.mkdir()
    (job.place / "node1").write_text("not a directory")     # node 1's place cannot be made
    r = job("--stage-env")
    assert r.returncode != 0
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "node1" in ln]
    assert len(lines) == 1 and "node node1: cannot create" in lines[0], r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert ranks(job.out) == {}, "a rank started although a node had no copy"


def test_stage_env_auto_falls_back_to_the_shared_env_with_one_warning(job, shared_env):
    job.place.mkdir()
    (job.place / "node1").write_text("not a directory")
    r = job("--stage-env=auto")
    assert r.returncode == 0, r.stdout + r.stderr
    warnings = [ln for ln in (r.stdout + r.stderr).splitlines() if "warning" in ln]
    assert len(warnings) == 1 and "node node1" in warnings[0] and str(shared_env) in warnings[0]
    got = ranks(job.out)
    assert sorted(got) == [0, 1] and all(Path(i["prefix"]) == shared_env for i in got.values())


def test_an_archive_the_first_node_cannot_read_fails_every_node_without_a_hang(shared_env, tmp_path, isolated_env):
    """The broadcast path alone (ddlrun, one rank per emulated node), its archive gone."""
    import subprocess
    import sys

    from wmlce_tools.stage.archive import ensure_archive

    a = ensure_archive(shared_env)
    cmd = [str(Path(sys.executable).parent / "ddlrun"), "--site", "local", "-n", "2", "--ranks-per-node", "1",
           "--cores-per-rank", "1", "--emulate-nodes", "2", "--no-prefix", "--",
           sys.executable, "-m", "wmlce_tools.stage", "unpack", "--manifest", str(a.manifest_path),
           "--place", f"{tmp_path}/nl/{{node}}", "--job", "j1", "--bcast", str(tmp_path / "gone.tar")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=isolated_env)
    assert r.returncode != 0
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("wml stage: node ")]
    assert sorted(ln.split(":")[1] for ln in lines) == [" node node0", " node node1"], r.stdout + r.stderr
    assert all("cannot read" in ln for ln in lines) and "Traceback" not in r.stderr


def test_a_missing_launcher_is_one_line_and_auto_falls_back(shared_env, tmp_path, isolated_env):
    """No sbcast on the node (a Slurm site): one line, no traceback; with --auto the shared env."""
    import os
    import shutil
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(shutil.which("tar"), bin_dir / "tar")
    env = dict(isolated_env, PATH=str(bin_dir), WML_SLURM_BASE=str(tmp_path))
    cmd = [sys.executable, "-m", "wmlce_tools.stage", "job", "--env", str(shared_env), "--place",
           f"{tmp_path}/nl", "--site", "local-slurm", "--nodes", "2", "--job", "7"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines()[-1] == (
        f"wml stage: error: staging {shared_env.name} failed, no rank started: sbcast not found on this node")
    r = subprocess.run([*cmd, "--auto"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and r.stdout.strip() == str(shared_env)
    assert [ln for ln in r.stderr.splitlines() if "warning" in ln] == [
        f"wml: warning: staging {shared_env.name} failed (sbcast not found on this node); "
        f"the ranks use the shared {shared_env}"]


def test_a_place_naming_a_variable_a_node_lacks_is_one_line(job):
    """``/mnt/bb/$USER`` with USER unset must not become a directory called '$USER'."""
    r = job("--stage-env", place_env=f"{job.place}/$WML_TEST_UNSET_VAR/{{node}}")
    assert r.returncode != 0
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "WML_TEST_UNSET_VAR" in ln and "not set" in ln]
    assert len(lines) == 1 and "node node0" in lines[0] and "node node1" in lines[0], r.stdout + r.stderr
    assert ranks(job.out) == {} and not job.place.exists()
