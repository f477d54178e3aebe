"""Bucket planning and the 16-bit float conversions (pure numpy)."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ddl_runtime.engine.algorithms import split_counts
from ddl_runtime.engine.buffers import as_tensor, narrow, widen
from ddl_runtime.engine.fusion import plan_buckets

MB = 1024 * 1024


def refs(*arrays):
    return [as_tensor(a, f"t{i}") for i, a in enumerate(arrays)]


def test_small_tensors_share_buckets_large_ones_reduce_in_place():
    tensors = refs(np.zeros(10, np.float32), np.zeros(300_000, np.float32), np.zeros(100, np.float64),
                   np.zeros(600_000, np.float32), np.zeros(0, np.float32), np.zeros(5, np.float16))
    specs = plan_buckets(tensors, 2 * MB, inplace_min_bytes=2 * MB)  # 524288 float32 per bucket
    inplace = [s for s in specs if s.inplace]
    assert [(s.segments[0][0], s.segments[0][1], s.segments[0][2]) for s in inplace] == [(3, 0, 524288), (3, 524288, 600_000)]
    packed = {s.dtype.name: s for s in specs if not s.inplace}
    assert [seg[0] for seg in packed["float32"].segments] == [0, 1, 5]  # float16 joins float32 (widened)
    assert [seg[3] for seg in packed["float32"].segments] == [0, 10, 300_010]
    assert packed["float64"].segments == ((2, 0, 100, 0),)
    assert all(s.length * s.dtype.itemsize <= 2 * MB for s in specs)


def test_default_in_place_threshold_is_a_sixteenth_of_a_bucket():
    tensors = refs(np.zeros(32_767, np.float32), np.zeros(32_768, np.float32), np.zeros(40_000, np.float16))
    specs = plan_buckets(tensors, 2 * MB)  # threshold 128 KB = 32768 float32
    assert [(s.inplace, [seg[0] for seg in s.segments]) for s in specs] == [(True, [1]), (False, [0, 2])]


def test_fusion_off_and_widened_large_tensors():
    tensors = refs(np.zeros(10, np.float32), np.zeros(3, np.float32))
    assert [s.segments for s in plan_buckets(tensors, 0)] == [((0, 0, 10, 0),), ((1, 0, 3, 0),)]
    big16 = refs(np.zeros(600_000, np.float16))
    specs = plan_buckets(big16, 1 * MB)  # widened to float32: 262144 per chunk, converted, not in place
    assert [s.length for s in specs] == [262144, 262144, 75712] and not any(s.inplace for s in specs)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=30), st.sampled_from([0, 4096, 65536]))
def test_every_element_is_planned_exactly_once(sizes, bucket_bytes):
    tensors = refs(*[np.zeros(n, np.float32) for n in sizes])
    covered = [np.zeros(n, int) for n in sizes]
    for spec in plan_buckets(tensors, bucket_bytes):
        offsets = set()
        for index, start, stop, offset in spec.segments:
            covered[index][start:stop] += 1
            assert offset + stop - start <= spec.length
            offsets.add(offset)
        assert len(offsets) == len(spec.segments)
    assert all((c == 1).all() for c in covered)


@pytest.mark.parametrize("n, parts", [(0, 3), (10, 3), (2, 4), (7, 1)])
def test_split_counts_matches_array_split(n, parts):
    assert split_counts(n, parts) == [len(p) for p in np.array_split(np.arange(n), parts)]


def test_bfloat16_round_trip_matches_ml_dtypes():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(size=10_000).astype(np.float32) * 1e3,
                             np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 3.4e38], np.float32)])
    bits = np.empty(values.size, np.uint16)
    narrow(values, "bfloat16", bits)
    expect = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    same = (bits == expect) | (np.isnan(values) & ((bits & 0x7FFF) > 0x7F80))
    assert same.all()
    back = np.empty(values.size, np.float32)
    widen(bits, "bfloat16", back)
    np.testing.assert_array_equal(back, expect.view(ml_dtypes.bfloat16).astype(np.float32))


def test_float16_widen_narrow_and_scale():
    src = np.array([1.5, -2.25, 65504.0], np.float16)
    wide = np.empty(3, np.float32)
    widen(src, "float16", wide)
    out = np.empty(3, np.float16)
    narrow(wide, "float16", out, scale=2.0)
    np.testing.assert_array_equal(out, np.array([0.75, -1.125, 32752.0], np.float16))
