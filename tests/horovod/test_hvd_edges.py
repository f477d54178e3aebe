"""Horovod's remaining edges (issues 32, 36), on 2 real ranks under `ddlrun --horovod`: static
process sets (duplicates refused, unknown ids), process sets on TensorFlow (global root ranks, a
tape outside its set, graph mode), TensorFlow 1 optimizers, Horovod's timeline layout, and
hvd.elastic for Keras 3.

The programs in tf_programs/ print `OK <check>` (or `FAIL <check>: ...`) on every rank; each
test here asserts its own checks on both ranks.
"""
from __future__ import annotations

import json

import pytest

from test_tf_horovod import _ddlrun, _passed
from torch_glue_helpers import PROGRAMS, ddlrun


def _both(out: str, check: str) -> None:
    for rank in (0, 1):
        assert check in _passed(out, rank), out[-6000:]


@pytest.fixture(scope="module")
def tf_sets(tmp_path_factory):
    trace = tmp_path_factory.mktemp("timeline") / "timeline.json"
    out = _ddlrun("hvd_tf_sets.py", env={"HOROVOD_TIMELINE": str(trace), "HOROVOD_TIMELINE_MARK_CYCLES": "1"})
    return out, trace


@pytest.fixture(scope="module")
def tf1_graph():
    return _ddlrun("hvd_tf1_graph.py")


STATIC_SET_CHECKS = [
    "hvd.init with a set listed twice or the global set listed: ValueError on every rank, nothing registered",
    "then hvd.init(process_sets=[[0], [1..]]) succeeds: ids 1 and 2, the global set keeps id 0 and all ranks",
    "a collective on a process set id never registered: ValueError (not InvalidArgumentError), eager and graph",
    "DistributedGradientTape, tf.compat.v1 DistributedOptimizer on an id never registered: ValueError on every rank",
    "an allreduce on a registered set this rank is not in: InvalidArgumentError, eager and graph",
    "Keras: DistributedOptimizer on a process set id never registered raises ValueError",
    "a collective on a removed process set: ValueError when the op is made, as Horovod"]


def test_static_process_sets_refuse_duplicates_and_unknown_ids_as_horovod():
    """Issue 36: Horovod 0.28's test_process_sets_static and its unknown-process-set-id test."""
    out = _ddlrun("hvd_static_sets.py")
    for rank in (0, 1):
        assert _passed(out, rank) == STATIC_SET_CHECKS, out[-6000:]


def test_tensorflow_broadcasts_on_a_process_set_take_the_global_root_rank(tf_sets):
    _both(tf_sets[0], "broadcast on a process set: root_rank is the root's rank in the job")
    _both(tf_sets[0], "broadcast_variables and broadcast_object on a process set: global root rank")


def test_tensorflow_tape_outside_its_process_set_returns_own_gradients(tf_sets):
    _both(tf_sets[0], "DistributedGradientTape on a rank outside its process set returns the rank's own gradients")


def test_tf1_graph_broadcast_variables_on_a_process_set_is_a_session_op(tf1_graph):
    _both(tf1_graph, "tf.compat.v1: broadcast_variables on a process set is an op Session.run runs")


def test_tf1_graph_allreduce_on_a_removed_process_set_is_invalid_argument(tf1_graph):
    _both(tf1_graph, "tf.compat.v1: an allreduce on a removed process set raises InvalidArgumentError, one line")


def test_distributed_optimizer_wraps_a_tensorflow1_optimizer(tf1_graph):
    _both(tf1_graph, "tf.compat.v1: DistributedOptimizer wraps a TensorFlow 1 optimizer (compute_gradients / "
                     "apply_gradients)")
    _both(tf1_graph, "tf.compat.v1: DistributedOptimizer on a process set (a rank outside it keeps its own "
                     "gradients)")


def _rows(events: list) -> dict:
    """Horovod's layout: tensor name -> its events, by the pid its process_name metadata names."""
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name" and e["pid"] != 0}
    rows: dict = {}
    for e in events:
        if e.get("ph") != "M" and e.get("pid") in names:
            rows.setdefault(names[e["pid"]], []).append(e)
    return rows


