"""The LMS planner, from given sizes, times, bandwidth and budget (pure Python)."""
from ddl_runtime.lms.planner import (KEEP, RECOMPUTE, SWAP, BlockProfile, Profile, SavedTensor, make_plan)

MB = 1 << 20


def profile(blocks=8, per_block=(8 * MB, 8 * MB, 4 * MB), forward_s=0.01, bandwidth=1e10,
            input_bytes=8 * MB):
    tensors = tuple(SavedTensor(b, n) for b in range(blocks) for n in per_block)
    return Profile(tensors, tuple(BlockProfile(f"b{b}", forward_s, input_bytes) for b in range(blocks)), bandwidth)


def test_nothing_moves_when_everything_fits():
    p = profile()
    plan = make_plan(p, p.saved_bytes)
    assert set(plan.tensors) == {KEEP} and not plan.moves and plan.fits and plan.extra_s == 0


def test_fast_link_swaps_the_earliest_tensors_and_never_the_last_block():
    p = profile(bandwidth=1e12)           # copies hide behind compute
    plan = make_plan(p, p.saved_bytes - 30 * MB)
    swapped = [i for i, d in enumerate(plan.tensors) if d == SWAP]
    assert swapped == list(range(len(swapped)))            # the first saved, in order
    assert plan.swapped_bytes >= 30 * MB and not plan.recompute and plan.fits
    assert plan.extra_s == 0
    assert all(p.tensors[i].block != 7 for i in swapped)


def test_slow_link_recomputes_blocks_instead():
    p = profile(bandwidth=1e8)            # 100 MB/s: a swapped MB stalls 10 ms, a block recomputes in 10 ms
    plan = make_plan(p, p.saved_bytes - 30 * MB)
    assert plan.recompute and plan.fits
    for b in plan.recompute:
        assert all(d == RECOMPUTE for t, d in zip(p.tensors, plan.tensors) if t.block == b)
    assert len(plan.recompute) == 3 and abs(plan.extra_s - 0.03) < 1e-9   # 12 MB freed per block


def test_small_tensors_are_never_swapped():
    p = Profile(tuple(SavedTensor(b, 512 * 1024) for b in range(4) for _ in range(4)),
                tuple(BlockProfile(f"b{b}", 0.01, 0, recomputable=False) for b in range(4)), 1e12)
    plan = make_plan(p, 1 * MB, min_swap_bytes=MB)
    assert SWAP not in plan.tensors and not plan.fits        # nothing it may move: over budget, said so
    plan = make_plan(p, 1 * MB, min_swap_bytes=0)
    assert SWAP in plan.tensors


def test_over_budget_even_moving_everything_is_said():
    p = profile(blocks=2)
    plan = make_plan(p, 0)
    assert not plan.fits and "over budget" in plan.describe()


KB = 1024


def test_when_recomputing_is_not_enough_the_recomputed_blocks_inputs_are_swapped():
    p = profile(bandwidth=1e8)
    plan = make_plan(p, 8 * 8 * MB)           # less than every block's input kept
    assert plan.recompute and plan.swap_inputs and plan.swap_inputs <= plan.recompute
    assert 7 not in plan.swap_inputs          # the last block's input is needed first in backward


def test_ranks_sharing_a_gpu_share_its_memory():
    from ddl_runtime.lms.transfer import sharing_ranks

    assert sharing_ranks({"DDL_LAYOUT_GPUS": "0;0;1;1", "LOCAL_RANK": "2"}) == 2
    assert sharing_ranks({"DDL_LAYOUT_GPUS": "0;1;2;3", "LOCAL_RANK": "1"}) == 1
    assert sharing_ranks({"DDL_LAYOUT_GPUS": "0;0;0", "LOCAL_RANK": "0"}) == 3
    assert sharing_ranks({"LOCAL_RANK": "0"}) == 1 and sharing_ranks({"DDL_LAYOUT_GPUS": "0;0"}) == 1
