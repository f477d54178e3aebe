"""Ranks that share a GPU (``--ranks-per-gpu K``, issue 30 item 1) and GPUs left idle (issue 33
item 5): the Layout, the script each centre gets, the bad input, the warning.

Per site, as its page documents it (each profile in site_configs/ cites the page):
- Summit (OLCF Summit guide, "Multiple tasks, single GPU per RS"): ``jsrun -a K -g 1`` resource
  sets and ``#BSUB -alloc_flags gpumps`` (CUDA MPS; the GPUs are EXCLUSIVE_PROCESS otherwise);
- Slurm (Frontier, Perlmutter, slurm-gpu): no ``--gpus-per-task`` (one GPU per task), the node's
  GPUs by ``--gpus-per-node`` and ddlrun's per-rank binding; no ``--gpu-bind=closest`` on
  Frontier, whose round-robin would split the ranks that share;
- PBS Pro + PALS (Polaris, Aurora): nothing in the launch line, ddlrun sets the GPU variable per
  rank from the Layout (as ALCF's affinity scripts do from the local rank);
- Theta and the CPU-only sites: one clear error.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.job_output import assert_golden, directives, promised_launch, render_job as render

from wmlce_tools.errors import WmlError
from wmlce_tools.layout import LayoutError, compile_layout
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site
from wmlce_tools.site.schema import replace

GOLDEN = Path(__file__).parent / "golden"
WML = [sys.executable, "-m", "wmlce_tools"]


def gpus_of(layout, node=0):
    return [r.gpus for r in layout.on_node(node)]


# -- the Layout --------------------------------------------------------------------------

def test_summit_two_ranks_per_gpu_is_12_ranks_per_node_paired_by_socket():
    lay = compile_layout(get_site("summit"), ResourceRequest(nodes=2, ranks_per_gpu=2))
    assert lay.size == 24 and lay.ranks_per_node == 12 and lay.gpus_per_rank == 1 and lay.ranks_per_gpu == 2
    assert gpus_of(lay) == [(0,), (0,), (1,), (1,), (2,), (2,), (3,), (3,), (4,), (4,), (5,), (5,)]
    assert gpus_of(lay, 1) == gpus_of(lay)
    # socket 0 holds ranks 0-5 and GPUs 0-2, socket 1 ranks 6-11 and GPUs 3-5
    node0 = lay.on_node(0)
    assert max(node0[5].cores) < 21 <= min(node0[6].cores)
    assert lay.gpus_per_node == 6 and lay.idle_gpus == ()
    assert "2 ranks per GPU" in lay.describe()


def test_perlmutter_k3_and_fewer_ranks_than_slots():
    site = get_site("perlmutter")
    lay = compile_layout(site, ResourceRequest(nodes=1, ranks_per_gpu=3))
    assert lay.ranks_per_node == 12 and [g for (g,) in gpus_of(lay)] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    lay = compile_layout(site, ResourceRequest(nodes=1, ranks_per_node=5, ranks_per_gpu=2))
    assert [g for (g,) in gpus_of(lay)] == [0, 0, 1, 1, 2] and lay.gpus_per_node == 3 and lay.idle_gpus == (3,)


def test_default_layouts_stay_one_gpu_per_rank():
    for name in ("summit", "perlmutter", "frontier", "polaris", "aurora", "slurm-gpu"):
        site = get_site(name)
        plain = compile_layout(site, ResourceRequest(nodes=2))
        assert compile_layout(site, ResourceRequest(nodes=2, ranks_per_gpu=1)) == plain
        assert plain.ranks_per_gpu == 1
        assert len({r.gpus for r in plain.on_node(0)}) == plain.ranks_per_node


def test_emulated_nodes_share_the_hosts_one_gpu():
    """Horovod's test_torch.py on one GPU: 2 emulated nodes, local rank 0 on each, both on GPU 0."""
    host = replace(get_site("local"), node=replace(get_site("local").node, cores_per_socket=2, gpus_per_socket=1))
    lay = compile_layout(host, ResourceRequest(nodes=2, ranks_per_gpu=2))
    assert lay.emulated and lay.size == 2 and lay.ranks_per_node == 1
    assert [(r.node, r.local_rank, r.gpus) for r in lay.ranks] == [(0, 0, (0,)), (1, 0, (0,))]
    # without the flag the emulated nodes get no GPU (as before)
    assert all(r.gpus == () for r in compile_layout(host, ResourceRequest(nodes=2)).ranks)
    with pytest.raises(LayoutError, match="4 ranks at 2 per GPU need 2 GPUs, but this host has 1"):
        compile_layout(host, ResourceRequest(nodes=2, ranks_per_node=2, ranks_per_gpu=2))
    # a 4-GPU host, 2 emulated nodes: each node's 2 GPUs, 2 ranks on each
    four = replace(host, node=replace(host.node, cores_per_socket=4, gpus_per_socket=4))
    lay = compile_layout(four, ResourceRequest(nodes=2, ranks_per_gpu=2))
    assert gpus_of(lay, 0) == [(0,), (0,), (1,), (1,)] and gpus_of(lay, 1) == [(2,), (2,), (3,), (3,)]


