"""Variable values in and out of a checkpoint, for the Keras callback and the TensorFlow Checkpointer.

A checkpoint keeps variables as ``{path: numpy array}``; restoring checks that the program holds
the same variables (names, shapes, dtypes) and names the first that differs, the same error on
every rank (every rank restores the same saved state into the same model).  Keras 3 variables
(either backend) and tf.Variables alike.  Random streams that are variables (Keras seed
generators, tf.random.Generator) differ between ranks: `per_rank` gathers each rank's own.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from ..errors import DDLInputError

Named = List[Tuple[str, Any]]


def to_numpy(v: Any) -> np.ndarray:
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(v, keras.Variable):
        return np.array(keras.ops.convert_to_numpy(v.value), copy=True)
    return np.array(v.numpy(), copy=True)


def values(named: Named) -> Dict[str, np.ndarray]:
    return {name: to_numpy(v) for name, v in named}


def assign(named: Named, saved: Dict[str, np.ndarray], what: str) -> None:
    """Assign `saved` to the variables of `named`; one line naming the first that does not match."""
    mine = dict(named)
    missing = [n for n in mine if n not in saved]
    extra = [n for n in saved if n not in mine]
    if missing or extra:
        detail = f"the model has {missing[0]!r}, the checkpoint does not" if missing else \
            f"the checkpoint has {extra[0]!r}, the model does not"
        raise DDLInputError(f"{what}: the checkpoint holds other variables than this program ({detail}); "
                            "was it written by another model?")
    for name, v in named:
        value = saved[name]
        shape, dtype = tuple(v.shape), np.dtype(to_numpy(v).dtype)
        if tuple(value.shape) != shape or value.dtype != dtype:
            raise DDLInputError(f"{what}: variable {name!r} is {value.dtype}{list(value.shape)} in the checkpoint "
                                f"but {dtype}{list(shape)} here; was it written by another model?")
    for name, v in named:
        v.assign(saved[name])


def unique(variables: Iterable[Any], prefix: str) -> Named:
    """(name, variable) pairs named by path, or by position when paths repeat."""
    variables = list(variables)
    paths = [str(getattr(v, "path", None) or getattr(v, "name", "") or "") for v in variables]
    if len(set(paths)) != len(paths) or "" in paths:
        paths = [f"{i}:{p}" for i, p in enumerate(paths)]
    return [(f"{prefix}/{p}", v) for p, v in zip(paths, variables)]


def per_rank(obj: Any) -> Optional[List[Any]]:
    """Collective: every rank's picklable `obj`, as a list on rank 0 (None elsewhere)."""
    from ..state import runtime as _rt
    from .saving import _gather

    return _gather(_rt.current(), obj, "checkpoint.per_rank")
