"""The suite's two tiers: what `bash scripts/test` (README, CI) runs, and what `--full` adds.

The quick tier is every test but those below.  Each entry here is a variant of a real multi-rank
run (another framework or backend, fp16, three ranks beside two, another launcher or scheduler)
whose contract a quick-tier sibling checks with a real run of its own: the sibling is named, and
tests/conftest.py refuses a table whose entry matches no test or whose sibling is missing or in
the full tier itself.  The full tier runs everything (`bash scripts/test --full`, or
WML_TESTS=full): before a merge and at every stop, its result in the stop's note.

Why two tiers: on the 2-core CI machine the whole suite took 36 to 38 minutes (2026-11-29), the
README promises under 20, and most of its time is framework imports in rank processes (torch 2.8 s,
TensorFlow 6 s, Keras 6 to 7 s of CPU each), which no test can shave.  An entry is (node id or its
prefix, the quick-tier sibling's node id or prefix, why the sibling covers it).
"""
from __future__ import annotations

from typing import List, NamedTuple


class FullOnly(NamedTuple):
    test: str       # a node id, or a prefix of node ids (a parametrised family)
    sibling: str    # the quick-tier test that checks the same contract with a real run
    why: str


_STRAGGLERS = "tests/report/test_report_stragglers.py::test_the_slow_rank_is_named_and_the_others_wait_for_it_counted_where_it_happens"
_RESUME = "tests/frameworks/test_walltime_resume.py::test_stopped_mid_epoch_resumes_to_the_uninterrupted_weights"
_STOP_SAVES = "tests/checkpoint/test_torch_chain.py::test_a_stop_signal_saves_exits_75_and_the_resumed_run_ends_with_the_same_weights"
_EXAMPLES = "tests/horovod/test_examples_horovod.py::"
_FP16 = "tests/horovod/test_torch_glue.py::test_case_on_every_rank[fp16_compression]"

