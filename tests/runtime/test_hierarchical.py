"""The hierarchical (topology-aware) algorithm: 4 ranks as 2 emulated nodes x 2 ranks, and more levels."""
import json

import pytest



@pytest.mark.parametrize("env", [
    {"DDL_EMULATE_NODES": "2"},
    {"DDL_OPTIONS": "-mode p:2x2x1x1", "DDL_FUSION_MB": "0.5"},
], ids=["emulate-2-nodes", "mode-p2x2x1x1"])
def test_two_nodes_of_two(run_mpi, env, tmp_path):
    env = dict(env, DDL_TIMELINE=str(tmp_path / "trace.json"))
    result = run_mpi(4, "check_collectives.py", "quick", env=env)
    result.assert_all_ok(4)
    by_rank = {t["rank"]: t for t in result.topologies()}
    for r in range(4):
        t = by_rank[r]
        assert t["algorithm"] == "hierarchical"
        assert (t["local_rank"], t["local_size"], t["cross_rank"], t["cross_size"]) == (r % 2, 2, r // 2, 2)
        assert t["info"] == [r, 4, r % 2, 2, None]
    # the reductions really ran the hierarchical chain (and the mpi=True ones the flat baseline)
    events = json.loads((tmp_path / "trace.rank0.json").read_text())
    algorithms = {e["args"]["algorithm"] for e in events if e.get("name") == "ALLREDUCE"}
    assert algorithms == {"hierarchical", "flat"}


def test_three_level_mode_rack_and_aisle(run_mpi):
    """p:1x2x2x1: one rank per node, so the chain is reduce-scatter in the rack, allreduce across racks."""
    result = run_mpi(4, "check_collectives.py", "quick", env={"DDL_OPTIONS": "-mode p:1x2x2x1"})
    result.assert_all_ok(4)
    for t in result.topologies():
        assert t["algorithm"] == "hierarchical"
        assert (t["local_size"], t["cross_size"]) == (1, 4)


@pytest.mark.parametrize("env, expect", [
    ({"DDL_OPTIONS": "-mode p:4", "DDL_EMULATE_NODES": "2"}, (4, 1, "flat", "mode")),
    ({"DDL_OPTIONS": "-mode=p:2x2", "DDL_EMULATE_NODES": "4"}, (2, 2, "hierarchical", "mode")),
    ({"DDL_EMULATE_NODES": "4"}, (1, 4, "flat", "emulate")),
    ({}, (4, 1, "flat", "shared-memory")),
], ids=["mode-over-emulate", "mode-equals-form", "emulate-4", "shared-memory"])
def test_grouping_precedence(run_mpi, env, expect):
    """mode string > DDL_EMULATE_NODES > MPI's shared-memory split (all 4 ranks share this host)."""
    result = run_mpi(4, "topology.py", env=env)
    summary = result.topologies()
    assert result.returncode == 0 and len(summary) == 4, result.stderr[-2000:]
    for t in summary:
        assert not t["failures"]
        assert (t["local_size"], t["cross_size"], t["algorithm"], t["source"]) == expect
        assert t["local_rank"] == t["rank"] % expect[0] and t["cross_rank"] == t["rank"] // expect[0]


def test_check_names_the_tensor_that_differs_from_the_baseline(run_mpi):
    """A fault injected into one rank's hierarchical result: every rank raises naming it."""
    result = run_mpi(4, "check_fault.py", env={"DDL_EMULATE_NODES": "2"})
    assert result.returncode == 0, result.stderr[-2000:]
    (summary,) = result.json_lines("SUMMARY ")
    for rank in summary:
        assert rank["calls"] == [False, True]  # flat baseline first, then the hierarchical run
        assert rank["error"] is not None and "check failed: tensor 'w.bad' differs from the MPI_Allreduce " \
            "baseline by more than 0.001" in rank["error"]
        assert rank["after_ok"]
    assert "relative difference 0.125 here" in summary[0]["error"]
