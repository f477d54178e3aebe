"""Mapping: ``ddlrun --dry-run`` prints the launch line the foundation's Layout gives, for each
site, with the scheduler's recorded environment; the job script's ddlrun call reproduces
exactly the launcher line the script promises."""
from __future__ import annotations

import shlex
import sys

import pytest

from wmlce_tools.ddlrun.rankexec import RankSettings, ShimError, parse_gpus, rank_environment
from wmlce_tools.ddlrun.rankfile import jsrun_erf, openmpi_rankfile, ranges
from wmlce_tools.jobscript import plan_job
from wmlce_tools.launch.command import MASTER_PLACEHOLDER
from wmlce_tools.layout import compile_layout
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site

from ddlrun_helpers import openmpi_mpiexec

SUMMIT_ENV = {"LSB_JOBID": "4242", "LSB_MCPU_HOSTS": "batch2 1 a01n01 42 a01n02 42"}
THETA_ENV = {"COBALT_JOBID": "77", "COBALT_PARTNAME": "3820-3821", "COBALT_JOBSIZE": "2"}
SLURM_ENV = {"SLURM_JOB_ID": "99", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_TASKS_PER_NODE": "4(x2)"}


def split(result):
    """(launcher words before the shim, shim settings, program) of a dry-run line."""
    assert result.returncode == 0, result.stderr
    argv = shlex.split(result.stdout.splitlines()[0])
    shim_at = argv.index("wmlce_tools.ddlrun.rankexec") - 2
    assert argv[shim_at] == sys.executable and argv[shim_at + 1] == "-m"
    dash = argv.index("--", shim_at)
    shim = argv[shim_at + 3:dash]
    settings = dict(zip(shim[::2], shim[1::2]))
    assert len(settings) * 2 == len(shim), shim
    return argv[:shim_at], settings, argv[dash + 1:]


def test_summit_one_rank_per_gpu(ddlrun):
    launch, shim, program = split(ddlrun("--site", "summit", "--dry-run", "--", "python", "train.py", "--lr", "0.1",
                                         env=SUMMIT_ENV))
    # OLCF's one-rank-per-GPU form; 2 compute nodes (the batch node is not one of them)
    assert launch == ["jsrun", "-n", "12", "-a", "1", "-c", "7", "-g", "1", "-r", "6", "-b", "packed:7", "-d", "packed"]
    assert shim["--size"] == "12" and shim["--ranks-per-node"] == "6" and shim["--binding"] == "per-rank"
    assert shim["--gpus"] == "0;1;2;3;4;5" and shim["--mode"] == "p:6x2x1x1" and shim["--output"] == "prefixed"
    assert program == ["python", "train.py", "--lr", "0.1"]


def test_summit_erf_when_ranks_do_not_split_over_sockets(ddlrun):
    r = ddlrun("--site", "summit", "--ranks-per-node", "3", "--dry-run", "python", "x.py", env=SUMMIT_ENV)
    launch, shim, _ = split(r)
    assert launch[:2] == ["jsrun", "--erf_input"] and launch[2].endswith("/erf")
    erf = [l.strip("# ").strip() for l in r.stdout.splitlines()[2:]]
    assert "cpu_index_using: logical" in erf
    assert "rank: 0: { host: 1; cpu: {0-55}; gpu: {0-1} }" in erf
    assert "rank: 5: { host: 2; cpu: {112-167}; gpu: {4-5} }" in erf
    assert shim["--gpus"] == "0,1;2,3;4,5"


def test_theta_aprun_depth_and_hw_threads(ddlrun):
    launch, shim, _ = split(ddlrun("--site", "theta", "--ranks-per-node", "4", "--threads-per-core", "2",
                                   "-x", "OMP_NUM_THREADS=32", "--dry-run", "python", "x.py", env=THETA_ENV))
    assert launch == ["aprun", "-n", "8", "-N", "4", "-d", "32", "-j", "2", "-cc", "depth", "-e", "OMP_NUM_THREADS=32"]
    assert shim["--binding"] == "none" and shim["--mode"] == "p:4x2x1x1"


def test_slurm_gpu_srun(ddlrun):
    launch, shim, _ = split(ddlrun("--site", "slurm-gpu", "--dry-run", "python", "x.py", env=SLURM_ENV))
    assert launch == ["srun", "-N", "2", "-n", "8", "--ntasks-per-node=4", "--cpus-per-task=16",
                      "--threads-per-core=1", "--gpus-per-task=1", "--cpu-bind=cores", "--kill-on-bad-exit=1"]
    assert shim["--gpus"] == "0;1;2;3" and shim["--master"].startswith("gpu01:")


def test_local_mpich_and_emulated_nodes(ddlrun):
    launch, shim, _ = split(ddlrun("--site", "fakegpu", "-n", "2", "--dry-run", "python", "x.py"))
    assert launch[1:] == ["-n", "2", "-bind-to", "core"] and launch[0].endswith("mpiexec")
    assert shim["--gpus"] == "0,1;2,3"
    launch, shim, _ = split(ddlrun("--site", "fakegpu", "-n", "4", "--emulate-nodes", "2", "--dry-run", "python", "x.py"))
    assert launch[1:] == ["-n", "4"]          # oversubscribed on 2 cores: no binding
    assert shim["--gpus"] == "0;1|2;3" and shim["--emulate-nodes"] == "2" and shim["--mode"] == "p:2x2x1x1"
    assert shim["--master"].startswith("localhost:")


@pytest.mark.skipif(openmpi_mpiexec() is None, reason="Debian's openmpi-bin is not installed")
def test_local_openmpi_rankfile(ddlrun):
    r = ddlrun("--site", "fakegpu", "--mpiexec", openmpi_mpiexec(), "-n", "1", "--cores-per-rank", "2",
               "--dry-run", "python", "x.py")
    launch, _, _ = split(r)
    assert launch[1:3] == ["-n", "1"] and launch[3] == "--rankfile"
    assert "#   rank 0=localhost slot=0-1" in r.stdout
    launch, _, _ = split(ddlrun("--site", "fakegpu", "--mpiexec", openmpi_mpiexec(), "-n", "2", "-x", "A=1",
                                "--dry-run", "python", "x.py"))
    at = launch.index("PYTHONUNBUFFERED=1")     # set in the tests' environment: Open MPI is told to pass it on
    assert launch[at - 1] == "-x"
    del launch[at - 1:at + 1]
    assert launch[1:] == ["-n", "2", "--map-by", "slot", "--bind-to", "core", "-x", "A=1", "--tag-output"]


@pytest.mark.parametrize("site, env, nodes, extra", [
    ("summit", SUMMIT_ENV, 2, {}),
    ("summit", SUMMIT_ENV, 2, {"gpu_binding": "local-rank"}),      # OLCF's DL layout
    ("theta", THETA_ENV, 2, {"ranks_per_node": 4, "threads_per_core": 2, "queue": "debug-cache-quad"}),
    ("theta", THETA_ENV, 2, {"ranks_per_node": 128, "threads_per_core": 2}),   # aprun -N 128 -d 1 -j 2
    ("slurm-gpu", SLURM_ENV, 2, {"ranks_per_node": 2}),
    ("fakegpu", {}, 2, {"ranks_per_node": 2}),
    ("local", {}, 1, {}),
])
def test_job_script_and_ddlrun_agree(ddlrun, isolated_env, site_dir, monkeypatch, tmp_path, site, env, nodes, extra):
    """Run the exact ddlrun command a generated job script runs; its launch line must be the
    launcher line the script promises (JobPlan.launcher_argv) with the shim before the program."""
    monkeypatch.setenv("WML_SITE_PATH", str(site_dir))
    req = ResourceRequest(nodes=nodes, exports=(("MY_VAR", "v 1"),), project="p1", **extra)
    plan = plan_job(get_site(site), req, ["python", "x.py"], jobdir=tmp_path / "job", workdir=tmp_path)
    (tmp_path / "x.py").write_text("")
    args = plan.ddlrun_argv[1:]
    exported = dict(plan.exports)          # the script exports these before it calls ddlrun
    r = ddlrun(*args[:args.index("--")], "--dry-run", *args[args.index("--"):], env={**env, **exported})
    launch, shim, program = split(r)
    argv = shlex.split(r.stdout.splitlines()[0])
    # the script's line is the launch plan's one assembly: the shim and the program included, only
    # the rendezvous (from the job id) left to the allocation
    promised = [shim["--master"] if a == MASTER_PLACEHOLDER else a for a in plan.launcher_argv]
    if plan.site.launcher == "mpiexec":
        argv, promised = argv[1:], promised[1:]      # ddlrun names the mpiexec it found
    assert argv == promised
    assert program == list(plan.program)
    assert shim["--mode"] == plan.layout.mode and int(shim["--size"]) == plan.layout.size


# The per-rank shim, in process: what one rank's environment becomes -------------------------
def settings(**kw):
    base = dict(size=4, ranks_per_node=2, binding="per-rank", node_gpus=parse_gpus("0,1;2,3"),
                mode="p:2x2x1x1", master_addr="h1", master_port=23456)
    base.update(kw)
    return RankSettings(**base)


@pytest.mark.parametrize("launcher_env, expect", [
    ({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
     {"RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1", "CUDA_VISIBLE_DEVICES": "2,3"}),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
     {"RANK": "2", "LOCAL_RANK": "0", "GROUP_RANK": "1", "CUDA_VISIBLE_DEVICES": "0,1"}),
    ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4",
      "CUDA_VISIBLE_DEVICES": "5,6"},                      # srun --gpus-per-task narrowed it already
     {"RANK": "1", "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "5,6"}),
    ({"JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_SIZE": "4", "JSM_NAMESPACE_LOCAL_RANK": "0",
      "CUDA_VISIBLE_DEVICES": "4,5,6,7"},                  # all node GPUs visible: index into them
     {"RANK": "0", "CUDA_VISIBLE_DEVICES": "4,5"}),
    ({"ALPS_APP_PE": "3"}, {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
                             "MASTER_ADDR": "h1", "MASTER_PORT": "23456", "DDL_LAYOUT_GPUS": "0,1;2,3",
                             "DDL_GPU_BINDING": "per-rank", "DDL_OPTIONS": "-mode p:2x2x1x1"}),
])
def test_rank_environment(launcher_env, expect):
    env = rank_environment(settings(), launcher_env)
    assert {k: env.get(k) for k in expect} == expect


def test_rank_environment_local_rank_binding_and_emulation():
    s = settings(binding="local-rank", node_gpus=parse_gpus("0;1|2;3"), emulate_nodes=2)
    env = rank_environment(s, {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "2",
                               "DDL_OPTIONS": "-mode p:9x9 -dbg 1"})
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env["DDL_GPU_BINDING"] == "local-rank" and env["DDL_LAYOUT_GPUS"] == "2;3"
    assert env["DDL_EMULATE_NODES"] == "2" and env["GROUP_RANK"] == "1" and env["LOCAL_RANK"] == "0"
    assert env["DDL_OPTIONS"] == "-mode p:2x2x1x1 -dbg 1"      # ddlrun's mode wins; other options stay


@pytest.mark.parametrize("launcher_env, message", [
    ({}, "cannot tell this process's rank"),
    ({"PMI_RANK": "0", "PMI_SIZE": "3", "MPI_LOCALRANKID": "0"}, "started 3 ranks but the layout has 4"),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
     "launcher says local rank 0 but the layout says 1"),
    ({"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "CUDA_VISIBLE_DEVICES": "0,1,2"},
     "CUDA_VISIBLE_DEVICES='0,1,2' shows 3"),
    ({"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "DDL_FUSION_MB": "lots"}, "DDL_FUSION_MB"),
    ({"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "DDL_OPTIONS": "-x 'open"}, "cannot be split"),
])
def test_rank_environment_refuses(launcher_env, message):
    s = settings(node_gpus=parse_gpus("2,3;0,1")) if "CUDA" in str(launcher_env) else settings()
    with pytest.raises(ShimError, match=message):
        rank_environment(s, launcher_env)


def test_placement_files():
    assert ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    lay = compile_layout(get_site("summit"), ResourceRequest(nodes=2))
    assert "rank 7=b slot=7-13" in openmpi_rankfile(lay, ["a", "b"])
    assert "rank: 0: { host: 1; cpu: {0-27}; gpu: {0} }" in jsrun_erf(lay)


def test_launcher_environment_carries_the_forwarded_variables(isolated_env):
    """srun and jsrun pass their own environment on: -x values must be in it too."""
    from wmlce_tools.ddlrun.plan import DdlrunOptions, build_plan

    env = dict(SLURM_ENV, KEEP="k", FROM_HERE="h")
    plan = build_plan(DdlrunOptions(program=("python",), site="slurm-gpu", exports=("NEW=1", "FROM_HERE"),
                                    dry_run=True), env)
    launch_env = plan.launcher_env(env)
    assert launch_env["NEW"] == "1" and launch_env["FROM_HERE"] == "h" and launch_env["KEEP"] == "k"
    assert plan.master_addr == "gpu01" and plan.layout.nodes == 2


def test_master_port_follows_the_job_id():
    from wmlce_tools.ddlrun.plan import master_port

    ports = {master_port({"SLURM_JOB_ID": str(j)}) for j in range(1000, 1200)}
    assert all(20000 <= p < 60000 for p in ports) and len(ports) > 190       # concurrent jobs differ
    assert master_port({"LSB_JOBID": "7", "WML_JOB_ID": "x"}) == master_port({"LSB_JOBID": "7"})
    assert master_port({"WML_JOB_ID": "local-1"}) == master_port({"WML_JOB_ID": "local-1"})


def test_stderr_relay_takes_out_exit_reports(tmp_path):
    """Exit reports reach ddlrun through any launcher's stderr; everything else passes."""
    import os

    from wmlce_tools.ddlrun.exitreport import RankExit, format_report
    from wmlce_tools.ddlrun.runner import StderrRelay

    token = "00112233aabbccdd"
    r, w = os.pipe()
    out = open(tmp_path / "stderr", "wb")
    relay = StderrRelay(os.fdopen(r, "rb"), token, fd=out.fileno())
    relay.start()
    for chunk in (b"[0] warming up\n", format_report(token, 2, 0), format_report(token, 1, 7) + b"[0] late\n",
                  format_report("ffffffffffffffff", 0, 9), format_report(token, 0, 1)):
        os.write(w, chunk)
    os.close(w)
    relay.join(timeout=10)
    out.close()
    assert relay.first_failure() == RankExit(1, 7)
    assert (tmp_path / "stderr").read_bytes() == b"[0] warming up\n[0] late\n" + format_report("ffffffffffffffff", 0, 9)


def _relay_of(*exits):
    """A StderrRelay that has read these (rank, status) exit reports."""
    import os

    from wmlce_tools.ddlrun.exitreport import format_report
    from wmlce_tools.ddlrun.runner import StderrRelay

    token = "00112233aabbccdd"
    r, w = os.pipe()
    relay = StderrRelay(os.fdopen(r, "rb"), token, fd=os.open(os.devnull, os.O_WRONLY))
    relay.start()
    for rank, code in exits:
        os.write(w, format_report(token, rank, code))
    os.close(w)
    relay.join(timeout=10)
    return relay


def _final(exits, code, chained=False):
    """ddlrun's status for a 2-rank job with these reports and launcher status, and what it said."""
    import io

    from wmlce_tools.ddlrun.runner import final_status

    err = io.StringIO()
    return final_status(_relay_of(*exits), code, 2, err, chained=chained), err.getvalue()


def test_a_rank_the_launcher_ends_after_another_checkpointed_and_stopped_is_not_the_failure():
    """Seen on the local Slurm: rank 1 exits 75 (the collective save is complete), srun's
    --kill-on-bad-exit SIGTERMs rank 0 while it is exiting (143): the job stopped for the walltime,
    it did not fail.  A 143 before any rank stopped is a failure, and so is any other status after."""
    from wmlce_tools.ddlrun.exitreport import RankExit

    stopped = _relay_of((1, 75), (0, 143))
    assert stopped.first_failure() is None and stopped.resumable() == 2
    assert _relay_of((1, 75), (0, 137)).first_failure() is None
    assert _relay_of((0, 143), (1, 75)).first_failure() == RankExit(0, 143)
    assert _relay_of((1, 75), (0, 1)).first_failure() == RankExit(0, 1)


def test_a_stop_whose_last_report_the_launcher_dropped_is_still_a_stop():
    """Seen on the local Slurm (CI): rank 1 exits 75, srun --kill-on-bad-exit ends rank 0 as it
    exits ("task 0: Terminated", "Force Terminated") and rank 0's report never comes: srun says
    143.  The job stopped for the walltime (the save was collective, finished before any rank
    exited 75); without a rank that stopped, or with another launcher status, it did not."""
    from ddl_runtime.checkpoint.protocol import EXIT_RESUME

    got, said = _final([(1, 75)], 143)
    assert got == EXIT_RESUME and "the launcher ended rank(s) 0 as they exited (status 143)" in said
    assert _final([(1, 75)], 137)[0] == EXIT_RESUME
    assert _final([(1, 75), (0, 75)], 1)[0] == EXIT_RESUME      # every rank said so: the launcher's status does not count
    assert _final([(1, 75)], 1)[0] == 1                         # a rank unaccounted for, a real failure status
    assert _final([], 143)[0] == 143                            # nothing stopped: ended, not a stop
    assert _final([(1, 75), (0, 2)], 143)[0] == 2               # a rank that failed decides


def test_in_a_chained_job_a_launcher_0_with_a_report_missing_is_not_taken_for_finished():
    """A stopped rank exits 0 to the launcher (its 75 goes in its report), so were a report lost,
    0 could be a stopped run: in a chained job ddlrun exits 75 then (the chain resumes; a finished
    run only repeats its end), naming the rank; outside a chain, 0 stays 0."""
    from ddl_runtime.checkpoint.protocol import EXIT_RESUME

    got, said = _final([(0, 0)], 0, chained=True)
    assert got == EXIT_RESUME and "rank(s) 1 never reported how they ended" in said
    assert _final([(0, 0)], 0)[0] == 0
    assert _final([(0, 0), (1, 0)], 0, chained=True)[0] == 0          # both finished: finished
    got, said = _final([(1, 75)], 0, chained=True)
    assert got == EXIT_RESUME and "rank(s) 0 did not report" in said

