"""One launch plan on every path (issue 58): the job script, an array sweep's and a packed sweep's
job scripts, a chain segment's, the Python API's, and ddlrun run by hand inside the allocation all
give the ranks the same command and the same environment, for the centres' profiles with their
fabric and each container runtime they offer.

What is compared on each path: the modules the script loads, the ranks' variables (each with its
source) in the script's table, and the launcher line the script promises; then ddlrun, run with the
script's own ddlrun line inside a fake allocation of the scheduler (its host variables), must run
exactly the promised line with the allocation's hosts and rendezvous filled in.  The programs are
never run here (these machines are elsewhere): tests/launch/test_composition_local.py runs the
local site's paths for real."""
from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from wmlce_tools.jobscript import plan_job, render_script
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site

WORK = Path("/work/proj")
PROGRAM = ["python3", str(WORK / "train.py"), "--lr", "0.1"]
SWEEP_PROGRAM = ["python3", str(WORK / "train.py"), "--lr", "{lr}"]

# (site, runtime or None, request) -- every container runtime a centre's profile offers, bare too
CASES = {
    "frontier": ("frontier", None, dict(nodes=2, project="abc123", walltime=30)),
    "frontier-apptainer": ("frontier", "apptainer", dict(nodes=2, project="abc123", walltime=30)),
    "polaris": ("polaris", None, dict(nodes=2, project="datasci", walltime=30, queue="debug")),
    "polaris-apptainer": ("polaris", "apptainer", dict(nodes=2, project="datasci", walltime=30, queue="debug")),
    "perlmutter-shifter": ("perlmutter", "shifter", dict(nodes=2, project="m1234", walltime=30)),
    "perlmutter-podman-hpc": ("perlmutter", "podman-hpc", dict(nodes=2, project="m1234", walltime=30)),
    "aurora": ("aurora", None, dict(nodes=2, project="datasci", walltime=30, queue="debug")),
    "alps": ("alps", None, dict(nodes=2, project="g123", walltime=30)),
    "summit": ("summit", None, dict(nodes=2, project="abc123", walltime=30)),
    "theta": ("theta", None, dict(nodes=2, project="abc123", walltime=30, ranks_per_node=4)),
}
IMAGES = {"apptainer": "/lus/img/pytorch.sif", "shifter": "nersc/pytorch:25.06.01", "podman-hpc": "nersc/pytorch:25.06.01",
          "container-engine": "nvcr.io#nvidia/pytorch:25.06-py3", "pyxis": "nvcr.io#nvidia/pytorch:25.06-py3"}
# a fake allocation of each scheduler: the variables ddlrun finds its hosts in
ALLOCATION = {
    "slurm": {"SLURM_JOB_ID": "99", "SLURM_JOB_NODELIST": "nid[001-002]", "SLURM_TASKS_PER_NODE": "8(x2)"},
    "lsf": {"LSB_JOBID": "4242", "LSB_MCPU_HOSTS": "batch2 1 a01n01 42 a01n02 42"},
    "cobalt": {"COBALT_JOBID": "42", "COBALT_PARTNAME": "3820-3821", "COBALT_JOBSIZE": "2"},
}
USER = (("MY_SETTING", "from --export"),)     # a value the user gave with --export


def _request(case: str, **more) -> ResourceRequest:
    site, runtime, kw = CASES[case]
    extra = dict(container=IMAGES[runtime], container_runtime=runtime) if runtime else {}
    return ResourceRequest(job_name="train", exports=USER, **kw, **extra, **more)


def _parts(script: str) -> Tuple[List[str], List[str], List[str]]:
    """(module lines, the ranks' variable table, the promised launcher argv) of a job script."""
    lines = script.splitlines()
    modules = [l for l in lines if l.startswith("module ")]
    table: List[str] = []
    if any(l.startswith("# ddlrun gives every rank") for l in lines):
        start = next(i for i, l in enumerate(lines) if l.startswith("# ddlrun gives every rank")) + 2
        while start < len(lines) and lines[start].startswith("#   "):
            table.append(lines[start])
            start += 1
    promise = next(lines[i + 1] for i, l in enumerate(lines) if l.startswith("# ddlrun recomputes this layout"))
    return modules, table, shlex.split(promise[len("#   "):])


