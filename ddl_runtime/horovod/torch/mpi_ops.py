"""horovod.torch's collectives on ddl_runtime's name-negotiated engine (ddl_runtime.collectives.negotiation).

Every op has Horovod's signature and semantics: `allreduce` / `allreduce_` /
`allreduce_async(_)`, grouped variants, `allgather` (first dims may differ), `broadcast`,
`alltoall` (with splits), `reducescatter`, `join`, `barrier`, `poll`, `synchronize`;
the non-inplace ops carry gradients (autograd Functions below, with Horovod's backward
rules).  Ranks match operations by name, so they may submit in different orders; unnamed
operations are numbered per process set and kind.  CPU tensors are used in place through
numpy views; CUDA tensors on the NCCL transport are moved and reduced on the device (device_route);
the others (the host transport, ranks sharing a GPU) pass through the runtime's host staging
(ddl_runtime.transports.gpu.host: pinned buffers reused across calls, copies on a side stream ordered by CUDA
events against the caller's stream; allgather's and alltoall's outputs pooled too); an asynchronous
handle holds its pinned buffers until its result was copied back.  bfloat16 is reduced in float32.

Devices as in Horovod's GPU build: a request's device ("cpu", "cuda") is negotiated like its dtype
(ranks that disagree all fail), a group that mixes devices is refused at once, and a CUDA tensor's
prescale / postscale (and an average's 1/size) are applied on its device in its own dtype
(integers in float64), where the engine scales host tensors (float16 in float32 arithmetic).
op=hvd.Adasum runs ddl_runtime.collectives.adasum, Horovod's algorithm, on the global set of a power-of-two
number of ranks.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import torch

from ddl_runtime.collectives.adasum import is_power_of_two
from ddl_runtime.errors import DDLInputError
from ddl_runtime.collectives.negotiation import Handle, Request

from ..common import handles as _handles
from ..common.exceptions import NotSupportedError
from ..common.basics import (Adasum, Average, Max, Min, Product, Sum, cross_rank, cross_size,  # noqa: F401
                             init, is_initialized, local_rank, local_size, rank, reduce_op, shutdown, size)
from ..common.process_sets import controller_for, global_process_set, is_global
from ..common.requests import alltoall_send_rows, scales as _scales, submit as _submit
from . import device_route as _route

_MOVABLE = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
            torch.float32, torch.float64, torch.bool}
_REDUCIBLE = _MOVABLE - {torch.bool}
_ADASUM = {torch.float16, torch.float32, torch.float64}  # Horovod's Adasum dtypes


# -- tensors <-> host numpy -------------------------------------------------------------------------
def _check_tensor(t: Any, what: str, reduce: bool) -> None:
    if not isinstance(t, torch.Tensor):
        raise DDLInputError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise DDLInputError(f"{what}: sparse tensors are not supported here (use sparse_allreduce_async)")
    if t.dtype not in (_REDUCIBLE if reduce else _MOVABLE):
        raise DDLInputError(f"{what}: dtype {t.dtype} is not supported")


def _host(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor with t's values (t itself when it already is one)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous()


def _staging(tensors: Sequence[Any]):
    """The host staging (ddl_runtime.transports.gpu.host.Staging: the rank's GPU's pinned pool and side stream)
    CUDA tensors pass through; None for CPU tensors, which the engine uses in place, and for CUDA
    tensors on another GPU than the rank's (copied through pageable memory, _host)."""
    cuda = [t for t in tensors if isinstance(t, torch.Tensor) and t.device.type == "cuda"]
    if not cuda:
        return None
    from ddl_runtime.transports import gpu
    from ddl_runtime.state import runtime
    from ddl_runtime.transports.gpu.transport import state
    rt = runtime.current()
    if any(t.device.index != state(rt).index for t in cuda):
        return None
    return gpu.host_staging(rt)


def _wire(t: torch.Tensor, device: str, prescale: float = 1.0) -> torch.Tensor:
    """What a reduction sends for `t`: prescaled on its device in its dtype off the CPU (the engine
    scales host tensors), bfloat16 widened to float32 there."""
    w = t.detach() if device == "cpu" else _scaled(t.detach(), prescale)
    return w.float() if w.dtype == torch.bfloat16 else w


