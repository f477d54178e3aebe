"""Horovod's ``DistributedOptimizer`` / ``PartialDistributedOptimizer`` for Keras 3 optimizers
(TensorFlow and torch backends).

Keras 3 optimizers update through ``apply(grads, trainable_variables)`` (``apply_gradients``
and ``model.fit``'s train step both end there), so the wrapper reduces the gradients at the
start of ``apply``: compress, optional pre-division, one fused ``allreduce_n`` over all
gradients (``ddl_runtime.tensorflow`` on TensorFlow, which also works inside the compiled
``tf.function`` step; the core runtime on torch tensors), post-scaling, decompress.
Gradients that are None stay None (every rank must have the same ones: the tensors are named
after their variables, so a rank that differs gets a mismatch error naming the variable).
Gradients of rank-local variables (``register_local_var``, ``PartialDistributedOptimizer``'s
``local_layers``) are not reduced (:mod:`ddl_runtime.horovod.common.local_gradients`);
``backward_passes_per_step > 1`` accumulates locally first (:mod:`._aggregation`).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import keras

from ddl_runtime.errors import DDLInputError
from ddl_runtime.horovod.common import Average, global_process_set, size
from ddl_runtime.horovod.common.basics import reduce_op
from ddl_runtime.horovod.common.local_gradients import LocalVariables, local_layer_variables
from ddl_runtime.core.stats import gradient_reduction
from ddl_runtime.keras import _mix_in, reduce_torch_gradients

from ._aggregation import LocalAggregation, to_dense
from ._keras2 import REMOVED_ATTRIBUTES, not_a_keras3_optimizer, removed_attribute
from .compression import Compression

__all__ = ["DistributedOptimizer", "PartialDistributedOptimizer"]


def _reduce_op(op: Any, who: str) -> str:
    name = reduce_op(op, None, who)
    if name not in ("average", "sum"):
        raise DDLInputError(f"{who}: op={name} is not supported for gradients; use op=hvd.Average or hvd.Sum")
    return "avg" if name == "average" else "sum"


def _grouped_allreduce(tensors: List[Any], op: str, names: List[str]) -> List[Any]:
    """One fused allreduce of the gradients on Keras's backend; returns the reduced tensors."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import ddl_runtime.tensorflow as ddl_tf
        with gradient_reduction():  # each run of it ends a step in this rank's record (core/stats.py)
            return list(ddl_tf.allreduce_n(tensors, op=op, names=names))
    if backend == "torch":
        import ddl_runtime as ddl
        tensors = [t.detach().contiguous().clone() for t in tensors]
        return list(reduce_torch_gradients(lambda: ddl.allreduce_n(tensors, op=op, names=names), tensors))
    raise DDLInputError(f"DistributedOptimizer: the {backend!r} Keras backend is not supported; "
                        f"use KERAS_BACKEND=tensorflow or torch")


class _HorovodState:
    """The wrapper's settings, in one plain object (Keras tracks variables, lists and dicts set
    as optimizer attributes; this keeps the local sums and local variables out of
    ``optimizer.variables``)."""

    def __init__(self, name: str, op: str, compression: Any, predivide: float, local: LocalVariables,
                 aggregation: Optional[LocalAggregation]) -> None:
        self.name, self.op, self.compression, self.predivide = name, op, compression, predivide
        self.local, self.aggregation = local, aggregation


class _HorovodOptimizerMixin:
    """Mixed in before the optimizer's own class: ``apply`` reduces the gradients first."""

    _hvd: _HorovodState

    def apply(self, grads, trainable_variables=None):  # type: ignore[override]
        grads = list(grads)
        if not grads:
            return super().apply(grads, trainable_variables)  # type: ignore[misc]
        variables = list(trainable_variables) if trainable_variables is not None else list(
            self._trainable_variables)
        if len(grads) != len(variables):
            raise DDLInputError(f"{self._hvd.name}: {len(grads)} gradients for {len(variables)} variables")
        aggregation = self._hvd.aggregation
        if aggregation is None:
            return super().apply(self._hvd_exchange(grads, variables), trainable_variables)  # type: ignore[misc]
        if not self.built:  # build outside the conditional update (Keras would build inside it)
            with keras.name_scope(self.name, caller=self):
                self.build(variables)
        aggregation.step(self, grads, variables, self._hvd_exchange,
                         lambda g, v: super(_HorovodOptimizerMixin, self).apply(g, v))
        return None

    def register_local_var(self, var: Any) -> None:
        """Horovod's API: ``var``'s gradient stays on this rank (not reduced over the ranks)."""
        self._hvd.local.register([var])

    def __getattr__(self, name: str) -> Any:  # only reached for attributes the optimizer lacks
        if name in REMOVED_ATTRIBUTES:
            raise removed_attribute(self, name)
        parent = getattr(super(), "__getattr__", None)
        if parent is not None:
            return parent(name)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def _hvd_exchange(self, grads: List[Any], variables: Sequence[Any]) -> List[Any]:
        """Shared gradients reduced over the ranks, local ones kept (scaled): Horovod's exchange."""
        return self._hvd.local.exchange(grads, variables, size(), self._hvd_reduce)

    def _hvd_reduce(self, grads: List[Any], variables: Sequence[Any]) -> List[Any]:
        """One fused reduction of present (non-None) gradients over all ranks."""
        if size() == 1:
            return grads
        state = self._hvd
        sent, ctxs = [], []
        for g in grads:
            g = to_dense(g)
            if state.predivide != 1.0:
                g = g * (1.0 / state.predivide)
            c, ctx = state.compression.compress(g)
            sent.append(c)
            ctxs.append(ctx)
        names = [f"{state.name}/grad/{getattr(v, 'path', None) or i}" for i, v in enumerate(variables)]
        op = "sum" if state.predivide != 1.0 else state.op
        reduced = _grouped_allreduce(sent, op, names)
        post = state.predivide / size() if state.predivide != 1.0 and state.op == "avg" else None
        out = []
        for r, ctx in zip(reduced, ctxs):
            r = state.compression.decompress(r, ctx)
            out.append(r * post if post is not None else r)
        return out


