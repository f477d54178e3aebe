"""Fusion planning: which tensor pieces go into which bucket (pure numpy, no MPI).

A plan depends only on the tensors' sizes and dtypes and the bucket size, so it is the same
on every rank and is cached per tensor-list signature.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .buffers import TensorRef

Segment = Tuple[int, int, int, int]  # (tensor index, start, stop, offset in the bucket buffer)


@dataclass(frozen=True)
class BucketSpec:
    """A bucket in a plan: a reduce dtype, a length and the tensor pieces it holds."""

    dtype: np.dtype
    length: int
    segments: Tuple[Segment, ...]
    inplace: bool  # True: the buffer IS one tensor's memory (no pack, no unpack copy)


INPLACE_FRACTION = 16  # tensors of at least bucket_bytes / 16 are reduced where they lie


def plan_buckets(refs: Sequence[TensorRef], bucket_bytes: int,
                 inplace_min_bytes: Optional[int] = None) -> List[BucketSpec]:
    """Group small tensors into buckets of at most `bucket_bytes` per reduce dtype, in list order.

    A tensor of at least `inplace_min_bytes` (default bucket_bytes / 16) is reduced where it
    lies, in bucket-sized chunks: copying it into a bucket and back costs more than the extra
    MPI call.  A tensor that must be widened (float16/bfloat16) is converted chunk by chunk
    into a float32 buffer instead.  `bucket_bytes` 0 gives one bucket per tensor.
    """
    if inplace_min_bytes is None:
        inplace_min_bytes = bucket_bytes // INPLACE_FRACTION
    specs: List[BucketSpec] = []
    open_: Dict[np.dtype, Tuple[List[Segment], int]] = {}
    order: List[np.dtype] = []

    def close(dtype: np.dtype) -> None:
        segments, length = open_.pop(dtype)
        if segments:
            specs.append(BucketSpec(dtype, length, tuple(segments), False))

    for index, ref in enumerate(refs):
        n = ref.numel
        if n == 0:
            continue
        dtype = ref.reduce_dtype
        itemsize = dtype.itemsize
        if bucket_bytes <= 0 or n * itemsize >= bucket_bytes or (
                not ref.widened and n * itemsize >= inplace_min_bytes):
            chunk = n if bucket_bytes <= 0 else max(1, bucket_bytes // itemsize)
            for start in range(0, n, chunk):
                stop = min(n, start + chunk)
                specs.append(BucketSpec(dtype, stop - start, ((index, start, stop, 0),), not ref.widened))
            continue
        if dtype not in open_:
            open_[dtype] = ([], 0)
            order.append(dtype)
        segments, length = open_[dtype]
        if length + n > bucket_bytes // itemsize:
            close(dtype)
            segments, length = [], 0
        segments.append((index, 0, n, length))
        open_[dtype] = (segments, length + n)
    for dtype in order:
        if dtype in open_:
            close(dtype)
    return specs


class Pool:
    """Reusable scratch arrays keyed by (dtype, length): no page faults on every step."""

    def __init__(self, keep: int = 8):
        self.free: Dict[Tuple[np.dtype, int], List[np.ndarray]] = {}
        self.keep = keep

    def take(self, dtype: np.dtype, n: int) -> np.ndarray:
        stack = self.free.get((np.dtype(dtype), n))
        return stack.pop() if stack else np.empty(n, dtype=dtype)

    def give(self, arr: np.ndarray) -> None:
        stack = self.free.setdefault((arr.dtype, arr.size), [])
        if len(stack) < self.keep:
            stack.append(arr)
