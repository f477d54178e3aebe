"""Horovod's Keras-module collectives on values: numbers, numpy arrays or tensors in, numpy out.

``horovod.keras.allreduce(value)`` and friends ran a TensorFlow op and returned its numpy value;
here they run the runtime's numpy collectives directly, so they work on every Keras backend.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

import keras

import ddl_runtime as _ddl
from ddl_runtime.errors import DDLInputError
from ddl_runtime.horovod.common import Average
from ddl_runtime.horovod.common.basics import reduce_op

__all__ = ["allreduce", "allgather", "broadcast", "reducescatter", "broadcast_global_variables"]

_OPS = {"average": "avg", "sum": "sum", "min": "min", "max": "max"}


def _array(value: Any, who: str) -> np.ndarray:
    try:
        arr = np.array(keras.ops.convert_to_numpy(value) if not isinstance(value, (int, float, list, tuple))
                       else value, copy=True, order="C")
    except (TypeError, ValueError) as exc:
        raise DDLInputError(f"{who}: cannot turn a {type(value).__name__} into an array: {exc}") from None
    if arr.dtype == np.float64 and isinstance(value, (float, list, tuple)):
        arr = arr.astype(np.float32)  # Horovod made a float32 constant from Python floats
    return arr


def _op(op: Any, average: Optional[bool], who: str) -> str:
    name = reduce_op(op, average, who)
    if name not in _OPS:
        raise DDLInputError(f"{who}: op={name} is not supported here; use hvd.Average, Sum, Min or Max")
    return _OPS[name]


def allreduce(value: Any, name: Optional[str] = None, average: Optional[bool] = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0, op: Any = None,
              compression: Any = None) -> np.ndarray:
    """Reduce ``value`` over all ranks (default: average); returns a numpy array."""
    who = f"allreduce('{name or 'value'}')"
    reduce_op = _op(op, average, who)
    arr = _array(value, who)
    dtype = arr.dtype
    if prescale_factor != 1.0:
        arr = (arr * prescale_factor).astype(dtype)
    if compression is not None and getattr(compression, "__name__", "") == "FP16Compressor" and arr.dtype.kind == "f":
        arr = arr.astype(np.float16)
    if reduce_op == "avg" and arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    _ddl.allreduce(arr, op=reduce_op, name=name or "value")
    arr = arr.astype(dtype) if arr.dtype != dtype and dtype.kind == "f" else arr
    if postscale_factor != 1.0:
        arr = (arr * postscale_factor).astype(arr.dtype)
    return arr


def allgather(value: Any, name: Optional[str] = None) -> np.ndarray:
    """Concatenate every rank's ``value`` along the first axis (first dims may differ)."""
    arr = _array(value, f"allgather('{name or 'value'}')")
    return np.asarray(_ddl.allgather(arr, name=name or "value"))


def broadcast(value: Any, root_rank: int, name: Optional[str] = None) -> np.ndarray:
    """``value`` as the root rank holds it, on every rank."""
    arr = _array(value, f"broadcast('{name or 'value'}')")
    _ddl.bcast(arr, root=root_rank, name=name or "value")
    return arr


def reducescatter(value: Any, name: Optional[str] = None, op: Any = Average) -> np.ndarray:
    """Reduce ``value`` over all ranks and return this rank's block of the first axis.

    Blocks as Horovod splits them: the first ``n % size`` ranks get one row more.
    """
    who = f"reducescatter('{name or 'value'}')"
    reduce_op = _op(op, None, who)
    if reduce_op not in ("avg", "sum"):
        raise DDLInputError(f"{who}: op must be Average or Sum")
    arr = allreduce(value, name=name, op=op)
    if arr.ndim == 0:
        raise DDLInputError(f"{who}: needs a tensor with at least one dimension")
    return np.array_split(arr, _ddl.size())[_ddl.rank()]


def broadcast_global_variables(root_rank: int) -> None:
    """TensorFlow 1 only in Horovod; Keras 3 has no global variable collection."""
    raise DDLInputError("broadcast_global_variables() needs TensorFlow 1 graph mode; on Keras 3 use "
                        "hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank) or "
                        "hvd.broadcast_variables(model.variables, root_rank)")
