"""What the generated Slurm, Summit and Theta scripts got wrong against the centres' own
documentation (issue 13, "Fix what is wrong"); each test failed before its fix.

Sources, by section:
- Slurm: sbatch(1) and srun(1), "--threads-per-core" (sbatch and srun must ask the same: on
  nodes with ThreadsPerCore=2, ``--cpus-per-task=16`` without it is 8 cores) and
  "--cpus-per-task" ("Beginning with 22.05, srun will not inherit the --cpus-per-task value
  requested by salloc or sbatch.  It must be requested again with the call to srun or set with
  the SRUN_CPUS_PER_TASK environment variable").  The real-cluster check of the same is
  tests/slurm/test_threads_per_core.py.
- Summit: OLCF Summit User Guide, "Batch Scheduler and Job Launcher" (``-P`` is required;
  ``-alloc_flags`` "smt1, smt2, smt4 (default)", "gpumps", "NVME"), "Hardware Threads"
  (OMP_NUM_THREADS per resource set), and "Deep Learning" / "IBM WML CE" (one resource set
  per node, ``jsrun -r1 -g6 -a6 -c42 -bpacked:7``, each rank picking its GPU by local rank
  so CUDA IPC works between the node's GPUs).
- Theta: ALCF "Job and Queue Scheduling on Theta" (default queue from 128 nodes;
  ``debug-cache-quad``/``debug-flat-quad`` for 1-8 nodes, 1 hour) and "Affinity on Theta"
  (``aprun -n -N -d -j``: 128 ranks per node are ``-N 128 -d 1 -j 2``), ALCF job script
  examples (``-q debug-flat-quad`` with ``--attrs mcdram=flat:numa=quad``).
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from wmlce_tools.errors import WmlError
from wmlce_tools.runs.interactive import interactive_directives
from wmlce_tools.jobscript import plan_job, render_script
from wmlce_tools.layout import LayoutError, check_queue_limits, compile_layout
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


def plan(site, program, **kw):
    return plan_job(get_site(site), ResourceRequest(**kw), [str(program)],
                    jobdir=Path("/jobs/j1"), workdir=Path("/work/proj"))


def script_of(site, program, **kw):
    return render_script(plan(site, program, **kw))


def directive(script, prefix, name):
    """The value of ``#SBATCH --name=value`` / ``#BSUB -name value`` lines."""
    vals = []
    for ln in script.splitlines():
        if not ln.startswith(prefix):
            continue
        words = ln[len(prefix):].split(None, 1)
        if words and words[0].split("=", 1)[0] == name:
            vals.append(words[0].split("=", 1)[1] if "=" in words[0] else words[1].strip('"'))
    return vals


def launch_argv(script):
    m = re.search(r"^# ddlrun recomputes this layout inside the allocation and runs:\n#   (.*)$", script, re.M)
    return shlex.split(m.group(1))


def ddlrun_argv(script):
    return shlex.split(script.rstrip().splitlines()[-1])


def flag(argv, name):
    vals = [a.split("=", 1)[1] for a in argv if a.startswith(name + "=")]
    return vals[0] if vals else None


# -- Slurm --------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [None, 1, 2])
def test_sbatch_and_srun_ask_the_same_cpus_and_threads_per_core(program, threads):
    script = script_of("slurm-gpu", program, nodes=2, threads_per_core=threads)
    srun = launch_argv(script)
    tpc = str(threads or 1)
    assert directive(script, "#SBATCH", "--threads-per-core") == [tpc] == [flag(srun, "--threads-per-core")]
    cpus = str(16 * int(tpc))
    # srun repeats --cpus-per-task itself: since 22.05 it does not inherit sbatch's
    assert directive(script, "#SBATCH", "--cpus-per-task") == [cpus] == [flag(srun, "--cpus-per-task")]


def test_salloc_asks_the_threads_per_core_srun_will(program):
    p = plan("slurm-gpu", program, nodes=1, threads_per_core=2)
    d = interactive_directives(p)
    assert "--threads-per-core=2" in d and "--cpus-per-task=32" in d


