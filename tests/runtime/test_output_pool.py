"""ddl_runtime.transports.shm.output_pool: result memory is reused once nothing sees it, never while something does."""
import gc

import numpy as np

from ddl_runtime.transports.shm.output_pool import ALIGN, OutputPool

F32 = np.dtype(np.float32)


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_hand_outs_are_aligned_writable_and_reused_after_release():
    pool = OutputPool()
    a = pool.take((1000, 3), F32)
    assert a.shape == (1000, 3) and a.dtype == F32 and a.flags.writeable and a.flags.c_contiguous
    assert _addr(a) % ALIGN == 0
    first = _addr(a)
    del a
    gc.collect()
    assert _addr(pool.take((1000, 3), F32)) == first


def test_memory_is_not_handed_out_twice_while_a_view_or_dlpack_export_lives():
    pool = OutputPool()
    a = pool.take((64,), F32)
    view = a.reshape(8, 8)[1:]            # what a framework may keep of the result
    capsule_holder = np.from_dlpack(a)    # a DLPack consumer holds the exported array
    first = _addr(a)
    del a
    gc.collect()
    b = pool.take((64,), F32)
    assert _addr(b) != first
    del view, b
    gc.collect()
    assert _addr(pool.take((64,), F32)) != first, "the DLPack consumer still reads that memory"
    del capsule_holder
    gc.collect()
    assert _addr(pool.take((64,), F32)) == first


def test_every_buffer_of_a_shape_in_use_at_once_is_kept():
    """ResNet-50 has 32 gradients of one shape: all 32 come back from the pool the next step."""
    pool = OutputPool()
    step1 = [pool.take((256,), F32) for _ in range(32)]
    addrs = {_addr(a) for a in step1}
    assert len(addrs) == 32
    del step1
    gc.collect()
    step2 = [pool.take((256,), F32) for _ in range(32)]
    assert {_addr(a) for a in step2} == addrs


def test_kept_memory_is_bounded():
    pool = OutputPool(max_bytes=3 * 4096)
    live = [pool.take((1024,), F32) for _ in range(5)]   # 5 x 4 KiB wanted, 3 kept
    assert pool.kept_bytes == 3 * 4096
    del live
    gc.collect()
    again = [pool.take((1024,), F32) for _ in range(5)]
    assert pool.kept_bytes == 3 * 4096 and len({_addr(a) for a in again}) == 5
    assert pool.take((0, 4), F32).shape == (0, 4)


def test_take_like_hands_out_one_buffer_per_array_with_the_same_rules():
    pool = OutputPool()
    like = [np.empty((3, 4), np.float32), np.empty((0,), np.float64), np.empty((3, 4), np.float32)]
    outs = pool.take_like(like)
    assert [(o.shape, o.dtype) for o in outs] == [(a.shape, a.dtype) for a in like]
    assert _addr(outs[0]) != _addr(outs[2]) and _addr(outs[0]) % ALIGN == 0
    addrs = {_addr(outs[0]), _addr(outs[2])}
    del outs
    gc.collect()
    again = pool.take_like(like)
    assert {_addr(again[0]), _addr(again[2])} == addrs  # reused once released