def _paths(case: str, tmp_path: Path) -> Dict[str, str]:
    """The job script each path writes for the case: keyed by path name."""
    from wmlce_tools.runs.chain import plan_chain, segment_plan
    from wmlce_tools.runs.sweep_plan import SweepOptions, plan_sweep
    from wmlce_tools.sweeps.grid import Trial

    site = get_site(CASES[case][0])
    req = _request(case)
    out: Dict[str, str] = {}
    job = plan_job(site, req, PROGRAM, jobdir=tmp_path / "job", workdir=WORK, preview=True)
    out["job script"] = render_script(job)
    chain = plan_chain(job, tmp_path / "chain", 2, None, None, 30 * 60)
    out["chain segment"] = render_script(segment_plan(job, chain, 2, previous="123"))
    trials = [Trial(0, (("lr", "0.1"),))]
    if site.scheduler not in ("cobalt", "local"):
        array = plan_sweep(site, req, SWEEP_PROGRAM, trials, SweepOptions(), tmp_path / "array", preview=True,
                           workdir=WORK)
        assert array.mode == "array"
        out["array sweep"] = array.script
    packed = plan_sweep(site, req, SWEEP_PROGRAM, trials, SweepOptions(pack=req.nodes), tmp_path / "packed",
                        preview=True, workdir=WORK)
    assert packed.mode == "packed"
    out["packed sweep"] = packed.script
    return out


def _trial(argv: List[str]) -> List[str]:
    """A sweep's line with its trial's value: the same program as the plain job's."""
    return [a.replace("{lr}", "0.1") for a in argv]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_path_loads_gives_and_launches_the_same(case, tmp_path):
    paths = _paths(case, tmp_path)
    want_modules, want_table, want_launch = _parts(paths["job script"])
    assert "#     MY_SETTING=from --export  <- --export" in want_table
    for name, script in paths.items():
        modules, table, launch = _parts(script)
        assert modules == want_modules, name
        assert table == want_table, name
        assert _trial(launch) == want_launch, name
    runtime = CASES[case][1]
    if runtime is not None:        # the container's setup reaches every path: its modules, its wrapper
        site = get_site(CASES[case][0])
        spec = site.container.runtimes[runtime]
        assert all(f"module load {m}" in want_modules for m in spec.modules)
        assert any(w in want_launch for w in ("apptainer", "shifter", "podman-hpc"))


