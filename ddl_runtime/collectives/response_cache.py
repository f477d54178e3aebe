"""Horovod's response cache for the negotiation rounds (negotiation.py), with small data inside.

A request whose descriptor (collective, name, op and scale factors, tensors' names, dtypes and
shapes) already ran on every rank is announced by a short id instead of its pickled
descriptor.  Ids are handed out when such a request runs, in table order, so every rank
numbers alike; a receiver turns an id back into the full descriptor, so matching by name,
mismatches, refusals and joins go through the table exactly as before.

On one host (collectives/negotiated.py) a cached small allreduce (one dtype, float32/64 or
int32/64, sum / average / min / max without scale factors, the same set shm/group.py's one-barrier
path takes) also carries its data in the round's shared-memory exchange.  When every rank
announced it, with its data, in the same round and no rank has joined, the round itself has
moved everything: each rank reduces the rows in rank order (the bits of shm/group.py's small path)
and the request completes without a table entry or a barrier of its own, so a steady-state
call costs one hand-off between the ranks.  Otherwise it goes through the table as usual
(its inputs are still the caller's).

An unnamed collective is numbered per call ("noname.17", negotiation.Controller.auto_name), so
its descriptor never repeats; Horovod's eager ops without a name share one and hit its cache.
Here such a descriptor is remembered with its number taken out, and announced as the cache id
plus the number (a key: the number + 1 above bit 32, the id below), so a loop of unnamed
``hvd.allreduce`` calls is cached like a named one.
"""
from __future__ import annotations

import math
import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..transports.shm.output_pool import ALIGN
from ..transports.shm.group import SMALL_BYTES

CARRY_BYTES = SMALL_BYTES  # per rank and round: the cached small allreduces' data
CAPACITY = 4096  # descriptors remembered by default (Horovod's default cache holds 1024); 0: no cache
PER_ROUND = 64  # cached announcements per rank and round (their ids fill the slot's header)
CARRY_DTYPES = frozenset(("float32", "float64", "int32", "int64"))
CARRY_OPS = frozenset(("sum", "average", "min", "max"))
_AUTO_NAME = re.compile(r"noname\.(\d+)")  # negotiation.Controller.auto_name
ID_BITS = 32
MAX_NUMBER = (1 << 30) - 2  # key << 1 | carry stays an int64; a larger number is announced in full


def _template(desc: tuple) -> Tuple[Optional[tuple], int]:
    """`desc` with an automatic name's number taken out (name None, each tensor name its suffix
    after the request's name), and the number; a named descriptor as it is, and -1.  None for an
    automatic name numbered past MAX_NUMBER: it would never repeat, so it is not worth a place."""
    name = desc[1]
    match = _AUTO_NAME.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        return desc, -1
    number = int(match.group(1))
    tensors = []
    for tname, dtype, shape in desc[3]:
        if tname != name and not tname.startswith(name + "."):
            return desc, -1
        tensors.append((tname[len(name):], dtype, shape))
    if number > MAX_NUMBER:
        return None, -1
    return (desc[0], None, desc[2], tuple(tensors)) + tuple(desc[4:]), number


class ResponseCache:
    """Descriptor <-> id, and what a cached allreduce carries in the data exchange."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity  # alike on every rank of the set (the controller agrees on it)
        self.ids: Dict[tuple, int] = {}
        self.descs: List[tuple] = []
        self.carries: List[Optional[Tuple[np.dtype, Tuple[int, ...], int]]] = []  # (dtype, counts, bytes taken)

    def learn(self, desc: tuple) -> None:
        """`desc` ran on every rank, announced alike by all (call in table order)."""
        template, _ = _template(desc)
        if template is None or template in self.ids or len(self.descs) >= self.capacity:
            return
        self.ids[template] = len(self.descs)
        self.descs.append(template)
        self.carries.append(self._carry(template))

    def key(self, desc: tuple) -> Optional[int]:
        """What announces `desc` (its id, and an unnamed request's number), or None if not cached."""
        template, number = _template(desc)
        cid = None if template is None else self.ids.get(template)
        return None if cid is None else ((number + 1) << ID_BITS) | cid

    def descriptor(self, key: int) -> tuple:
        """The full descriptor a key announces (an unnamed request's name and tensor names rebuilt)."""
        template = self.descs[key & ((1 << ID_BITS) - 1)]
        number = (key >> ID_BITS) - 1
        if number < 0:
            return template
        name = f"noname.{number}"
        return (template[0], name, template[2], tuple((name + suffix, dtype, shape)
                                                      for suffix, dtype, shape in template[3])) + tuple(template[4:])

    def carry(self, key: int) -> Optional[Tuple[np.dtype, Tuple[int, ...], int]]:
        """What the announced request carries in the round's data (None: nothing)."""
        return self.carries[key & ((1 << ID_BITS) - 1)]

    def _carry(self, desc: tuple) -> Optional[Tuple[np.dtype, Tuple[int, ...], int]]:
        kind, _, (op, prescale, postscale), tensors = desc[:4]
        if kind != "allreduce" or op not in CARRY_OPS or prescale != 1.0 or postscale != 1.0 or not tensors \
                or desc[6:7] not in ((), ("cpu",)):  # device tensors are scaled by their caller, not here
            return None
        dtype = tensors[0][1]
        if dtype not in CARRY_DTYPES or any(t[1] != dtype for t in tensors) or (op == "average" and dtype[0] != "f"):
            return None
        dt = np.dtype(dtype)
        counts = tuple(math.prod(t[2]) for t in tensors)
        taken = -(-sum(counts) * dt.itemsize // ALIGN) * ALIGN
        return (dt, counts, taken) if 0 < taken <= CARRY_BYTES else None
