"""Which GPU a rank owns, whether ranks share one, and whether a call's tensors are where they belong.

A GPU is named by its UUID (unique everywhere) or, where the driver gives none, by host and PCI
bus id.  Ranks share a GPU when two of them name the same one: that is read from the GPUs
themselves (gathered from every rank by transport.py), never from the layout, since
CUDA_VISIBLE_DEVICES numbers GPUs per process and two ranks' "cuda:0" may or may not be one
device.
"""
from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from ...engine.buffers import TensorRef

DEVICES = ("cpu", "cuda", "xpu")  # torch device types the collectives take (ROCm's tensors are "cuda")


@dataclass(frozen=True)
class GpuIdentity:
    """One rank's GPU as every rank can compare it."""

    uuid: str  # "GPU-..." or, without a UUID, "<host>/pci:<domain>:<bus>:<device>"
    index: int  # the CUDA index in that rank's process
    name: str = ""  # the product name, for messages

    def describe(self) -> str:
        return f"{self.name or 'GPU'} {self.uuid}"


def rank_gpu_index(local_gpuid: Optional[int]) -> Optional[int]:
    """This rank's CUDA index: the one the runtime selected at init, else torch's current device;
    None when torch is not loaded or this process sees no GPU."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    if local_gpuid is not None and local_gpuid < torch.cuda.device_count():
        return local_gpuid
    return torch.cuda.current_device()


def local_identity(index: Optional[int]) -> Optional[GpuIdentity]:
    """The identity of CUDA device `index` in this process (None for None)."""
    if index is None:
        return None
    torch = sys.modules["torch"]
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None and str(uuid).strip("0-") != "":
        key = f"GPU-{uuid}" if not str(uuid).startswith("GPU-") else str(uuid)
    else:
        pci = (getattr(props, "pci_domain_id", 0), getattr(props, "pci_bus_id", index),
               getattr(props, "pci_device_id", 0))
        key = f"{socket.gethostname()}/pci:{pci[0]:04x}:{pci[1]:02x}:{pci[2]:02x}"
    return GpuIdentity(key, index, str(getattr(props, "name", "")))


def shared_gpus(identities: Sequence[Optional[GpuIdentity]]) -> Dict[str, List[int]]:
    """The GPUs that more than one rank owns: {uuid: [ranks]} (ranks without a GPU are left out)."""
    owners: Dict[str, List[int]] = {}
    for rank, ident in enumerate(identities):
        if ident is not None:
            owners.setdefault(ident.uuid, []).append(rank)
    return {uuid: ranks for uuid, ranks in owners.items() if len(ranks) > 1}


def device_problem(refs: Sequence[TensorRef], gpu_index: Optional[int]) -> Optional[str]:
    """Why this call's tensors cannot go through this rank's device transport, or None.

    Checked: every tensor on cpu, cuda or xpu; all on one device (a mixed group); a CUDA tensor on
    a rank that has no GPU; a CUDA tensor on a GPU other than the rank's.  The text is one line
    naming the tensor; ops.py agrees on it across ranks so every rank raises it.
    """
    for ref in refs:
        if ref.device not in DEVICES:
            return f"tensor '{ref.name}' is on device '{ref.device}'; only {', '.join(DEVICES)} tensors are supported"
    devices = {_device(ref) for ref in refs}
    if len(devices) > 1:
        first = refs[0]
        other = next(ref for ref in refs if _device(ref) != _device(first))
        return (f"tensors of one call are on different devices: '{first.name}' on {_device(first)}, "
                f"'{other.name}' on {_device(other)}; put them on one device")
    for ref in refs:
        if ref.device != "cuda":
            continue
        if gpu_index is None:
            return f"tensor '{ref.name}' is on {_device(ref)} but this rank has no GPU"
        if ref.index != gpu_index:
            return (f"tensor '{ref.name}' is on {_device(ref)} but this rank's GPU is cuda:{gpu_index} "
                    f"(ddl_runtime.local_gpuid()); move it there")
    return None


def _device(ref: TensorRef) -> str:
    return ref.device if ref.index is None else f"{ref.device}:{ref.index}"