def _copied_back(staging, hosts: Sequence[torch.Tensor], devices: Sequence[torch.device],
                 into: Optional[Sequence[Optional[torch.Tensor]]] = None) -> List[torch.Tensor]:
    """Host tensors copied onto the devices, in order on the caller's stream: into `into[i]` where it
    is a contiguous tensor of the host tensor's dtype and shape, else into a new tensor."""
    dsts = []
    for i, (h, dev) in enumerate(zip(hosts, devices)):
        target = into[i] if into is not None else None
        usable = target is not None and target.device == dev and target.dtype == h.dtype \
            and target.is_contiguous() and tuple(target.shape) == tuple(h.shape)
        dsts.append(target.detach() if usable else torch.empty(h.shape, dtype=h.dtype, device=dev))
    staging.copy_in(hosts, dsts)
    return dsts


def _device_of(tensors: Sequence[Any], what: str) -> str:
    """The device type all of one request's tensors live on; a group that mixes devices is refused
    here, before any communication (Horovod raises at enqueue)."""
    kinds = sorted({t.device.type for t in tensors if isinstance(t, torch.Tensor)})
    if len(kinds) > 1:
        raise DDLInputError(f"{what}: tensors in one group must be on the same device, got tensors on "
                            f"{' and '.join(kinds)}")
    return kinds[0] if kinds else "cpu"


def _scaled(t: torch.Tensor, factor: float) -> torch.Tensor:
    """`t * factor` on t's device in t's dtype (the factor rounded to it; integers in float64,
    truncated), as Horovod's GPU build scales."""
    if factor == 1.0:
        return t
    if t.dtype.is_floating_point:
        return t * torch.tensor(factor, dtype=t.dtype, device=t.device)
    return (t.to(torch.float64) * factor).to(t.dtype)


