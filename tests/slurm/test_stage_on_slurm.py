"""``wml submit --site local-slurm --nodes 2 --env E --stage-env`` on the real local Slurm: the job
script sbcasts the env's archive to the nodes and unpacks it with one srun task per node, each
emulated node into its own TmpFS directory; every rank runs from its node's copy, and
``strace -f -e trace=%file`` on every rank counts no call under E's shared prefix."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.stage_env import make_env

PROGRAM = """\
import json, os, sys
import stagedpkg
open(os.path.join(sys.argv[1], "rank" + os.environ["RANK"]), "w").write(json.dumps(
    {"prefix": sys.prefix, "node": os.environ["SLURMD_NODENAME"], "pkg": stagedpkg.HERE}))
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_staged_job_on_slurm_sbcasts_and_makes_no_shared_call(local_slurm, run_wml, tmp_path):
    env_prefix = make_env(tmp_path / "shared")
    prog, out, traces = tmp_path / "prog.py", tmp_path / "out", tmp_path / "strace"
    prog.write_text(PROGRAM)
    out.mkdir()
    traces.mkdir()
    slurm_env = {"SLURM_CONF": str(local_slurm.conf), "WML_SLURM_BASE": str(local_slurm.base)}
    r = run_wml("submit", "--site", "local-slurm", "--nodes", "2", "--ranks-per-node", "1", "-t", "5",
                "--env", str(env_prefix), "--stage-env", "--wait", "--json", "--",
                "strace", "-f", "-qq", "-e", "trace=%file", "-ff", "-o", str(traces / "trace"),
                "python", str(prog), str(out), env=slurm_env, timeout=300)
    job = json.loads(r.stdout.splitlines()[0]) if r.stdout.strip() else {}
    jobdir = Path(job["output"]).parent if job.get("output") else tmp_path / "none"
    log = "".join(f.read_text() for f in sorted(jobdir.glob("*.out")) + sorted(jobdir.glob("*.err")))
    assert r.returncode == 0, r.stderr + log
    assert "wml: staged stagetest to " in log and " on 2 nodes" in log, log
    # the archive was built by wml submit, once, not on the job's nodes
    assert "wml: building the staging archive of" in r.stderr and "building" not in log
    got = {p.name: json.loads(p.read_text()) for p in out.glob("rank*")}
    assert sorted(got) == ["rank0", "rank1"], log
    assert {g["node"] for g in got.values()} == set(local_slurm.nodes[:2])
    for g in got.values():     # each rank on its node's own copy, under that node's TmpFS
        node_dir = local_slurm.base / "tmpfs" / g["node"]
        assert Path(g["prefix"]).parent == node_dir and g["pkg"].startswith(str(node_dir) + "/")
    calls = {p.name: sum(str(env_prefix) in ln for ln in p.read_text().splitlines()) for p in traces.glob("trace.*")}
    assert len(calls) >= 2 and set(calls.values()) == {0}, calls
    for node in local_slurm.nodes[:2]:      # the job's copies and sbcast's archive are gone
        left = [p.name for p in (local_slurm.base / "tmpfs" / node).iterdir()
                if p.name.startswith(("wml-env-stagetest-", f".wml-sbcast-{job['job_id']}-"))]
        assert left == [], left
