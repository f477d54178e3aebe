"""Rank and size for the framework integrations (``ddl_runtime.torch``, ``ddl_runtime.keras``).

Each call initialises the runtime first when it is not yet (idempotent), so a training script
can ask for ``rank()`` before anything else.  Framework-free: imports neither torch nor keras.
"""
from __future__ import annotations

import ddl_runtime as _ddl


def init() -> None:
    """Initialise the runtime (idempotent)."""
    if not _ddl.is_initialized():
        _ddl.init()


def rank() -> int:
    init()
    return _ddl.rank()


def size() -> int:
    init()
    return _ddl.size()


def local_rank() -> int:
    init()
    return _ddl.local_rank()


def is_root(root_rank: int = 0) -> bool:
    """True on the rank that writes logs and checkpoints."""
    return rank() == root_rank


def scale_lr(lr: float) -> float:
    """The learning rate for ``size()`` learners: ``lr * size()`` (DDL's linear scaling rule)."""
    init()
    return _ddl.scale_lr(lr)
