"""Device tensors copied to the host before host code reads or serialises them.

The public helpers (parameters_max_divergence, broadcast_optimizer_state, the checkpoint's state,
the Keras callbacks on the torch backend) hand tensors to numpy or to pickle.  A CUDA tensor
cannot be viewed as numpy ("can't convert cuda:0 device type tensor to numpy"), and one pickled as
it lies is rebuilt on the saving rank's device index wherever it is loaded (another rank's GPU,
or none).  `to_host` copies every tensor of a nested state (dicts, lists, tuples) to the host
once; host tensors are passed through without a copy.  Loading such a state with
`load_state_dict` puts each value back on its parameter's device.
"""
from __future__ import annotations

import sys
from typing import Any


def to_host(obj: Any) -> Any:
    """`obj` with every torch tensor in it on the CPU (host tensors detached, not copied)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()  # no copy for a host tensor
    if isinstance(obj, dict):
        items = [(k, to_host(v)) for k, v in obj.items()]
        try:
            out = type(obj)(items)  # dict, OrderedDict (a state_dict keeps its type and _metadata)
        except TypeError:
            return dict(items)
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata
        return out
    if isinstance(obj, list):
        return [to_host(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(to_host(v) for v in obj)
    return obj

