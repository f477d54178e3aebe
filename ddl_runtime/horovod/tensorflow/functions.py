"""broadcast_variables, broadcast_object(_fn) and allgather_object for horovod.tensorflow."""
from __future__ import annotations

import pickle
from typing import Any, Callable, List, Optional

import numpy as np

import ddl_runtime as _ddl
import ddl_runtime.tensorflow as _ddl_tf

from ..common.process_sets import controller_for, global_process_set
from . import mpi_ops
from .naming import refusing


def _is_global(process_set: Any) -> bool:
    return process_set is None or process_set is global_process_set


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assign `root_rank`'s values to `variables` (tf.Variables or Keras variables) on every rank.

    The whole job: one fused broadcast (ddl_runtime.tensorflow.broadcast_variables); another
    process set: one negotiated broadcast per variable.  `root_rank` is the root's rank in the
    job (as in Horovod).  Eagerly returns None; in a graph (tf.function, tf.compat.v1) the
    grouped assign op, for ``Session.run``.
    """
    import tensorflow as tf

    variables = list(variables)
    if _is_global(process_set):
        return _ddl_tf.broadcast_variables(variables, root_rank=root_rank)
    assigned = mpi_ops.broadcast_(variables, root_rank, name="broadcast_variables", process_set=process_set)
    return None if tf.executing_eagerly() else tf.group(*assigned)


def _bytes_op(kind: str, arrays: List[np.ndarray], name: str, process_set: Any, params: tuple = ()) -> List[Any]:
    outs: List[Any] = [None] * len(arrays) if kind == "allgather" else arrays
    mpi_ops._run(kind, name, params, arrays, outs, process_set, f"{kind}_object('{name}')")
    return outs


def broadcast_object(obj: Any, root_rank: int = 0, session: Any = None, name: Optional[str] = None,
                     process_set: Any = global_process_set) -> Any:
    """`root_rank`'s picklable `obj`, returned on every rank of the process set."""
    if _is_global(process_set):
        return _ddl.bcast_object(obj, root=root_rank)
    ctl = controller_for(process_set, "broadcast_object")
    name = name or type(obj).__name__
    with refusing("broadcast", f"broadcast_object.{name}.length", process_set):
        root_rank = mpi_ops._check_root(root_rank, process_set, f"broadcast_object('{name}')")
    is_root = ctl.global_ranks[ctl.rank] == root_rank  # root_rank: the root's rank in the job, as in Horovod
    data = pickle.dumps(obj) if is_root else b""
    length = np.array([len(data)], dtype=np.int64)
    _bytes_op("broadcast", [length], f"broadcast_object.{name}.length", process_set, (root_rank,))
    buf = np.frombuffer(data, dtype=np.uint8).copy() if is_root else np.zeros(int(length[0]), np.uint8)
    _bytes_op("broadcast", [buf], f"broadcast_object.{name}.data", process_set, (root_rank,))
    return pickle.loads(buf.tobytes())


def broadcast_object_fn(root_rank: int = 0, session: Any = None, name: Optional[str] = None,
                        process_set: Any = global_process_set) -> Callable[[Any], Any]:
    """A function obj -> broadcast_object(obj, root_rank, ...)."""
    return lambda obj: broadcast_object(obj, root_rank, session, name, process_set)


def allgather_object(obj: Any, session: Any = None, name: Optional[str] = None,
                     process_set: Any = global_process_set) -> List[Any]:
    """Every rank's picklable `obj`, as a list in rank order (the same list on every rank)."""
    name = name or type(obj).__name__
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8).copy()
    lengths = _bytes_op("allgather", [np.array([data.size], dtype=np.int64)], f"allgather_object.{name}.length",
                        process_set)[0]
    blob = _bytes_op("allgather", [data], f"allgather_object.{name}.data", process_set)[0]
    out, offset = [], 0
    for n in lengths.tolist():
        out.append(pickle.loads(blob[offset:offset + int(n)].tobytes()))
        offset += int(n)
    return out
