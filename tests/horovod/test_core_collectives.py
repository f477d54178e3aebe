"""horovod.torch collectives on real MPI ranks, checked against references each rank computes."""
import pytest


@pytest.mark.parametrize("n", [2, 3])
def test_torch_collectives_match_references(hvd_run, n):
    """allreduce ops/scaling/in-place/async/bfloat16, order-independent matching by name, grouped ops,
    allgather with differing first dims, broadcast, alltoall with splits, uneven reducescatter,
    autograd through every collective, fp16 compression, barrier and poll, threads."""
    result = hvd_run(n, "core_collectives.py")
    result.assert_ok(n, expected_checks=13)


def test_collectives_and_join_on_open_mpi(hvd_run, openmpi):
    """The same checks on Debian's Open MPI (its own non-blocking collectives and progress rules)."""
    hvd_run(2, "core_collectives.py", mpi=openmpi).assert_ok(2, expected_checks=13)
    hvd_run(2, "core_sets_join.py", mpi=openmpi).assert_ok(2, expected_checks=12)


def test_collectives_appear_in_the_timeline(hvd_run, tmp_path):
    import json

    trace = tmp_path / "trace.json"
    result = hvd_run(2, "core_timeline.py", env={"DDL_TIMELINE": str(trace)})
    result.assert_ok(2, expected_checks=0)
    events = json.loads((tmp_path / "trace.rank0.json").read_text())  # closed by shutdown: strict JSON
    spans = {(e["name"], e.get("args", {}).get("tensors")) for e in events if e.get("ph") == "X"}
    assert ("ALLREDUCE", "traced.weight") in spans, spans
    assert ("ALLGATHER", "traced.gather") in spans, spans
    negotiated = {e["args"]["name"] for e in events if e.get("name") == "NEGOTIATE_ALLREDUCE"}
    assert "traced.weight" in negotiated, negotiated
