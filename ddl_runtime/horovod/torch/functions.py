"""Horovod's torch helper functions: ``broadcast_parameters``, ``broadcast_optimizer_state``,
``broadcast_object``, ``allgather_object``.

On the global process set they are ddl_runtime.torch's own (one broadcast per dtype for the
parameters, the root's ``state_dict()`` as one object for the optimizer, names and shapes
compared across ranks first so a mismatch is an error on every rank, never a hang).  On a
smaller process set they go through the set's collectives in ``mpi_ops``.  Objects travel
pickled (the standard ``pickle``, as mpi4py does), so lambdas and local classes do not.
"""
from __future__ import annotations

import io
import pickle
from typing import Any, List, Optional

import numpy as np
import torch

import ddl_runtime as _ddl
import ddl_runtime.torch as _native
from ddl_runtime.transports.gpu.hostcopy import to_host
from ddl_runtime.errors import DDLInputError

from ..common.process_sets import is_global as _is_global  # also optimizer.py's, sync_batch_norm.py's

__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object"]


def _allgather(tensor: torch.Tensor, name: str, process_set: Any = None) -> torch.Tensor:
    """Concatenate every member's ``tensor`` along dim 0 (first dims may differ)."""
    if _is_global(process_set):
        _native.init()
        out = _ddl.allgather(tensor, name=name)
        return out if isinstance(out, torch.Tensor) else torch.as_tensor(np.asarray(out))
    from . import mpi_ops
    return mpi_ops.allgather(tensor, name=name, process_set=process_set)


def _to_words(data: bytes) -> torch.Tensor:
    """Bytes as int64 words (zero-padded): the runtime moves no uint8."""
    padded = data + b"\0" * (-len(data) % 8)
    return torch.from_numpy(np.frombuffer(padded, dtype=np.int64).copy())


def _from_words(words: torch.Tensor, length: int) -> bytes:
    return words.numpy().tobytes()[:length]


def broadcast_parameters(params: Any, root_rank: int = 0, process_set: Any = None) -> None:
    """Copy ``root_rank``'s values into every rank's tensors, in place.

    ``params``: ``model.state_dict()``, ``model.named_parameters()`` or a list of tensors.
    """
    if _is_global(process_set):
        _native.broadcast_parameters(params, root_rank=root_rank)
        return
    from . import mpi_ops
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        items = [p if isinstance(p, tuple) else (f"tensor.{i}", p) for i, p in enumerate(params)]
    else:
        raise DDLInputError(f"broadcast_parameters: invalid params of type {type(params).__name__}")
    for name, tensor in items:
        mpi_ops.broadcast_(tensor, root_rank, name=f"broadcast_parameters.{name}", process_set=process_set)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int = 0,
                              process_set: Any = None) -> None:
    """Give every rank ``root_rank``'s optimizer state and hyperparameters (its ``state_dict``)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise DDLInputError("broadcast_optimizer_state: cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state:
        # As Horovod does for a new optimizer: every trainable parameter without a gradient gets
        # a zero one (Horovod then steps once to create the state; that step is left out here,
        # since it would move parameters under weight decay and advance Adam's step count).
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
                    if isinstance(optimizer, torch.optim.SparseAdam):
                        p.grad = p.grad.to_sparse()
    if _is_global(process_set):
        _native.broadcast_optimizer_state(optimizer, root_rank=root_rank)
        return
    if not process_set.included():
        return
    state = None
    from . import mpi_ops
    if mpi_ops.rank() == root_rank:
        buf = io.BytesIO()
        torch.save(to_host(optimizer.state_dict()), buf)  # CUDA state: host copies
        state = buf.getvalue()
    state = broadcast_object(state, root_rank, name="broadcast_optimizer_state", process_set=process_set)
    if mpi_ops.rank() != root_rank:
        optimizer.load_state_dict(torch.load(io.BytesIO(state), weights_only=False, map_location="cpu"))


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None, process_set: Any = None) -> Any:
    """``root_rank``'s picklable ``obj`` on every rank (returned; ``obj`` elsewhere is ignored)."""
    if _is_global(process_set):
        _native.init()
        return _ddl.bcast_object(obj, root=root_rank)
    if not process_set.included():
        return obj
    from . import mpi_ops
    name = name or type(obj).__name__
    data = pickle.dumps(obj) if mpi_ops.rank() == root_rank else b""
    length = torch.tensor([len(data)], dtype=torch.int64)
    mpi_ops.broadcast_(length, root_rank, name=f"broadcast_object.{name}.length", process_set=process_set)
    words = _to_words(data) if mpi_ops.rank() == root_rank else torch.zeros((int(length) + 7) // 8,
                                                                              dtype=torch.int64)
    mpi_ops.broadcast_(words, root_rank, name=f"broadcast_object.{name}.data", process_set=process_set)
    return pickle.loads(_from_words(words, int(length)))


def allgather_object(obj: Any, name: Optional[str] = None, process_set: Any = None) -> List[Any]:
    """Every member's picklable ``obj``, as a list in rank order (the same list on every rank)."""
    name = name or type(obj).__name__
    data = pickle.dumps(obj)
    lengths = _allgather(torch.tensor([len(data)], dtype=torch.int64), f"allgather_object.{name}.length",
                         process_set)
    words = _allgather(_to_words(data), f"allgather_object.{name}.data", process_set)
    out, offset = [], 0
    for length in lengths.tolist():
        n = (int(length) + 7) // 8
        out.append(pickle.loads(_from_words(words[offset:offset + n], int(length))))
        offset += n
    return out
