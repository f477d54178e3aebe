"""The response cache's keys (ddl_runtime/collectives/response_cache.py), without MPI: what one rank
announces is what every other rank rebuilds, named or unnamed."""
from ddl_runtime.collectives.response_cache import MAX_NUMBER, ResponseCache


def _desc(name, shapes, op="sum"):
    tensors = tuple((name if len(shapes) == 1 else f"{name}.{i}", "float32", s) for i, s in enumerate(shapes))
    return ("allreduce", name, (op, 1.0, 1.0), tensors, None, None)


def test_a_named_descriptor_is_announced_by_its_id_and_rebuilt_as_it_was():
    cache = ResponseCache()
    grads = _desc("grads", [(3, 4), (5,)])
    assert cache.key(grads) is None
    cache.learn(grads)
    assert cache.descriptor(cache.key(grads)) == grads
    assert cache.key(_desc("grads", [(3, 4), (6,)])) is None   # another shape is another request
    assert cache.carry(cache.key(grads))[1] == (12, 5)          # small: its data rides in the round


def test_an_unnamed_call_is_cached_by_its_template_and_rebuilt_with_its_own_number():
    cache = ResponseCache()
    cache.learn(_desc("noname.3", [(7,)]))
    cache.learn(_desc("noname.4", [(7,)]))                       # the same template: one entry
    cache.learn(_desc("noname.5", [(2,), (2, 2)]))               # a group, numbered too
    assert len(cache.descs) == 2
    for desc in (_desc("noname.17", [(7,)]), _desc("noname.0", [(7,)]), _desc("noname.99", [(2,), (2, 2)])):
        key = cache.key(desc)
        assert key is not None and cache.descriptor(key) == desc
    assert cache.key(_desc("noname.8", [(7,)], op="max")) is None
    assert cache.key(_desc("noname.8", [(8,)])) is None


def test_a_number_too_large_for_the_key_is_announced_in_full_and_takes_no_place():
    cache = ResponseCache()
    cache.learn(_desc("noname.1", [(7,)]))
    late = _desc(f"noname.{MAX_NUMBER + 1}", [(7,)])
    assert cache.key(late) is None
    cache.learn(late)
    assert len(cache.descs) == 1
    assert 2 * cache.key(_desc(f"noname.{MAX_NUMBER}", [(7,)])) + 1 < (1 << 63)   # key << 1 | carry: an int64


def test_capacity_zero_caches_nothing():
    cache = ResponseCache(capacity=0)
    cache.learn(_desc("grads", [(3,)]))
    assert cache.key(_desc("grads", [(3,)])) is None