def test_single_thread_nodes_get_no_threads_per_core(program):
    """Nodes with one thread per core (the local cluster's default) need no such flag."""
    script = script_of("local-slurm", program, nodes=2)
    assert directive(script, "#SBATCH", "--threads-per-core") == []
    assert flag(launch_argv(script), "--threads-per-core") is None


# -- Summit -------------------------------------------------------------------------------

@pytest.mark.parametrize("threads, smt", [(None, "smt4"), (1, "smt1"), (2, "smt2"), (4, "smt4")])
def test_summit_smt_level_follows_threads_per_core(program, threads, smt):
    p = plan("summit", program, nodes=2, project="abc123", threads_per_core=threads)
    script = render_script(p)
    assert directive(script, "#BSUB", "-alloc_flags") == [smt]
    d = interactive_directives(p)
    assert d[d.index("-alloc_flags") + 1] == smt
    assert "#     OMP_NUM_THREADS=" in script and "-x OMP_NUM_THREADS" not in script   # ddlrun's default, shown


@pytest.mark.parametrize("kw, omp", [
    (dict(), "28"),                                          # 7 cores x smt4
    (dict(threads_per_core=1), "7"),
    (dict(threads_per_core=2, ranks_per_node=2), "42"),      # 21 cores x 2
    (dict(exports=(("OMP_NUM_THREADS", "4"),)), "4"),        # the user's value wins
])
def test_summit_ranks_get_omp_num_threads_of_their_cores_and_threads(program, kw, omp):
    script = script_of("summit", program, nodes=2, project="abc123", **kw)
    # the launch plan's value (ddlrun gives it to every rank), or the user's --export, which wins
    assert re.findall(r"^#     OMP_NUM_THREADS=(\S+)  <- ", script, re.M) == [omp]
    ddl = ddlrun_argv(script)
    assert ("-x" in ddl and ddl[ddl.index("-x") + 1] == "OMP_NUM_THREADS") == ("exports" in kw)


def test_summit_refuses_to_render_without_a_project(program):
    with pytest.raises(WmlError, match=r"summit charges every job to a project: give -P/--project"):
        plan("summit", program, nodes=2)


def test_summit_alloc_flags_pass_through_beside_the_smt_level(program):
    script = script_of("summit", program, nodes=2, project="abc123", threads_per_core=2,
                       alloc_flags=("gpumps", "NVME"))
    assert directive(script, "#BSUB", "-alloc_flags") == ["smt2 gpumps NVME"]
    with pytest.raises(WmlError, match=r"the SMT level follows --threads-per-core; give --threads-per-core 1"):
        ResourceRequest(alloc_flags=("smt1",))
    with pytest.raises(WmlError, match=r"not an LSF allocation flag"):
        ResourceRequest(alloc_flags=("gpumps;id",))
    with pytest.raises(WmlError, match=r"--alloc-flags is an LSF option; slurm-gpu uses slurm"):
        plan("slurm-gpu", program, nodes=1, alloc_flags=("gpumps",))


def test_summit_two_gpus_per_rank_derive_three_ranks_per_node(program):
    lay = compile_layout(get_site("summit"), ResourceRequest(nodes=2, gpus_per_rank=2))
    assert lay.ranks_per_node == 3 and lay.size == 6
    assert [r.gpus for r in lay.on_node(0)] == [(0, 1), (2, 3), (4, 5)]
    assert lay.cores_per_rank == 14
    ddl = ddlrun_argv(script_of("summit", program, nodes=2, project="abc123", gpus_per_rank=2))
    assert ddl[ddl.index("--ranks-per-node") + 1] == "3" and ddl[ddl.index("--gpus-per-rank") + 1] == "2"


def test_summit_script_calls_wmls_own_ddlrun_by_absolute_path(program):
    """``module load ibm-wml-ce`` puts IBM's ddlrun first on PATH: the script must not ask PATH."""
    script = script_of("summit", program, nodes=2, project="abc123")
    exe = ddlrun_argv(script)[0]
    assert os.path.isabs(exe) and exe == str(Path(sys.executable).parent / "ddlrun")
    lines = script.splitlines()
    assert lines.index("module load ibm-wml-ce") < next(i for i, ln in enumerate(lines) if ln.startswith(exe))
    assert not any(ln.startswith("ddlrun ") for ln in lines)