def test_one_gpu_host_refusal_names_the_flag():
    host = replace(get_site("local"), node=replace(get_site("local").node, cores_per_socket=2, gpus_per_socket=1))
    with pytest.raises(LayoutError, match="2 ranks per node but a local node has 1 GPU; give --ranks-per-gpu 2"):
        compile_layout(host, ResourceRequest(nodes=1, ranks_per_node=2))
    lay = compile_layout(host, ResourceRequest(nodes=1, ranks_per_node=2, ranks_per_gpu=2))
    assert gpus_of(lay) == [(0,), (0,)]


# -- the scripts -------------------------------------------------------------------------

SHARED_JOBS = {
    "summit": dict(nodes=2, project="abc123", walltime=30, job_name="train", ranks_per_gpu=2),
    "frontier": dict(nodes=2, project="abc123", walltime=30, job_name="train", ranks_per_gpu=2),
    "perlmutter": dict(nodes=2, project="m1234", walltime=30, job_name="train", ranks_per_gpu=2),
    "slurm-gpu": dict(nodes=2, walltime=30, job_name="train", ranks_per_gpu=2),
    "polaris": dict(nodes=2, project="datascience", walltime=30, queue="debug", job_name="train", ranks_per_gpu=2),
    "aurora": dict(nodes=2, project="datascience", walltime=30, queue="debug", job_name="train", ranks_per_gpu=2),
}


@pytest.mark.parametrize("site", sorted(SHARED_JOBS))
def test_golden_shared_gpu_scripts(site, program):
    _, script = render(site, program, **SHARED_JOBS[site])
    assert_golden(script, program, GOLDEN / f"shared-{site}.sh")


def test_summit_resource_sets_of_two_ranks_and_gpumps(program):
    _, script = render("summit", program, **SHARED_JOBS["summit"])
    assert '#BSUB -alloc_flags "smt4 gpumps"' in directives(script, "#BSUB")
    argv = promised_launch(script)
    assert argv[:13] == ["jsrun", "-n", "12", "-a", "2", "-c", "6", "-g", "1", "-r", "6", "-b", "packed:3"]
    # a user's own gpumps is not doubled
    plan, _ = render("summit", program, alloc_flags=("gpumps",), **SHARED_JOBS["summit"])
    assert plan.alloc_flags == "smt4 gpumps"
    plan, _ = render("summit", program, nodes=1, project="a")
    assert "gpumps" not in plan.alloc_flags


