"""RefCache: a small tensor list passed again unchanged reuses its validation; any change re-validates."""
import numpy as np
import pytest
import torch

from ddl_runtime.engine import refcache
from ddl_runtime.engine.buffers import as_tensor
from ddl_runtime.engine.refcache import RefCache


def _validated(cache, tensors, names=None):
    key = ("allreduce_n", "sum", tuple(map(id, tensors)), names)
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
    for i, ts in enumerate(lists):  # as many call sites
        _validated(cache, ts, (f"site{i}",))
    assert len(cache._entries) == refcache.MAX_ENTRIES
    assert _validated(cache, lists[-1], (f"site{len(lists) - 1}",))[1] and not _validated(cache, lists[0], ("site0",))[1]


def test_a_site_of_ever_new_tensors_stops_keeping_them_and_a_stable_one_is_cached_again():
    """torch's fresh gradients every step: after MISS_STREAK misses the cache keeps none of them
    alive (their memory goes back to the allocator), probing once every PROBE_EVERY misses."""
    import gc
    import weakref

    cache = RefCache()
    gone = []
    for step in range(refcache.MISS_STREAK + 10):
        grads = [torch.full((8,), float(step)), torch.ones(3)]
        gone.append(weakref.ref(grads[0]))
        refs, hit = _validated(cache, grads)
        assert not hit and refs[0].flat[0] == step
    del grads, refs
    gc.collect()
    alive = [step for step, ref in enumerate(gone) if ref() is not None]
    assert alive == list(range(refcache.MISS_STREAK)), alive  # only the first few were stored
    assert not cache._entries or len(cache._entries) <= refcache.MISS_STREAK
    # the same objects from now on: the next probe stores them and later calls hit
    stable = [torch.zeros(8), torch.ones(3)]
    hits = [_validated(cache, stable)[1] for _ in range(refcache.PROBE_EVERY + 2)]
    assert hits[-1] and hits.count(False) <= refcache.PROBE_EVERY