def test_summit_olcf_dl_layout_one_resource_set_per_node_with_all_gpus(program):
    """--gpu-binding local-rank: OLCF's DL layout, jsrun -r1 -g6 -a6 -c42 -bpacked:7."""
    script = script_of("summit", program, nodes=4, project="abc123", gpu_binding="local-rank")
    assert launch_argv(script)[:14] == ["jsrun", "-n", "4", "-a", "6", "-c", "42", "-g", "6", "-r", "1",
                                        "-b", "packed:7", "-d"]
    ddl = ddlrun_argv(script)
    assert ddl[ddl.index("--gpu-binding") + 1] == "local-rank"   # ddlrun recomputes the same launch
    default = script_of("summit", program, nodes=4, project="abc123")
    assert launch_argv(default)[:7] == ["jsrun", "-n", "24", "-a", "1", "-c", "7"]
    assert "--gpu-binding" not in ddlrun_argv(default)
    with pytest.raises(WmlError, match="theta nodes have no GPUs"):
        plan("theta", program, nodes=128, gpu_binding="local-rank")
    with pytest.raises(WmlError, match="expected per-rank or local-rank"):
        ResourceRequest(gpu_binding="all")


def test_ddlrun_takes_the_same_gpu_binding(tmp_path):
    """Inside the allocation ddlrun must launch what the script's comment shows."""
    from wmlce_tools.ddlrun.cli import parse_args
    from wmlce_tools.ddlrun.plan import build_plan

    hostfile = tmp_path / "hosts"
    hostfile.write_text("batch1\n" + "".join(f"h41n0{i}\n" * 42 for i in (1, 2)))
    env = {"LSB_JOBID": "7", "LSB_DJOB_HOSTFILE": str(hostfile)}
    opts = parse_args(["--site", "summit", "--dry-run", "-n", "12", "--ranks-per-node", "6",
                       "--gpu-binding", "local-rank", "--", "true"])
    cmd = build_plan(opts, env).command()
    assert cmd[:13] == ["jsrun", "-n", "2", "-a", "6", "-c", "42", "-g", "6", "-r", "1", "-b", "packed:7"]
    assert "--binding" in cmd and cmd[cmd.index("--binding") + 1] == "local-rank"


# -- Theta --------------------------------------------------------------------------------

def test_theta_small_jobs_go_to_a_debug_queue(program):
    theta = get_site("theta")
    assert check_queue_limits(theta, ResourceRequest(nodes=2)) == ("debug-cache-quad", 60)
    script = script_of("theta", program, nodes=2, project="datascience")
    assert "#COBALT -q debug-cache-quad" in script and "#COBALT --attrs mcdram=cache:numa=quad" in script
    with pytest.raises(WmlError, match=r"below the 128-node minimum of queue 'default'.*queue\(s\) that take "
                                       r"this job: debug-cache-quad, debug-flat-quad \(-q\)"):
        check_queue_limits(theta, ResourceRequest(nodes=2, queue="default"))
    # 9-127 nodes: no queue takes it, and the message says the production minimum
    with pytest.raises(WmlError, match="below the 128-node minimum"):
        check_queue_limits(theta, ResourceRequest(nodes=64))
    # a debug queue's limits still hold
    with pytest.raises(WmlError, match="above the 1:00 maximum for queue 'debug-cache-quad'"):
        check_queue_limits(theta, ResourceRequest(nodes=2, queue="debug-cache-quad", walltime=90))


def test_theta_128_ranks_per_node_on_two_hw_threads_per_core(program):
    script = script_of("theta", program, nodes=128, project="datascience", ranks_per_node=128, threads_per_core=2)
    assert launch_argv(script)[:11] == ["aprun", "-n", "16384", "-N", "128", "-d", "1", "-j", "2", "-cc", "depth"]
    assert "#     OMP_NUM_THREADS=1  <- the layout" in script
    lay = compile_layout(get_site("theta"), ResourceRequest(nodes=1, ranks_per_node=128, threads_per_core=2))
    hw = [h for r in lay.ranks for h in r.hwthreads]
    assert len(hw) == len(set(hw)) == 128 and lay.ranks[1].cores == (0,) and lay.ranks[2].cores == (1,)
    # -N 256 -d 1 -j 4 and -N 128 -d 2 -j 4 are valid too
    assert compile_layout(get_site("theta"), ResourceRequest(nodes=1, ranks_per_node=128, threads_per_core=4)).cpus_per_rank == 2
    # ddlrun, given the script's numbers, places the same ranks
    ddl = ddlrun_argv(script)
    again = compile_layout(get_site("theta"), ResourceRequest(
        nodes=128, ranks_per_node=int(ddl[ddl.index("--ranks-per-node") + 1]),
        cores_per_rank=int(ddl[ddl.index("--cores-per-rank") + 1]),
        threads_per_core=int(ddl[ddl.index("--threads-per-core") + 1])))
    assert again.cpus_per_rank == 1 and again.size == 16384