def DistributedOptimizer(optimizer: "keras.optimizers.Optimizer", name: Optional[str] = None,
                         device_dense: str = "", device_sparse: str = "", compression: Any = None,
                         sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                         op: Any = Average, backward_passes_per_step: int = 1,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: Any = None, process_set: Any = global_process_set,
                         scale_local_gradients: bool = True) -> "keras.optimizers.Optimizer":
    """Make a Keras 3 optimizer reduce gradients over all ranks before every update (Horovod's API).

    ``compression`` (``Compression.none`` / ``.fp16``, from this module, ``horovod.tensorflow``
    or ``horovod.torch``), ``op`` (Average or Sum; Adasum is not supported) and
    ``gradient_predivide_factor`` (divide before the sum, multiply by factor / size after) behave
    as in Horovod.  ``backward_passes_per_step=N`` accumulates gradients locally and reduces and
    applies them on every N-th step only (summed, or averaged over the N passes with
    ``average_aggregated_gradients=True``; ``optimizer.iterations`` counts every pass), as
    Horovod's Keras optimizer does.  ``register_local_var(var)`` keeps ``var``'s gradient on
    this rank (divided by ``size()`` when ``scale_local_gradients``).  ``num_groups`` /
    ``groups`` only steer Horovod's fusion: here every gradient goes into one fused call, so
    they are accepted and change nothing.  ``device_dense`` / ``device_sparse`` are accepted for
    compatibility.  IndexedSlices are always reduced as dense tensors (Horovod's
    ``sparse_as_dense=True``).  Changes ``optimizer`` in place (its class becomes a same-named
    subclass) and returns it.
    """
    who = "DistributedOptimizer"
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise not_a_keras3_optimizer(optimizer, who)
    reduce_op = _reduce_op(op, who)
    passes = _passes(backward_passes_per_step, who)
    if passes > 1 and getattr(optimizer, "gradient_accumulation_steps", None):
        raise DDLInputError(f"{who}: backward_passes_per_step={passes} and the optimizer's own "
                            f"gradient_accumulation_steps={optimizer.gradient_accumulation_steps} both accumulate; "
                            f"use one of them")
    try:
        factor = float(gradient_predivide_factor)
    except (TypeError, ValueError):
        raise DDLInputError(f"{who}: gradient_predivide_factor must be a number, got "
                            f"{gradient_predivide_factor!r}") from None
    if not factor > 0:
        raise DDLInputError(f"{who}: gradient_predivide_factor must be > 0, got {gradient_predivide_factor!r}")
    if factor != 1.0 and reduce_op != "avg":
        raise DDLInputError(f"{who}: gradient_predivide_factor needs op=Average")
    if process_set is not global_process_set and getattr(process_set, "size", lambda: size())() != size():
        raise DDLInputError(f"{who}: only the global process set is supported for Keras optimizers")
    if compression is None:
        compression = Compression.none
    if not (callable(getattr(compression, "compress", None)) and callable(getattr(compression, "decompress", None))):
        raise DDLInputError(f"{who}: compression must be Compression.none or Compression.fp16, got {compression!r}")
    _mix_in(optimizer, _HorovodOptimizerMixin)
    optimizer._hvd = _HorovodState(
        name=name or f"Distributed{optimizer.__class__.__name__}", op=reduce_op, compression=compression,
        predivide=factor, local=LocalVariables(scale_local_gradients),
        aggregation=LocalAggregation(passes, average_aggregated_gradients) if passes > 1 else None)
    return optimizer


def PartialDistributedOptimizer(optimizer: "keras.optimizers.Optimizer", name: Optional[str] = None,
                                device_dense: str = "", device_sparse: str = "", compression: Any = None,
                                sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                                op: Any = Average, backward_passes_per_step: int = 1,
                                average_aggregated_gradients: bool = False, groups: Any = None,
                                process_set: Any = global_process_set, local_layers: Any = None,
                                scale_local_gradients: bool = True) -> "keras.optimizers.Optimizer":
    """:func:`DistributedOptimizer` whose ``local_layers``' (a Keras layer or a list of them)
    trainable variables keep their gradients on this rank (Horovod >= 0.27, model parallelism):
    not reduced, divided by ``size()`` when ``scale_local_gradients``.  Without local layers it
    is DistributedOptimizer."""
    local = local_layer_variables(local_layers, "PartialDistributedOptimizer")
    optimizer = DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse, compression=compression,
        sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step, average_aggregated_gradients=average_aggregated_gradients,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    optimizer._hvd.local.register(local)
    return optimizer


def _passes(value: Any, who: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DDLInputError(f"{who}: backward_passes_per_step must be an integer >= 1, got {value!r}")
    return value
