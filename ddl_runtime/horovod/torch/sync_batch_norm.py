"""``hvd.SyncBatchNorm``: batch normalization whose statistics span the whole job.

In training with more than one rank, each forward sums per channel the count, the values and
their squares (float64) and allreduces those sums once, so every rank normalizes with the
mean and variance of the global batch (batches may differ in size between ranks).  The
backward pass allreduces the two per-channel sums the input gradient needs; the weight and
bias gradients stay local, to be averaged by the DistributedOptimizer as usual.  In eval
mode, or alone, it is ``torch.nn.BatchNorm`` (any input rank >= 2, like ``_BatchNorm``).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

import ddl_runtime as _ddl
import ddl_runtime.torch as _native

__all__ = ["SyncBatchNorm"]


def _allreduce_sum(t: torch.Tensor, name: str, process_set: Any) -> torch.Tensor:
    from .functions import _is_global
    if _is_global(process_set):
        out = _ddl.allreduce(t, op="sum", name=name)
        return out if isinstance(out, torch.Tensor) else t
    from . import mpi_ops
    from ddl_runtime.horovod import common
    return mpi_ops.allreduce_(t, op=common.Sum, name=name, process_set=process_set)


def _channel_view(t: torch.Tensor, dims: int) -> torch.Tensor:
    """A per-channel vector shaped to broadcast against (N, C, ...) input."""
    return t.view(1, -1, *([1] * (dims - 2)))


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set, name):
        dims = x.dim()
        axes = [0] + list(range(2, dims))
        channels = x.shape[1]
        x64 = x.detach().to(torch.float64)
        count = float(x.numel() // channels) if channels else 0.0
        stats = torch.cat([x64.sum(dim=axes), (x64 * x64).sum(dim=axes),
                           torch.tensor([count], dtype=torch.float64, device=x.device)])  # beside x's sums
        stats = _allreduce_sum(stats.contiguous(), f"{name}.stats", process_set)
        total = float(stats[-1])
        if total <= 1:
            raise ValueError(f"SyncBatchNorm: expected more than 1 value per channel across all ranks "
                             f"when training, got input size {tuple(x.shape)} and {int(total)} values in all")
        mean = stats[:channels] / total
        var = (stats[channels:2 * channels] / total - mean * mean).clamp_min(0.0)
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_((var * total / (total - 1)).to(running_var.dtype),
                                                     alpha=momentum)
        mean_c, invstd_c = _channel_view(mean, dims), _channel_view(invstd, dims)
        xhat = (x64 - mean_c) * invstd_c
        out = xhat
        if weight is not None:
            out = out * _channel_view(weight.detach().to(torch.float64), dims)
        if bias is not None:
            out = out + _channel_view(bias.detach().to(torch.float64), dims)
        ctx.save_for_backward(xhat.to(x.dtype), invstd.to(x.dtype), weight)
        ctx.total, ctx.process_set, ctx.name = total, process_set, name
        ctx.has_bias = bias is not None
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        xhat, invstd, weight = ctx.saved_tensors
        dims = grad_out.dim()
        axes = [0] + list(range(2, dims))
        channels = grad_out.shape[1]
        dy = grad_out.contiguous()
        sum_dy = dy.sum(dim=axes)
        sum_dy_xhat = (dy * xhat).sum(dim=axes)
        grad_weight = sum_dy_xhat if weight is not None else None
        grad_bias = sum_dy if ctx.has_bias else None
        grad_input = None
        if ctx.needs_input_grad[0]:
            sums = torch.cat([sum_dy, sum_dy_xhat]).to(torch.float64).contiguous()
            sums = _allreduce_sum(sums, f"{ctx.name}.grad", ctx.process_set).to(dy.dtype)
            g_dy, g_dy_xhat = sums[:channels] / ctx.total, sums[channels:] / ctx.total
            scale = invstd if weight is None else invstd * weight.detach()
            grad_input = _channel_view(scale, dims) * (dy - _channel_view(g_dy, dims)
                                                       - xhat * _channel_view(g_dy_xhat, dims))
        return grad_input, grad_weight, grad_bias, None, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over the global batch of all ranks (Horovod's ``hvd.SyncBatchNorm``).

    Same arguments as ``torch.nn.BatchNorm*d`` plus ``process_set``; works on any input of
    rank >= 2 (N, C, ...).  Every rank must call it in the same order (it communicates).
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_set: Any = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set
        self._sync_name = f"SyncBatchNorm[{num_features}]"

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {input.dim()}D input)")

    def _run_bn(self, input: torch.Tensor, factor: float) -> torch.Tensor:
        use_batch = self.training or not self.track_running_stats
        return F.batch_norm(input, self.running_mean if not self.training or self.track_running_stats else None,
                            self.running_var if not self.training or self.track_running_stats else None,
                            self.weight, self.bias, use_batch, factor, self.eps)

    def _members(self) -> int:
        from .functions import _is_global
        if _is_global(self.process_set):
            _native.init()
            return _ddl.size()
        return self.process_set.size() if self.process_set.included() else 1

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        if not self.training or self._members() == 1:
            return self._run_bn(input, factor)
        track = self.track_running_stats
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias,
                                            self.running_mean if track else None,
                                            self.running_var if track else None,
                                            self.eps, factor, self.process_set, self._sync_name)
