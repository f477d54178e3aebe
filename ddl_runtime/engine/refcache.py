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

A call site that passes new objects every time (torch's fresh gradients after
``zero_grad()``: the default ``DistributedOptimizer``) would only pay for storing entries that
never hit, and each entry would keep an old step's gradients alive, so the allocator could not
reuse their memory.  So after MISS_STREAK misses in a row at one site (the key without the
objects' identities) nothing is stored for it, except one probe every PROBE_EVERY misses, in
case its objects have become stable.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .buffers import TensorRef

MAX_BYTES = 256 << 10
MAX_ENTRIES = 16
MISS_STREAK = 3
PROBE_EVERY = 64
MAX_SITES = 256


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
        self._misses: Dict[tuple, int] = {}  # per call site: misses in a row

    @staticmethod
    def _site(key: tuple) -> tuple:
        """The key (what, op, identities, names) without the identities, plus how many."""
        return (key[0], key[1], key[3], len(key[2]))

    def get(self, key: tuple, tensors: Sequence[Any]) -> Optional[Tuple[List[TensorRef], Any]]:
        """(refs, extra) stored for `key` when every tensor is unchanged, else None."""
        entry = self._entries.get(key)
        if entry is not None:
            objs, prints, refs, extra = entry
            if all(_fingerprint(obj) == fp for obj, fp in zip(objs, prints)):
                self._misses.pop(self._site(key), None)
                return refs, extra
            del self._entries[key]
        site = self._site(key)
        if len(self._misses) >= MAX_SITES and site not in self._misses:
            self._misses.clear()
        self._misses[site] = self._misses.get(site, 0) + 1
        return None

    def storing(self, key: tuple) -> bool:
        """Whether put() would store for this key's site (not a site of ever-new objects)."""
        misses = self._misses.get(self._site(key), 0)
        return misses <= MISS_STREAK or misses % PROBE_EVERY == 0

    def put(self, key: tuple, tensors: Sequence[Any], refs: List[TensorRef], extra: Any) -> None:
        if not self.storing(key):
            return
        prints = [_fingerprint(t) for t in tensors]  # None for anything but CPU numpy / torch
        if any(fp is None for fp in prints) or sum(r.nbytes for r in refs) > MAX_BYTES:
            return
        if len(self._entries) >= MAX_ENTRIES:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = (list(tensors), prints, refs, extra)

    def clear(self) -> None:
        self._entries.clear()
        self._misses.clear()
