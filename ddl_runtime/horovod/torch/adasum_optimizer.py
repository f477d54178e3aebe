"""``hvd.DistributedOptimizer(op=hvd.Adasum)``: Horovod's delta optimizer (its
``_DistributedAdasumOptimizer``).

Adasum combines what each rank would change, not the gradients.  Once a parameter's gradient has
been accumulated ``backward_passes_per_step`` times (a post-accumulate-grad hook), the wrapped
optimizer steps that parameter alone from a copy of its value, and the change (the delta) starts
an in-place Adasum allreduce named after the parameter.  ``step()`` waits for every delta and sets
each parameter to its starting value plus the combined delta, so the model stays identical on
every rank.  As in Horovod: the global process set only, ``synchronize()`` does nothing,
``skip_synchronize()`` and ``zero_grad()`` with deltas in flight are refused.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Optional, Tuple

import torch

from ddl_runtime.errors import DDLInputError

from . import mpi_ops


class _AdasumOptimizerMixin:
    """Methods added to the wrapped optimizer's own class (see optimizer.DistributedOptimizer)."""

    def _adasum_setup(self, named_parameters: Optional[list], compression: Any, backward_passes_per_step: int) -> None:
        params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is None:
            named_parameters = [(f"allreduce.noname.{i}", p) for i, p in enumerate(params)]
        names = [n for n, _ in named_parameters]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise DDLInputError(f"Parameter names in named_parameters must be unique. Found duplicates: "
                                f"{', '.join(map(str, dups))}")
        named_ids = {id(p) for _, p in named_parameters}
        unnamed = [p for p in params if id(p) not in named_ids]
        if unnamed:
            raise DDLInputError(f"named_parameters was specified, but {len(unnamed)} of the optimizer's parameters "
                                f"were not named (first: shape {tuple(unnamed[0].shape)})")
        if int(backward_passes_per_step) < 1:
            raise DDLInputError(f"DistributedOptimizer: backward_passes_per_step={backward_passes_per_step}; "
                                "expected >= 1")
        by_id = {id(p): n for n, p in named_parameters}
        self._adasum_names: Dict[torch.Tensor, str] = {p: by_id[id(p)] for p in params}
        self._adasum_compression = compression
        self.backward_passes_per_step = int(backward_passes_per_step)
        self._adasum_params: List[torch.Tensor] = [p for p in params if p.requires_grad]
        self._adasum_delay = {p: self.backward_passes_per_step for p in self._adasum_params}
        self._adasum_handles: Dict[torch.Tensor, Tuple[Optional[int], Any]] = {}
        self._adasum_start = {p: torch.zeros_like(p, requires_grad=False) for p in self._adasum_params}
        self._adasum_hooks = [p.register_post_accumulate_grad_hook(self._adasum_hook) for p in self._adasum_params]

    def _adasum_hook(self, p: torch.Tensor) -> None:
        handle = self._adasum_handles.get(p, (None, None))[0]
        if handle is not None or self._adasum_delay[p] <= 0:
            raise DDLInputError("Gradients were computed more than backward_passes_per_step times before call "
                                "to step(). Increase backward_passes_per_step to accumulate gradients locally.")
        self._adasum_delay[p] -= 1
        self._adasum_handles[p] = self._adasum_launch(p) if self._adasum_delay[p] == 0 else (None, None)

    def _adasum_launch(self, p: torch.Tensor) -> Tuple[int, Any]:
        """Step `p` alone from its current value; start the Adasum of the change."""
        start = self._adasum_start[p]
        stashed = [group["params"] for group in self.param_groups]
        try:
            for group in self.param_groups:
                group["params"] = [p] if any(p is v for v in group["params"]) else []
            with torch.no_grad():
                start.copy_(p)
            super(_AdasumOptimizerMixin, self).step()
            with torch.no_grad():
                p.sub_(start)
        finally:
            for group, kept in zip(self.param_groups, stashed):
                group["params"] = kept
        wire, ctx = self._adasum_compression.compress(p.detach())
        return mpi_ops.allreduce_async_(wire, name=self._adasum_names[p], op=mpi_ops.Adasum), ctx

    def synchronize(self) -> None:
        """Nothing to do: step() waits for the deltas (Horovod's Adasum optimizer does the same)."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise DDLInputError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # pragma: no cover

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in self._adasum_params:
            if self._adasum_handles.get(p, (None, None))[0] is None:  # not (yet) accumulated enough: now
                self._adasum_handles[p] = self._adasum_launch(p)
        for p in self._adasum_params:
            handle, ctx = self._adasum_handles[p]
            delta = self._adasum_compression.decompress(mpi_ops.synchronize(handle), ctx)
            start = self._adasum_start[p]
            with torch.no_grad():
                start.add_(delta.to(start.dtype))
                p.copy_(start)
            self._adasum_delay[p] = self.backward_passes_per_step
        self._adasum_handles.clear()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        if any(h is not None for h, _ in self._adasum_handles.values()):
            raise DDLInputError("optimizer.zero_grad() was called after loss.backward() but before "
                                "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                "cause a race condition.")
        super(_AdasumOptimizerMixin, self).zero_grad(set_to_none=set_to_none)

    def set_backward_passes_per_step(self, passes: int) -> None:
        if int(passes) < 1:
            raise DDLInputError(f"set_backward_passes_per_step({passes}): expected >= 1")
        self.backward_passes_per_step = int(passes)
        for p in self._adasum_delay:
            self._adasum_delay[p] = self.backward_passes_per_step
