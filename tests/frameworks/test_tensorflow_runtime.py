"""ddl_runtime.tensorflow under `ddlrun -n 2`: values, dtypes, gradients, mismatches and bad input.

One job (TensorFlow takes seconds to import per rank) runs workers/tf_checks.py; each rank
records what it saw and the tests below judge it.
"""
import json

import numpy as np
import pytest

from fw_helpers import WORKERS, ddlrun

DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64"]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf_checks")
    r = ddlrun(2, WORKERS / "tf_checks.py", str(out), timeout=240)
    assert r.returncode == 0, r.output
    recs = [json.loads((out / f"rank{i}.json").read_text()) for i in range(2)]
    assert [d["rank"] for d in recs] == [0, 1] and recs[0]["size"] == 2
    return recs


def _expect(rec, key, matrix, scalar):
    got = rec[key]
    assert [g["dtype"] for g in got] == DTYPES * 3, key  # the input's dtype comes back
    for g in got[:6]:
        assert g["shape"] == [2, 3] and np.allclose(g["values"], matrix), (key, g)
    for g in got[6:12]:
        assert g["shape"] == [] and g["values"] == scalar, (key, g)
    for g in got[12:]:
        assert g["shape"] == [0, 4] and g["values"] == [], (key, g)


def test_allreduce_n_every_dtype_eager_and_in_tf_function(ranks):
    matrix = np.arange(6).reshape(2, 3) * 3  # rank 0 holds 1x, rank 1 2x
    for rec in ranks:
        _expect(rec, "eager_sum", matrix, 5.0)
        _expect(rec, "graph_sum", matrix, 5.0)
        # the traced graph knows every output's static shape
        assert rec["graph_static_shapes"] == [[2, 3]] * 6 + [[]] * 6 + [[0, 4]] * 6
        avg = rec["graph_avg"]
        assert [g["dtype"] for g in avg] == DTYPES[:4] * 3
        for g in avg[:4]:
            assert np.allclose(g["values"], np.arange(6).reshape(2, 3) * 1.5)
        assert [g["values"] for g in avg[4:8]] == [2.5] * 4


def test_one_dtype_inside_tf_function_comes_back_whole(ranks):
    for rec in ranks:  # rank 0 holds 1x, rank 1 2x
        got = rec["graph_one_dtype"]
        assert [g["shape"] for g in got] == [[3, 5], [], [0, 4], [7]]
        assert all(g["dtype"] == "float32" for g in got)
        assert np.allclose(got[0]["values"], np.arange(15).reshape(3, 5) * 3)
        assert got[1]["values"] == 6.0 and got[2]["values"] == [] and got[3]["values"] == [3.0] * 7


def test_large_results_live_in_shared_memory_eagerly_and_in_tf_function(ranks):
    """On one host the results the peers write sit in shared memory: no copy out (shm/results.py)."""
    for rec in ranks:
        for how in ("eager", "graph"):
            got = rec[f"{how}_big_results"]
            assert got["shared"] == [True, True], (how, got)
            assert got["shapes"] == [[300_000], [1, 70_016]]
            assert got["first"] == got["last"] == 1.5 and got["row"] == 70_015.0


def test_import_starts_nothing_and_autograph_leaves_the_runtime_alone(ranks):
    for rec in ranks:
        assert rec["threading_settable_after_import"] is True, rec["threading_settable_after_import"]
        # the engine ran once per rank, from plain Python (no AutoGraph-converted frame above it)
        assert rec["autograph_frames_in_engine"] == [False]
        assert [g["values"] for g in rec["graph_autograph_sum"]] == [(np.arange(6).reshape(2, 3) * 3).tolist()] * 6


def test_single_tensor_collectives(ranks):
    # rank 0 holds [1, 5, -2], rank 1 [-1, 7, -7]
    want = [[-1, 5, -7], [1, 7, -2], [0, 6, -4.5], [-1, 7, -7],
            [[0, 0], [1, 1], [1, 1]], [0, 12, -9]]
    for rec in ranks:
        for key in ("eager_misc", "graph_misc"):
            got = [g["values"] for g in rec[key]]
            assert got == want, (key, got)
            assert all(g["dtype"] == "float32" for g in rec[key])
        assert rec["input_after"] == ([1, 5, -2] if rec["rank"] == 0 else [-1, 7, -7])
        assert rec["broadcast_variables"] == [1.0, 11.0]  # root 1's values assigned
        assert rec["variable_allreduce"][0]["values"] == [2.0, 22.0]
        assert [g["values"] for g in rec["ddl_module"]] == [[3.0], [3, 6], [1.0]]
        assert [g["dtype"] for g in rec["ddl_module"]] == ["float32", "int32", "float32"]