def _np(t: torch.Tensor) -> np.ndarray:
    """A numpy view of a contiguous CPU tensor (bfloat16 as its int16 bits)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy()
    return t.numpy()


# -- allreduce ------------------------------------------------------------------------------------
def _allreduce_start(tensors: Sequence[torch.Tensor], outputs: Optional[Sequence[torch.Tensor]], name, op_name: str,
                     prescale: float, postscale: float, process_set, what: str, group: bool):
    """Submit; returns (core handle, finish) where finish(handle) returns the output tensors."""
    device = _device_of(tensors, what)
    if device in _route.DEVICES and _on_device_transport(tensors, op_name, process_set):  # reduced on the GPU, no host copy
        return _allreduce_on_device(tensors, outputs, name, op_name, prescale, postscale, process_set, what, group)
    for t in tensors:
        _check_tensor(t, what, reduce=True)
        if op_name == "adasum" and t.dtype not in _ADASUM:
            raise DDLInputError(f"{what}: op=Adasum supports float16, float32 and float64 tensors, not {t.dtype}")
    staging = _staging(tensors)
    if staging is not None:
        return _allreduce_staged(staging, tensors, outputs, name, op_name, prescale, postscale, process_set, what,
                                 group, device)
    inputs, outs, copy_back = [], [], []
    for i, t in enumerate(tensors):
        target = outputs[i] if outputs is not None else None
        h = _host(_wire(t, device, prescale))
        src = _np(h)
        if target is None:
            out = None  # the engine picks the memory: a pooled buffer or a shared result region, reused
        elif target.device.type == "cpu" and target.is_contiguous() and target.dtype != torch.bfloat16:
            out = target  # written in place by the reduction
        else:
            out = torch.empty(h.shape, dtype=h.dtype)
        inputs.append(src)
        outs.append(None if out is None else _np(out))
        copy_back.append((out, target, t))
    handle = _submit("allreduce", name, (op_name, prescale, postscale), inputs, outs, process_set, what,
                     group=group, device=device)
    post = _device_postscale(op_name, postscale, process_set, device, what)

    def finish(h: Handle) -> List[torch.Tensor]:
        results = []
        for i, (out, target, orig) in enumerate(copy_back):
            if target is not None:
                if out is not target:
                    target.copy_(out)
                if post != 1.0:
                    with torch.no_grad():
                        target.copy_(_scaled(target, post))
                results.append(target)
            else:  # the engine's memory, reused once this tensor (and every view of it) is gone
                res = torch.from_numpy(h.request.outputs[i]).to(device=orig.device, dtype=orig.dtype)
                results.append(_scaled(res, post))
        return results
    return handle, finish


def _allreduce_staged(staging, tensors, outputs, name, op_name, prescale, postscale, process_set, what, group,
                      device):
    """_allreduce_start through the host staging: the wire tensors (_wire) copied into pooled pinned
    buffers, reduced there in place by the engine, copied back onto each input's device when the
    request finished (in place into an output that takes it as it is), postscaled on the device;
    the buffers go back to the pool only then."""
    lease = staging.copy_out([_wire(t, device, prescale) for t in tensors])
    try:
        handle = _submit("allreduce", name, (op_name, prescale, postscale), [_np(v) for v in lease.views],
                         [_np(v) for v in lease.views], process_set, what, group=group, device=device)
    except BaseException:
        staging.give_back(lease)
        raise
    post = _device_postscale(op_name, postscale, process_set, device, what)

    def finish(_h: Handle) -> List[torch.Tensor]:
        direct = outputs if post == 1.0 else None
        try:
            reduced = _copied_back(staging, lease.views, [t.device for t in tensors], direct)
        finally:
            staging.give_back(lease)
        results = []
        for i, (res, t) in enumerate(zip(reduced, tensors)):
            target = outputs[i] if outputs is not None else None
            res = _scaled(res.to(t.dtype), post)
            if target is not None and res.data_ptr() != target.data_ptr():
                with torch.no_grad():
                    target.copy_(res)
            results.append(res if target is None else target)
        return results
    return handle, finish


def _on_device_transport(tensors: Sequence[Any], op_name: str, process_set) -> bool:
    """Whether a request is reduced on the GPU with an op NCCL and the IPC route have: on the NCCL
    transport as device_route.takes says (CUDA tensors of this rank's GPU, dtypes NCCL reduces, process
    sets); on the IPC transport (every rank on one GPU, ddl_runtime.transports.gpu.transport) CUDA
    tensors of the global set.  Otherwise (the host transport) they go through host memory as on CPU."""
    if op_name not in ("sum", "average", "min", "max"):
        return False
    if _route.takes(tensors, process_set, reduce=True):
        return True
    if not tensors or process_set not in (None, global_process_set):
        return False
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda" or t.dtype not in _route.NCCL_REDUCE_DTYPES:
            return False
    from ddl_runtime.state import runtime
    from ddl_runtime.transports.gpu.transport import decided
    rt = runtime.current()
    chosen = decided(rt)
    return rt.size > 1 and chosen is not None and chosen.name == "ipc"


def _allreduce_on_device(tensors, outputs, name, op_name, prescale, postscale, process_set, what, group):
    """_allreduce_start for the NCCL transport: the tensors themselves are submitted (announced as
    "<dtype>@cuda") and, in negotiated order, summed (or min/max) per fused group on the device
    (negotiation._post_allreduce_device); this layer scales on the device in the tensor's dtype, as
    on the host transport (_scaled, _device_postscale).  An output on the same device is written in place."""
    inputs, outs = [], []
    for i, t in enumerate(tensors):
        _check_tensor(t, what, reduce=True)
        target = outputs[i] if outputs is not None else None
        same = target is not None and target.device == t.device and target.dtype == t.dtype and target.is_contiguous()
        inputs.append(_scaled(t.detach(), prescale).contiguous())
        outs.append(target.detach() if same else None)
    device = "xpu" if tensors[0].device.type == "xpu" else "cuda"  # CI's twin runs cpu tensors as cuda
    handle = _submit("allreduce", name, (op_name, prescale, postscale), inputs, outs, process_set, what,
                     group=group, device=device)
    post = _device_postscale(op_name, postscale, process_set, device, what)

    def finish(h: Handle) -> List[torch.Tensor]:
        results = []
        for i, res in enumerate(h.request.outputs):
            target = outputs[i] if outputs is not None else None
            if target is None:
                results.append(_scaled(res, post))
                continue
            with torch.no_grad():
                if post != 1.0:
                    target.copy_(_scaled(res, post))
                elif res.data_ptr() != target.data_ptr():
                    target.copy_(res)
            results.append(target)
        return results
    return handle, finish


def _device_postscale(op_name: str, postscale: float, process_set, device: str, what: str) -> float:
    """What this layer multiplies a device result by (the engine scales host tensors itself)."""
    if device == "cpu":
        return 1.0
    if op_name == "average":
        return postscale / controller_for(process_set, what).size
    return postscale


def _op_args(average, op, prescale_factor, postscale_factor, what, process_set=global_process_set):
    if op == Adasum and average is None:
        op_name = _adasum(process_set, what)
    else:
        op_name = reduce_op(op, average, what)
    return op_name, *_scales(prescale_factor, postscale_factor, what)


def _adasum(process_set, what: str) -> str:
    """op=hvd.Adasum where Horovod runs it (the same refusals, raised alike on every rank)."""
    if not is_global(process_set):
        raise NotSupportedError(f"{what}: Adasum does not support non-global process sets yet.")
    n = size()
    if not is_power_of_two(n):
        raise NotSupportedError(f"{what}: Running Adasum with non-power of 2 ranks is not supported yet "
                                f"({n} ranks).")
    return "adasum"


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set) -> int:
    """Start averaging (default) or reducing `tensor` across ranks into a new tensor; returns a handle."""
    what = f"allreduce('{name}')" if name else "allreduce"
    op_name, pre, post = _op_args(average, op, prescale_factor, postscale_factor, what, process_set)
    handle, finish = _allreduce_start([tensor], None, name, op_name, pre, post, process_set, what, False)
    return _handles.register(handle, lambda h: finish(h)[0])


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set) -> int:
    """In-place allreduce_async: the result is written into `tensor`."""
    what = f"allreduce_('{name}')" if name else "allreduce_"
    op_name, pre, post = _op_args(average, op, prescale_factor, postscale_factor, what, process_set)
    handle, finish = _allreduce_start([tensor], [tensor], name, op_name, pre, post, process_set, what, False)
    return _handles.register(handle, lambda h: finish(h)[0])


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op_name, pre, post, process_set):
        ctx.args = (op_name, pre, post, process_set)
        handle, finish = _allreduce_start([tensor], None, name, op_name, pre, post, process_set,
                                          f"allreduce('{name}')" if name else "allreduce", False)
        handle.wait()
        return finish(handle)[0]

    @staticmethod
    def backward(ctx, grad):
        op_name, pre, post, process_set = ctx.args
        return _Allreduce.apply(grad.contiguous(), None, op_name, pre, post, process_set), None, None, None, None, None


def _compress(compression, tensor):
    if compression is None:
        return tensor, None
    return compression.compress(tensor)


def _decompress(compression, tensor, ctx):
    return tensor if compression is None else compression.decompress(tensor, ctx)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Average (default) or reduce `tensor` across ranks; returns a new tensor (differentiable).

    op: hvd.Average, Sum, Min, Max, Product or Adasum.  compression:
    hvd.Compression.none / fp16.  prescale_factor / postscale_factor multiply before / after.
    """
    what = f"allreduce('{name}')" if name else "allreduce"
    op_name, pre, post = _op_args(average, op, prescale_factor, postscale_factor, what, process_set)
    _check_tensor(tensor, what, reduce=True)
    wire, ctx = _compress(compression, tensor)
    return _decompress(compression, _Allreduce.apply(wire, name, op_name, pre, post, process_set), ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def _grouped_allreduce_async(kind, in_place, tensors, average, name, op, prescale_factor, postscale_factor,
                             process_set) -> int:
    what = f"{kind}('{name}')" if name else kind
    tensors = _as_list(tensors, what)
    op_name, pre, post = _op_args(average, op, prescale_factor, postscale_factor, what, process_set)
    handle, finish = _allreduce_start(tensors, tensors if in_place else None, name, op_name, pre, post, process_set,
                                      what, True)
    return _handles.register(handle, finish)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set) -> int:
    """Reduce a list of tensors as one negotiated, fused operation; returns a handle."""
    return _grouped_allreduce_async("grouped_allreduce", False, tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set) -> int:
    """grouped_allreduce_async, results written into `tensors`; returns a handle."""
    return _grouped_allreduce_async("grouped_allreduce_", True, tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op_name, pre, post, process_set, *tensors):
        ctx.args = (op_name, pre, post, process_set)
        handle, finish = _allreduce_start(tensors, None, name, op_name, pre, post, process_set,
                                          "grouped_allreduce", True)
        handle.wait()
        return tuple(finish(handle))

    @staticmethod
    def backward(ctx, *grads):
        op_name, pre, post, process_set = ctx.args
        reduced = _GroupedAllreduce.apply(None, op_name, pre, post, process_set, *[g.contiguous() for g in grads])
        return (None, None, None, None, None, *reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Reduce a list of tensors together; returns a list of new tensors (differentiable)."""
    what = f"grouped_allreduce('{name}')" if name else "grouped_allreduce"
    tensors = _as_list(tensors, what)
    op_name, pre, post = _op_args(average, op, prescale_factor, postscale_factor, what, process_set)
    _device_of(tensors, what)
    for t in tensors:
        _check_tensor(t, what, reduce=True)
    pairs = [_compress(compression, t) for t in tensors]
    reduced = _GroupedAllreduce.apply(name, op_name, pre, post, process_set, *[w for w, _ in pairs])
    return [_decompress(compression, r, c) for r, (_, c) in zip(reduced, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def _as_list(tensors, what: str) -> list:
    if not isinstance(tensors, (list, tuple)):
        raise DDLInputError(f"{what}: expected a list of tensors, got {type(tensors).__name__}")
    if not tensors:
        raise DDLInputError(f"{what}: the list of tensors is empty")
    return list(tensors)


# -- sparse allreduce ----------------------------------------------------------------------------
def sparse_allreduce_async(tensor, name, op, process_set=global_process_set) -> Callable[[], torch.Tensor]:
    """Allreduce a sparse COO tensor by gathering indices and values; returns a callable giving the result."""
    what = f"sparse_allreduce('{name}')"
    if op not in (Average, Sum):
        raise DDLInputError(f"{what}: op must be hvd.Average or hvd.Sum")
    t = tensor.coalesce()
    indices = t.indices().t().contiguous()
    values = t.values().contiguous()
    h_idx = allgather_async(indices, name=f"{name}.indices", process_set=process_set)
    h_val = allgather_async(values, name=f"{name}.values", process_set=process_set)

    def result() -> torch.Tensor:
        idx = synchronize(h_idx)
        vals = synchronize(h_val)
        if op == Average:
            vals = vals / (process_set or global_process_set).size()
        return torch.sparse_coo_tensor(idx.t(), vals, size=tensor.size())
    return result


# -- allgather ------------------------------------------------------------------------------------
def _allgather_start(tensors, name, process_set, what: str, group: bool):
    device = _device_of(tensors, what)
    for t in tensors:
        _check_tensor(t, what, reduce=False)
    if _route.takes(tensors, process_set):  # gathered on the device (NCCL transport)
        return _route.allgather_start(tensors, name, process_set, what, group)
    staging = _staging(tensors)
    lease = None
    if staging is not None:
        lease = staging.copy_out([t.detach().reshape(1) if t.dim() == 0 else t.detach() for t in tensors])
        hosts = lease.views
    else:
        hosts = [_host(t).reshape(1) if t.dim() == 0 else _host(t) for t in tensors]
    metas = list(tensors)
    # Output shapes depend on the other ranks' first dims: allocate when the request runs.
    outputs: List[Optional[np.ndarray]] = [None] * len(hosts)
    out_leases: list = []
    allocate = None if lease is None else _pooled_outputs(staging, [h.dtype for h in hosts], out_leases)
    try:
        handle = _submit("allgather", name, (), [_np(h) for h in hosts], outputs, process_set, what, group=group,
                         device=device, allocate=allocate)
    except BaseException:
        if lease is not None:
            staging.give_back(lease)
        raise

    def finish(h: Handle) -> List[torch.Tensor]:
        gathered = []
        for out, orig in zip(h.request.outputs, metas):
            res = torch.from_numpy(out)
            gathered.append(res.view(torch.bfloat16) if orig.dtype == torch.bfloat16 else res)
        if lease is None:
            return [g.to(orig.device) for g, orig in zip(gathered, metas)]
        try:
            return _copied_back(staging, gathered, [orig.device for orig in metas])
        finally:
            for used in [lease, *out_leases]:
                staging.give_back(used)
    return handle, finish


def _pooled_outputs(staging, dtypes: Sequence[torch.dtype], leases: list) -> Callable:
    """Request.allocate for a host-staged allgather or alltoall: output i in a pooled pinned buffer
    of the staging (Horovod allocates them in pinned memory too), leased until the result was copied
    back onto the device (the leases are appended to `leases`)."""
    def allocate(i: int, shape: tuple) -> np.ndarray:
        leases.append(staging.lease([(tuple(shape), dtypes[i])]))
        return _np(leases[-1].views[0])
    return allocate


def allgather_async(tensor, name=None, process_set=global_process_set) -> int:
    """Start concatenating every rank's `tensor` along dim 0 (first dims may differ); returns a handle."""
    what = f"allgather('{name}')" if name else "allgather"
    handle, finish = _allgather_start([tensor], name, process_set, what, False)
    return _handles.register(handle, lambda h: finish(h)[0])


def grouped_allgather_async(tensors, name=None, process_set=global_process_set) -> int:
    what = f"grouped_allgather('{name}')" if name else "grouped_allgather"
    handle, finish = _allgather_start(_as_list(tensors, what), name, process_set, what, True)
    return _handles.register(handle, finish)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, grouped, *tensors):
        ctx.process_set, ctx.grouped = process_set, grouped
        what = f"allgather('{name}')" if name else "allgather"
        handle, finish = _allgather_start(tensors, name, process_set, what, ctx.grouped)
        handle.wait()
        out = finish(handle)
        ctx.rows = handle.result
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        reduced = _GroupedAllreduce.apply(None, "average", 1.0, 1.0, ctx.process_set, *[g.contiguous() for g in grads])
        me = controller_for(ctx.process_set, "allgather").rank
        results = []
        for g, rows in zip(reduced, ctx.rows):
            offset = sum(rows[:me])
            results.append(g.narrow(0, offset, rows[me]))
        return (None, None, None, *results)


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenate every rank's `tensor` along dim 0; returns a new tensor (differentiable)."""
    return _Allgather.apply(name, process_set, False, tensor)[0]


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    what = f"grouped_allgather('{name}')" if name else "grouped_allgather"
    return list(_Allgather.apply(name, process_set, True, *_as_list(tensors, what)))