@pytest.mark.parametrize("site", ["frontier", "perlmutter", "slurm-gpu"])
def test_slurm_asks_for_the_nodes_gpus_not_one_per_task(site, program):
    plan, script = render(site, program, **SHARED_JOBS[site])
    gpus = plan.layout.node_spec.gpus
    argv = promised_launch(script)
    assert f"--gpus-per-node={gpus}" in argv and f"#SBATCH --gpus-per-node={gpus}" in script
    assert not any(a.startswith(("--gpus-per-task", "--gpu-bind", "--ntasks-per-gpu")) for a in argv)
    assert f"--ntasks-per-node={2 * gpus}" in argv
    ddl = script.splitlines()[-1].split()
    assert ddl[ddl.index("--ranks-per-gpu") + 1] == "2"
    # where each rank owns its GPU, the site's own form stays (per-rank binding: one GPU per task,
    # Frontier with --gpu-bind=closest; Perlmutter's local-rank binding: the node's GPUs)
    plan, script = render(site, program, **{**SHARED_JOBS[site], "ranks_per_gpu": None})
    argv = promised_launch(script)
    assert ("--gpus-per-task=1" in argv) == (plan.site.gpu_binding == "per-rank")
    assert ("--gpu-bind=closest" in argv) == (site == "frontier")



# -- bad input: one line, status != 0, no traceback -------------------------------------

BAD = [
    (["-s", "summit", "-P", "a", "--ranks-per-gpu", "0"], "--ranks-per-gpu must be an integer >= 1, got 0"),
    (["-s", "summit", "-P", "a", "--ranks-per-gpu", "-2"], "--ranks-per-gpu must be an integer >= 1, got -2"),
    (["-s", "summit", "-P", "a", "--ranks-per-gpu", "2", "--gpus-per-rank", "2"],
     "--ranks-per-gpu 2 with --gpus-per-rank 2: a rank sharing a GPU has that one GPU, not 2; drop --gpus-per-rank"),
    (["-s", "perlmutter", "--ranks-per-gpu", "2", "--gpus-per-rank", "0"],
     "--ranks-per-gpu 2 with --gpus-per-rank 0: CPU-only ranks share no GPU"),
    (["-s", "theta", "-P", "a", "--ranks-per-gpu", "2"], "--ranks-per-gpu 2: a theta node has no GPUs to share"),
    (["-s", "local-slurm", "--ranks-per-gpu", "2"], "--ranks-per-gpu 2: a local-slurm node has no GPUs to share"),
    (["-s", "perlmutter", "--ranks-per-gpu", "2", "--ranks-per-node", "9"],
     "9 ranks per node at 2 per GPU need 5 GPUs, but a perlmutter node has 4"),
    (["-s", "summit", "-P", "a", "--ranks-per-gpu", "2", "--ranks-per-node", "6"],
     "jsrun resource sets of 2 ranks and one GPU need ranks per node a multiple of 4"),
]


@pytest.mark.parametrize("args,line", BAD, ids=[" ".join(a[1:]) for a, _ in BAD])
def test_bad_sharing_requests_are_one_line(args, line, program, isolated_env, tmp_path):
    for cmd in (["render"], ["submit", "--dry-run"]):
        p = subprocess.run([*WML, *cmd, *args, str(program)], capture_output=True, text=True,
                           env=isolated_env, cwd=tmp_path, timeout=60)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode != 0 and len(lines) == 1 and lines[0].startswith("wml: error: "), p.stderr
        assert line in lines[0]
        assert p.stdout == "" and not (tmp_path / "wml-jobs").exists()


def test_request_refuses_sharing_with_several_gpus_per_rank():
    with pytest.raises(WmlError, match="drop --gpus-per-rank"):
        ResourceRequest(ranks_per_gpu=2, gpus_per_rank=3)
    assert ResourceRequest(ranks_per_gpu=2, gpus_per_rank=1).ranks_per_gpu == 2   # ddlrun passes 1


# -- GPUs left idle (issue 33 item 5) -----------------------------------------------------

IDLE = ("wml: warning: 1 rank per node x 3 GPUs use 3 of the 4 GPUs of a perlmutter node: GPU 3 stays idle "
        "on every node; --gpus-per-rank 2 (2 ranks per node) or --gpus-per-rank 4 (1 rank per node) uses all 4")


