"""Horovod's response cache for the negotiation rounds (negotiation.py), with small data inside.

A request whose descriptor (collective, name, op and scale factors, tensors' names, dtypes and
shapes) already ran on every rank is announced by a short id instead of its pickled
descriptor.  Ids are handed out when such a request runs, in table order, so every rank
numbers alike; a receiver turns an id back into the full descriptor, so matching by name,
mismatches, refusals and joins go through the table exactly as before.

On one host (shm/negotiated.py) a cached small allreduce (one dtype, float32/64 or
int32/64, sum / average / min / max without scale factors, the same set shm/group.py's one-barrier
path takes) also carries its data in the round's shared-memory exchange.  When every rank
announced it, with its data, in the same round and no rank has joined, the round itself has
moved everything: each rank reduces the rows in rank order (the bits of shm/group.py's small path)
and the request completes without a table entry or a barrier of its own, so a steady-state
call costs one hand-off between the ranks.  Otherwise it goes through the table as usual
(its inputs are still the caller's).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from .shm.output_pool import ALIGN
from .shm.group import SMALL_BYTES

CARRY_BYTES = SMALL_BYTES  # per rank and round: the cached small allreduces' data
CAPACITY = 4096  # descriptors remembered by default (Horovod's default cache holds 1024); 0: no cache
PER_ROUND = 64  # cached announcements per rank and round (their ids fill the slot's header)
CARRY_DTYPES = frozenset(("float32", "float64", "int32", "int64"))
CARRY_OPS = frozenset(("sum", "average", "min", "max"))


class ResponseCache:
    """Descriptor <-> id, and what a cached allreduce carries in the data exchange."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity  # alike on every rank of the set (the controller agrees on it)
        self.ids: Dict[tuple, int] = {}
        self.descs: List[tuple] = []
        self.carries: List[Optional[Tuple[np.dtype, Tuple[int, ...], int]]] = []  # (dtype, counts, bytes taken)

    def learn(self, desc: tuple) -> None:
        """`desc` ran on every rank, announced alike by all (call in table order)."""
        if desc in self.ids or len(self.descs) >= self.capacity:
            return
        self.ids[desc] = len(self.descs)
        self.descs.append(desc)
        self.carries.append(self._carry(desc))

    def _carry(self, desc: tuple) -> Optional[Tuple[np.dtype, Tuple[int, ...], int]]:
        kind, _, (op, prescale, postscale), tensors = desc[:4]
        if kind != "allreduce" or op not in CARRY_OPS or prescale != 1.0 or postscale != 1.0 or not tensors:
            return None
        dtype = tensors[0][1]
        if dtype not in CARRY_DTYPES or any(t[1] != dtype for t in tensors) or (op == "average" and dtype[0] != "f"):
            return None
        dt = np.dtype(dtype)
        counts = tuple(math.prod(t[2]) for t in tensors)
        taken = -(-sum(counts) * dt.itemsize // ALIGN) * ALIGN
        return (dt, counts, taken) if 0 < taken <= CARRY_BYTES else None
