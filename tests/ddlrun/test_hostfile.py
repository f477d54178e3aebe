"""ddlrun's launch line at full-machine size: no argument may exceed Linux's 128 KiB limit on
one argument (MAX_ARG_STRLEN), or the launch fails with E2BIG before any rank starts.

A long host list goes in a host file instead (MPICH ``-f``, Open MPI ``--hostfile`` with
``slots=``, PALS ``--hostfile`` when the launch does not use the PBS job's whole node file); a
short one stays on the line as before.  Dry runs inside fake allocations, like
test_plan_scale.py, then a real 2-host MPICH launch on this machine (``localhost`` and its
hostname) with the threshold forced to 0 (WML_DDLRUN_HOSTFILE_BYTES).  Open MPI across hosts
is given a rankfile naming every rank's host, so ddlrun sends it no host list; its host file
(``host slots=N``, for the oversubscribed layouts that take the ``--host`` path) is checked as
text: Open MPI merges two names of one machine into one node and refuses a host file that
lists it twice, so it cannot be launched across "two hosts" here.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest
from helpers.missing import skip_unless_ci

from wmlce_tools.ddlrun.cli import parse_args
from wmlce_tools.ddlrun.plan import build_plan
from wmlce_tools.ddlrun.rankfile import mpiexec_hostfile
from wmlce_tools.ddlrun.runner import dry_run_text
from wmlce_tools.launchers import LaunchContext, launch_command
from wmlce_tools.layout import compile_layout
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site

from ddlrun_helpers import HERE, openmpi_mpiexec

MAX_ARG_STRLEN = 128 * 1024
SHOW = str(HERE / "programs" / "show_env.py")
#: a PBS cluster whose users launch with MPICH's (Hydra's) mpiexec rather than PALS
PBS_HYDRA_SITE = """\
name: pbshydra
description: a PBS cluster launching with Hydra's mpiexec (tests only)
scheduler: pbs
launcher: mpiexec
platform: linux-64
node: {sockets: 2, cores_per_socket: 52, threads_per_core: 2, gpus_per_socket: 3}
total_nodes: 10624
queues:
  prod: {default: true, max_nodes: 10624, max_walltime: "1:00"}
gpu_binding: per-rank
"""
#: a cluster of 1-core nodes: two ranks per node oversubscribe it, so Open MPI gets --host (no rankfile)
TINY_SITE = """\
name: tiny
description: 1-core nodes without GPUs (tests only)
scheduler: slurm
launcher: mpiexec
platform: linux-64
node: {sockets: 1, cores_per_socket: 1, threads_per_core: 1, gpus_per_socket: 0}
total_nodes: 4096
queues:
  batch: {default: true, max_nodes: 4096, max_walltime: "1:00"}
