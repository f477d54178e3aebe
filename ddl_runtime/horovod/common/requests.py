"""Framework-free request building shared by horovod.torch and horovod.tensorflow.

A collective becomes one ``negotiation.Request`` submitted to its process set's controller;
the framework layers only turn tensors into host numpy arrays and back.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ...engine.buffers import _dtype_name
from ...errors import DDLInputError
from ...collectives.negotiation import Handle, Request
from .process_sets import controller_for


def submit(kind: str, name: Optional[str], params: tuple, inputs: Sequence[np.ndarray], outputs: Sequence[Any],
           process_set: Any, what: str, extra: Any = None, group: bool = False, device: str = "cpu") -> Handle:
    """Submit one request (numbered per set and kind when unnamed; ``group``: one name per input;
    ``device``: where the caller's tensors live, negotiated like their dtypes)."""
    ctl = controller_for(process_set, what)
    base = str(name) if name is not None else ctl.auto_name(kind)
    names = [f"{base}.{i}" for i in range(len(inputs))] if group else [base] * len(inputs)
    entries = [(n, _wire_dtype(a), tuple(a.shape)) for n, a in zip(names, inputs)]
    return ctl.submit(Request(kind, base, params, entries, list(inputs), list(outputs), extra, device=device))


def _wire_dtype(a: Any) -> str:
    """A numpy array's dtype; a torch tensor reduced where it lies (negotiation._post_allreduce_device)
    is announced as "<dtype>@<device>", so ranks that disagree on the device fail as a dtype mismatch."""
    if isinstance(a, np.ndarray):
        return _dtype_name(a.dtype)
    return f"{str(a.dtype).replace('torch.', '')}@{a.device.type}"


def scales(prescale_factor: Any, postscale_factor: Any, what: str) -> Tuple[float, float]:
    """The two scale factors as floats, or one clear error."""
    try:
        return float(prescale_factor), float(postscale_factor)
    except (TypeError, ValueError):
        raise DDLInputError(f"{what}: prescale_factor and postscale_factor must be numbers") from None


def alltoall_send_rows(first: int, splits: Optional[List[int]], size: int, what: str) -> List[int]:
    """Rows this rank sends to each rank: ``splits`` checked against the first dimension, or an even split."""
    if splits is None:
        if first % size:
            raise DDLInputError(f"{what}: the first dimension ({first}) is not a multiple of the number of "
                                f"ranks ({size}); pass splits")
        return [first // size] * size
    if len(splits) != size:
        raise DDLInputError(f"{what}: {len(splits)} splits for {size} ranks")
    if any(v < 0 for v in splits):
        raise DDLInputError(f"{what}: splits must not be negative: {splits}")
    if sum(splits) != first:
        raise DDLInputError(f"{what}: the splits add up to {sum(splits)}, but the first dimension is {first}")
    return list(splits)
