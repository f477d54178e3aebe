"""Framework-neutral cross-rank checks built only on ``allreduce`` of float64 numpy rows.

Used by the Keras integration (either backend) to make every rank raise the same error when
ranks disagree about a model's variables, its step counts or its metrics.  Needs an
initialized runtime.
"""
from __future__ import annotations

import hashlib
from typing import List, Sequence

import numpy as np

from ddl_runtime.errors import DDLMismatchError

def _ops():
    from . import ops  # imports mpi4py: not at import (ddl_runtime.torch and .keras import this module)

    return ops


def gather_rows(row: np.ndarray) -> np.ndarray:
    """Every rank's float64 ``row`` (same length on all ranks) as a (size, n) array.

    Each rank writes its row into its own slot of a zero matrix and the matrices are summed:
    exact for float64 values (x + 0 == x).
    """
    n = int(row.shape[0])
    mat = np.zeros((_ops().size(), max(n, 1)), dtype=np.float64)
    mat[_ops().rank(), :n] = row
    out = _ops().allreduce(mat, op="sum")
    return np.asarray(out, dtype=np.float64).reshape(_ops().size(), max(n, 1))[:, :n]


def gather_strings(text: str) -> List[str]:
    """Every rank's string (used only on error paths, to word a precise message)."""
    data = text.encode("utf-8")
    length = gather_rows(np.array([len(data)], dtype=np.float64))
    width = int(length.max())
    row = np.zeros(width, dtype=np.float64)
    row[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    rows = gather_rows(row)
    return [bytes(rows[r, : int(length[r, 0])].astype(np.uint8)).decode("utf-8", "replace")
            for r in range(rows.shape[0])]


def _digest(text: str) -> float:
    """A 48-bit hash as an exactly representable float64."""
    return float(int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=6).digest(), "big"))


def check_consistent(what: str, names: Sequence[str], descs: Sequence[str]) -> None:
    """Raise the same DDLMismatchError on every rank unless all ranks hold the same items.

    ``names[i]`` names item i (e.g. a variable), ``descs[i]`` describes what must match (shape,
    dtype).  One small allreduce when everything agrees; a few more only to word the error.
    """
    if _ops().size() == 1:
        return
    counts = gather_rows(np.array([len(names)], dtype=np.float64))[:, 0].astype(int)
    if len(set(counts.tolist())) != 1:
        lists = [s.split("\n") if s else [] for s in gather_strings("\n".join(names))]
        mine = set(names)
        detail = ""
        for r, other in enumerate(lists):
            extra = [n for n in other if n not in mine]
            missing = [n for n in names if n not in set(other)]
            if extra:
                detail = f"; {what} {extra[0]!r} exists on rank {r} but not on rank {_ops().rank()}"
                break
            if missing:
                detail = f"; {what} {missing[0]!r} exists on rank {_ops().rank()} but not on rank {r}"
                break
        counts_txt = ", ".join(f"rank {r}: {c}" for r, c in enumerate(counts))
        raise DDLMismatchError(f"ranks hold different numbers of {what}s ({counts_txt}){detail}")
    if not names:
        return
    rows = gather_rows(np.array([_digest(f"{n}\x00{d}") for n, d in zip(names, descs)], dtype=np.float64))
    bad = np.nonzero((rows != rows[0:1, :]).any(axis=0))[0]
    if bad.size == 0:
        return
    i = int(bad[0])
    per_rank = "; ".join(f"rank {r}: {t}" for r, t in enumerate(gather_strings(descs[i])))
    raise DDLMismatchError(f"{what} {names[i]!r} differs across ranks ({per_rank})"
                           + (f" and {bad.size - 1} more" if bad.size > 1 else ""))
