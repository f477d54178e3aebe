"""Data movement for name-negotiated collectives: numpy buffers in, non-blocking MPI out.

Each `post_*` function starts one collective on a communicator and returns an `InFlight`
whose `finish()` (called once every MPI request completed) writes the results.  They run
after negotiation (negotiation.py), so every rank already knows every other rank's shapes,
splits and roots: no size exchange happens here, each collective is a single MPI call.

Reductions run in a wide type where the tensor's own has no MPI type or loses precision
when summed (float16 and bfloat16 in float32); integer tensors are scaled in float64 and
truncated back, as Horovod does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

import numpy as np
from mpi4py import MPI

REDUCE_MPI_OPS = {"sum": MPI.SUM, "average": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "product": MPI.PROD}
WIDE = {"float16": np.dtype(np.float32)}  # bfloat16 arrives already widened (see the framework layers)


@dataclass
class InFlight:
    requests: List[MPI.Request]
    finish: Callable[[], None]
    label: str = ""
    started: float = 0.0
    done: bool = field(default=False)

    def test(self) -> bool:
        if not self.done and (not self.requests or MPI.Request.Testall(self.requests)):
            self.finish()
            self.done = True
        return self.done


def reduce_dtype(dtype: np.dtype) -> np.dtype:
    return WIDE.get(dtype.name, dtype)


def _is_int(dtype: np.dtype) -> bool:
    return dtype.kind in "iub"


def prescaled(src: np.ndarray, factor: float, into: np.ndarray) -> None:
    """Copy `src` into the reduction buffer `into`, multiplied by `factor` (integers in float64, truncated)."""
    if factor == 1.0:
        np.copyto(into, src, casting="unsafe")
    elif _is_int(src.dtype):
        np.copyto(into, src.astype(np.float64) * factor, casting="unsafe")
    else:
        np.multiply(src, into.dtype.type(factor), out=into, casting="unsafe")


def finished(buf: np.ndarray, divisor: int, factor: float, out: np.ndarray) -> None:
    """Divide (average) and postscale the reduced `buf`, then write it into `out` in out's dtype."""
    if _is_int(out.dtype):
        if divisor != 1 or factor != 1.0:
            wide = buf.astype(np.float64)
            if divisor != 1:
                wide /= divisor
            if factor != 1.0:
                wide *= factor
            np.copyto(out, np.trunc(wide), casting="unsafe")
        else:
            np.copyto(out, buf, casting="unsafe")
        return
    if divisor != 1:
        np.divide(buf, buf.dtype.type(divisor), out=buf)
    if factor != 1.0:
        np.multiply(buf, buf.dtype.type(factor), out=buf)
    np.copyto(out, buf, casting="unsafe")


def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


def post_allreduce(comm: MPI.Comm, inputs: Sequence[Optional[np.ndarray]], outputs: Sequence[Optional[np.ndarray]],
                   dtype: np.dtype, counts: Sequence[int], op: str, prescale: float, postscale: float,
                   divisor: int, label: str = "") -> InFlight:
    """One fused allreduce over several tensors of one dtype; None inputs (a joined rank) contribute zeros."""
    wide = reduce_dtype(dtype)
    total = int(sum(counts))
    buf = np.zeros(total, dtype=wide)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(int)
    for src, lo, hi in zip(inputs, offsets[:-1], offsets[1:]):
        if src is not None and hi > lo:
            prescaled(src.reshape(-1), prescale, buf[lo:hi])
    requests = [comm.Iallreduce(MPI.IN_PLACE, buf, REDUCE_MPI_OPS[op])] if total else []

    def finish() -> None:
        for out, lo, hi in zip(outputs, offsets[:-1], offsets[1:]):
            if out is not None:
                finished(buf[lo:hi], divisor, postscale, out.reshape(-1))
    return InFlight(requests, finish, label)


def post_allgather(comm: MPI.Comm, src: np.ndarray, out: np.ndarray, rows: Sequence[int], label: str = "") -> InFlight:
    """Concatenate every rank's rows along the first axis into `out` (rows[r] = rank r's first dim)."""
    row_bytes = (src.nbytes // src.shape[0]) if src.ndim and src.shape[0] else int(
        np.prod(src.shape[1:], dtype=np.int64)) * src.itemsize
    counts = [int(r) * row_bytes for r in rows]
    displs = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(int).tolist()
    requests = []
    if sum(counts):
        requests = [comm.Iallgatherv([_bytes(src), MPI.BYTE], [_bytes(out), (counts, displs), MPI.BYTE])]
    return InFlight(requests, lambda: None, label)


def post_bcast(comm: MPI.Comm, buf: np.ndarray, root: int, label: str = "") -> InFlight:
    requests = [comm.Ibcast([_bytes(buf), MPI.BYTE], root=root)] if buf.nbytes else []
    return InFlight(requests, lambda: None, label)


def post_alltoall(comm: MPI.Comm, src: np.ndarray, out: np.ndarray, send_rows: Sequence[int],
                  recv_rows: Sequence[int], label: str = "") -> InFlight:
    row_bytes = int(np.prod(src.shape[1:], dtype=np.int64)) * src.itemsize
    scounts = [int(r) * row_bytes for r in send_rows]
    rcounts = [int(r) * row_bytes for r in recv_rows]
    sdispl = np.concatenate(([0], np.cumsum(scounts)[:-1])).astype(int).tolist()
    rdispl = np.concatenate(([0], np.cumsum(rcounts)[:-1])).astype(int).tolist()
    request = comm.Ialltoallv([_bytes(src), (scounts, sdispl), MPI.BYTE],
                              [_bytes(out), (rcounts, rdispl), MPI.BYTE])
    return InFlight([request], lambda: None, label)


def scatter_rows(first_dim: int, size: int) -> List[int]:
    """How reducescatter splits the first dimension: evenly, the first ranks taking one more row."""
    base, extra = divmod(first_dim, size)
    return [base + (1 if r < extra else 0) for r in range(size)]


def post_reducescatter(comm: MPI.Comm, src: np.ndarray, out: np.ndarray, rows: Sequence[int], op: str,
                       prescale: float, postscale: float, divisor: int, label: str = "") -> InFlight:
    wide = reduce_dtype(src.dtype)
    buf = np.empty(src.size, dtype=wide)
    prescaled(src.reshape(-1), prescale, buf)
    row = int(np.prod(src.shape[1:], dtype=np.int64))
    counts = [int(r) * row for r in rows]
    recv = np.empty(counts[comm.Get_rank()], dtype=wide)
    requests = [comm.Ireduce_scatter(buf, recv, counts, REDUCE_MPI_OPS[op])] if src.size else []

    def finish() -> None:
        finished(recv, divisor, postscale, out.reshape(-1))
    return InFlight(requests, finish, label)
