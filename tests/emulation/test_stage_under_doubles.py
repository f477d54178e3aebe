"""``--stage-env`` job scripts for Summit (LSF + jsrun), Theta (Cobalt + aprun), Polaris and
Aurora (PBS Pro + PALS) run end to end under the schedulers' doubles (see
test_lsf_cobalt_scripts.py and test_pbs_scripts.py): the staging step broadcasts the env's
archive through ddlrun and the site's launcher to one rank per (emulated) node, each node
unpacks it into its own node-local directory, and every rank of the job runs from its node's
copy.  Only the schedulers and launchers are doubles; ddlrun, MPICH, tar and the env are real.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers.stage_env import make_env
from test_lsf_cobalt_scripts import Emulation, summit_hosts
from test_pbs_scripts import AURORA_HOSTS, POLARIS_HOSTS, run_script

PROGRAM = """\
import json, os, sys
import stagedpkg
open(os.path.join(sys.argv[1], "rank" + os.environ["RANK"]), "w").write(json.dumps(
    {"prefix": sys.prefix, "pkg": stagedpkg.HERE, "node": int(os.environ["GROUP_RANK"])}))
"""


@pytest.fixture(scope="module")
def env_prefix(tmp_path_factory) -> Path:
    return make_env(tmp_path_factory.mktemp("shared"))


@pytest.fixture
def staged(tmp_path, env_prefix):
    prog, out, place = tmp_path / "prog.py", tmp_path / "out", tmp_path / "node-local"
    prog.write_text(PROGRAM)
    out.mkdir()

    def check(proc, nodes: int, ranks: int):
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0, text[-4000:]
        assert f"wml: staged {env_prefix.name} to {place}/node0/wml-env-" in text, text[-4000:]
        got = {int(p.name[4:]): json.loads(p.read_text()) for p in out.glob("rank*")}
        assert sorted(got) == list(range(ranks)), text[-4000:]
        for info in got.values():
            mine = place / f"node{info['node']}"
            assert Path(info["prefix"]).parent == mine and info["pkg"].startswith(f"{mine}/"), info
        assert {i["node"] for i in got.values()} == set(range(nodes))
        assert not list(place.glob("node*/wml-env-*")), "the copies outlived the job"

    staged.prog, staged.out, staged.place, staged.check = prog, out, place, check
    staged.argv = ["--env", str(env_prefix), "--stage-env", "--", "python", str(prog), str(out)]
    staged.env = {"WML_STAGE_PLACE": f"{place}/{{node}}"}
    return staged


@pytest.fixture
def emu(tmp_path, run_wml, isolated_env):
    return Emulation(tmp_path, run_wml, isolated_env)


def test_summit_staged_job_under_lsf_and_jsrun(emu, staged):
    script = emu.render("--site", "summit", "--nodes", "2", "--ranks-per-node", "2", "-P", "abc123", "-t", "10",
                        *staged.argv, env=staged.env)
    assert '#BSUB -alloc_flags "smt4 NVME"' in script
    proc = emu.run(script, {**emu.lsf_env("701106", summit_hosts(2)), **staged.env})
    staged.check(proc, 2, 4)
    stage, job, end = emu.records("jsrun")       # staging, the job, the cleanup
    assert stage["hosts"] == job["hosts"] == end["hosts"] == ["h41n01", "h41n02"]   # one rank per node (an ERF)


def test_theta_staged_job_under_cobalt_and_aprun(emu, staged):
    script = emu.render("--site", "theta", "--nodes", "2", "--ranks-per-node", "2", "-q", "debug-cache-quad",
                        "-P", "datascience", "-t", "10", *staged.argv, env=staged.env)
    assert "#COBALT --attrs mcdram=cache:numa=quad:ssds=required:ssd_size=128" in script
    proc = emu.run(script, {**emu.cobalt_env("351457", [3820, 3821]), **staged.env}, executable=True)
    staged.check(proc, 2, 4)
    stage, job, end = emu.records("aprun")
    assert stage["flags"][:4] == ["-n", "2", "-N", "1"]


@pytest.mark.parametrize("site, hosts, job_id, extra", [
    ("polaris", POLARIS_HOSTS, "4242.polaris-pbs-01", {"PALS_DOUBLE_CPUS": "64"}),
    ("aurora", AURORA_HOSTS, "777.aurora-pbs-0001", {"PALS_DOUBLE_CPUS": "208"}),
])
def test_pbs_staged_job_under_pbs_and_pals(site, hosts, job_id, extra, run_wml, isolated_env, staged, tmp_path):
    r = run_wml("render", "--site", site, "--nodes", "2", "--ranks-per-node", "2", "-q", "debug", "-P", "datascience",
                "-t", "10", *staged.argv, env=staged.env)
    assert r.returncode == 0, r.stderr
    proc = run_script(tmp_path, isolated_env, r.stdout, job_id, hosts, {**extra, **staged.env})
    staged.check(proc, 2, 4)