def test_timeline_has_horovods_per_tensor_rows_and_cycle_marks(tf_sets):
    out, trace = tf_sets
    _both(out, "timeline rows")
    events = json.loads(trace.read_text())  # rank 0's file, closed at shutdown: strict JSON
    header = next(e for e in events if e.get("name") == "process_name" and e["pid"] == 0)
    assert "start_time_since_epoch_in_micros" in header["args"], header
    rows = _rows(events)
    row = rows.get("allreduce.test_allreduce")
    assert row, sorted(rows)
    phases = [(e["ph"], e.get("name")) for e in row]
    assert phases[:4] == [("B", "NEGOTIATE_ALLREDUCE"), ("X", "0"), ("E", None), ("B", "ALLREDUCE")], phases
    assert phases[4][0] == "B" and phases[4][1].endswith("_ALLREDUCE") and phases[5] == ("E", None), phases
    assert row[-1]["ph"] == "E" and row[-1]["args"] == {"dtype": "HOROVOD_FLOAT32", "shape": "[2]"}, row[-1]
    assert [e["ts"] for e in row] == sorted(e["ts"] for e in row), row
    bcast = [(e["ph"], e.get("name")) for e in rows["broadcast.test_broadcast"]]
    assert bcast[0] == ("B", "NEGOTIATE_BROADCAST") and ("B", "BROADCAST") in bcast, bcast
    marks = [e for e in events if e.get("name") == "CYCLE_START"]
    assert marks and all(e["ph"] == "i" and e["s"] == "g" for e in marks), marks[:3]


@pytest.mark.parametrize("flat", ["0", "1"])
def test_torch_timeline_has_a_row_per_gradient_or_flat_bucket(tmp_path, flat):
    trace = tmp_path / "timeline.json"
    job = ddlrun(["--horovod", "-n", "2", "python", str(PROGRAMS / "torch_timeline_rows.py")],
                 env={"HOROVOD_TIMELINE": str(trace), "DDL_FLAT_BUCKETS": flat})
    assert job.returncode == 0 and job.stdout.count("OK torch timeline rows") == 2, job.output
    rows = _rows(json.loads(trace.read_text()))
    assert [(e["ph"], e.get("name")) for e in rows["allreduce.test_allreduce"]][:2] == [
        ("B", "NEGOTIATE_ALLREDUCE"), ("X", "0")], rows["allreduce.test_allreduce"]
    # the optimizer's gradients (the ordered engine, not negotiated): ALLREDUCE around the reduction
    grads = ["allreduce.weight", "allreduce.bias"] if flat == "0" else \
        [r for r in rows if r.startswith("allreduce.grad-bucket:0")]
    assert grads and all(r in rows for r in grads), sorted(rows)
    for r in grads:
        phases = [(e["ph"], e.get("name")) for e in rows[r]]
        assert phases[:2] == [("B", "ALLREDUCE"), ("B", "SHM_ALLREDUCE")] and phases[-1] == ("E", None), phases
        assert rows[r][-1]["args"]["dtype"] == "HOROVOD_FLOAT32", rows[r][-1]


@pytest.mark.parametrize("module,backend", [("horovod.tensorflow.keras", "tensorflow"), ("horovod.keras", "torch")])
def test_keras_elastic_state_and_callbacks(module, backend):
    out = _ddlrun("hvd_keras_elastic.py", module, backend=backend)
    assert f"[0] backend {backend}" in out, out[-4000:]
    for rank in (0, 1):
        assert _passed(out, rank) == [
            "KerasState: sync gives every rank rank 0's weights",
            "Update{Batch,Epoch}StateCallback and CommitStateCallback(batches_per_commit) in model.fit",
            "KerasState.restore returns weights and values to the last commit",
            "UpdateBatchStateCallback: the first epoch after a restore runs only the batches not done yet",
            "hvd.elastic.run with KerasState: restored to the last commit and retried after HorovodInternalError",
        ], out[-6000:]