gpu_binding: per-rank
"""


def aurora_names(n: int) -> List[str]:
    """Aurora-length host names (about 50 characters each)."""
    return [f"x{4000 + i // 512}c{i // 128 % 4}s{i // 8 % 16}b0n{i % 8}.hostmgmt2000.cm.aurora.alcf.anl.gov"
            for i in range(n)]


@pytest.fixture
def sites(tmp_path) -> Path:
    d = tmp_path / "hostfile-sites"
    d.mkdir()
    (d / "pbshydra.yaml").write_text(PBS_HYDRA_SITE)
    (d / "tiny.yaml").write_text(TINY_SITE)
    return d


def plan_of(args: List[str], env: Dict[str, str]):
    plan = build_plan(parse_args([*args, "--dry-run", "--", "python", "train.py"]), env)
    return plan, dry_run_text(plan)


def exec_accepts(argv: List[str]) -> None:
    """The kernel takes the line: exec it with ``true`` in the launcher's place (the old
    3,000-host line failed here with OSError E2BIG, "Argument list too long")."""
    subprocess.run([shutil.which("true"), *argv[1:]], check=True)


def hostfile_path(argv: List[str], flag: str) -> str:
    assert flag in argv, argv[:12]
    return argv[argv.index(flag) + 1]


def test_10624_node_pbs_allocation_launches_with_every_argument_under_128k(tmp_path, sites, isolated_env):
    """Aurora's size, launched with Hydra's mpiexec inside PBS: the old ``-hosts h1,...,h10624``
    was one 530 KB argument (E2BIG); now ``-f FILE``, the file naming every node in order."""
    hosts = aurora_names(10624)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("".join(h + "\n" for h in hosts))
    env = {"WML_SITE_PATH": str(sites), "PBS_JOBID": "1.aurora-pbs-0001", "PBS_NODEFILE": str(nodefile)}
    plan, text = plan_of(["--site", "pbshydra"], env)
    argv = plan.command(hostfile_path="/tmp/x/hostfile")
    assert plan.layout.nodes == 10624 and plan.layout.ranks_per_node == 6
    assert max(len(a.encode()) for a in argv) < MAX_ARG_STRLEN
    exec_accepts(argv)
    assert hostfile_path(argv, "-f") == "/tmp/x/hostfile" and "-hosts" not in argv
    assert argv[argv.index("-ppn") + 1] == "6"
    assert plan.hostfile == "".join(f"{h}:6\n" for h in hosts)
    # the dry run names the file and says how many hosts it holds, without printing 10,624 lines
    line = shlex.split(text.splitlines()[0])
    assert max(len(a.encode()) for a in line) < MAX_ARG_STRLEN
    assert re.search(r"^# \S+/ddlrun-<tmpdir>/hostfile: 10624 hosts, .*" + re.escape(hosts[-1]), text, re.M), text
    assert len(_launch_lines(text)) == 2


def _launch_lines(text: str):
    """The dry run's lines but the ranks' variables (``# every rank gets`` and its entries)."""
    return [l for l in text.splitlines() if not l.startswith(("# every rank gets", "#   "))]


def test_10624_node_aurora_job_with_pals(tmp_path, isolated_env):
    """PALS reads the job's node file itself: the whole allocation adds no host list (the
    line stays as it was); the first 10,000 nodes of it go as a --hostfile naming them."""
    hosts = aurora_names(10624)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("".join(h + "\n" for h in hosts))
    env = {"PBS_JOBID": "1.aurora-pbs-0001", "PBS_NODEFILE": str(nodefile)}
    plan, text = plan_of(["--site", "aurora"], env)
    argv = plan.command()
    assert plan.hostfile is None and "--hostfile" not in argv and plan.layout.nodes == 10624
    assert max(len(a.encode()) for a in argv) < MAX_ARG_STRLEN
    plan, text = plan_of(["--site", "aurora", "-n", str(10000 * 6), "--ranks-per-node", "6"], env)
    argv = plan.command(hostfile_path="/tmp/x/hostfile")
    assert hostfile_path(argv, "--hostfile") == "/tmp/x/hostfile"
    assert plan.hostfile == "".join(h + "\n" for h in hosts[:10000])
    assert max(len(a.encode()) for a in argv) < MAX_ARG_STRLEN


def test_pals_with_hosts_other_than_the_jobs_names_them(tmp_path, isolated_env):
    """-H on a PALS site: the old line passed no hosts, so PALS ran on $PBS_NODEFILE's nodes,
    not the ones asked for."""
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("x1\nx2\nx3\n")
    plan, text = plan_of(["--site", "polaris", "-H", "x3,x1"], {"PBS_JOBID": "7.p", "PBS_NODEFILE": str(nodefile)})
    assert plan.hostfile == "x3\nx1\n"
    assert "--hostfile" in plan.command(hostfile_path="/tmp/x/hostfile")
    assert "hostfile: 2 hosts" in text


def test_3000_host_hydra_list(tmp_path, sites, isolated_env):
    """3,000 Aurora-length hosts (about 165 KB as one -hosts argument) given with --hostfile."""
    hosts = aurora_names(3000)
    f = tmp_path / "hosts"
    f.write_text("".join(h + "\n" for h in hosts))
    plan, text = plan_of(["--site", "tiny", "--hostfile", str(f), "--mpiexec", "/nonexistent/mpiexec"],
                         {"WML_SITE_PATH": str(sites), "SLURM_JOB_ID": "5"})
    argv = plan.command(hostfile_path="/tmp/x/hostfile")
    assert max(len(a.encode()) for a in argv) < MAX_ARG_STRLEN
    exec_accepts(argv)
    assert hostfile_path(argv, "-f") == "/tmp/x/hostfile"
    assert plan.hostfile.splitlines() == [f"{h}:1" for h in hosts]


def test_3000_host_openmpi_launch_names_hosts_in_its_rankfile(tmp_path, sites, isolated_env):
    """Open MPI across hosts is given a rankfile (every rank's host and cores): no host list on the line."""
    exe = openmpi_mpiexec()
    if exe is None:
        skip_unless_ci("Debian's Open MPI is not installed (apt-get install openmpi-bin)")
    hosts = aurora_names(3000)
    plan, _ = plan_of(["--site", "tiny", "-H", ",".join(hosts), "--mpiexec", exe],
                      {"WML_SITE_PATH": str(sites), "SLURM_JOB_ID": "5"})
    argv = plan.command(rankfile_path="/tmp/x/rankfile")
    assert plan.mpi_flavor == "openmpi" and plan.hostfile is None and "--rankfile" in argv and "--host" not in argv
    assert max(len(a.encode()) for a in argv) < MAX_ARG_STRLEN


def oversubscribed_local_layout():
    """Only an oversubscribed layout (the local site's) sends Open MPI a --host list."""
    lay = compile_layout(get_site("local"), ResourceRequest(nodes=2, ranks_per_node=2 * (os.cpu_count() or 1)))
    assert lay.oversubscribed
    return lay


def test_openmpi_host_list_goes_in_a_hostfile_with_slots():
    lay = oversubscribed_local_layout()
    hosts = aurora_names(3000)[:2]
    rpn = lay.ranks_per_node
    assert mpiexec_hostfile("openmpi", lay, hosts, 1 << 20) is None
    assert mpiexec_hostfile("openmpi", lay, hosts, 0) == f"{hosts[0]} slots={rpn}\n{hosts[1]} slots={rpn}\n"
    ctx = LaunchContext(site=get_site("local"), hosts=hosts, mpi_flavor="openmpi", hostfile="/tmp/x/hostfile")
    argv = launch_command(lay, ctx, ["true"])
    assert hostfile_path(argv, "--hostfile") == "/tmp/x/hostfile" and "--host" not in argv


def test_short_host_lists_stay_on_the_line(tmp_path, sites, isolated_env):
    """Below the threshold the line is what it always was: -hosts a,b, no file."""
    plan, text = plan_of(["--site", "tiny", "-H", "n1,n2", "--mpiexec", "/nonexistent/mpiexec"],
                         {"WML_SITE_PATH": str(sites), "SLURM_JOB_ID": "5"})
    argv = plan.command()
    assert plan.hostfile is None and argv[argv.index("-hosts") + 1] == "n1,n2" and "-f" not in argv
    assert len(_launch_lines(text)) == 1     # the line alone, no file described


def test_bad_threshold_is_one_line(ddlrun, sites):
    r = ddlrun("--site", "tiny", "-H", "n1,n2", "--dry-run", "true",
               env={"WML_SITE_PATH": str(sites), "WML_DDLRUN_HOSTFILE_BYTES": "32k"})
    assert r.returncode == 2 and r.error_lines == [
        "ddlrun: error: WML_DDLRUN_HOSTFILE_BYTES='32k': expected a number of bytes >= 0 "
        "(the longest host list passed to mpiexec as one argument)"], r.stderr


def _launched_hostfile(stderr: str, flag: str) -> str:
    line = next(l for l in stderr.splitlines() if l.startswith("ddlrun: /"))
    return hostfile_path(shlex.split(line[len("ddlrun: "):]), flag)


def test_real_mpich_launch_through_a_hostfile(ddlrun, sites):
    exe = shutil.which("mpiexec")
    if exe is None:
        skip_unless_ci("pip's mpich is not installed (pip install mpich)")
    me = socket.gethostname()
    r = ddlrun("--site", "tiny", "-H", f"localhost,{me}", "--mpiexec", exe, "python", SHOW,
               env={"WML_SITE_PATH": str(sites), "WML_DDLRUN_HOSTFILE_BYTES": "0"}, timeout=120)
    assert r.returncode == 0, r.stderr
    ranks = r.ranks()
    assert [x["RANK"] for x in ranks] == ["0", "1"] and {x["WORLD_SIZE"] for x in ranks} == {"2"}
    assert [x["GROUP_RANK"] for x in ranks] == ["0", "1"]
    path = _launched_hostfile(r.stderr, "-f")
    assert os.path.basename(path) == "hostfile" and not os.path.exists(path), "the host file outlived ddlrun"
    assert not os.path.exists(os.path.dirname(path))
