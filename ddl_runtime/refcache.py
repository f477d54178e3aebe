"""The steady state of a training loop: the same small tensor list, validated once.

A latency-bound call (a small model's gradients, a bucket of flags) spends a fifth of its time
validating and viewing its tensors (as_tensor: dtype, layout, a flat view, the signature entry),
and a training loop passes the very same objects every step (the gradient views of
``DistributedOptimizer(gradient_as_bucket_view=True)``, preallocated numpy buffers).  RefCache
keeps the validated TensorRefs of such calls, keyed by the objects' identities and the call's
names and op, and hands them back after a cheap check that each object still has the shape,
dtype and memory it was validated with (numpy: shape, strides, writability; torch: data
pointer, shape, dtype, contiguity).  The entry holds the objects, so an id cannot be reused
while it is cached.  Only lists of at most MAX_BYTES are cached, MAX_ENTRIES at a time (oldest
out), so what the cache keeps alive stays small; anything else is validated as usual.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .buffers import TensorRef

MAX_BYTES = 256 << 10
MAX_ENTRIES = 16


def _fingerprint(obj: Any) -> Optional[tuple]:
    """What must not change for a cached TensorRef to stay right; None: do not cache it."""
    if type(obj) is np.ndarray:
        return (obj.shape, obj.strides, obj.dtype, obj.flags.writeable)
    torch = sys.modules.get("torch")
    if torch is not None and type(obj) is torch.Tensor and obj.device.type == "cpu":
        return (obj.data_ptr(), obj.shape, obj.dtype, obj.is_contiguous())
    return None


class RefCache:
    def __init__(self) -> None:
        self._entries: Dict[tuple, Tuple[list, List[tuple], List[TensorRef], Any]] = {}

    def get(self, key: tuple, tensors: Sequence[Any]) -> Optional[Tuple[List[TensorRef], Any]]:
        """(refs, extra) stored for `key` when every tensor is unchanged, else None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        objs, prints, refs, extra = entry
        for obj, fp in zip(objs, prints):
            if _fingerprint(obj) != fp:
                del self._entries[key]
                return None
        return refs, extra

    def put(self, key: tuple, tensors: Sequence[Any], refs: List[TensorRef], extra: Any) -> None:
        prints = [_fingerprint(t) for t in tensors]  # None for anything but CPU numpy / torch
        if any(fp is None for fp in prints) or sum(r.nbytes for r in refs) > MAX_BYTES:
            return
        if len(self._entries) >= MAX_ENTRIES:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = (list(tensors), prints, refs, extra)

    def clear(self) -> None:
        self._entries.clear()
