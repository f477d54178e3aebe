"""RefCache: a small tensor list passed again unchanged reuses its validation; any change re-validates."""
import numpy as np
import pytest
import torch

from ddl_runtime import refcache
from ddl_runtime.buffers import as_tensor
from ddl_runtime.refcache import RefCache


def _validated(cache, tensors):
    key = ("allreduce_n", "sum", tuple(map(id, tensors)), None)
    hit = cache.get(key, tensors)
    if hit is not None:
        return hit[0], True
    refs = [as_tensor(t, f"t{i}") for i, t in enumerate(tensors)]
    cache.put(key, tensors, refs, "described")
    return refs, False


def test_same_objects_unchanged_are_served_from_the_cache():
    cache = RefCache()
    ts = [np.ones(4, np.float32), torch.ones(3, dtype=torch.float64)]
    first, hit = _validated(cache, ts)
    assert not hit
    again, hit = _validated(cache, ts)
    assert hit and again is first
    again[0].flat[:] = 7  # the cached views still see the caller's memory
    assert ts[0][0] == 7


@pytest.mark.parametrize("change", ["numpy shape", "numpy read-only", "torch storage", "torch shape"])
def test_any_change_to_a_tensor_is_validated_again(change):
    cache = RefCache()
    a, t = np.ones(6, np.float32), torch.ones(4)
    ts = [a, t]
    _validated(cache, ts)
    if change == "numpy shape":
        a.shape = (2, 3)
    elif change == "numpy read-only":
        a.setflags(write=False)
    elif change == "torch storage":
        t.data = torch.full((4,), 5.0)
    else:
        t.resize_(2, 2)
    if change == "numpy read-only":  # re-validated: refused, as a first call would be
        with pytest.raises(Exception, match="read-only"):
            _validated(cache, ts)
        return
    refs, hit = _validated(cache, ts)
    assert not hit
    assert refs[0].shape == a.shape and refs[1].shape == tuple(t.shape)
    assert refs[1].flat.__array_interface__["data"][0] == t.data_ptr()  # the new memory


def test_large_lists_and_other_objects_are_not_kept_and_the_cache_is_bounded():
    cache = RefCache()
    big = [np.ones(refcache.MAX_BYTES // 4 + 1, np.float32)]
    _validated(cache, big)
    assert not _validated(cache, big)[1]  # too big to keep alive
    lists = [[np.ones(2, np.float32)] for _ in range(refcache.MAX_ENTRIES + 5)]
    for ts in lists:
        _validated(cache, ts)
    assert len(cache._entries) == refcache.MAX_ENTRIES
    assert _validated(cache, lists[-1])[1] and not _validated(cache, lists[0])[1]
