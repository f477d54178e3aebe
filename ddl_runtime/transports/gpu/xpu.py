"""XPU tensors (Intel GPUs, Aurora): through torch.distributed's xccl group, or host memory.

The route is agreed at the first collective on XPU tensors (transport.agree_route: every rank's
family.route gathered; a rank whose torch lacks xccl while another has it, or a backend asked for
and missing, is one line on every rank).  With xccl the collectives are nccl.py's, on a process
group opened with the xccl backend (oneCCL); without it the tensors are copied to the host,
reduced or moved by the CPU engine (the `*_host` callables ops.py hands in) and copied back.
CI runs both on CPU tensors: the xccl group as its gloo twin (family.TWINS), the host route as it is.
"""
from __future__ import annotations

from typing import Callable, Sequence

from . import nccl
from .transport import agree_route


def takes(refs) -> bool:
    """Whether a call's tensors are XPU tensors (ops.py has refused a group that mixes devices)."""
    return bool(refs) and refs[0].device == "xpu"


def allreduce_start(rt, targets: Sequence, op: str, results: list, reduce_host: Callable[[list], None],
                    device: str = "xpu") -> nccl.Pending:
    chosen = agree_route(rt, device)
    if chosen.backend:
        return nccl.allreduce_start(nccl.process_group(rt, chosen.backend), targets, op, rt.size, results)
    hosts = [t.detach().to("cpu", copy=True) for t in targets]
    reduce_host(hosts)
    for t, h in zip(targets, hosts):
        t.detach().copy_(h)
    return nccl.Pending([], lambda: None, results)


def bcast(rt, tensors: Sequence, root: int, bcast_host: Callable[[list], None], device: str = "xpu") -> None:
    chosen = agree_route(rt, device)
    if chosen.backend:
        nccl.broadcast(nccl.process_group(rt, chosen.backend), tensors, root)
        return
    hosts = [t.detach().to("cpu", copy=True).contiguous() for t in tensors]
    bcast_host(hosts)
    if rt.rank != root:
        for t, h in zip(tensors, hosts):
            t.detach().copy_(h)


def allgather(rt, tensor, gather_host: Callable, device: str = "xpu"):
    chosen = agree_route(rt, device)
    if chosen.backend:
        return nccl.allgather(nccl.process_group(rt, chosen.backend), tensor, rt.size)
    gathered = gather_host(tensor.detach().to("cpu", copy=True).contiguous())
    return gathered.to(tensor.device, copy=True)
