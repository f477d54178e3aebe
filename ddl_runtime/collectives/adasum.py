"""Adasum (Horovod's ``op=hvd.Adasum``): an allreduce that adds gradients where they are
orthogonal and averages them where they are parallel.

Two vectors combine as ``a' = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b`` (a coefficient
stays 1 where its vector's squared norm is below 1e-8).  Over ``n`` ranks (a power of two) the
combination runs as Horovod's vector-halving, distance-doubling allreduce (horovod/common/ops/
adasum/adasum.h): at level ``L = 1, 2, 4, ...`` a rank swaps half of the part it holds with rank
``rank ^ L``, the dot product and squared norms of each tensor are summed over the ``2L`` ranks
that now hold the two vectors between them, every rank combines its slice, and the halves travel
back the same way.  Dot products and norms are per tensor of a fused group, as in Horovod, and
are computed in float64; float16 is combined in float32 arithmetic.  Framework-free: numpy
buffers and an MPI communicator; the caller runs it where every rank runs its collectives in the
same order (negotiation.py).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
from mpi4py import MPI

TAG = 0x4144  # point-to-point tag of the exchanges (the data communicator's collectives do not use tags)
DTYPES = frozenset(("float16", "float32", "float64"))  # as Horovod's Adasum: other dtypes are refused
NORM_EPS = 1e-8  # Horovod: a vector with a squared norm below this keeps coefficient 1


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def coefficients(dot: float, anormsq: float, bnormsq: float) -> Tuple[float, float]:
    """The two coefficients of Horovod's pairwise combination ``acoeff * a + bcoeff * b``."""
    acoeff = 1.0 - dot / anormsq * 0.5 if anormsq >= NORM_EPS else 1.0
    bcoeff = 1.0 - dot / bnormsq * 0.5 if bnormsq >= NORM_EPS else 1.0
    return acoeff, bcoeff


def _math_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(np.float64)


def _exchange(comm: MPI.Comm, send: np.ndarray, recv: np.ndarray, peer: int, idle: Callable[[int], None]) -> None:
    requests = [comm.Irecv([recv.view(np.uint8), MPI.BYTE], source=peer, tag=TAG),
                comm.Isend([send.view(np.uint8), MPI.BYTE], dest=peer, tag=TAG)]
    while not MPI.Request.Testall(requests):
        idle(peer)


def _group_sum(comm: MPI.Comm, values: np.ndarray, span: int, idle: Callable[[int], None]) -> np.ndarray:
    """Sum `values` over the `span` ranks sharing this rank's bits above log2(span) (recursive doubling,
    lower rank's part first, so every rank of the group gets the very same sums)."""
    rank = comm.Get_rank()
    other = np.empty_like(values)
    d = 1
    while d < span:
        peer = rank ^ d
        _exchange(comm, values, other, peer, idle)
        values = values + other if rank < peer else other + values
        d <<= 1
    return values


def allreduce(comm: MPI.Comm, inputs: Sequence[Optional[np.ndarray]], outputs: Sequence[np.ndarray],
              dtype: np.dtype, counts: Sequence[int], prescale: float, postscale: float,
              idle: Callable[[int], None] = lambda peer: None) -> None:
    """Adasum of a fused group over every rank of `comm` into `outputs` (blocking; `idle(peer)` is
    called while waiting for that rank of `comm` and may raise).  None inputs (a joined rank)
    contribute zeros."""
    size, rank = comm.Get_size(), comm.Get_rank()
    if not is_power_of_two(size):
        raise ValueError(f"Adasum needs a power-of-two number of ranks, got {size}")
    dtype = np.dtype(dtype)
    math = _math_dtype(dtype)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    total = int(offsets[-1])
    buf = np.zeros(total, dtype=dtype)
    for src, lo, hi in zip(inputs, offsets[:-1], offsets[1:]):
        if src is not None and hi > lo:
            flat = src.reshape(-1)
            buf[lo:hi] = flat if prescale == 1.0 else (flat.astype(math) * prescale).astype(dtype)
    recv = np.empty_like(buf)
    lo, hi = 0, total
    parents: List[Tuple[int, int]] = []
    level = 1
    while level < size:  # reduce: halve what this rank holds, combine it with the peer's half
        peer = rank ^ level
        mid = lo + (hi - lo) // 2
        left = rank & level == 0
        keep, give = ((lo, mid), (mid, hi)) if left else ((mid, hi), (lo, mid))
        _exchange(comm, buf[give[0]:give[1]], recv[keep[0]:keep[1]], peer, idle)
        parents.append((lo, hi))
        lo, hi = keep
        _combine(comm, buf, recv, lo, hi, offsets, left, 2 * level, math, idle)
        level <<= 1
    while parents:  # gather: the halves travel back, distance halving
        level >>= 1
        peer = rank ^ level
        plo, phi = parents.pop()
        other = (hi, phi) if lo == plo else (plo, lo)
        _exchange(comm, buf[lo:hi], buf[other[0]:other[1]], peer, idle)
        lo, hi = plo, phi
    for out, lo, hi in zip(outputs, offsets[:-1], offsets[1:]):
        res = buf[lo:hi]
        if postscale != 1.0:
            res = (res.astype(math) * postscale).astype(dtype)
        np.copyto(out.reshape(-1), res, casting="unsafe")


def _combine(comm: MPI.Comm, buf: np.ndarray, recv: np.ndarray, lo: int, hi: int, offsets: np.ndarray,
             left: bool, span: int, math: np.dtype, idle: Callable[[int], None]) -> None:
    """Combine this rank's slice [lo, hi) of a (its group's vector) with b (the peer group's), per tensor."""
    ntensors = len(offsets) - 1
    parts = []
    sums = np.zeros(3 * ntensors, dtype=np.float64)
    for i in range(ntensors):
        tlo, thi = max(lo, int(offsets[i])), min(hi, int(offsets[i + 1]))
        if thi <= tlo:
            continue
        a = buf[tlo:thi].astype(np.float64)
        b = recv[tlo:thi].astype(np.float64)
        an, bn = float(a @ a), float(b @ b)
        sums[3 * i:3 * i + 3] = (float(a @ b), an, bn) if left else (float(a @ b), bn, an)
        parts.append((i, tlo, thi))
    sums = _group_sum(comm, sums, span, idle)
    for i, tlo, thi in parts:
        dot, first, second = sums[3 * i:3 * i + 3]
        anormsq, bnormsq = (first, second) if left else (second, first)
        acoeff, bcoeff = coefficients(dot, anormsq, bnormsq)
        a = buf[tlo:thi].astype(math)
        b = recv[tlo:thi].astype(math)
        buf[tlo:thi] = (math.type(acoeff) * a + math.type(bcoeff) * b).astype(buf.dtype)
