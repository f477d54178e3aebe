"""Layout: every rank's node, local rank, GPUs and cores, for every bundled site."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from wmlce_tools.errors import WmlError
from wmlce_tools.layout import LayoutError, check_queue_limits, compile_layout
from wmlce_tools.resources import ResourceRequest
from wmlce_tools.site.registry import get_site

SITES = ["summit", "theta", "slurm-gpu"]


def test_summit_18_nodes_is_108_ranks_one_gpu_each():
    lay = compile_layout(get_site("summit"), ResourceRequest(nodes=18))
    assert lay.size == 108 and lay.ranks_per_node == 6 and lay.gpus_per_rank == 1
    assert lay.cores_per_rank == 7 and lay.threads_per_core == 4
    # Socket affinity: ranks 0-2 on socket 0 (cores 0-20, GPUs 0-2), 3-5 on socket 1.
    node0 = lay.on_node(0)
    assert [r.gpus for r in node0] == [(0,), (1,), (2,), (3,), (4,), (5,)]
    assert node0[2].cores == tuple(range(14, 21)) and node0[3].cores == tuple(range(21, 28))
    assert node0[0].hwthreads[:5] == (0, 1, 2, 3, 4)
    assert lay.ranks[-1].node == 17 and lay.ranks[-1].local_rank == 5
    assert lay.mode == "p:6x18x1x1"
    assert compile_layout(get_site("summit"), ResourceRequest(nodes=36)).mode == "p:6x18x2x1"


def test_cpu_only_site_defaults_to_one_rank_per_node_with_all_cores():
    lay = compile_layout(get_site("theta"), ResourceRequest(nodes=128))
    assert lay.size == 128 and lay.ranks_per_node == 1 and lay.gpus_per_rank == 0
    assert lay.cores_per_rank == 64 and lay.threads_per_core == 1


@pytest.mark.parametrize("req, msg", [
    (ResourceRequest(nodes=1, ranks_per_node=6, gpus_per_rank=2), "12 GPUs, but a summit node has 6"),
    (ResourceRequest(nodes=1, ranks_per_node=6, cores_per_rank=8), "48 cores, but a summit node has 42"),
    (ResourceRequest(nodes=1, ranks_per_node=43, gpus_per_rank=0), "only 42 usable cores"),
    (ResourceRequest(nodes=1, threads_per_core=8), "8 hw threads per core"),
    (ResourceRequest(nodes=5000), "5000 nodes requested but summit has 4608"),
])
def test_refuses_what_a_summit_node_cannot_hold(req, msg):
    with pytest.raises(LayoutError, match=msg):
        compile_layout(get_site("summit"), req)


@pytest.mark.parametrize("site, req, msg", [
    ("summit", ResourceRequest(nodes=18, walltime=6 * 60), "above the 2:00 maximum for jobs of up to 45 nodes"),
    ("summit", ResourceRequest(nodes=18, queue="debug", walltime=3 * 60), "above the 2:00 maximum for queue 'debug'"),
    ("summit", ResourceRequest(nodes=18, queue="nope"), "unknown queue 'nope' on summit; queues: batch, debug"),
    ("theta", ResourceRequest(nodes=16), "below the 128-node minimum of queue 'default'"),
    ("theta", ResourceRequest(nodes=16, queue="debug-cache-quad"), "above the 8-node limit"),
    ("slurm-gpu", ResourceRequest(nodes=8, queue="debug"), "above the 4-node limit of queue 'debug'"),
])
def test_queue_limits_name_the_limit(site, req, msg):
    with pytest.raises(WmlError, match=msg):
        check_queue_limits(get_site(site), req)


def test_queue_defaults_and_bins():
    summit = get_site("summit")
    assert check_queue_limits(summit, ResourceRequest(nodes=100, walltime=12 * 60)) == ("batch", 720)
    assert check_queue_limits(summit, ResourceRequest(nodes=1000, walltime=24 * 60)) == ("batch", 1440)
    assert check_queue_limits(get_site("theta"), ResourceRequest(nodes=8, queue="debug-cache-quad")) == ("debug-cache-quad", 60)


def test_local_site_emulates_nodes_and_splits_the_host():
    local = get_site("local")
    lay = compile_layout(local, ResourceRequest(nodes=2, ranks_per_node=2))
    assert lay.emulated and lay.size == 4
    assert [(r.node, r.local_rank) for r in lay.ranks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert lay.mode == "p:2x2x1x1"
    host_cores = local.node.cores
    assert all(c < host_cores for r in lay.ranks for c in r.cores)


@st.composite
def requests(draw):
    site = get_site(draw(st.sampled_from(SITES)))
    node = site.node
    rpn = draw(st.integers(1, node.cores))
    max_gpr = node.gpus // rpn
    gpr = draw(st.integers(0, max_gpr)) if max_gpr else 0
    nodes = draw(st.integers(1, 6))
    return site, ResourceRequest(nodes=nodes, ranks_per_node=rpn, gpus_per_rank=gpr,
                                 threads_per_core=draw(st.integers(1, node.threads_per_core)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_any_valid_request_uses_each_gpu_and_core_once_and_numbers_ranks(case):
    site, req = case
    lay = compile_layout(site, req)
    assert [r.rank for r in lay.ranks] == list(range(req.nodes * lay.ranks_per_node))
    for n in range(lay.nodes):
        ranks = lay.on_node(n)
        assert sorted(r.local_rank for r in ranks) == list(range(lay.ranks_per_node))
        gpus = [g for r in ranks for g in r.gpus]
        cores = [c for r in ranks for c in r.cores]
        hw = [h for r in ranks for h in r.hwthreads]
        assert len(gpus) == len(set(gpus)) and all(0 <= g < site.node.gpus for g in gpus)
        assert len(cores) == len(set(cores)) and all(0 <= c < site.node.cores for c in cores)
        assert len(hw) == len(set(hw))
        for r in ranks:
            assert len(r.gpus) == lay.gpus_per_rank and len(r.cores) == lay.cores_per_rank
            # A rank's GPUs sit on the socket of its cores whenever ranks split evenly over sockets.
            if lay.ranks_per_node % site.node.sockets == 0 and r.gpus and site.node.gpus_per_socket:
                per_socket = lay.gpus_per_rank * lay.ranks_per_node // site.node.sockets
                if per_socket <= site.node.gpus_per_socket:
                    sock = r.cores[0] // site.node.cores_per_socket
                    assert all(g // site.node.gpus_per_socket == sock for g in r.gpus)


def test_more_ranks_than_gpus_must_say_cpu_only():
    with pytest.raises(LayoutError, match="12 ranks per node but a summit node has 6 GPUs; give --ranks-per-gpu 2 to share them, or --gpus-per-rank 0"):
        compile_layout(get_site("summit"), ResourceRequest(nodes=1, ranks_per_node=12))
    lay = compile_layout(get_site("summit"), ResourceRequest(nodes=1, ranks_per_node=12, gpus_per_rank=0))
    assert lay.size == 12 and all(r.gpus == () for r in lay.ranks)


def test_schema_and_registries_name_the_same_schedulers_and_launchers():
    """A scheduler or launcher the site schema accepts must exist, and the reverse: each of wml's
    own names loads (a Scheduler, a launch function) from the one registry."""
    from wmlce_tools import launchers, schedulers
    from wmlce_tools.site.schema import json_schema

    props = json_schema()["$defs"]["SiteProfile"]["properties"]
    assert props["scheduler"]["enum"] == schedulers.names() == ["cobalt", "local", "lsf", "pbs", "slurm"]
    assert props["launcher"]["enum"] == launchers.names() == ["aprun", "jsrun", "mpiexec", "pals", "srun"]
    for name in schedulers.names():
        sched = schedulers.get_scheduler(name)
        assert sched.name == name and sched.job_id_var and sched.template == f"{name}.sh.j2"