# -- broadcast ------------------------------------------------------------------------------------
def _check_root(root_rank, process_set, what: str) -> int:
    ctl = controller_for(process_set, what)
    if isinstance(root_rank, bool) or not isinstance(root_rank, (int, np.integer)) \
            or int(root_rank) not in ctl.global_ranks:
        raise DDLInputError(f"{what}: root_rank {root_rank!r} is not a rank of the process set "
                            f"({ctl.global_ranks if len(ctl.global_ranks) <= 16 else 'size %d' % ctl.size})")
    return int(root_rank)


def _broadcast_start(tensor, root_rank, name, process_set, inplace: bool, what: str):
    _check_tensor(tensor, what, reduce=False)
    root = _check_root(root_rank, process_set, what)
    if _route.takes([tensor], process_set):  # broadcast on the device (NCCL transport)
        return _route.broadcast_start(tensor, root, name, process_set, inplace, what)
    staging = _staging([tensor])
    if staging is not None:
        return _broadcast_staged(staging, tensor, root, name, process_set, inplace, what)
    if inplace and tensor.device.type == "cpu" and tensor.is_contiguous():
        out = tensor.detach()  # received in place
    else:
        out = _host(tensor).clone()
    arr = _np(out)
    handle = _submit("broadcast", name, (root,), [arr], [arr], process_set, what, device=tensor.device.type)

    def finish(_h: Handle) -> torch.Tensor:
        if inplace:
            if out.data_ptr() != tensor.data_ptr():
                with torch.no_grad():
                    tensor.copy_(out)
            return tensor
        return out.to(tensor.device)
    return handle, finish


