"""Reduction algorithms as chains of non-blocking MPI stages over a flat buffer.

`flat`: one Iallreduce over all ranks (MPI's own algorithm; the `mpi=True` baseline).
`hierarchical`: for active levels L0 (node) .. Lk (top), reduce-scatter the buffer inside
L0, reduce-scatter that shard inside L1, ..., allreduce the smallest shard across Lk, then
allgather back down.  At the node level each local rank owns a different shard and
reduces it across nodes on its own communicator, so all local ranks drive the inter-node
links in parallel (DDL's "multi-ring").  Every stage has its own communicator, so buckets
in flight never interleave collectives on one communicator.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np
from mpi4py import MPI

MPI_TYPES = {
    np.dtype(np.float32): MPI.FLOAT,
    np.dtype(np.float64): MPI.DOUBLE,
    np.dtype(np.int32): MPI.INT32_T,
    np.dtype(np.int64): MPI.INT64_T,
}
MPI_OPS = {"sum": MPI.SUM, "avg": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX}


def split_counts(n: int, parts: int) -> List[int]:
    """np.array_split sizes: the first n % parts parts get one extra element."""
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


@dataclass
class Level:
    """One active level below the top: separate communicators for its two directions."""

    name: str
    reduce_scatter: MPI.Comm
    allgather: MPI.Comm
    size: int
    rank: int


@dataclass
class Algorithms:
    flat: MPI.Comm
    levels: List[Level]  # active levels below the top, innermost first
    top: Optional[MPI.Comm]  # the outermost active level; None when the job is flat

    @property
    def hierarchical(self) -> bool:
        return self.top is not None and bool(self.levels)

    def stages(self, name: str) -> int:
        return 1 if name == "flat" else 2 * len(self.levels) + 1


class Chain:
    """The stages of one bucket's reduction; `post(i)` starts stage i and returns its request."""

    def __init__(self, algorithms: Algorithms, name: str, buf: np.ndarray, op: str, pool):
        self.algorithms = algorithms
        self.name = name
        self.buf = buf
        self.datatype = MPI_TYPES[buf.dtype]
        self.op = MPI_OPS[op]
        self.pool = pool
        self.count = algorithms.stages(name)
        self.shards: List[np.ndarray] = []  # shard held after each reduce-scatter
        self.counts: List[List[int]] = []

    def post(self, i: int) -> MPI.Request:
        t = self.datatype
        if self.name == "flat":
            return self.algorithms.flat.Iallreduce(MPI.IN_PLACE, [self.buf, t], self.op)
        levels = self.algorithms.levels
        k = len(levels)
        if i < k:  # reduce-scatter inside level i
            level = levels[i]
            src = self.buf if i == 0 else self.shards[i - 1]
            counts = split_counts(src.size, level.size)
            shard = self.pool.take(self.buf.dtype, counts[level.rank])
            self.counts.append(counts)
            self.shards.append(shard)
            return level.reduce_scatter.Ireduce_scatter([src, t], [shard, t], counts, self.op)
        if i == k:  # allreduce across the top level
            target = self.shards[-1] if self.shards else self.buf
            return self.algorithms.top.Iallreduce(MPI.IN_PLACE, [target, t], self.op)
        j = 2 * k - i  # allgather back down: level k-1 .. 0
        level = levels[j]
        counts = self.counts[j]
        displs = np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()
        dst = self.buf if j == 0 else self.shards[j - 1]
        return level.allgather.Iallgatherv([self.shards[j], t], [dst, (counts, displs), t])

    def release(self) -> None:
        for shard in self.shards:
            self.pool.give(shard)
        self.shards = []
