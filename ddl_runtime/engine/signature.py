"""Mismatch detection: ranks agree on what a collective is before any data moves.

Each collective has a signature (the operation, its arguments, and every tensor's name,
dtype and shape).  Its 64-bit digest (computed once per distinct signature, then cached)
is reduced with MAX over (d, -d): when max(d) == -max(-d) every rank passed the same
signature.  The same reduction carries each rank's arrival time (core/stats.py).  Only when they differ do ranks exchange full signatures, so the error can name
the first tensor that differs and which ranks hold which version.
"""
from __future__ import annotations

import hashlib
from typing import Dict, List, Sequence, Tuple

import numpy as np

from ..errors import DDLInputError, DDLMismatchError

Signature = Tuple  # (operation description, ((name, dtype, shape), ...))
DEVICE_PROBLEM = "device problem"  # a head item (DEVICE_PROBLEM, text): this rank's tensors are misplaced

_digests: Dict[Signature, int] = {}


def digest(signature: Signature) -> int:
    cached = _digests.get(signature)
    if cached is None:
        raw = hashlib.blake2b(repr(signature).encode(), digest_size=8).digest()
        cached = int.from_bytes(raw, "little", signed=True) >> 1  # keep -d representable
        if len(_digests) > 4096:
            _digests.clear()
        _digests[signature] = cached
    return cached


def agreement_buffer(signature: Signature, arrival: int = 0) -> np.ndarray:
    """What a rank reduces with MAX to agree: (d, -d) and its arrival (core/stats.py: the largest
    is the last rank's), one reduction for both."""
    d = digest(signature)
    return np.array([d, -d, arrival], dtype=np.int64)


def agreed(reduced_max: np.ndarray) -> bool:
    return int(reduced_max[0]) == -int(reduced_max[1])


def describe_mismatch(what: str, signatures: Sequence[Signature]) -> str:
    """One line naming the first difference and the ranks on each side."""
    ops = _group([s[0] for s in signatures])
    if len(ops) > 1:
        return f"{what}: ranks call different collectives: " + "; ".join(
            f"{_ranks(r)}: {_op(op)}" for op, r in ops)
    lists = [s[1] for s in signatures]
    lengths = _group([len(t) for t in lists])
    for i in range(max(len(t) for t in lists)):
        entries = _group([t[i] if i < len(t) else None for t in lists])
        if len(entries) > 1:
            names = {e[0] for e, _ in entries if e is not None}
            label = f"tensor '{sorted(names)[0]}'" if len(names) == 1 else f"tensor #{i}"
            sides = "; ".join(f"{_ranks(r)}: {_entry(e)}" for e, r in entries)
            extra = ""
            if len(lengths) > 1:
                extra = " (list lengths: " + "; ".join(f"{_ranks(r)}: {n}" for n, r in lengths) + ")"
            return f"{what}: {label} differs across ranks: {sides}{extra}"
    return f"{what}: ranks disagree on the collective's arguments"


def with_device_problem(signature: Signature, problem: str) -> Signature:
    """`signature` carrying this rank's device problem: the digest then differs from a sound rank's,
    and raise_mismatch names the problem on every rank."""
    return (signature[0] + ((DEVICE_PROBLEM, problem),), signature[1])


def raise_mismatch(what: str, signatures: Sequence[Signature]) -> None:
    problems = [(rank, item[1]) for rank, s in enumerate(signatures) for item in s[0]
                if isinstance(item, tuple) and item[:1] == (DEVICE_PROBLEM,)]
    if problems:
        rank, text = problems[0]
        more = f" (and on {_ranks([r for r, _ in problems[1:]])})" if len(problems) > 1 else ""
        raise DDLInputError(f"{what}: rank {rank}: {text}{more}")
    raise DDLMismatchError(describe_mismatch(what, signatures))


def _op(op: tuple) -> str:
    return f"{op[0]}({', '.join(map(repr, op[1:]))})"


def _entry(entry) -> str:
    if entry is None:
        return "no tensor"
    name, dtype, shape = entry
    return f"'{name}' {dtype}{list(shape)}"


def _group(values: List) -> List[Tuple[object, List[int]]]:
    groups: Dict = {}
    for rank, value in enumerate(values):
        groups.setdefault(value, []).append(rank)
    return list(groups.items())


def _ranks(ranks: List[int]) -> str:
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"{word} {','.join(map(str, ranks))}"
