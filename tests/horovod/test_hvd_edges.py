"""Horovod's remaining edges (issue 32), on 2 real ranks under `ddlrun --horovod`: static process
sets with repeats, process sets on TensorFlow (global root ranks, a tape outside its set, graph
mode), TensorFlow 1 optimizers, Horovod's timeline layout, and hvd.elastic for Keras 3.

The programs in tf_programs/ print `OK <check>` (or `FAIL <check>: ...`) on every rank; each
test here asserts its own checks on both ranks.
"""
from __future__ import annotations

import pytest

from test_tf_horovod import _ddlrun, _passed


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


def test_static_process_sets_accept_repeats_and_permutations():
    out = _ddlrun("hvd_static_sets.py")
    for rank in (0, 1):
        assert _passed(out, rank) == [
            "static process sets: repeats and permutations name the same set",
            "collectives on a repeated set and on the set of every rank",
            "add_process_set of an existing set is refused; removing a repeated set unregisters every object "
            "naming it"], out[-6000:]


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
