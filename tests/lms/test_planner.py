"""The LMS planner, from given sizes, times, bandwidth and budget (pure Python)."""
import dataclasses

from ddl_runtime.lms.planner import (KEEP, RECOMPUTE, SWAP, BlockProfile, Plan, Profile, SavedTensor, make_plan,
                                     peak_bytes)

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


def chained(blocks=24, act=MB, forward_s=0.01, bandwidth=1e8, breaks=()):
    """Blocks of five activations each whose input is one activation, all chaining except `breaks`."""
    tensors = tuple(SavedTensor(b, act) for b in range(blocks) for _ in range(5))
    return Profile(tensors, tuple(BlockProfile(f"b{b}", forward_s, act, chains=b > 0 and b not in breaks)
                                  for b in range(blocks)), bandwidth)


def test_chained_blocks_are_recomputed_in_segments_faster_than_block_by_block():
    p = chained()
    budget = 30 * MB               # 24 kept inputs + one block back (29 MB) fit, barely: most blocks recomputed
    plan = make_plan(p, budget)
    alone = make_plan(Profile(p.tensors, tuple(BlockProfile(b.name, b.forward_s, b.input_bytes) for b in p.blocks),
                              p.bandwidth_Bps), budget)
    assert plan.fits and alone.fits
    assert max(z - a for a, z in plan.units()) >= 1, plan.describe()      # a unit of several blocks
    assert plan.extra_s < alone.extra_s and len(plan.recompute) < len(alone.recompute)
    assert peak_bytes(p, plan) <= budget
    assert "segments" in plan.describe()
    for a, z in plan.units():                                            # a unit is its blocks' tensors
        assert all(b in plan.recompute for b in range(a, z + 1))


def test_a_segment_never_spans_a_block_that_does_not_chain():
    p = chained(breaks=(6, 12, 18))
    plan = make_plan(p, 30 * MB)
    assert plan.fits and max(z - a for a, z in plan.units()) >= 1
    for a, z in plan.units():
        assert not any(a < b <= z for b in (6, 12, 18)), plan.units()


def test_a_segment_comes_back_whole_in_backward():
    p = chained(blocks=4)
    seg = Plan(tuple(RECOMPUTE for _ in p.tensors), frozenset(range(4)), 0, 0, 0, 0, 0.0, True,
               segments=((0, 3),))
    single = dataclasses.replace(seg, segments=())
    assert peak_bytes(p, seg) == MB + 20 * MB              # its input, then all four blocks at once
    assert peak_bytes(p, single) == 4 * MB + 5 * MB        # every block's input, then one block at a time


def test_a_block_that_saves_no_new_bytes_does_not_stop_the_segment_search():
    """A block whose saved tensors were all saved before (0 new bytes) starts the search at 0 bytes;
    it must still end (it looped for ever, the size growing by a quarter of 0)."""
    tensors = tuple(SavedTensor(b, 0 if b == 3 else MB) for b in range(12) for _ in range(5))
    p = Profile(tensors, tuple(BlockProfile(f"b{b}", 0.01, MB, chains=b > 0) for b in range(12)), 1e8)
    plan = make_plan(p, 20 * MB)
    assert plan.fits and peak_bytes(p, plan) <= 20 * MB


def views(blocks=8, storage=6 * MB, own=2 * MB, bandwidth=1e12):
    """Each block saves three views of one storage (q, k, v of one projection; only the first view
    carries the storage's bytes) and one tensor of its own."""
    tensors = []
    for b in range(blocks):
        first = len(tensors)
        tensors += [SavedTensor(b, storage), SavedTensor(b, 0, first), SavedTensor(b, own), SavedTensor(b, 0, first)]
    return Profile(tuple(tensors), tuple(BlockProfile(f"b{b}", 0.01, own) for b in range(blocks)), bandwidth)


def test_a_storage_is_swapped_with_all_its_views_and_held_while_one_is_kept():
    p = views()
    assert p.saved_bytes == 8 * 8 * MB and p.storages[0] == (0, 1, 3)
    for budget in (10 * MB, 25 * MB, 40 * MB):
        plan = make_plan(p, budget)
        for members in p.storages.values():
            assert len({plan.tensors[i] for i in members}) == 1, plan.tensors
        assert plan.fits and peak_bytes(p, plan) <= budget
        assert plan.kept_bytes + plan.swapped_bytes == p.saved_bytes
    # one view swapped, another kept: the storage stays on the device, counted once
    d = [KEEP] * len(p.tensors)
    d[0] = SWAP
    half = Plan(tuple(d), frozenset(), 0, 0, 0, 0, 0.0, True)
    assert peak_bytes(p, half) == p.saved_bytes
    d[1] = d[3] = SWAP
    whole = Plan(tuple(d), frozenset(), 0, 0, 0, 0, 0.0, True)
    assert peak_bytes(p, whole) == p.saved_bytes - 6 * MB


def test_a_blocks_output_saved_again_by_the_next_block_is_not_freed_by_recomputing_the_first():
    """A block saves its output (ReLU) and the next block saves it again (its input): recomputing the
    first keeps it held by the second; the next block's recompute keeps it as its input, once."""
    blocks, inner, out = 6, 4 * MB, MB
    tensors, inputs = [], []
    for b in range(blocks):
        inputs.append(len(tensors) - 1 if b else None)      # the previous block's output
        if b:
            tensors.append(SavedTensor(b, 0, inputs[b]))     # saves its input: a view of that output
        tensors += [SavedTensor(b, inner), SavedTensor(b, out)]
    p = Profile(tuple(tensors), tuple(BlockProfile(f"b{b}", 0.01, out if b else 0, input_storage=inputs[b])
                                      for b in range(blocks)), 1e6)      # a slow link: recompute
    plan = make_plan(p, p.saved_bytes - 12 * MB)
    assert plan.recompute and plan.fits
    assert peak_bytes(p, plan) <= p.saved_bytes - 12 * MB
    every = Plan(tuple(RECOMPUTE if t.block in (1, 2) else KEEP for t in p.tensors), frozenset({1, 2}),
                 0, 0, 0, 0, 0.0, True, segments=((1, 1), (2, 2)))
    # blocks 1 and 2 recomputed: their inner tensors go; block 0's output stays (block 0 keeps it:
    # block 1's input costs nothing more), block 1's output stays as block 2's input (once), block 2's
    # output stays (block 3 saves it)
    assert peak_bytes(p, every) == p.saved_bytes - 2 * inner