@pytest.mark.parametrize("req, msg", [
    (ResourceRequest(nodes=1, ranks_per_node=128), "give --threads-per-core 2"),
    (ResourceRequest(nodes=1, ranks_per_node=96, threads_per_core=2), "fill the hw threads of every core evenly"),
    (ResourceRequest(nodes=1, ranks_per_node=512, threads_per_core=4), "fill the hw threads"),
])
def test_theta_refuses_ranks_that_do_not_fill_the_hw_threads(req, msg):
    with pytest.raises(LayoutError, match=msg):
        compile_layout(get_site("theta"), req)


@pytest.mark.parametrize("queue, attrs", [("debug-flat-quad", "mcdram=flat:numa=quad"),
                                          ("debug-cache-quad", "mcdram=cache:numa=quad")])
def test_theta_attrs_match_the_queues_memory_mode(program, queue, attrs):
    p = plan("theta", program, nodes=2, project="datascience", queue=queue)
    assert directive(render_script(p), "#COBALT", "--attrs") == [attrs]
    d = interactive_directives(p)
    assert d[d.index("--attrs") + 1] == attrs


# -- CLI: interactive without a program, render's output paths -----------------------------

def test_summit_interactive_needs_no_program(run_wml):
    proc = run_wml("submit", "--site", "summit", "--interactive", "-P", "ABC123", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout)
    assert argv[:2] == ["bsub", "-Is"] and argv[argv.index("-P") + 1] == "ABC123"
    assert argv[argv.index("-alloc_flags") + 1] == "smt4"
    proc = run_wml("submit", "--site", "summit", "-P", "ABC123", "--dry-run")
    assert proc.returncode != 0 and "no program given" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_wml("submit", "--site", "summit", "--interactive", "--dry-run")
    assert proc.returncode != 0 and "give -P/--project" in proc.stderr


def test_cli_alloc_flags_and_gpu_binding(run_wml, tmp_path):
    prog = tmp_path / "train.py"
    prog.write_text("print(1)\n")
    out = run_wml("render", "--site", "summit", "-N", "2", "-P", "abc", "--alloc-flags", "gpumps NVME",
                  "--gpu-binding", "local-rank", str(prog)).stdout
    assert '#BSUB -alloc_flags "smt4 gpumps NVME"' in out and "#   jsrun -n 2 -a 6 -c 42 -g 6 -r 1" in out


@pytest.mark.parametrize("site, args, prefix, names", [
    ("summit", ["-P", "abc"], "#BSUB", ["-o", "-e"]),
    ("slurm-gpu", [], "#SBATCH", ["--output", "--error"]),
    ("theta", ["-P", "abc"], "#COBALT", ["-O"]),
])
def test_render_points_output_at_a_directory_that_exists(run_wml, tmp_path, site, args, prefix, names):
    """The printed script is submitted as is (``wml render ... > job.sh; bsub < job.sh``): LSF,
    Slurm and Cobalt do not create the directory of -o/-e, so it must exist already."""
    prog = tmp_path / "train.py"
    prog.write_text("print(1)\n")
    work = tmp_path / "work"
    work.mkdir()
    proc = run_wml("render", "--site", site, "-N", "2", *args, str(prog), cwd=work)
    assert proc.returncode == 0, proc.stderr
    for name in names:
        [path] = directive(proc.stdout, prefix, name)
        assert Path(path).is_absolute() and Path(path).parent.is_dir(), path
        assert Path(path).parent == work
    assert list(work.iterdir()) == []           # render writes nothing
