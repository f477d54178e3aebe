"""Horovod's ``hvd.DistributedOptimizer`` for torch, on ddl_runtime's native optimizer engine.

The engine is ``ddl_runtime.torch``'s: post-accumulate-grad hooks count each gradient, a fixed
list of buckets (identical on every rank) is launched strictly in order as soon as all of a
bucket's gradients are ready (``allreduce_n_async``), and ``synchronize()`` waits.  What this
module adds is Horovod's contract on top of it:

* a gradient that is ``None`` on this rank is reduced as zeros (Horovod's "force allreduce":
  a parameter unused on some ranks gets the others' contribution, never a hang);
* ``compression`` (compress before, decompress after the reduction), ``op`` Average / Sum
  (Adasum: Horovod's delta optimizer, adasum_optimizer.py), ``gradient_predivide_factor`` (Average split into a pre-scale of
  1/f and a post-scale of f/size, as Horovod does), ``backward_passes_per_step``;
* ``groups`` / ``num_groups``: each group is one bucket (reduced together once all its
  gradients are ready); a parameter in no group is a bucket of its own;
* sparse gradients: reduced by allgathering indices and values (``sparse_as_dense=True``:
  densified, reduced with the rest, and made sparse again for the optimizer);
* ``synchronize()`` / ``skip_synchronize()`` and the warning for ``step()`` right after an
  explicit ``synchronize()``;
* ``process_set``: ranks outside the set leave their gradients alone; inside a set smaller
  than the job the reduction runs on the set's communicator.

A second ``step()`` after ``synchronize()`` (without ``skip_synchronize()``) warns as in
Horovod but does not reduce the already reduced gradients again.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Dict, Iterable, List, Optional, Sequence

import torch

import ddl_runtime as _ddl
import ddl_runtime.torch as _native
from ddl_runtime.checkpoint import stop as _stop
from ddl_runtime.errors import DDLInputError

from .adasum_optimizer import _AdasumOptimizerMixin
from .compression import Compression
from .functions import _is_global

__all__ = ["DistributedOptimizer"]

_STEP_AFTER_SYNC = ("optimizer.step() called without optimizer.skip_synchronize() context after "
                    "optimizer.synchronize(). This can cause training slowdown. You may want to "
                    "consider using optimizer.skip_synchronize() context if you use "
                    "optimizer.synchronize() in your code.")


def _common():
    from ddl_runtime.horovod import common
    return common


class _SetHandle:
    """A process-set reduction in flight (the native engine's handles reduce over the world)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def done(self) -> bool:
        from . import mpi_ops
        return bool(mpi_ops.poll(self._handle))

    def wait(self) -> list:
        from . import mpi_ops
        return list(mpi_ops.synchronize(self._handle))


class _Pending:
    """What one launched bucket needs at synchronize(): per dense tensor its parameter and
    compression context (for a flat bucket, its position in the bucket instead); the sparse
    parameters to reduce by allgather."""

    __slots__ = ("dense", "ctxs", "sparse", "positions")

    def __init__(self) -> None:
        self.dense: List[torch.Tensor] = []
        self.ctxs: List[Any] = []
        self.sparse: List[torch.Tensor] = []
        self.positions: Optional[List[int]] = None  # a flat bucket's: index of each dense parameter


class _HorovodOptimizerMixin(_native._DistributedOptimizerMixin):
    """Horovod's semantics over the native mixin (see the module docstring)."""

    def _hvd_setup(self, named_parameters, compression, backward_passes_per_step: int, op: Any,
                   gradient_predivide_factor: float, groups: Any, sparse_as_dense: bool,
                   process_set: Any) -> None:
        common = _common()
        if op not in (common.Average, common.Sum):
            raise DDLInputError(f"DistributedOptimizer: op={op!r} is not supported; use hvd.Average, hvd.Sum "
                                f"or hvd.Adasum")
        factor = float(gradient_predivide_factor)
        if factor != 1.0 and op != common.Average:
            raise DDLInputError("DistributedOptimizer: gradient_predivide_factor not supported with op != Average")
        if not factor > 0:
            raise DDLInputError(f"DistributedOptimizer: gradient_predivide_factor={gradient_predivide_factor!r} "
                                f"must be greater than 0")
        if not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
            raise DDLInputError("DistributedOptimizer: compression must be hvd.Compression.none, "
                                "hvd.Compression.fp16 or a Compressor with compress/decompress")
        if process_set is None:
            process_set = common.global_process_set
        self._hvd_compression = compression
        self._hvd_sparse_as_dense = bool(sparse_as_dense)
        self._hvd_process_set = process_set
        self._hvd_global = _is_global(process_set)
        self._hvd_average = op == common.Average
        self._hvd_op = op
        self.op = op
        self.gradient_predivide_factor = factor
        self._hvd_synchronized = False
        self._hvd_should_sync = True
        self._hvd_pending: Dict[int, tuple] = {}  # bucket index -> (_Pending, wire tensors)
        _native.init()
        if self._hvd_global:
            members = _ddl.size()
            self._hvd_included = True
        else:
            common.process_sets.check_known(process_set, "DistributedOptimizer")  # on every rank, in or out
            self._hvd_included = bool(process_set.included())
            members = process_set.size() if self._hvd_included else 1
        self._hvd_members = members
        # Average without a predivide factor lets the engine divide while unpacking; otherwise
        # the engine sums and the scaling happens here.
        if self._hvd_average and factor == 1.0:
            self._hvd_engine_op, self._hvd_pre, self._hvd_post = "avg", 1.0, 1.0
        elif self._hvd_average:
            self._hvd_engine_op, self._hvd_pre, self._hvd_post = "sum", 1.0 / factor, factor / members
        else:
            self._hvd_engine_op, self._hvd_pre, self._hvd_post = "sum", 1.0, 1.0
        self._ddl_setup(named_parameters, self._hvd_engine_op, backward_passes_per_step, None)
        if groups is not None:
            self._hvd_regroup(groups)
        self._hvd_flatten()

    # -- setup helpers ----------------------------------------------------------------------

    def _hvd_flatten(self) -> None:
        """Which buckets reduce as one flat array (the native engine's _Bucket.flatten: small CPU
        float buckets, copied straight into the shared-memory arena on one host): those of the
        whole job, without compression.  A compressor changes what travels per tensor, and a
        process set reduces on its own communicator, so those keep the per-tensor path."""
        flat = (self._hvd_global and self._hvd_compression is Compression.none and self._ddl_size > 1)
        for bucket in self._ddl_buckets:
            if not flat:
                bucket.flat = None
            elif bucket.flat is None and _native._flattens(bucket):
                bucket.flatten(self._hvd_engine_op)

    def _ddl_check_consistent(self, names) -> None:
        # Parameters and groups must match on every rank; options (lr, betas...) may differ until
        # broadcast_optimizer_state() sets the root's, as Horovod allows.  A process set's members
        # may run a different model from the rest of the job: no world-wide comparison there.
        if getattr(self, "_hvd_global", True):
            _native._check_optimizer_consistent(self, names, options=False)

    def _hvd_regroup(self, groups: Any) -> None:
        """Replace the size-based buckets by Horovod's explicit groups."""
        order = [p for b in self._ddl_buckets for p in b.params]  # backward (reversed) order
        position = {p: i for i, p in enumerate(order)}
        if isinstance(groups, bool) or not isinstance(groups, (int, list, tuple)):
            raise DDLInputError("DistributedOptimizer: groups must be a number of groups or a list of "
                                "lists of parameters")
        if isinstance(groups, int):
            if groups < 0:
                raise DDLInputError(f"DistributedOptimizer: groups={groups} must be >= 0")
            if groups == 0 or not order:
                return
            forward = list(reversed(order))
            parts = [list(part) for part in _split(forward, groups) if part]
        else:
            parts, seen = [], set()
            for g, group in enumerate(groups):
                part = []
                for p in group:
                    if not isinstance(p, torch.Tensor) or p not in position:
                        raise DDLInputError(f"DistributedOptimizer: groups[{g}] holds something that is not a "
                                            f"trainable parameter of this optimizer")
                    if p in seen:
                        raise DDLInputError(f"DistributedOptimizer: parameter {self._ddl_names[p]!r} is in "
                                            f"more than one group")
                    seen.add(p)
                    part.append(p)
                if part:
                    parts.append(part)
            parts += [[p] for p in order if p not in seen]
        # A bucket is ready when its last gradient arrives: launch order = that arrival order.
        parts.sort(key=lambda part: max(position[p] for p in part))
        self._ddl_buckets = [_native._Bucket(i, sorted(part, key=position.get),
                                             [self._ddl_names[p] for p in sorted(part, key=position.get)],
                                             stop_slot=i == len(parts) - 1)
                             for i, part in enumerate(parts)]
        self._ddl_bucket_of = {p: b for b in self._ddl_buckets for p in b.params}

    # -- reductions --------------------------------------------------------------------------

    @property
    def _parameter_names(self) -> Dict[torch.Tensor, str]:
        return self._ddl_names

    def _ddl_launch(self, bucket) -> None:  # called by the native hooks, in bucket order
        bucket.launched = True
        self._ddl_next = bucket.index + 1
        bucket.handle = None
        if not self._hvd_reducing():  # outside the process set (or alone in it): nothing to do
            return
        if bucket.flat is not None:
            self._hvd_launch_flat(bucket)
            return
        pending = _Pending()
        tensors: List[torch.Tensor] = []
        names: List[str] = []
        for p in bucket.params:
            if p.grad is None:
                # Not computed here (unused this step): reduce zeros, as Horovod does, so the
                # ranks that did compute it are not left waiting.
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
            grad = p.grad
            if grad.is_sparse:
                if not self._hvd_sparse_as_dense:
                    pending.sparse.append(p)
                    continue
                grad = grad.to_dense()
            elif not grad.is_contiguous():
                p.grad = grad = grad.contiguous()
            wire, ctx = self._hvd_compression.compress(grad)
            if self._hvd_pre != 1.0:
                wire = wire.mul_(self._hvd_pre) if wire is p.grad else wire * self._hvd_pre
            tensors.append(wire)
            names.append(self._ddl_names[p])
            pending.dense.append(p)
            pending.ctxs.append(ctx)
        if not tensors:
            pass
        elif self._hvd_global:
            bucket.handle = _ddl.allreduce_n_async(tensors, op=self._hvd_engine_op, names=names)
        else:
            from . import mpi_ops
            op = _common().Average if self._hvd_engine_op == "avg" else _common().Sum
            bucket.handle = _SetHandle(mpi_ops.grouped_allreduce_async_(
                tensors, name=f"DistributedOptimizer.bucket{bucket.index}.{names[0]}", op=op,
                process_set=self._hvd_process_set))
        self._hvd_pending[bucket.index] = (pending, tensors)

    def _hvd_launch_flat(self, bucket) -> None:
        """_ddl_launch for a flat bucket: every dense gradient (zeros for one this rank did not
        compute, as Horovod does; a sparse one densified with sparse_as_dense) copied into the
        array the bucket's FlatAllreduce hands out, pre-scaled there, and the reduction started.
        A sparse gradient otherwise leaves zeros in its place and is reduced by allgather."""
        pending = _Pending()
        pending.positions = []
        parts, flags = bucket.views_of(bucket.flat.buffer())
        into: List[torch.Tensor] = []
        grads: List[torch.Tensor] = []
        for j, p in enumerate(bucket.params):
            if p.grad is None:
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
            grad = p.grad
            if grad.is_sparse:
                if not self._hvd_sparse_as_dense:
                    parts[j].zero_()
                    pending.sparse.append(p)
                    continue
                grad = grad.to_dense()
            into.append(parts[j])
            grads.append(grad)
            pending.dense.append(p)
            pending.positions.append(j)
        if into:
            torch._foreach_copy_(into, grads)
            if self._hvd_pre != 1.0:
                torch._foreach_mul_(into, self._hvd_pre)
        flags.fill_(1.0)  # the flat array's tail: presence flags (unused here), then the stop slot
        if bucket.stop_slot and _stop.slot_value() != _stop.GO:
            flags[-1] = _stop.slot_value()
        bucket.handle = bucket.flat.start()
        self._hvd_pending[bucket.index] = (pending, [])

    def _hvd_store_flat(self, bucket, pending: _Pending, out: Any) -> None:
        """The reduced flat array back into the gradients (post-scaled on the way)."""
        parts, flags = bucket.views_of(out)
        if bucket.stop_slot:  # the stop agreement rode along (ddl_runtime.checkpoint.stop)
            go = float(flags[-1])
            _stop.post_folded(go / self._hvd_members if self._hvd_engine_op == "sum" else go, self._hvd_members)
        dense, values = [], []
        for p, j in zip(pending.dense, pending.positions):
            if p.grad.is_sparse:  # sparse_as_dense: made sparse again for the optimizer
                self._hvd_store(p, parts[j], None)
            else:
                dense.append(p.grad)
                values.append(parts[j])
        if dense:
            if self._hvd_post != 1.0:
                values = torch._foreach_mul(values, self._hvd_post)
            torch._foreach_copy_(dense, values)

    def _hvd_reducing(self) -> bool:
        return self._hvd_included and self._hvd_members > 1

    def synchronize(self) -> None:
        """Wait for every gradient reduction of this step (starting those not started yet)."""
        if self._ddl_size == 1 and self._hvd_global:
            self._hvd_synchronized = self._ddl_synced = True
            return
        while self._ddl_next < len(self._ddl_buckets):
            self._ddl_launch(self._ddl_buckets[self._ddl_next])
        try:
            for bucket in self._ddl_buckets:
                pending, tensors = self._hvd_pending.pop(bucket.index, (None, []))
                if pending is None:
                    continue
                if pending.positions is not None:
                    self._hvd_store_flat(bucket, pending, bucket.handle.wait())
                else:
                    results = bucket.handle.wait() if bucket.handle is not None else tensors
                    for p, out, ctx in zip(pending.dense, results, pending.ctxs):
                        self._hvd_store(p, out, ctx)
                bucket.handle = None
                for p in pending.sparse:
                    self._hvd_store_sparse(p)
        finally:
            self._hvd_pending.clear()
            self._ddl_reset()
        self._hvd_synchronized = self._ddl_synced = True

    def _hvd_store(self, p: torch.Tensor, out: Any, ctx: Any) -> None:
        value = out if isinstance(out, torch.Tensor) else _native._as_tensor_result(out, p.grad)
        value = self._hvd_compression.decompress(value, ctx)
        if self._hvd_post != 1.0:
            value = value.mul_(self._hvd_post) if value is p.grad else value * self._hvd_post
        if p.grad.is_sparse:
            p.grad.zero_().add_(value.to_sparse() if not value.is_sparse else value)
        elif value is not p.grad:
            p.grad.copy_(value)

    def _hvd_store_sparse(self, p: torch.Tensor) -> None:
        """Sum (or average) a sparse gradient across ranks: allgather indices and values."""
        from .functions import _allgather
        grad = p.grad.coalesce()
        name = self._ddl_names[p]
        indices = _allgather(grad.indices().t().contiguous(), f"{name}.indices", self._hvd_process_set)
        values = _allgather(grad.values().contiguous(), f"{name}.values", self._hvd_process_set)
        if self._hvd_average:
            values = values / self._hvd_members
        total = torch.sparse_coo_tensor(indices.t(), values, grad.size(), check_invariants=False).coalesce()
        p.grad.zero_().add_(total)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """``step()`` inside this block does not synchronize (call ``synchronize()`` first)."""
        self._hvd_should_sync = False
        try:
            yield
        finally:
            self._hvd_should_sync = True

    def step(self, closure=None):
        """Average the gradients (unless inside ``skip_synchronize()``), then step."""
        if closure is not None and self._hvd_reducing():
            raise DDLInputError("DistributedOptimizer.step(closure): closures re-run backward and are not "
                                "supported with gradient averaging; call backward() yourself, then step()")
        if self._hvd_should_sync:
            if self._hvd_synchronized:
                warnings.warn(_STEP_AFTER_SYNC)
            else:
                self.synchronize()
        base = super(_native._DistributedOptimizerMixin, self)
        out = base.step(closure) if closure is not None else base.step()
        self._hvd_synchronized = self._ddl_synced = False
        self._ddl_reset()
        self._ddl_stats.end_step(self._ddl_bytes if self._hvd_reducing() else 0)   # core/stats.py
        return out

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._hvd_pending and not self._ddl_synced:
            raise DDLInputError("optimizer.zero_grad() was called after loss.backward() but before "
                                "optimizer.step() or optimizer.synchronize(); the gradient reductions "
                                "in flight would be lost")
        self._ddl_reset()
        super(_native._DistributedOptimizerMixin, self).zero_grad(set_to_none=set_to_none)

    def set_backward_passes_per_step(self, passes: int) -> None:
        if int(passes) < 1:
            raise DDLInputError(f"set_backward_passes_per_step({passes}): expected >= 1")
        self._ddl_passes = int(passes)
        self.backward_passes_per_step = int(passes)
        self._ddl_reset()

    def load_state_dict(self, *args, **kwargs):
        self._hvd_pending.clear()
        self._ddl_reset()
        self._hvd_synchronized = self._ddl_synced = False
        return super(_native._DistributedOptimizerMixin, self).load_state_dict(*args, **kwargs)


def _split(items: Sequence[Any], n: int) -> List[List[Any]]:
    """``items`` in ``n`` contiguous parts whose lengths differ by at most one (first ones longer)."""
    base, extra = divmod(len(items), n)
    parts, start = [], 0
    for i in range(n):
        end = start + base + (1 if i < extra else 0)
        parts.append(list(items[start:end]))
        start = end
    return parts


def DistributedOptimizer(optimizer: torch.optim.Optimizer, named_parameters: Optional[Iterable] = None,
                         compression: Any = Compression.none, backward_passes_per_step: int = 1,
                         op: Any = None, gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                         groups: Any = None, sparse_as_dense: bool = False, process_set: Any = None):
    """Wrap ``optimizer`` so that ``step()`` uses gradients reduced across ranks (Horovod's API).

    Returns an object of a subclass of the optimizer's own class sharing its parameter groups
    and state; use it from then on.  Arguments as in Horovod: ``named_parameters`` (names for
    errors and the timeline; unique, covering every parameter), ``compression``
    (``hvd.Compression.none`` / ``.fp16``), ``backward_passes_per_step`` (accumulate locally,
    reduce every N backward passes), ``op`` (``hvd.Average`` default, ``hvd.Sum``, ``hvd.Adasum``:
    Horovod's delta optimizer), ``gradient_predivide_factor``, ``num_groups`` (deprecated: ``groups=N``),
    ``groups`` (N groups, or a list of lists of parameters reduced together),
    ``sparse_as_dense``, ``process_set``.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise DDLInputError(f"DistributedOptimizer: optimizer is a {type(optimizer).__name__}, "
                            f"not a torch.optim.Optimizer")
    if isinstance(optimizer, _native._DistributedOptimizerMixin):
        raise DDLInputError("DistributedOptimizer: this optimizer is already distributed")
    if op is None:
        op = _common().Average
    if num_groups and groups is None:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        groups = int(num_groups)
    if named_parameters is not None:
        named_parameters = list(named_parameters)
        if any(not isinstance(item, tuple) for item in named_parameters):
            raise DDLInputError("named_parameters should be a sequence of tuples (name, parameter), "
                                "usually produced by model.named_parameters().")
    adasum = op == _common().Adasum
    if adasum:
        if float(gradient_predivide_factor) != 1.0:
            raise DDLInputError("DistributedOptimizer: gradient_predivide_factor not supported with op != Average")
        from .mpi_ops import _adasum
        _adasum(process_set, "DistributedOptimizer")  # Horovod's refusals: a process set, 2^k ranks
        adasum = _common().size() > 1
        op = op if adasum else _common().Sum  # one rank: Adasum of one delta is the delta itself
    base = optimizer.__class__
    cls = type(base.__name__, (_AdasumOptimizerMixin if adasum else _HorovodOptimizerMixin, base), {})
    cls.__module__ = __name__
    obj = cls.__new__(cls)
    state = dict(optimizer.__dict__)
    state.pop("step", None)  # an LR scheduler's per-instance wrapper bound to the old object
    obj.__dict__.update(state)
    obj.backward_passes_per_step = int(backward_passes_per_step)
    if adasum:
        obj.op = op
        obj._adasum_setup(named_parameters, compression, backward_passes_per_step)
        return obj
    obj._hvd_setup(named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                   groups, sparse_as_dense, process_set)
    return obj
