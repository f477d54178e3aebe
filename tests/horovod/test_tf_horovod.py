"""horovod.tensorflow, horovod.tensorflow.keras and horovod.keras on Keras 3, on 2 real ranks
under `ddlrun --horovod` (the scripts import plain `horovod.*`).

The programs in tf_programs/ check values on every rank and print `OK <check>`; a failed
check raises there, which ends the job non-zero.  Here: the job succeeded and every check
passed on both ranks.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hvd_examples_helpers import clean_env

PROGRAMS = Path(__file__).resolve().parent / "tf_programs"

TF_CHECKS = [
    "allreduce ops", "tf.function allreduce and allgather", "grouped_allreduce", "fp16 compression",
    "allgather with different first dims", "broadcast, broadcast_, broadcast_variables",
    "broadcast_object, allgather_object", "alltoall with splits", "reducescatter, grouped_reducescatter",
    "gradients through allreduce and allgather",
    "DistributedGradientTape equivalence (eager, tf.function, fp16 + predivide)",
    "PartialDistributedGradientTape (local / size, shared averaged, get_local_and_global_gradients)", "join, barrier",
    "errors: Adasum, bad splits, shape mismatch",
]
KERAS_CHECKS = [
    "DistributedOptimizer == full batch (none, fp16, op=Sum)",
    "BroadcastGlobalVariablesCallback in model.fit (weights and optimizer state)", "MetricAverageCallback",
    "LearningRateWarmupCallback, LearningRateScheduleCallback", "load_model",
    "backward_passes_per_step == local sums reduced every N steps (sum, average, iterations, fit)",
    "PartialDistributedOptimizer, register_local_var (local gradient / size, shared averaged)",
    "BroadcastGlobalVariablesCallback(local_variables=...): local weights and their optimizer slots stay",
    "Keras 2 spellings: opt.lr, opt.get_gradients, TF1 / class optimizers name the Keras 3 spelling",
    "value collectives, DistributedOptimizer bad arguments",
    "local_layers on one rank only: one-line mismatch error on every rank",
]


def _ddlrun(program: str, *args: str, backend: str = "tensorflow", timeout: float = 300, env=None) -> str:
    cmd = [sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--horovod", "-n", "2", sys.executable,
           str(PROGRAMS / program), *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=clean_env({"KERAS_BACKEND": backend, **(env or {})}), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s: {str(exc.stdout)[-3000:]}")
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    return p.stdout


def _passed(stdout: str, rank: int) -> list:
    prefix = f"[{rank}] OK "
    return [line[len(prefix):] for line in stdout.splitlines() if line.startswith(prefix)]


def test_horovod_tensorflow_api_on_two_ranks(tmp_path):
    trace = tmp_path / "timeline.json"
    out = _ddlrun("hvd_tf_api.py", env={"HOROVOD_TIMELINE": str(trace)})
    for rank in (0, 1):
        assert _passed(out, rank) == TF_CHECKS, out[-4000:]
    # HOROVOD_TIMELINE: rank 0's Chrome trace shows the TensorFlow collectives
    events = json.loads(trace.read_text())
    names = {e.get("name", "") for e in events}
    for kind in ("ALLREDUCE", "ALLGATHER", "ALLTOALL"):
        assert f"NEGOTIATE_{kind}" in names, sorted(names)
    assert any(n.startswith("ALLREDUCE") and not n.startswith("NEGOTIATE") for n in names), sorted(names)


@pytest.mark.parametrize("module,backend", [("horovod.tensorflow.keras", "tensorflow"), ("horovod.keras", "torch")])
def test_horovod_keras_api_on_keras3(module, backend):
    out = _ddlrun("hvd_keras_api.py", module, backend=backend)
    assert f"[0] backend {backend}" in out
    expected = list(KERAS_CHECKS)
    if backend == "tensorflow":
        expected.insert(2, "jit_compile=True: XLA off for the train step")
    for rank in (0, 1):
        assert _passed(out, rank) == expected, out[-4000:]


def test_tensorflow_keras_refuses_another_backend():
    """horovod.tensorflow.keras under KERAS_BACKEND=torch: one clear line, not a half-working module."""
    code = "import ddl_runtime.horovod.tensorflow.keras"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=clean_env({"KERAS_BACKEND": "torch"}))
    assert p.returncode != 0
    assert "horovod.tensorflow.keras needs the TensorFlow Keras backend" in p.stderr
    assert "use horovod.keras" in p.stderr


FAULT_CHECKS = [
    "mismatch: FailedPreconditionError on every rank (eager, tf.function, graph)",
    "one rank's bad input: an error on every rank, the job goes on",
    "graph mode: independent collectives named from the graph, run 40 times",
    "rank_op, size_op, local ops, uint16 and bool",
    "TF1 graph mode: ref variables, broadcast_, broadcast_global_variables, broadcast gradient",
]


def test_horovod_tensorflow_errors_reach_every_rank_and_graphs_never_deadlock():
    """Horovod's error classes on every rank; a bad input on one rank fails the others too; a
    graph of independent collectives runs 40 times whatever order the executor picks; a rank
    that leaves ends the other's wait within seconds.  No stall shutdown is set: a hang would
    hit the timeout."""
    out = _ddlrun("hvd_tf_faults.py", timeout=240)
    assert _passed(out, 1) == FAULT_CHECKS, out[-4000:]
    assert _passed(out, 0) == FAULT_CHECKS + ["a rank that left ends the others' waits, naming it"], out[-4000:]
