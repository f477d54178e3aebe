"""Aligned host arrays for out-of-place results, reused once nothing refers to them any more.

A framework that wraps a result array without copying it (TensorFlow through DLPack, or the
ndarray a ``tf.numpy_function`` returns) keeps that array alive for as long as a tensor uses
the memory.  Writing a fresh 100 MB array costs a page fault per 4 KiB on every step, more
than the reduction's own copy; so the memory behind a result is taken again as soon as
every array that sees it is gone.

How "gone" is known: each hand-out is a view of ``np.frombuffer(memoryview(memory))``.  That
array does not own its data and its base is no ndarray, so numpy makes it the ``.base`` of
every view derived from the hand-out (reshape, slice, ``.view(uint16)``, DLPack exports hold
the array they export): it lives exactly as long as something can still read or write the
result.  The pool keeps only a weak reference to it.  Buffers are kept per (shape, dtype),
as many as one step had in use at once (ResNet-50 has 32 gradients of one shape), up to
`max_bytes` in all; a hand-out beyond that is plain fresh memory.
"""
from __future__ import annotations

import math
import threading
import weakref
from typing import Dict, List, Tuple

import numpy as np

ALIGN = 64  # TensorFlow wraps host buffers aligned like this without copying them


def packed_layout(sizes, itemsize: int) -> Tuple[List[int], int]:
    """Offsets (in elements) that pack arrays of `sizes` elements one after another, each at a
    multiple of ALIGN bytes, and the total length (at least 1)."""
    step = max(1, ALIGN // itemsize)
    offsets, at = [], 0
    for n in sizes:
        offsets.append(at)
        at += -(-n // step) * step
    return offsets, max(at, 1)


def aligned_bytes(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGN
    return raw[offset:offset + nbytes]


class OutputPool:
    """take(shape, dtype): a writable, 64-byte aligned, C-contiguous array (contents undefined).

    `shape` is a tuple of ints and `dtype` a np.dtype (as an ndarray's .shape and .dtype)."""

    def __init__(self, max_bytes: int = 4 << 30, max_keys: int = 4096):
        self.max_bytes = max_bytes
        self.max_keys = max_keys
        self.kept_bytes = 0
        self._slots: Dict[Tuple[tuple, np.dtype], List[list]] = {}  # [memory, weakref to the live hand-out]
        self._lock = threading.Lock()

    def take(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        with self._lock:
            return self._take(shape, dtype)

    def take_like(self, arrays) -> list:
        """take(a.shape, a.dtype) for every array, under one lock (a step's outputs at once)."""
        with self._lock:
            return [self._take(a.shape, a.dtype) for a in arrays]

    def _take(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:
            return np.empty(shape, dtype=dtype)
        key = (shape, dtype)
        slots = self._slots.get(key)
        if slots is None:
            if len(self._slots) >= self.max_keys:
                self._clear()
            slots = self._slots[key] = []
        for slot in slots:
            if slot[1]() is None:
                break
        else:
            slot = [aligned_bytes(nbytes), None]
            if self.kept_bytes + nbytes <= self.max_bytes:
                slots.append(slot)
                self.kept_bytes += nbytes
        flat = np.frombuffer(memoryview(slot[0]), dtype=dtype)
        slot[1] = weakref.ref(flat)
        return flat.reshape(shape)

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._slots.clear()
        self.kept_bytes = 0


RESULTS = OutputPool()  # the runtime's out-of-place results (allreduce_n_fresh, ddl_runtime.tensorflow)