def _broadcast_staged(staging, tensor, root: int, name, process_set, inplace: bool, what: str):
    """_broadcast_start through the host staging: the root copies its tensor into a pooled pinned
    buffer, the others receive into one; the buffer is copied onto the device (into `tensor` when in
    place) and goes back to the pool when the request finished."""
    if rank() == root:
        lease = staging.copy_out([tensor])
    else:
        lease = staging.lease([(tuple(tensor.shape), tensor.dtype)])
    arr = _np(lease.views[0])
    try:
        handle = _submit("broadcast", name, (root,), [arr], [arr], process_set, what, device=tensor.device.type)
    except BaseException:
        staging.give_back(lease)
        raise

    def finish(_h: Handle) -> torch.Tensor:
        try:
            (out,) = _copied_back(staging, lease.views, [tensor.device], [tensor] if inplace else None)
        finally:
            staging.give_back(lease)
        if not inplace:
            return out
        if out.data_ptr() != tensor.data_ptr():
            with torch.no_grad():
                tensor.copy_(out)
        return tensor
    return handle, finish


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    what = f"broadcast('{name}')" if name else "broadcast"
    handle, finish = _broadcast_start(tensor, root_rank, name, process_set, False, what)
    return _handles.register(handle, finish)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    what = f"broadcast_('{name}')" if name else "broadcast_"
    handle, finish = _broadcast_start(tensor, root_rank, name, process_set, True, what)
    return _handles.register(handle, finish)


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        handle, finish = _broadcast_start(tensor, root_rank, name, process_set, False,
                                          f"broadcast('{name}')" if name else "broadcast")
        handle.wait()
        return finish(handle)

    @staticmethod
    def backward(ctx, grad):
        reduced = _Allreduce.apply(grad.contiguous(), None, "average", 1.0, 1.0, ctx.process_set)
        if rank() != ctx.root_rank:
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Return a new tensor holding root_rank's `tensor` (differentiable)."""
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrite `tensor` with root_rank's; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# -- alltoall -------------------------------------------------------------------------------------
def _alltoall_start(tensor, splits, name, process_set, what: str):
    ctl = controller_for(process_set, what)
    _check_tensor(tensor, what, reduce=False)
    if tensor.dim() == 0:
        raise DDLInputError(f"{what}: alltoall needs a tensor with at least one dimension")
    first = tensor.shape[0]
    if splits is None:
        send = None
    else:
        if isinstance(splits, torch.Tensor):
            if splits.dtype != torch.int32:
                raise DDLInputError(f"{what}: splits must be a torch.int32 tensor, got {splits.dtype}")
            send = [int(v) for v in splits.detach().cpu().reshape(-1).tolist()]
        elif isinstance(splits, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in splits):
            send = [int(v) for v in splits]
        else:
            raise DDLInputError(f"{what}: splits must be a list of ints or an int32 tensor")
    send = alltoall_send_rows(first, send, ctl.size, what)
    if _route.takes([tensor], process_set):  # exchanged on the device (NCCL transport)
        return _route.alltoall_start(tensor, send, splits, name, process_set, what)
    staging = _staging([tensor])
    lease = staging.copy_out([tensor]) if staging is not None else None
    arr = _np(lease.views[0] if lease is not None else _host(tensor))
    out_leases: list = []
    allocate = None if lease is None else _pooled_outputs(staging, [tensor.dtype], out_leases)
    try:
        handle = _submit("alltoall", name, (), [arr], [None], process_set, what, extra=tuple(send),
                         device=tensor.device.type, allocate=allocate)
    except BaseException:
        if lease is not None:
            staging.give_back(lease)
        raise

    def finish(hd: Handle):
        out = torch.from_numpy(hd.request.outputs[0])
        if tensor.dtype == torch.bfloat16:
            out = out.view(torch.bfloat16)
        received = torch.tensor(hd.result, dtype=torch.int32)
        rdev = splits.device if isinstance(splits, torch.Tensor) else torch.device("cpu")
        if lease is None:
            return out.to(tensor.device), received.to(rdev)
        try:
            (moved,) = _copied_back(staging, [out], [tensor.device])
        finally:
            for used in [lease, *out_leases]:
                staging.give_back(used)
        return moved, received.to(rdev)
    return handle, finish


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set) -> int:
    """Start scattering rows of `tensor` to every rank (splits[i] rows to rank i) and gathering theirs."""
    what = f"alltoall('{name}')" if name else "alltoall"
    handle, finish = _alltoall_start(tensor, splits, name, process_set, what)
    return _handles.register(handle, finish)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        handle, finish = _alltoall_start(tensor, splits, name, process_set,
                                         f"alltoall('{name}')" if name else "alltoall")
        handle.wait()
        out, received = finish(handle)
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _unused):
        back, _ = _Alltoall.apply(grad.contiguous(), ctx.received.cpu(), None, ctx.process_set)
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Send splits[i] rows of `tensor` to rank i (equal parts when splits is None); returns the received
    rows concatenated in rank order, and, when splits were given, the int32 tensor of rows received
    from each rank.  Differentiable."""
    out, received = _Alltoall.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


# -- reducescatter --------------------------------------------------------------------------------
def _reducescatter_start(tensors, name, op, prescale_factor, postscale_factor, process_set, what, group):
    op_name, pre, post = _op_args(None, op, prescale_factor, postscale_factor, what)
    if op_name not in ("average", "sum"):
        raise DDLInputError(f"{what}: reducescatter supports op=hvd.Average or hvd.Sum")
    ctl = controller_for(process_set, what)
    from ddl_runtime.engine.kernels import scatter_rows
    device = _device_of(tensors, what)
    for t in tensors:
        _check_tensor(t, what, reduce=True)
        if t.dim() == 0:
            raise DDLInputError(f"{what}: reducescatter needs a tensor with at least one dimension, got a scalar")
    if _route.takes(tensors, process_set, reduce=True):  # reduced on the device (NCCL transport)
        return _route.reducescatter_start(tensors, name, op_name, pre, post, process_set, what, group, _scaled,
                                          _device_postscale)
    staging = _staging(tensors)
    if staging is not None:
        return _reducescatter_staged(staging, tensors, name, op_name, pre, post, process_set, what, group, device,
                                     ctl)
    inputs, outs, metas = [], [], []
    for t in tensors:
        h = _host(_wire(t, device, pre))
        rows = scatter_rows(h.shape[0], ctl.size)[ctl.rank]
        out = torch.empty((rows,) + tuple(h.shape[1:]), dtype=h.dtype)
        inputs.append(_np(h))
        outs.append(_np(out))
        metas.append((out, t))
    handle = _submit("reducescatter", name, (op_name, pre, post), inputs, outs, process_set, what, group=group,
                     device=device)
    scale = _device_postscale(op_name, post, process_set, device, what)

    def finish(_h: Handle) -> List[torch.Tensor]:
        return [_scaled(out.to(device=t.device, dtype=t.dtype), scale) for out, t in metas]
    return handle, finish, op_name


def _reducescatter_staged(staging, tensors, name, op_name, pre, post, process_set, what, group, device, ctl):
    """_reducescatter_start through the host staging: the wire tensors (_wire) in pooled pinned
    buffers, this rank's rows received into pooled ones, copied onto the device and postscaled there
    when the request finished; both leases go back to the pool then."""
    from ddl_runtime.engine.kernels import scatter_rows
    wires = [_wire(t, device, pre) for t in tensors]
    sent = staging.copy_out(wires)
    try:
        got = staging.lease([((scatter_rows(w.shape[0], ctl.size)[ctl.rank],) + tuple(w.shape[1:]), w.dtype)
                             for w in wires])
    except BaseException:
        staging.give_back(sent)
        raise
    try:
        handle = _submit("reducescatter", name, (op_name, pre, post), [_np(v) for v in sent.views],
                         [_np(v) for v in got.views], process_set, what, group=group, device=device)
    except BaseException:
        staging.give_back(sent)
        staging.give_back(got)
        raise
    scale = _device_postscale(op_name, post, process_set, device, what)

    def finish(_h: Handle) -> List[torch.Tensor]:
        try:
            outs = _copied_back(staging, got.views, [t.device for t in tensors])
        finally:
            staging.give_back(sent)
            staging.give_back(got)
        return [_scaled(out.to(t.dtype), scale) for out, t in zip(outs, tensors)]
    return handle, finish, op_name


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0) -> int:
    what = f"reducescatter('{name}')" if name else "reducescatter"
    handle, finish, _ = _reducescatter_start([tensor], name, op, prescale_factor, postscale_factor, process_set,
                                             what, False)
    return _handles.register(handle, lambda h: finish(h)[0])


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0) -> int:
    what = f"grouped_reducescatter('{name}')" if name else "grouped_reducescatter"
    handle, finish, _ = _reducescatter_start(_as_list(tensors, what), name, op, prescale_factor, postscale_factor,
                                             process_set, what, True)
    return _handles.register(handle, finish)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, pre, post, process_set, *tensors):
        ctx.process_set = process_set
        handle, finish, op_name = _reducescatter_start(tensors, name, op, pre, post, process_set,
                                                       "reducescatter", len(tensors) > 1)
        ctx.op_name = op_name
        handle.wait()
        return tuple(finish(handle))

    @staticmethod
    def backward(ctx, *grads):
        gathered = _Allgather.apply(None, ctx.process_set, len(grads) > 1, *[g.contiguous() for g in grads])
        if ctx.op_name == "sum":
            n = controller_for(ctx.process_set, "reducescatter").size
            gathered = [g * n for g in gathered]
        return (None, None, None, None, None, *gathered)


def reducescatter(tensor, name=None, compression=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduce `tensor` across ranks and give each rank its slice of dim 0 (the first ranks get one
    more row when it does not divide evenly).  Differentiable."""
    wire, ctx = _compress(compression, tensor)
    out = _Reducescatter.apply(name, op, prescale_factor, postscale_factor, process_set, wire)[0]
    return _decompress(compression, out, ctx)