def test_the_python_api_plans_the_packed_paths_job(tmp_path, monkeypatch):
    """The API's plan (a sweep of one trial) is the CLI's: same modules, table and launch."""
    from wmlce_tools.api import plan as api_plan
    from wmlce_tools.sweeps.grid import Trial

    monkeypatch.setenv("WML_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.chdir(tmp_path)
    sp = api_plan(PROGRAM, [Trial(0, ())], preview=True, site="frontier", nodes=2, account="abc123", walltime="30",
                  container=IMAGES["apptainer"], export=["MY_SETTING=from --export"], job_name="train")
    job = plan_job(get_site("frontier"), _request("frontier-apptainer"), PROGRAM, jobdir=tmp_path / "j",
                   workdir=Path.cwd(), preview=True)
    api_modules, api_table, api_launch = _parts(sp.script)
    modules, table, launch = _parts(render_script(job))
    assert (api_modules, api_table) == (modules, table)
    assert api_launch == launch


def _ddlrun_in_allocation(script_plan, env: Dict[str, str]):
    """ddlrun as the job script calls it, inside the allocation (its hosts in ``env``)."""
    from wmlce_tools.ddlrun.cli import parse_args
    from wmlce_tools.ddlrun.plan import build_plan

    argv = script_plan.ddlrun_argv[1:]       # after the ddlrun executable
    opts = parse_args(argv)
    return build_plan(dataclasses.replace(opts, dry_run=True), env)


@pytest.mark.parametrize("case", sorted(c for c in CASES if get_site(CASES[c][0]).scheduler in ALLOCATION))
def test_ddlrun_in_the_allocation_runs_the_promised_line(case, tmp_path, monkeypatch):
    site = get_site(CASES[case][0])
    job = plan_job(site, _request(case), PROGRAM, jobdir=tmp_path / "job", workdir=WORK, preview=True)
    monkeypatch.chdir("/")
    env = {**ALLOCATION[site.scheduler], "PATH": "/usr/bin:/bin", **dict(job.exports)}
    monkeypatch.setattr("os.getcwd", lambda: str(WORK))
    launch = _ddlrun_in_allocation(job, env)
    argv = launch.command()
    promised = job.launcher_argv
    master = f"{launch.master_addr}:{launch.master_port}"
    assert argv == [master if a == "<node 0>:<port from the job id>" else a for a in promised]
    # the variables the script's table promised are what ddlrun decided there (a value naming a
    # host variable, $LD_LIBRARY_PATH, is that variable's there)
    got = [(a.name, a.where, a.value) for a in launch.decision.report]
    want = [(a.name, a.where, a.value) for a in job.launch.promised().report]
    assert [g[:2] for g in got] == [w[:2] for w in want]
    assert all(g == w for g, w in zip(got, want) if "$" not in w[2])


@pytest.mark.parametrize("case, var", [("polaris-apptainer", "NCCL_COLLNET_ENABLE"), ("frontier-apptainer", "NCCL_NET"),
                                       ("perlmutter-podman-hpc", "FI_MR_CACHE_MONITOR"), ("polaris", "NCCL_COLLNET_ENABLE")])
def test_a_value_exported_before_the_job_wins_in_a_container_job_too(case, var, tmp_path, monkeypatch):
    """Issue 58 point 1: NCCL_COLLNET_ENABLE=0 exported before a Polaris container job reached the
    ranks as 1 (the container's lines exported the page's value unconditionally)."""
    site = get_site(CASES[case][0])
    job = plan_job(site, _request(case), PROGRAM, jobdir=tmp_path / "job", workdir=WORK, preview=True)
    script = render_script(job)
    assert f"export {var}=" not in script            # the script exports no default: ddlrun decides
    env = {**ALLOCATION.get(site.scheduler, {}), "PATH": "/usr/bin:/bin", var: "0", **dict(job.exports)}
    if site.scheduler == "pbs":
        nodefile = tmp_path / "nodefile"
        nodefile.write_text("x1\nx2\n")
        env.update(PBS_JOBID="1.pbs", PBS_NODEFILE=str(nodefile))
    monkeypatch.setattr("os.getcwd", lambda: str(WORK))
    launch = _ddlrun_in_allocation(job, env)
    got = launch.launcher_env(env)
    assert got[var] == "0"
    assert all(f"{var}=" not in a or a.endswith("=0") for a in launch.command())
    report = {a.name: a for a in launch.decision.report}
    assert report[var].value == "0" and report[var].source.startswith("set before the launch")


def test_no_path_list_gets_an_empty_entry_and_inside_values_stay_inside(tmp_path, monkeypatch):
    """Frontier in Apptainer (issue 60 point 2): the library path meant for inside goes in as
    APPTAINERENV_LD_LIBRARY_PATH, never onto the host's LD_LIBRARY_PATH, and an unset
    $CRAY_LD_LIBRARY_PATH leaves no empty entry (the current directory) in it."""
    job = plan_job(get_site("frontier"), _request("frontier-apptainer"), PROGRAM, jobdir=tmp_path / "job",
                   workdir=WORK, preview=True)
    script = render_script(job)
    assert "export LD_LIBRARY_PATH" not in script and "APPTAINERENV" not in script.split("# ddlrun gives")[0]
    env = {**ALLOCATION["slurm"], "PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/host/lib", **dict(job.exports)}
    monkeypatch.setattr("os.getcwd", lambda: str(WORK))
    launch = _ddlrun_in_allocation(job, env)
    got = launch.launcher_env(env)
    assert got["LD_LIBRARY_PATH"] == "/opt/host/lib"           # the host's, untouched
    inside = got["APPTAINERENV_LD_LIBRARY_PATH"].split(":")
    assert "" not in inside and "/opt/host/lib" in inside and inside[-1] == "/opt/cray/pe/lib64"


def test_podman_hpc_is_told_every_variable_the_ranks_read(tmp_path, monkeypatch):
    """Issue 58 point 3: podman passes no variable by itself; its -e list names the fabric's, the
    run record's and a sweep's."""
    job = plan_job(get_site("perlmutter"), _request("perlmutter-podman-hpc"), PROGRAM, jobdir=tmp_path / "job",
                   workdir=WORK, preview=True)
    env = {**ALLOCATION["slurm"], "PATH": "/usr/bin:/bin", "WML_JOB_DIR": str(tmp_path / "job"),
           "WML_TRIAL": "0", "WML_PARAM_LR": "0.1", "WML_SWEEP_RUN": str(tmp_path / "run"),
           "DDL_STATS_DIR": str(tmp_path / "run/trials/0/stats"), **dict(job.exports)}
    monkeypatch.setattr("os.getcwd", lambda: str(WORK))
    argv = _ddlrun_in_allocation(job, env).command()
    passed = {argv[i + 1] for i, a in enumerate(argv) if a == "-e"}
    fabric = {v.name for v in job.launch.fabric.values}
    assert fabric <= passed
    assert {"WML_JOB_DIR", "DDL_STATS_DIR", "WML_PARAM_LR", "WML_TRIAL", "WML_SWEEP_RUN", "MY_SETTING"} <= passed


def test_the_container_engine_edf_carries_the_fabric_hooks(tmp_path, monkeypatch):
    """Issue 58 point 5: the fabric's container options reach the container: the CE's EDF gets the
    [annotations] the site's page gives (aws_ofi_nccl), Shifter its --module."""
    from wmlce_tools.launch.plan import LaunchOptions, build_launch
    from wmlce_tools.layout import compile_layout
    from wmlce_tools.rankenv import Decision

    site = get_site("alps")
    if site.container is None or "container-engine" not in site.container.runtimes:
        pytest.fail("alps has no container-engine runtime in its profile (issue 60 point 1)")
    lay = compile_layout(site, ResourceRequest(nodes=2))
    plan = build_launch(site, lay, LaunchOptions(program=tuple(PROGRAM), container=IMAGES["container-engine"],
                                                 container_runtime="container-engine", workdir=str(WORK)))
    edf = plan.container.edf_text(plan.promised())
    assert '"com.hooks.aws_ofi_nccl.enabled" = "true"' in edf and "[annotations]" in edf
    shifter = plan_job(get_site("perlmutter"), _request("perlmutter-shifter"), PROGRAM, jobdir=tmp_path / "j",
                       workdir=WORK, preview=True)
    assert "#SBATCH --module=gpu,nccl-plugin" in render_script(shifter)
    assert "--module=gpu,nccl-plugin" in shifter.launcher_argv


def test_the_network_plugin_found_where_ddlrun_runs_is_bound_and_first_inside(tmp_path, monkeypatch):
    """Issue 60 point 2: Frontier's rccl-net-plugin module puts the plugin on the host; in Apptainer
    its directory must be bound in and first on the library path inside (OLCF's RCCL container
    example), wherever the module keeps it."""
    plugin_dir = tmp_path / "sw/rccl-plugins/aws-ofi-nccl/lib"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "librccl-net.so").write_text("")
    job = plan_job(get_site("frontier"), _request("frontier-apptainer"), PROGRAM, jobdir=tmp_path / "job",
                   workdir=WORK, preview=True)
    assert "its directory, found where ddlrun runs, is bound in" in render_script(job)
    env = {**ALLOCATION["slurm"], "PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": f"{plugin_dir}:/opt/host/lib",
           **dict(job.exports)}
    monkeypatch.setattr("os.getcwd", lambda: str(WORK))
    launch = _ddlrun_in_allocation(job, env)
    argv = launch.command()
    assert str(plugin_dir) in [argv[i + 1] for i, a in enumerate(argv) if a == "-B"]
    inside = launch.launcher_env(env)["APPTAINERENV_LD_LIBRARY_PATH"].split(":")
    assert inside[0] == str(plugin_dir)