@pytest.mark.parametrize("cmd", [["render"], ["submit", "--dry-run"]])
def test_three_gpus_per_rank_on_perlmutter_warns_once(cmd, program, isolated_env, tmp_path):
    p = subprocess.run([*WML, *cmd, "-s", "perlmutter", "--gpus-per-rank", "3", str(program)],
                       capture_output=True, text=True, env=isolated_env, cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr
    assert [ln for ln in p.stderr.splitlines() if ln.strip()] == [IDLE]
    assert "#SBATCH --gpus-per-node=3" in p.stdout       # the script is still written as asked


def test_no_warning_when_every_gpu_is_used(program, isolated_env, tmp_path):
    for args in (["-s", "perlmutter"], ["-s", "perlmutter", "--gpus-per-rank", "2"],
                 ["-s", "perlmutter", "--ranks-per-gpu", "2"], ["-s", "perlmutter", "--gpus-per-rank", "0"],
                 ["-s", "theta", "-P", "a"]):
        p = subprocess.run([*WML, "render", *args, str(program)], capture_output=True, text=True,
                           env=isolated_env, cwd=tmp_path, timeout=60)
        assert p.returncode == 0 and p.stderr == "", (args, p.stderr)


def test_idle_warning_names_the_fix_for_the_request_given(program):
    plan, _ = render("summit", program, nodes=1, project="a", ranks_per_node=4, ranks_per_gpu=2)
    assert plan.warnings == ("4 ranks per node at 2 per GPU use 2 of the 6 GPUs of a summit node: GPUs 1, 2, 4, 5 "
                             "stay idle on every node; --ranks-per-node 12 uses all 6",)
    plan, _ = render("perlmutter", program, nodes=1, ranks_per_node=1, gpus_per_rank=1)
    assert plan.warnings[0].endswith("GPUs 1, 2, 3 stay idle on every node; --ranks-per-node 4 --gpus-per-rank 1 "
                                     "uses all 4")


def test_the_job_script_leaves_mps_to_ddlrun_and_passes_the_users_choice(program):
    """ALCF, "Using MPS in Multi-node Jobs": the MPS control daemon on each node before the ranks.
    ddlrun starts it (ddlrun/mps.py, from the site's gpu_sharing), so the job script does not (one
    way); --gpu-sharing reaches ddlrun's line; a choice the site cannot run is one line at render."""
    for site, kw in (("polaris", SHARED_JOBS["polaris"]), ("perlmutter", SHARED_JOBS["perlmutter"]),
                     ("summit", SHARED_JOBS["summit"])):
        _, script = render(site, program, **kw)
        assert "nvidia-cuda-mps-control" not in script and "--gpu-sharing" not in script, site
    for choice in ("mps", "time-slice"):
        _, script = render("polaris", program, gpu_sharing=choice, **SHARED_JOBS["polaris"])
        ddl = script.splitlines()[-1].split()
        assert ddl[ddl.index("--gpu-sharing") + 1] == choice and ddl.index("--gpu-sharing") < ddl.index("--")
    _, script = render("polaris", program, gpu_sharing="mps", **{**SHARED_JOBS["polaris"], "ranks_per_gpu": None})
    assert "--gpu-sharing" not in script               # no GPU shared: nothing to say
    with pytest.raises(WmlError, match=r"^--gpu-sharing time-slice: summit's GPUs are in EXCLUSIVE_PROCESS mode"):
        render("summit", program, gpu_sharing="time-slice", **SHARED_JOBS["summit"])
    with pytest.raises(WmlError, match=r"^--gpu-sharing mps: CUDA MPS is NVIDIA's, and frontier's GPUs are not"):
        render("frontier", program, gpu_sharing="mps", **SHARED_JOBS["frontier"])
    with pytest.raises(WmlError, match=r"^--gpu-sharing 'on': expected mps or time-slice$"):
        render("polaris", program, gpu_sharing="on", **SHARED_JOBS["polaris"])