def test_gradients_through_collectives(ranks):
    w = np.array([1.0, 2.0, 3.0])
    for r, rec in enumerate(ranks):
        # d/dw sum((sum_r w*(r+1))^2) on rank r: the allreduce of the upstream 2*3w, times (r+1)
        assert np.allclose(rec["grad_sum"], 2 * 3 * w * 2 * (r + 1))
        assert np.allclose(rec["grad_allreduce_n"], rec["grad_sum"])  # eagerly, under a tape, allreduce_n too
        assert np.allclose(rec["grad_avg"], 2 * 1.5 * w * (r + 1) / 1)  # avg of upstream stays avg
        # allgather: the summed upstream's slice for this rank's rows
        assert np.allclose(rec["grad_allgather"], [16.0, 0, 0] if r == 0 else [16.0, 32.0, 0])


def test_distributed_gradient_tape_matches_full_batch(ranks):
    for rec in ranks:
        assert rec["tape_unreduced_diff"] > 1e-2, "control: half-batch gradients must differ from full-batch ones"
        assert rec["tape_eager_diff"] < 1e-6
        assert rec["tape_graph_diff"] < 1e-6
        assert rec["sgd_moved"] > 0.05 and rec["sgd_diff"] < 1e-5  # 5 steps in tf.function == full batch


@pytest.mark.parametrize("case", ["shape", "dtype", "name"])
def test_mismatch_raises_on_every_rank_naming_the_tensor(ranks, case):
    for rec in ranks:
        eager = rec[f"mismatch_eager_{case}"]
        assert eager["type"] == "DDLMismatchError", eager
        assert "layer/kernel" in eager["message"] and "\n" not in eager["message"]
        assert eager["seconds"] < 30
        graph = rec[f"mismatch_graph_{case}"]  # inside tf.function: TF reports the failing op,
        # as an error that is both the DDLMismatchError and the op's tf.errors.OpError
        assert graph["type"] == "DDLMismatchError" and graph["is_ddl_mismatch"] and graph["is_tf_op_error"], graph
        assert graph["last_error_type"] == "DDLMismatchError", graph
        assert "layer/kernel" in graph["last_error"] and graph["seconds"] < 30
        assert "DDLMismatchError: " + graph["last_error"] in graph["message"]
    assert "float32[4]" in ranks[0]["mismatch_eager_shape"]["message"]
    assert "float64[3]" in ranks[1]["mismatch_graph_dtype"]["last_error"]
    assert "layer/bias" in ranks[0]["mismatch_eager_name"]["message"]
    for rec in ranks:  # the runtime is still usable afterwards; other TF errors are untouched
        assert rec["after_mismatch"][0]["values"] == [2.0, 4.0]
        other = rec["unrelated_while_pending"]
        assert other["type"] == "InvalidArgumentError" and not other["is_ddl_mismatch"], other


BAD = {
    "non_tensor": "builtins.list; expected a tf.Tensor",
    "numpy": "numpy.ndarray; expected a tf.Tensor",
    "ragged_list": "'tensor.1' is a builtins.list",
    "ragged_tensor": "tf.RaggedTensor",
    "dtype_int8": "unsupported dtype int8",
    "dtype_bool": "unsupported dtype bool",
    "avg_int": "op 'avg' needs floating-point tensors",
    "bad_op": "op 'prod' is not one of",
    "bad_root": "root 5 is not a rank",
    "not_a_list": "expected a list of tensors",
    "tape": "expected a tf.GradientTape",
    "graph_non_tensor": "'tensor.1' is a builtins.str",
}


def test_bad_input_is_one_line_input_error_before_anything_is_sent(ranks):
    for rec in ranks:
        for key in ("before_init", "before_init_rank"):
            assert rec[key]["is_ddl_input"] and "not initialized" in rec[key]["message"], rec[key]
        for case, text in BAD.items():
            e = rec[f"bad_{case}"]
            assert e is not None and e["is_ddl_input"], (case, e)
            assert text in e["message"] and "\n" not in e["message"], (case, e)
    assert "unsupported dtype uint8" in ranks[1]["bad_one_rank_only"]["message"]
    for rec in ranks:  # a collective inside XLA is refused while tracing, with what to do instead
        assert rec["xla"]["type"] == "DDLError" and "jit_compile=False" in rec["xla"]["message"], rec["xla"]
    # rank 1 alone failed a call; had anything been sent, this next collective would not line up
    for rec in ranks:
        assert rec["after_bad"][0]["values"] == [2.0, 4.0]
