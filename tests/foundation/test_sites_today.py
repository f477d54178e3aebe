"""The machines users run on today: ALCF Polaris and Aurora (PBS Pro + PALS mpiexec), OLCF
Frontier and NERSC Perlmutter (Slurm + srun), rendered and checked line by line against the
centres' pages (each profile in site_configs/ names the page it follows):

- Polaris, https://docs.alcf.anl.gov/polaris/running-jobs/ : ``#PBS -l select=N:system=polaris``,
  ``-l place=scatter``, ``-l walltime=``, ``-l filesystems=home:eagle``, ``-A``, ``-q``; ``mpiexec
  -n <ranks> --ppn 4 --depth=8 --cpu-bind depth --env OMP_NUM_THREADS=...``; GPU of local rank r
  is 3 - r (set_affinity_gpu_polaris.sh).
- Aurora, https://docs.alcf.anl.gov/aurora/running-jobs-aurora/ : ``-l select=N``,
  ``filesystems=home:flare``; 12 ranks per node bound with ``--cpu-bind=list:1-8:...:93-100``
  (6 ranks: ``list:1-16:17-32:33-48:53-68:69-84:85-100``), ZE_AFFINITY_MASK per local rank.
- Frontier, https://docs.olcf.ornl.gov/systems/frontier_user_guide.html : ``srun -N2 -n16 -c7
  --gpus-per-task=1 --gpu-bind=closest``, ``-A``, ``-p batch``.
- Perlmutter, https://docs.nersc.gov/jobs/examples/ : ``-C gpu``, ``-q regular``, ``-A``,
  ``--gpus-per-node=4``, ``srun ... -c 32 --cpu-bind=cores``.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from helpers.job_output import assert_golden, directives, normalize, promised_launch

from wmlce_tools.jobscript import plan_job, render_script
from wmlce_tools.launchers.pals import cpu_bind_list
from wmlce_tools.layout import compile_layout
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.detect import detect_site
from wmlce_tools.site.registry import get_site, known_sites

GOLDEN = Path(__file__).parent / "golden"
SITES = ("polaris", "aurora", "frontier", "perlmutter")


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


def render(site, program, **kw):
    plan = plan_job(get_site(site), ResourceRequest(**kw), [str(program), "--epochs", "3"],
                    jobdir=Path("/jobs/j1"), workdir=Path("/work/proj"))
    return plan, render_script(plan)


GOLDEN_JOBS = {
    "polaris": dict(nodes=2, project="datascience", walltime=30, queue="debug", job_name="train"),
    "aurora": dict(nodes=2, project="datascience", walltime=30, queue="debug", job_name="train", after="4242.aurora-pbs-0001"),
    "frontier": dict(nodes=2, project="abc123", walltime=30, job_name="train"),
    "perlmutter": dict(nodes=2, project="m1234", walltime=30, job_name="train"),
}


@pytest.mark.parametrize("site", SITES)
def test_golden_two_node_scripts(site, program):
    _, script = render(site, program, **GOLDEN_JOBS[site])
    golden = GOLDEN / f"{site}.sh"
    assert_golden(script, program, golden)


def test_polaris_directives_and_mpiexec_line(program):
    plan, script = render("polaris", program, nodes=2, project="datascience", walltime=30, queue="debug",
                          after="4241.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov")
    assert directives(script, "#PBS") == [
        "#PBS -N wml-job", "#PBS -A datascience", "#PBS -q debug", "#PBS -l select=2:system=polaris",
        "#PBS -l place=scatter", "#PBS -l walltime=00:30:00", "#PBS -l filesystems=home:eagle",
        "#PBS -k doe", "#PBS -o /jobs/j1/wml-job.out", "#PBS -e /jobs/j1/wml-job.err",
        "#PBS -W depend=afterok:4241.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"]
    argv = promised_launch(script)
    assert argv[:8] == ["mpiexec", "-n", "8", "--ppn", "4", "--depth=8", "--cpu-bind", "depth"]
    # the job's exports reach every rank through --env
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--env"] == \
        [f"{a.name}={a.value}" for a in plan.launch.promised().report if a.where == "rank"]


def test_polaris_with_both_hw_threads_binds_cores_and_their_siblings(program):
    """--depth would give a rank 16 consecutive CPUs = 16 cores' first threads; with 2 threads
    per core each rank gets its 8 cores and their second threads (Linux: core + 32)."""
    _, script = render("polaris", program, nodes=1, project="p", walltime=30, queue="debug", threads_per_core=2)
    argv = promised_launch(script)
    assert argv[5] == "--cpu-bind=list:0-7,32-39:8-15,40-47:16-23,48-55:24-31,56-63"


def test_polaris_ranks_take_gpus_in_alcfs_order():
    """set_affinity_gpu_polaris.sh: local rank r -> GPU 3 - r % 4 (closest to its cores)."""
    from wmlce_tools.ddlrun.plan import DdlrunOptions, build_plan

    env = {"PBS_NODEFILE": "/nonexistent"}
    opts = DdlrunOptions(program=("true",), site="polaris", hosts="x3005c0s13b0n0,x3005c0s13b1n0", dry_run=True)
    plan = build_plan(opts, env)
    shim = plan.shim_argv()
    assert shim[shim.index("--gpus") + 1] == "3;2;1;0"
    assert shim[shim.index("--gpu-env") + 1] == "CUDA_VISIBLE_DEVICES"


def test_aurora_binds_one_rank_per_tile_as_alcf_does(program):
    _, script = render("aurora", program, nodes=2, project="datascience", walltime=30, queue="debug")
    assert directives(script, "#PBS")[3:7] == ["#PBS -l select=2", "#PBS -l place=scatter",
                                              "#PBS -l walltime=00:30:00", "#PBS -l filesystems=home:flare"]
    assert "module load frameworks" in script
    argv = promised_launch(script)
    assert argv[:6] == ["mpiexec", "-n", "24", "--ppn", "12",
                        "--cpu-bind=list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100"]


def test_aurora_bind_lists_for_other_layouts():
    site = get_site("aurora")
    # ALCF's "Example 2 (Implicit Scaling)": 6 ranks per node, one GPU (2 tiles) each, 16 cores
    lay = compile_layout(site, ResourceRequest(nodes=1, ranks_per_node=6, cores_per_rank=16))
    assert cpu_bind_list(lay) == "list:1-16:17-32:33-48:53-68:69-84:85-100"
    assert lay.ranks[0].gpus == (0, 1)
    # both hw threads of each core: Linux numbers the second thread of core c as c + 104
    lay = compile_layout(site, ResourceRequest(nodes=1, threads_per_core=2))
    assert cpu_bind_list(lay).startswith("list:1-8,105-112:9-16,113-120:")


def test_frontier_srun_line(program):
    _, script = render("frontier", program, nodes=2, project="abc123", walltime=30)
    d = directives(script, "#SBATCH")
    assert "#SBATCH --partition=batch" in d and "#SBATCH --account=abc123" in d and "#SBATCH --nodes=2" in d
    argv = promised_launch(script)
    assert argv[:5] == ["srun", "-N", "2", "-n", "16"]
    assert "--cpus-per-task=7" in argv and "--gpus-per-task=1" in argv and "--gpu-bind=closest" in argv
    for mod in ("PrgEnv-gnu", "rocm", "craype-accel-amd-gfx90a", "rccl-net-plugin"):
        assert f"module load {mod}\n" in script
    assert "#     MIOPEN_USER_DB_PATH=/tmp/my-miopen-cache  <- " in script


def test_frontier_walltime_bins(program):
    with pytest.raises(Exception, match="2:00 maximum"):
        render("frontier", program, nodes=2, project="abc123", walltime=180, queue="batch")
    plan, _ = render("frontier", program, nodes=100, project="abc123", walltime=360)
    assert plan.queue == "batch"


def test_perlmutter_qos_constraint_and_srun_line(program):
    _, script = render("perlmutter", program, nodes=2, project="m1234", walltime=30)
    d = directives(script, "#SBATCH")
    assert "#SBATCH --qos=regular" in d and "#SBATCH --constraint=gpu" in d and "#SBATCH --account=m1234" in d
    assert "#SBATCH --gpus-per-node=4" in d and not any(x.startswith("#SBATCH --partition") for x in d)
    argv = promised_launch(script)
    assert argv[:5] == ["srun", "-N", "2", "-n", "8"]
    assert "--cpus-per-task=32" in argv and "--gpus-per-node=4" in argv and "--cpu-bind=cores" in argv
    _, script = render("perlmutter", program, nodes=2, project="m1234", walltime=30, queue="debug")
    assert "#SBATCH --qos=debug" in script


@pytest.mark.parametrize("site", SITES)
def test_rendered_scripts_pass_bash_n(site, program, tmp_path):
    import subprocess

    _, script = render(site, program, exports=(("A", "it's $(id)"),), **GOLDEN_JOBS[site])
    f = tmp_path / "job.sh"
    f.write_text(script)
    assert subprocess.run(["bash", "-n", str(f)], capture_output=True).returncode == 0


@pytest.mark.parametrize("site,tool", [("polaris", "qsub"), ("aurora", "qsub"), ("frontier", "sbatch"),
                                       ("perlmutter", "sbatch")])
def test_dry_run_shows_the_submit_command(site, tool, run_wml, tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    proc = run_wml("submit", "--site", site, "--nodes", "2", "-P", "X", "-t", "30m", "--dry-run", "--json",
                   "train.py")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    argv = shlex.split(info["submit_command"])
    assert argv[0] == tool and argv[-1] == info["script"]
    assert not Path(info["script"]).exists()          # a dry run writes nothing


def test_pbs_interactive_allocation(run_wml, tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    proc = run_wml("submit", "--site", "polaris", "--nodes", "1", "-P", "datascience", "-t", "30", "-q", "debug",
                   "--interactive", "--dry-run", "train.py")
    assert proc.returncode == 0, proc.stderr
    assert shlex.split(proc.stdout.strip()) == [
        "qsub", "-I", "-l", "select=1:system=polaris", "-l", "place=scatter", "-l", "walltime=00:30:00",
        "-l", "filesystems=home:eagle", "-q", "debug", "-N", "wml-job", "-A", "datascience"]


@pytest.mark.parametrize("env,host,expected", [
    ({}, "polaris-login-02.hsn.cm.polaris.alcf.anl.gov", "polaris"),
    ({}, "aurora-uan-0010", "aurora"),
    ({"LMOD_SYSTEM_NAME": "frontier"}, "login05", "frontier"),
    ({}, "login11.frontier.olcf.ornl.gov", "frontier"),
    ({"NERSC_HOST": "perlmutter"}, "login31", "perlmutter"),
    ({"NERSC_HOST": "cori"}, "cori07", None),
])
def test_site_detect_recognises_login_nodes(env, host, expected):
    got = detect_site(known_sites(), env=env, hostname=host)
    assert (got.name if got else None) == expected


@pytest.mark.parametrize("site", ["polaris", "aurora", "frontier"])
def test_project_is_required_where_the_centre_rejects_jobs_without_one(site, run_wml, tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    proc = run_wml("render", "--site", site, "--nodes", "2", "-t", "30m", "train.py")
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.startswith("wml: error: ") and "--project" in proc.stderr and len(proc.stderr.splitlines()) == 1
