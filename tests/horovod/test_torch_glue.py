"""Horovod's torch DistributedOptimizer, broadcast/allgather helpers, SyncBatchNorm and the
dynamic timeline, on 2 real ranks under ``ddlrun --horovod`` (the script imports
``horovod.torch``).  One job runs every case; each test checks its case on every rank."""
import pytest

from torch_glue_helpers import PROGRAMS, ddlrun

RANKS = 2
CASES = ["shim_is_the_runtime", "average", "sum_op", "predivide_factor", "groups", "fp16_compression", "custom_compressor",
         "backward_passes_per_step", "force_allreduce_unused_parameter", "synchronize_clip_skip",
         "zero_grad_in_flight", "bad_arguments", "parameter_names_without_named_parameters",
         "sparse_gradients", "flat_buckets_match_the_per_tensor_path", "broadcast_functions", "sync_batch_norm", "dynamic_timeline",
         "process_set_optimizer", "models_that_differ_between_ranks"]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tl = tmp_path_factory.mktemp("timeline")
    run = ddlrun(["--horovod", "-n", str(RANKS), "python", str(PROGRAMS / "torch_glue_cases.py"), *CASES],
                 env={"HOROVOD_TIMELINE": "DYNAMIC", "TIMELINE_DIR": str(tl)})
    assert run.returncode == 0, run.output
    return run


@pytest.mark.parametrize("case", CASES)
def test_case_on_every_rank(job, case):
    results = job.results().get(case, {})
    assert sorted(results) == list(range(RANKS)), f"{case}: no result from some rank\n{job.output}"
    failures = {r: v for r, v in results.items() if v != "ok"}
    assert not failures, f"{case}: {failures}"


# Off the shared-memory arena (two emulated nodes: the small buckets' FlatAllreduce reduces a
# private array through the MPI engine) the optimizer must give the same answers.
TWO_NODE_CASES = ["average", "sum_op", "predivide_factor", "force_allreduce_unused_parameter",
                  "sparse_gradients", "flat_buckets_match_the_per_tensor_path"]


def test_optimizer_cases_across_two_emulated_nodes():
    run = ddlrun(["--horovod", "-n", str(RANKS), "--emulate-nodes", "2", "python",
                  str(PROGRAMS / "torch_glue_cases.py"), *TWO_NODE_CASES])
    assert run.returncode == 0, run.output
    results = run.results()
    for case in TWO_NODE_CASES:
        assert results.get(case) == {r: "ok" for r in range(RANKS)}, f"{case}: {results.get(case)}\n{run.output}"
