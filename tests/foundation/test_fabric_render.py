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

from wmlce_tools.fabric.container import container_fabric
from wmlce_tools.fabric.resolve import fabric_for
from wmlce_tools.fabric.script import script_lines
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


def container_text(site: str, nodes: int) -> str:
    """What a container job of the case gets: the script's fabric lines and the container's needs."""
    prof = get_site(site)
    fab = fabric_for(prof, nodes, container=True)
    c = container_fabric(prof, nodes)
    return "\n".join([*script_lines(fab), f"# modules: {' '.join(c.modules)}", f"# binds: {' '.join(c.binds)}",
                      *(f"# env: {k}={v}" for k, v in c.env), *(f"# option: {k}={v}" for k, v in c.options)]) + "\n"


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
    for page, checked in fabric_for(get_site(site), kw["nodes"]).pages:
        assert f"#   {page} (checked {checked})" in script


def test_frontier_follows_the_pytorch_page(program):
    _, one = render_job("frontier", program, **CASES["frontier-1"][1])
    _, four = render_job("frontier", program, **CASES["frontier-4"][1])
    for script in (one, four):
        mods = [l for l in script.splitlines() if l.startswith("module load")]
        assert mods[-1] == "module load rccl-net-plugin" and mods.index("module load rocm") < len(mods) - 1
        assert '[ -n "${FI_MR_CACHE_MONITOR+set}" ] || export FI_MR_CACHE_MONITOR="kdreg2"' in script
        assert "memhooks" not in script and "NCCL_SOCKET_IFNAME" not in script    # superseded advice
        assert 'export MIOPEN_USER_DB_PATH="/tmp/my-miopen-cache"' in script
    assert 'export NCCL_NET="Socket"' in one and 'export NCCL_NET="OFI"' in four
    assert promised_launch(four)[0] == "srun"       # srun, not torchrun
    c = container_fabric(get_site("frontier"), 4)
    assert {"/opt/cray", "/usr/share/libdrm", "/var/spool/slurmd"} <= set(c.binds)


def test_polaris_aurora_perlmutter_values(program):
    _, pol = render_job("polaris", program, **CASES["polaris"][1])
    assert ('export LD_LIBRARY_PATH="/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib:/soft/libraries/hwloc/lib/'
            '${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"') in pol
    for k, v in (("NCCL_NET", "AWS Libfabric"), ("NCCL_COLLNET_ENABLE", "1"), ("NCCL_CROSS_NIC", "1"),
                 ("NCCL_NET_GDR_LEVEL", "PHB"), ("FI_CXI_DISABLE_HOST_REGISTER", "1"),
                 ("FI_MR_CACHE_MONITOR", "userfaultfd"), ("FI_CXI_DEFAULT_CQ_SIZE", "131072")):
        assert f'export {k}="{v}"' in pol
    _, aur = render_job("aurora", program, **CASES["aurora"][1])
    for k, v in (("CCL_PROCESS_LAUNCHER", "pmix"), ("CCL_ATL_TRANSPORT", "mpi"), ("CCL_KVS_MODE", "mpi"),
                 ("FI_MR_CACHE_MONITOR", "userfaultfd")):
        assert f'export {k}="{v}"' in aur
    assert dict(container_fabric(get_site("aurora"), 1).env)["CCL_ATL_TRANSPORT"] == "ofi"   # the one-node container example
    assert "CCL_ATL_TRANSPORT" not in dict(container_fabric(get_site("aurora"), 2).env) or \
        dict(container_fabric(get_site("aurora"), 2).env)["CCL_ATL_TRANSPORT"] == "mpi"
    assert dict(container_fabric(get_site("perlmutter"), 2).options) == {"shifter.module": "gpu,nccl-plugin"}


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
    opts = dict(container_fabric(get_site("alps"), 2).options)
    assert opts == {"com.hooks.aws_ofi_nccl.enabled": "true", "com.hooks.aws_ofi_nccl.variant": "cuda-dl"}


def _fabric_part(script: str) -> str:
    lines = script.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("# Fabric:"))
    end = next(i for i, l in enumerate(lines) if l.startswith('echo "wml: job'))
    return "\n".join(lines[start:end])


@pytest.mark.parametrize("site, scheduler", [("frontier", "slurm"), ("polaris", "pbs"), ("alps", "slurm")])
def test_a_variable_the_user_set_is_never_overwritten(site, scheduler, program):
    """The job script's fabric lines run in bash: exported before the job (Slurm's default
    --export=ALL, PBS's qsub -V) -> kept; --export -> wins; unset -> the page's value."""
    kw = dict(CASES[site if site != "frontier" else "frontier-4"][1])
    plan, script = render_job(site, program, exports=(("FI_MR_CACHE_MONITOR", "mine"),), **kw)
    assert plan.site.scheduler == scheduler
    assert "# FI_MR_CACHE_MONITOR: --export sets it" in script
    part = _fabric_part(script)
    show = 'printf "%s|%s|%s\\n" "${NCCL_NET-}" "$FI_MR_CACHE_MONITOR" "${NCCL_NET_GDR_LEVEL-unset}"'
    env = {"PATH": os.environ["PATH"], "NCCL_NET_GDR_LEVEL": "user"}
    for preset, want in (({"NCCL_NET": "user-net"}, "user-net"), ({}, None)):
        out = subprocess.run(["bash", "-c", f"set -euo pipefail\n{part}\n{show}"], env={**env, **preset},
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        net, monitor, gdr = out.stdout.strip().split("|")
        page_net = dict((v.name, v.value) for v in fabric_for(plan.site, kw["nodes"]).values)["NCCL_NET"]
        assert net == (want or page_net)
        assert monitor == "mine"
        assert gdr == "user"


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