def test_a_packed_sweep_keeps_the_containers_setup(tmp_path):
    """Issue 58 point 2, as written: `wml sweep --site frontier -N 2 --pack 2 ... --container
    /lus/img.sif --dry-run` had neither the container's modules nor its fabric case, and yet ran
    `apptainer exec`."""
    from wmlce_tools.runs.sweep_plan import SweepOptions, plan_sweep
    from wmlce_tools.sweeps.grid import Trial

    req = ResourceRequest(nodes=2, project="abc", walltime=30, container="/lus/img.sif")
    sp = plan_sweep(get_site("frontier"), req, ["python3", str(WORK / "prog.py"), "--lr", "{lr}"],
                    [Trial(0, (("lr", "0.1"),)), Trial(1, (("lr", "0.01"),))], SweepOptions(pack=2),
                    tmp_path / "run", preview=True, workdir=WORK)
    script = sp.script
    assert sp.mode == "packed"
    for m in ("olcf-container-tools", "apptainer-enable-mpi", "apptainer-enable-gpu"):
        assert f"module load {m}\n" in script
    assert "inside a container" in script and "#     MPICH_SMP_SINGLE_COPY_MODE=NONE  <- " in script
    launch = _parts(script)[2]
    assert launch[launch.index("apptainer") + 1] == "exec"