FULL_ONLY: List[FullOnly] = [
    # the GPU command's smoke run: every CPU entry; the quick tier runs two entries by name
    FullOnly("tests/runtime/test_gpu_checks_cmd.py::test_the_gpu_command_runs_every_cpu_entry_and_prints_one_line_per_check",
             "tests/runtime/test_gpu_checks_cmd.py::test_named_entries_run_alone_and_print_their_lines",
             "the command's table, exit status and results file, on two entries instead of thirteen"),
    # Horovod's own suites: the TensorFlow subset beside the torch one
    FullOnly("tests/horovod/test_conformance_tensorflow.py::test_horovod_tensorflow_suite_subset_passes_on_two_ranks",
             "tests/horovod/test_tf_horovod.py::test_horovod_tensorflow_api_on_two_ranks",
             "horovod.tensorflow's API on two real ranks; Horovod's torch suite stays in the quick tier"),
    # the Horovod examples: each example, fp16 and the local Slurm once in the quick tier
    FullOnly(_EXAMPLES + "test_example_under_ddlrun_horovod[fp16-horovod_torch_digits.py]",
             _FP16, "Horovod's fp16 compression on two real ranks"),
    FullOnly(_EXAMPLES + "test_example_under_ddlrun_horovod[fp16-horovod_keras_digits.py]",
             _FP16, "Horovod's fp16 compression on two real ranks"),
    FullOnly(_EXAMPLES + "test_example_under_ddlrun_horovod[fp32-horovod_keras_digits.py]",
             _EXAMPLES + "test_example_under_ddlrun_horovod[fp32-horovod_torch_digits.py]", "ddlrun --horovod, torch"),
    FullOnly(_EXAMPLES + "test_example_under_local_slurm[horovod_torch_digits.py]",
             _EXAMPLES + "test_example_under_local_slurm[horovod_keras_digits.py]", "the local Slurm, Keras"),
    # healing: the local spare and Horovod-on-Keras beside their siblings
    FullOnly("tests/heal/test_heal_local.py::test_horovod_keras_heals_with_the_runtimes_checkpoint",
             "tests/heal/test_heal_local.py::test_horovod_torch_heals_with_the_runtimes_checkpoint",
             "Horovod's elastic state restored from the runtime's checkpoint, torch"),
    FullOnly("tests/heal/test_heal_local.py::test_a_lost_node_is_left_out_the_spare_takes_its_place_and_the_weights_are_the_uninterrupted_runs",
             "tests/slurm/test_heal_on_slurm.py::test_a_node_taken_down_under_a_running_job_is_replaced_by_the_spare",
             "a lost node left out and the spare taking its place, on the real Slurm"),
    FullOnly("tests/slurm/test_heal_on_slurm.py::test_without_a_spare_the_chains_next_segment_is_kept_off_the_failed_node",
             "tests/slurm/test_heal_on_slurm.py::test_a_node_taken_down_under_a_running_job_is_replaced_by_the_spare",
             "the failed node named and left out, with a spare"),
    # walltimes and chains
    FullOnly(_RESUME + "[keras-tensorflow]", _RESUME + "[keras-torch]", "Keras's fit stopped mid-epoch and resumed"),
    FullOnly(_RESUME + "[tfloop-tensorflow]", _RESUME + "[keras-torch]", "the same resume, through the runtime's checkpoint"),
    FullOnly(_STOP_SAVES + "[optimizer-rank 1 only]", _STOP_SAVES + "[plain-every rankexec]", "stop, save, 75, resume"),
    FullOnly(_STOP_SAVES + "[elastic-rank 1 only]", _STOP_SAVES + "[plain-every rankexec]", "stop, save, 75, resume"),
    FullOnly("tests/slurm/test_torch_chain_on_slurm.py::test_a_torch_run_of_three_walltimes_through_a_chain_of_three_equals_one_job",
             "tests/slurm/test_chain_on_slurm.py::test_three_walltimes_through_a_chain_of_three",
             "a chain of three on the real Slurm (the torch weights: tests/chain/test_torch_chain_e2e.py)"),
    FullOnly("tests/slurm/test_local_cluster.py::test_walltime_limit_ends_in_timeout",
             "tests/jobs/test_local_site.py::test_a_local_job_is_ended_at_its_walltime_and_shown_as_timeout",
             "a job ended at its walltime shown as TIMEOUT (Slurm's shortest limit is a minute)"),
    FullOnly("tests/emulation/test_chain_lsf_cobalt.py::test_three_walltimes_through_cobalt_qsub_with_the_scripts_own_timer",
             "tests/emulation/test_chain_pbs.py::test_two_walltimes_through_qsub_with_the_scripts_own_timer",
             "a chain through qsub under the script's own timer (PBS; LSF's bsub beside it)"),
    # the run report
    FullOnly(_STRAGGLERS + "[ddl-loader-one-host]", _STRAGGLERS + "[ddl-two-ranks-two-nodes]", "a slow rank"),
    FullOnly(_STRAGGLERS + "[hvd-loader-one-host]", _STRAGGLERS + "[ddl-two-ranks-two-nodes]", "a slow rank"),
    FullOnly(_STRAGGLERS + "[ddl-loader-two-nodes]", _STRAGGLERS + "[ddl-two-ranks-two-nodes]", "two nodes"),
    FullOnly(_STRAGGLERS + "[ddl-after-backward-one-host]", _STRAGGLERS + "[ddl-two-ranks-two-nodes]", "ddl_runtime's wait"),
    FullOnly(_STRAGGLERS + "[keras-fit-two-ranks]",
             "tests/report/test_report_keras.py::test_keras_and_tensorflow_steps_reach_the_record_wml_report_reads[tensorflow]",
             "Keras's steps in the record wml report reads"),
    FullOnly("tests/report/test_report_keras.py::test_keras_and_tensorflow_steps_reach_the_record_wml_report_reads[torch]",
             "tests/report/test_report_keras.py::test_keras_and_tensorflow_steps_reach_the_record_wml_report_reads[tensorflow]",
             "Keras's steps in the record, another backend"),
    FullOnly("tests/report/test_report_runs.py::test_a_sweep_without_a_metric_names_no_best_trial",
             "tests/report/test_report_runs.py::test_a_sweep_lists_every_trial_and_never_names_a_failed_one_best",
             "a sweep's report"),
    # sweeps
    FullOnly("tests/slurm/test_sweep_on_slurm.py::test_grid_packed_in_one_allocation_two_at_a_time",
             "tests/sweep/test_sweep_local.py::test_grid_of_a_two_rank_torch_script_packed_failed_trial_resumed_alone",
             "packed trials (the Slurm array stays in the quick tier)"),
    # frameworks and Horovod's APIs on another backend, three ranks beside two
    FullOnly("tests/frameworks/test_framework_examples.py::test_bench_scaling_reports_every_configuration",
             "tests/frameworks/test_framework_examples.py::test_bench_scaling_phases_with_independent_ranks",
             "bench_scaling's table"),
    FullOnly("tests/frameworks/test_framework_examples.py::test_keras_digits[python]",
             "tests/frameworks/test_framework_examples.py::test_keras_digits[mpiexec-n2]", "the Keras example"),
    FullOnly("tests/frameworks/test_framework_averaging.py::test_keras_fit_two_ranks_match_one_process_with_double_batch",
             "tests/frameworks/test_tensorflow_keras.py::test_keras_fit_on_tensorflow_matches_one_process_with_double_batch",
             "Keras's fit on two ranks equals one process with the double batch"),
    FullOnly("tests/frameworks/test_tensorflow_keras.py::test_seed_tf_keras_script_wml_submit_two_nodes",
             "tests/frameworks/test_framework_examples.py::test_train_digits_wml_submit_two_nodes",
             "a seed script submitted with `wml submit --nodes 2` to the local site"),
    FullOnly("tests/horovod/test_hvd_edges.py::test_static_process_sets_refuse_duplicates_and_unknown_ids_as_horovod",
             "tests/horovod/test_core_sets_join.py::test_static_process_sets_and_unknown_ids_as_horovod",
             "static process sets refused as Horovod refuses them (torch)"),
    FullOnly("tests/horovod/test_core_collectives.py::test_collectives_and_join_on_open_mpi",
             "tests/horovod/test_core_collectives.py::test_torch_collectives_match_references[2]",
             "the collectives and join (pip's MPICH; Open MPI runs in tests/runtime/test_shm.py)"),
    FullOnly("tests/horovod/test_tf_horovod.py::test_horovod_keras_api_on_keras3[horovod.keras-torch]",
             "tests/horovod/test_tf_horovod.py::test_horovod_keras_api_on_keras3[horovod.tensorflow.keras-tensorflow]",
             "Horovod's Keras API on Keras 3"),
    FullOnly("tests/horovod/test_hvd_edges.py::test_keras_elastic_state_and_callbacks[horovod.keras-torch]",
             "tests/horovod/test_hvd_edges.py::test_keras_elastic_state_and_callbacks[horovod.tensorflow.keras-tensorflow]",
             "Horovod's Keras elastic state and callbacks"),
    FullOnly("tests/horovod/test_hvd_edges.py::test_torch_timeline_has_a_row_per_gradient_or_flat_bucket[1]",
             "tests/horovod/test_hvd_edges.py::test_torch_timeline_has_a_row_per_gradient_or_flat_bucket[0]", "the timeline"),
    FullOnly("tests/horovod/test_torch_adasum.py::test_adasum_on_four_ranks_halves_twice",
             "tests/horovod/test_torch_adasum.py::test_adasum_on_two_ranks_matches_horovods_formula", "Adasum"),
    FullOnly("tests/horovod/test_torch_adasum.py::test_adasum_on_two_ranks_of_open_mpi",
             "tests/horovod/test_torch_adasum.py::test_adasum_on_two_ranks_matches_horovods_formula", "Adasum"),
    FullOnly("tests/horovod/test_core_collectives.py::test_torch_collectives_match_references[3]",
             "tests/horovod/test_core_collectives.py::test_torch_collectives_match_references[2]", "collectives"),
    FullOnly("tests/horovod/test_core_sets_join.py::test_process_sets_and_join[3]",
             "tests/horovod/test_core_sets_join.py::test_process_sets_and_join[2]", "process sets and join"),
    FullOnly("tests/horovod/test_core_cache.py::test_cached_requests_keep_every_guarantee[3]",
             "tests/horovod/test_core_cache.py::test_cached_requests_keep_every_guarantee[2]", "the response cache"),
    FullOnly("tests/horovod/test_core_shm_stream.py::test_negotiated_and_native_collectives_in_any_order[3]",
             "tests/horovod/test_core_shm_stream.py::test_negotiated_and_native_collectives_in_any_order[2]", "order"),
    FullOnly("tests/runtime/test_gpu_transport.py::test_horovod_device_route_moves_and_reduces_through_the_process_group_as_the_host_path_does[3]",
             "tests/runtime/test_gpu_transport.py::test_horovod_device_route_moves_and_reduces_through_the_process_group_as_the_host_path_does[2]",
             "the device route"),
    FullOnly("tests/lms/test_distributed.py::test_two_ranks_keep_identical_parameters_with_lms[horovod]",
             "tests/lms/test_distributed.py::test_two_ranks_keep_identical_parameters_with_lms[ddl]", "LMS on two ranks"),
]


def full_only(nodeid: str) -> bool:
    return any(full_only_entry(e, nodeid) for e in FULL_ONLY)


def check(collected: List[str]) -> List[str]:
    """What is wrong with the table against a whole-suite collection: an entry that matches no test,
    or whose sibling is not collected or is in the full tier itself."""
    problems = []
    ids = set(collected)
    for e in FULL_ONLY:
        if not any(full_only_entry(e, n) for n in ids):
            problems.append(f"{e.test} matches no test")
        if e.sibling not in ids:
            problems.append(f"{e.test}'s sibling {e.sibling} is not a test")
        elif full_only(e.sibling):
            problems.append(f"{e.test}'s sibling {e.sibling} is in the full tier too")
    return problems


def full_only_entry(e: FullOnly, nodeid: str) -> bool:
    return nodeid == e.test or nodeid.startswith(e.test + "[")