def grouped_reducescatter(tensors, name=None, compression=None, op=Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    what = f"grouped_reducescatter('{name}')" if name else "grouped_reducescatter"
    tensors = _as_list(tensors, what)
    pairs = [_compress(compression, t) for t in tensors]
    outs = _Reducescatter.apply(name, op, prescale_factor, postscale_factor, process_set, *[w for w, _ in pairs])
    return [_decompress(compression, o, c) for o, (_, c) in zip(outs, pairs)]


# -- join, barrier, poll, synchronize ---------------------------------------------------------------
def join(device=-1) -> int:
    """Wait until every rank has joined; meanwhile take part in the others' allreduces with zeros.

    Returns the rank that joined last.  `device` is accepted for compatibility (tensors are
    staged through host memory)."""
    ctl = controller_for(global_process_set, "join")
    handle = ctl.submit(Request("join", "join", (), []))
    return handle.wait()


def barrier(process_set=global_process_set) -> None:
    """Wait until every rank of the process set reaches the barrier."""
    ctl = controller_for(process_set, "barrier")
    ctl.submit(Request("barrier", ctl.auto_name("barrier"), (), [])).wait()


def poll(handle: int) -> bool:
    """True when the async operation has finished (never blocks)."""
    return _handles.poll(handle)


def synchronize(handle: int):
    """Wait for an async operation and return its output (raises if the collective failed)."""
    return _handles.synchronize(handle)
