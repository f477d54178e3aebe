"""The fabric section in rendered job scripts, line by line against the centres' pages.

Sources (the values and dates are in each profile's ``fabric:`` section):
- Frontier: OLCF "PyTorch on Frontier" (module rccl-net-plugin; NCCL_NET Socket on one node, OFI
  on several; FI_MR_CACHE_MONITOR kdreg2; MIOpen's cache on node-local /tmp); OLCF's container
  examples (binds /opt/cray, /usr/share/libdrm, /var/spool/slurmd).
- Polaris: ALCF "NCCL" (aws-ofi-nccl from /soft/libraries and its variables); "Containers on
  Polaris" (cray-mpich-abi, -B /opt -B /var/run/palsd/).
- Aurora: ALCF "oneCCL" (the essential set); "Containers on Aurora" (one node, TCP).
- Perlmutter: NERSC "Launchers" (Shifter --module=gpu,nccl-plugin); NERSC's SC25 tutorial script
  (FI_MR_CACHE_MONITOR=userfaultfd).
- Alps: CSCS "NCCL" (the variables always set with a uenv, the aws-ofi-nccl module); CSCS
  "Container Engine resource hooks" (com.hooks.aws_ofi_nccl.*); "Slurm" (-c72 per GH200).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers.job_output import assert_golden, directives, promised_launch, render_job

from wmlce_tools.fabric.resolve import fabric_for
from wmlce_tools.launch.describe import env_lines, module_lines
from wmlce_tools.launch.plan import LaunchOptions, build_launch
from wmlce_tools.layout import compile_layout
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site

GOLDEN = Path(__file__).parent / "golden" / "fabric"

CASES = {
    "frontier-1": ("frontier", dict(nodes=1, project="abc123", walltime=30, job_name="train")),
    "frontier-4": ("frontier", dict(nodes=4, project="abc123", walltime=30, job_name="train")),
    "polaris": ("polaris", dict(nodes=2, project="datascience", walltime=30, queue="debug", job_name="train")),
    "aurora": ("aurora", dict(nodes=2, project="datascience", walltime=30, queue="debug", job_name="train")),
    "perlmutter": ("perlmutter", dict(nodes=2, project="m1234", walltime=30, job_name="train")),
    "alps": ("alps", dict(nodes=2, project="g123", walltime=30, job_name="train")),
}


def container_plan(site: str, nodes: int, image: str = "/img/x.sif"):
    """The launch plan of a container job of the case (a site without containers: its fabric's
    container case as a bare plan would not show it, so the site's runtime is the only one)."""
    prof = get_site(site)
    lay = compile_layout(prof, ResourceRequest(nodes=nodes))
    return build_launch(prof, lay, LaunchOptions(program=("python3", "x.py"), container=image, workdir="/work/proj"))


def container_text(site: str, nodes: int) -> str:
    """What a container job of the case gets: its modules, each variable with where it goes, the
    container's binds and runtime switches."""
    if get_site(site).container is None:
        return "(no container runtime)\n"
    plan = container_plan(site, nodes)
    c = plan.container
    return "\n".join([*module_lines(plan), *env_lines(plan, plan.promised()),
                      f"# binds: {' '.join(c.extra_binds)}", *(f"# option: {k}={v}" for k, v in c.options)]) + "\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_fabric_scripts_bare_and_in_a_container(case, program):
    site, kw = CASES[case]
    _, script = render_job(site, program, **kw)
    assert_golden(script, program, GOLDEN / f"{case}.sh")
    text = container_text(site, kw["nodes"])
    golden = GOLDEN / f"{case}-container.txt"
    if os.environ.get("WML_REGENERATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text()
    # every value names the page it came from, with the date it was checked there
    fab = fabric_for(get_site(site), kw["nodes"])
    for v in fab.values:
        assert f"{v.page} (checked {v.checked})" in script, v


def test_frontier_follows_the_pytorch_page(program):
    _, one = render_job("frontier", program, **CASES["frontier-1"][1])
    _, four = render_job("frontier", program, **CASES["frontier-4"][1])
    for script in (one, four):
        mods = [l for l in script.splitlines() if l.startswith("module load")]
        assert mods[-1] == "module load rccl-net-plugin" and mods.index("module load rocm") < len(mods) - 1
        assert "#     FI_MR_CACHE_MONITOR=kdreg2  <- https://docs.olcf.ornl.gov/software/analytics/pytorch_frontier.html" in script
        assert "memhooks" not in script and "NCCL_SOCKET_IFNAME" not in script    # superseded advice
        assert "#     MIOPEN_USER_DB_PATH=/tmp/my-miopen-cache  <-" in script
    assert "#     NCCL_NET=Socket  <-" in one and "#     NCCL_NET=OFI  <-" in four
    assert promised_launch(four)[0] == "srun"       # srun, not torchrun
    c = container_plan("frontier", 4).container
    assert {"/opt/cray", "/usr/share/libdrm", "/var/spool/slurmd"} <= set(c.extra_binds)


def test_polaris_aurora_perlmutter_values(program):
    _, pol = render_job("polaris", program, **CASES["polaris"][1])
    assert "#     LD_LIBRARY_PATH=/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib:/soft/libraries/hwloc/lib/:$LD_LIBRARY_PATH  <-" in pol
    for k, v in (("NCCL_NET", "AWS Libfabric"), ("NCCL_COLLNET_ENABLE", "1"), ("NCCL_CROSS_NIC", "1"),
                 ("NCCL_NET_GDR_LEVEL", "PHB"), ("FI_CXI_DISABLE_HOST_REGISTER", "1"),
                 ("FI_MR_CACHE_MONITOR", "userfaultfd"), ("FI_CXI_DEFAULT_CQ_SIZE", "131072")):
        assert f"#     {k}={v}  <-" in pol
    _, aur = render_job("aurora", program, **CASES["aurora"][1])
    for k, v in (("CCL_PROCESS_LAUNCHER", "pmix"), ("CCL_ATL_TRANSPORT", "mpi"), ("CCL_KVS_MODE", "mpi"),
                 ("FI_MR_CACHE_MONITOR", "userfaultfd")):
        assert f"#     {k}={v}  <-" in aur
    one, two = (dict(fabric_env) for fabric_env in (
        ((v.name, v.value) for v in fabric_for(get_site("aurora"), n, container=True).values) for n in (1, 2)))
    assert one["CCL_ATL_TRANSPORT"] == "ofi"   # the one-node container example
    assert two.get("CCL_ATL_TRANSPORT", "mpi") == "mpi"
    assert dict(fabric_for(get_site("perlmutter"), 2, container=True).container_options) == \
        {"shifter.module": "gpu,nccl-plugin"}


def test_alps_places_four_ranks_per_node_one_per_gh200(program, run_wml):
    r = run_wml("site", "show", "alps")
    assert r.returncode == 0 and "platform: linux-aarch64" in r.stdout, r.stderr
    plan, script = render_job("alps", program, **CASES["alps"][1])
    assert [s.cores for s in plan.layout.on_node(0)] == [tuple(range(72 * i, 72 * i + 72)) for i in range(4)]
    assert [s.gpus for s in plan.layout.on_node(0)] == [(0,), (1,), (2,), (3,)]
    d = directives(script, "#SBATCH")
    assert "#SBATCH --nodes=2" in d and "#SBATCH --ntasks-per-node=4" in d and "#SBATCH --cpus-per-task=72" in d
    argv = promised_launch(script)
    assert "--gpus-per-task=1" in argv and "--cpus-per-task=72" in argv
    opts = dict(fabric_for(get_site("alps"), 2, container=True).container_options)
    assert opts == {"com.hooks.aws_ofi_nccl.enabled": "true", "com.hooks.aws_ofi_nccl.variant": "cuda-dl"}


@pytest.mark.parametrize("site, scheduler", [("frontier", "slurm"), ("polaris", "pbs"), ("alps", "slurm")])
def test_a_variable_the_user_set_is_never_overwritten(site, scheduler, program):
    """ddlrun decides each rank variable where the launch runs, by the plan's one rule: exported
    before the job (Slurm's default --export=ALL, PBS's qsub -V) -> kept; --export -> wins; unset ->
    the page's value."""
    kw = dict(CASES[site if site != "frontier" else "frontier-4"][1])
    plan, script = render_job(site, program, exports=(("FI_MR_CACHE_MONITOR", "mine"),), **kw)
    assert plan.site.scheduler == scheduler
    assert "#     FI_MR_CACHE_MONITOR=mine  <- --export" in script
    page_net = dict((v.name, v.value) for v in fabric_for(plan.site, kw["nodes"]).values)["NCCL_NET"]
    for preset, want in (({"NCCL_NET": "user-net"}, "user-net"), ({}, page_net)):
        environ = {"NCCL_NET_GDR_LEVEL": "user", "FI_MR_CACHE_MONITOR": "exported", **preset}
        d = plan.launch.decide(environ)
        got = d.launcher_env(environ)
        assert got["NCCL_NET"] == want
        assert got["FI_MR_CACHE_MONITOR"] == "mine"
        assert got.get("NCCL_NET_GDR_LEVEL", "user") == "user"


@pytest.mark.parametrize("old, new, says", [
    ("FI_MR_CACHE_MONITOR: kdreg2", 'FI_MR_CACHE_MONITOR: "$(rm -rf ~)"',
     ":{line}: fabric.settings.0: env: FI_MR_CACHE_MONITOR='$(rm -rf ~)': a value may name variables as $NAME"),
    ('checked: "2026-07-22"', "checked: yesterday", ":{line}: fabric.plugin.checked: Expected `str` matching regex"),
    ("      binds: [/opt/cray,", "      where: bare\n      binds: [/opt/cray,", "binds, container_env and container_options are for settings with where: container"),
])
def test_a_bad_fabric_section_is_one_line_naming_file_line_and_key(old, new, says, run_wml, tmp_path):
    text = (Path(__file__).parents[2] / "site_configs" / "frontier.yaml").read_text()
    assert old in text
    bad = tmp_path / "frontier.yaml"
    bad.write_text(text.replace(old, new, 1).replace("    - where: container\n      where: bare", "    - where: bare"))
    r = run_wml("site", "validate", str(bad))
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    import re                                                  # a line number, the key, what is wrong
    pattern = r":\d+" + re.escape(says.split("{line}", 1)[1]) if "{line}" in says else re.escape(says)
    assert re.search(pattern, lines[0]), lines[0]
