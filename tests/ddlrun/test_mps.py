"""CUDA MPS for ranks that share a GPU (issue 57 item 1): the real ddlrun on a host that pretends
to have one GPU (a site profile), the real MPICH, and a stand-in ``nvidia-cuda-mps-control`` first
on PATH (tests/ddlrun/programs/fake_mps_control.py: a daemon on a UNIX socket in the pipe
directory, as NVIDIA's), which journals every call; each rank journals what it sees.  What is
checked: one daemon per host, started before any rank and stopped after the last (also after a
failing rank, and when ddlrun is signalled), in a directory of the job under the node-local place
that is gone afterwards; every rank has its pipe directory and finds the daemon running there; a
daemon that does not start is one line naming the node and no rank starts; time-sliced starts
nothing; ``ddlrun --check`` and the dry run say which is in force."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.mps import MPS_RANK, env_for, fake_mps_bin, journal, kinds, short_place

from ddlrun_helpers import FAKE_GPU_SITE

MPS_SITE = FAKE_GPU_SITE + """\
stage_env: {{place: "$MPS_TEST_PLACE/{{node}}"}}
gpu_sharing:
  default: mps
  docs: [https://docs.alcf.anl.gov/polaris/running-jobs/using-gpus/]
  checked: "2026-11-29"
"""


@pytest.fixture
def mps(site_dir, tmp_path):
    """(env for ddlrun, journal path, place): the stand-in on PATH, a short node-local place."""
    (site_dir / "onegpu.yaml").write_text(FAKE_GPU_SITE.format(name="onegpu", gpus=1, binding="per-rank"))
    (site_dir / "mpsgpu.yaml").write_text(MPS_SITE.format(name="mpsgpu", gpus=1, binding="per-rank"))
    place = short_place()
    path = tmp_path / "journal.jsonl"
    try:
        yield env_for(fake_mps_bin(tmp_path), path, place, WML_JOB_ID="job42"), path, place
    finally:
        for e in journal(path):          # a daemon a failing test left behind
            if e["event"] == "start":
                subprocess.run(["sh", "-c", "echo quit | nvidia-cuda-mps-control"], timeout=20,
                               env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=e["pipe"],
                                        PATH=f"{tmp_path / 'fake-mps-bin'}:{os.environ['PATH']}"),
                               capture_output=True)
        shutil.rmtree(place, ignore_errors=True)


def ranks_of(entries):
    return sorted((e for e in entries if e["event"] == "rank"), key=lambda e: e["rank"])


def test_one_daemon_before_the_ranks_stopped_after_them(ddlrun, mps):
    env, path, place = mps
    r = ddlrun("--site", "onegpu", "-n", "2", "--ranks-per-gpu", "2", "--gpu-sharing", "mps",
               sys.executable, str(MPS_RANK), env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    entries = journal(path)
    assert kinds(entries) == ["start", "ask:get_server_list", "rank", "rank", "ask:quit"], entries
    start = entries[0]
    # a directory of this job under the node-local place ($WML_STAGE_PLACE), pipe and log in it
    assert re.fullmatch(re.escape(place) + r"/wml-mps-job42\.\d+/pipe", start["pipe"]), start
    assert start["log"] == start["pipe"][:-len("pipe")] + "log"
    for rank in ranks_of(entries):        # each rank: the daemon's pipe directory, the daemon running there
        assert (rank["pipe"], rank["log"], rank["alive"]) == (start["pipe"], start["log"], True), rank
    assert not os.path.exists(os.path.dirname(start["pipe"]))           # removed after the ranks
    lines = r.error_lines                 # said before the launch line, and after the ranks
    started = next(i for i, l in enumerate(lines) if l.startswith("ddlrun: CUDA MPS: control daemon started on 1 node(s)"))
    launch = next(i for i, l in enumerate(lines) if "wmlce_tools.ddlrun.rankexec" in l)
    assert started < launch < lines.index("ddlrun: CUDA MPS: control daemon stopped"), lines


def test_emulated_nodes_on_one_host_share_its_one_daemon(ddlrun, mps):
    env, path, place = mps
    env = {k: v for k, v in env.items() if k != "WML_STAGE_PLACE"}      # the site's place: $MPS_TEST_PLACE/{node}
    r = ddlrun("--site", "mpsgpu", "-n", "2", "--emulate-nodes", "2", "--ranks-per-gpu", "2",
               sys.executable, str(MPS_RANK), env=dict(env, MPS_TEST_PLACE=place), timeout=120)
    assert r.returncode == 0, r.stderr
    entries = journal(path)
    assert kinds(entries) == ["start", "ask:get_server_list", "rank", "rank", "ask:quit"], entries
    pipe = entries[0]["pipe"]
    # the site's place names {node}: one host, one daemon, so one directory for both emulated nodes
    assert pipe.startswith(f"{place}/mps/wml-mps-job42."), pipe
    assert [(e["group_rank"], e["pipe"], e["alive"]) for e in ranks_of(entries)] == [("0", pipe, True),
                                                                                      ("1", pipe, True)]


def test_the_daemon_is_stopped_after_a_failing_rank(ddlrun, mps):
    env, path, _ = mps
    r = ddlrun("--site", "mpsgpu", "-n", "2", "--ranks-per-gpu", "2", sys.executable, str(MPS_RANK),
               env=dict(env, MPS_TEST_PLACE=mps[2], FAIL_RANK="1", FAIL_CODE="3"), timeout=120)
    assert r.returncode == 3, r.stderr
    entries = journal(path)
    assert kinds(entries)[-1] == "ask:quit" and kinds(entries).count("rank") == 2, entries
    assert max(e["t"] for e in ranks_of(entries)) < entries[-1]["t"]
    assert "ddlrun: rank 1 failed first, with exit status 3" in r.stderr
    assert not os.path.exists(os.path.dirname(entries[0]["pipe"]))


def test_a_healed_run_starts_the_daemon_for_each_attempt_on_its_nodes(ddlrun, mps):
    """--restarts with a spare: the restart runs on other nodes (the spare), so each attempt starts
    the daemons on its own nodes before its ranks and stops them after (one daemon for the whole run
    would leave the spare without one)."""
    env, path, place = mps
    r = ddlrun("--site", "mpsgpu", "-n", "2", "--emulate-nodes", "2", "--ranks-per-gpu", "2", "--spare-nodes", "1",
               "--restarts", "1", sys.executable, str(MPS_RANK),
               env=dict(env, MPS_TEST_PLACE=place, FAIL_RANK="1", FAIL_CODE="SIGKILL", FAIL_ATTEMPT="1", WML_JOB_DIR=str(mps[1].parent / "job")),
               timeout=180)
    assert r.returncode == 0, r.stderr
    assert "relaunching on node0, node2 without node1" in r.stderr, r.stderr
    entries = journal(path)
    one = ["start", "ask:get_server_list", "rank", "rank", "ask:quit"]
    assert kinds(entries) == one + one, entries
    second = [e for e in entries if e["event"] == "rank" and e["attempt"] == "2"]
    assert [(e["group_rank"], e["alive"]) for e in sorted(second, key=lambda e: e["rank"])] == [
        ("0", True), ("1", True)], second
    assert r.stderr.count("ddlrun: CUDA MPS: control daemon started on") == 2, r.stderr


def test_the_daemon_is_stopped_when_ddlrun_is_signalled(isolated_env, site_dir, mps, tmp_path):
    env, path, _ = mps
    e = dict(isolated_env, WML_SITE_PATH=str(site_dir), MPS_TEST_PLACE=mps[2], SLEEP_S="60", **env)
    proc = subprocess.Popen([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--site", "mpsgpu", "-n", "2",
                             "--ranks-per-gpu", "2", sys.executable, str(MPS_RANK)], env=e, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while kinds(journal(path)).count("rank") < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, err
    entries = journal(path)
    assert kinds(entries)[-1] == "ask:quit", (entries, err)
    assert "ddlrun: CUDA MPS: control daemon stopped" in err
    assert not os.path.exists(os.path.dirname(entries[0]["pipe"]))


def test_a_daemon_that_does_not_start_is_one_line_and_no_rank_starts(ddlrun, mps):
    env, path, _ = mps
    r = ddlrun("--site", "mpsgpu", "-n", "2", "--ranks-per-gpu", "2", sys.executable, str(MPS_RANK),
               env=dict(env, MPS_TEST_PLACE=mps[2], FAKE_MPS_FAIL="start"), timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    host = os.uname().nodename.split(".")[0]
    assert r.error_lines == [
        f"ddlrun: error: the MPS control daemon did not start on {host}: nvidia-cuda-mps-control -d exited 1: "
        "stand-in: no CUDA-capable device is detected; --gpu-sharing time-slice runs the ranks time-sliced "
        "without it"], r.stderr
    assert "rank" not in kinds(journal(path))
    assert os.listdir(mps[2]) == []                                   # nothing left behind
    # not installed on the node: the same one line
    r = ddlrun("--site", "mpsgpu", "-n", "2", "--ranks-per-gpu", "2", sys.executable, str(MPS_RANK),
               env=dict(env, MPS_TEST_PLACE=mps[2], PATH=os.path.dirname(sys.executable) + ":/usr/bin:/bin"))
    assert r.returncode == 2 and r.error_lines == [
        f"ddlrun: error: the MPS control daemon did not start on {host}: nvidia-cuda-mps-control is not on PATH "
        "there; --gpu-sharing time-slice runs the ranks time-sliced without it"], r.stderr
    # asked for time-sliced: no daemon, the ranks run
    r = ddlrun("--site", "mpsgpu", "-n", "2", "--ranks-per-gpu", "2", "--gpu-sharing", "time-slice",
               sys.executable, str(MPS_RANK), env=dict(env, MPS_TEST_PLACE=mps[2], FAKE_MPS_FAIL="start"))
    assert r.returncode == 0, r.stderr
    assert [e["pipe"] for e in ranks_of(journal(path))] == [None, None]


def test_time_sliced_starts_nothing(ddlrun, mps):
    env, path, _ = mps
    for extra in ([], ["--gpu-sharing", "time-slice"]):       # the site names none; asked for
        r = ddlrun("--site", "onegpu", "-n", "2", "--ranks-per-gpu", "2", *extra, sys.executable, str(MPS_RANK),
                   env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "CUDA MPS" not in r.stderr
    assert kinds(journal(path)) == ["rank"] * 4
    assert {e["pipe"] for e in ranks_of(journal(path))} == {None}
    # every rank its own GPU: nothing to share, --gpu-sharing says nothing
    r = ddlrun("--site", "onegpu", "-n", "1", "--gpu-sharing", "mps", sys.executable, str(MPS_RANK), env=env)
    assert r.returncode == 0 and "CUDA MPS" not in r.stderr and "start" not in kinds(journal(path))


def test_check_and_dry_run_say_which_is_in_force(ddlrun, mps):
    env, _, place = mps
    env = dict(env, MPS_TEST_PLACE=place)
    cases = {
        ("onegpu",): "GPU sharing: 2 ranks per GPU, time-sliced (no CUDA MPS; site onegpu names no gpu_sharing; "
                     "--gpu-sharing mps starts CUDA MPS)",
        ("onegpu", "--gpu-sharing", "mps"): "GPU sharing: 2 ranks per GPU under CUDA MPS (--gpu-sharing): ddlrun "
                                            "starts nvidia-cuda-mps-control -d once per node before the ranks and "
                                            "stops it after them; pipes in " + place + "/wml-mps-job42.",
        ("mpsgpu",): "GPU sharing: 2 ranks per GPU under CUDA MPS (site mpsgpu: "
                     "https://docs.alcf.anl.gov/polaris/running-jobs/using-gpus/): ddlrun starts",
        ("mpsgpu", "--gpu-sharing", "time-slice"): "GPU sharing: 2 ranks per GPU, time-sliced (no CUDA MPS; "
                                                   "--gpu-sharing)",
    }
    for args, line in cases.items():
        r = ddlrun("--check", "--site", args[0], "-n", "2", "--ranks-per-gpu", "2", *args[1:],
                   env=dict(env, CUDA_VISIBLE_DEVICES="0"))      # the probe counts the one GPU
        assert r.returncode == 0, r.stderr
        said = [l for l in r.error_lines if "GPU sharing" in l]
        assert len(said) == 1 and said[0].startswith("ddlrun: " + line), (args, r.stderr)
        dry = ddlrun("--dry-run", "--site", args[0], "-n", "2", "--ranks-per-gpu", "2", *args[1:], "python", "x.py",
                     env=env)
        assert dry.returncode == 0 and f"# {line}" in dry.stdout, dry.stdout
    assert kinds(journal(mps[1])) == []             # neither starts anything
    # Summit: LSF starts it for -alloc_flags gpumps; its GPUs are EXCLUSIVE_PROCESS
    lsf = {"LSB_JOBID": "1", "LSB_MCPU_HOSTS": "batch1 1 a01n01 42 a01n02 42"}
    dry = ddlrun("--dry-run", "--site", "summit", "--ranks-per-gpu", "2", "python", "x.py", env=lsf)
    assert dry.returncode == 0 and "# GPU sharing: 2 ranks per GPU under CUDA MPS, started by LSF, for " \
                                   "-alloc_flags gpumps (site summit: " in dry.stdout, dry.stderr
    assert "CUDA_MPS_PIPE_DIRECTORY" not in dry.stdout
    dry = ddlrun("--dry-run", "--site", "summit", "--ranks-per-gpu", "2", "--gpu-sharing", "time-slice", "python",
                 "x.py", env=lsf)
    assert dry.returncode == 2 and dry.error_lines == [
        "ddlrun: error: --gpu-sharing time-slice: summit's GPUs are in EXCLUSIVE_PROCESS mode (one process each), "
        "so ranks sharing one need CUDA MPS (https://docs.olcf.ornl.gov/systems/summit_user_guide.html)"]


def test_polaris_dry_run_starts_mps_once_per_node_and_hands_every_rank_the_pipe(ddlrun):
    """Two PBS nodes: the start goes through PALS's mpiexec, one rank per node, as ALCF's page does;
    every rank gets CUDA_MPS_PIPE_DIRECTORY on the launch line."""
    env = {"PBS_JOBID": "123.polaris-pbs-01", "PBS_NODEFILE": "", "WML_MPIEXEC": "mpiexec"}
    nodefile = Path(os.environ.get("TMPDIR", "/tmp")) / f"wml-mps-nodes-{os.getpid()}"
    nodefile.write_text("x3001c0s1b0n0\nx3001c0s1b1n0\n")
    try:
        env["PBS_NODEFILE"] = str(nodefile)
        dry = ddlrun("--dry-run", "--site", "polaris", "--ranks-per-gpu", "2", "python", "x.py", env=env)
    finally:
        nodefile.unlink()
    assert dry.returncode == 0, dry.stderr
    launch = dry.stdout.splitlines()[0]
    pipe = re.search(r"--env CUDA_MPS_PIPE_DIRECTORY=(\S+)", launch)
    assert pipe and re.fullmatch(r"/local/scratch/wml-mps-123\.polaris-pbs-01\.\d+/pipe", pipe.group(1)), launch
    assert "# before the ranks (once per node through the launcher): python -m wmlce_tools.ddlrun.mps start" \
        in dry.stdout
