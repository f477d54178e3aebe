"""Rank and size for the framework integrations (``ddl_runtime.torch``, ``ddl_runtime.keras``).

Each call initialises the runtime first when it is not yet (idempotent), so a training script
can ask for ``rank()`` before anything else.  Framework-free: imports neither torch nor keras.
"""
from __future__ import annotations


def _ops():
    from . import ops  # imports mpi4py: not at import (ddl_runtime.torch and .keras import this module)

    return ops


def init() -> None:
    """Initialise the runtime (idempotent)."""
    if not _ops().is_initialized():
        _ops().init()


def rank() -> int:
    init()
    return _ops().rank()


def size() -> int:
    init()
    return _ops().size()


def local_rank() -> int:
    init()
    return _ops().local_rank()


def is_root(root_rank: int = 0) -> bool:
    """True on the rank that writes logs and checkpoints."""
    return rank() == root_rank


def scale_lr(lr: float) -> float:
    """The learning rate for ``size()`` learners: ``lr * size()`` (DDL's linear scaling rule)."""
    init()
    return _ops().scale_lr(lr)
