"""Horovod's ``DistributedOptimizer`` for Keras 3 optimizers (TensorFlow and torch backends).

Keras 3 optimizers update through ``apply(grads, trainable_variables)`` (``apply_gradients``
and ``model.fit``'s train step both end there), so the wrapper reduces the gradients at the
start of ``apply``: compress, optional pre-division, one fused ``allreduce_n`` over all
gradients (``ddl_runtime.tensorflow`` on TensorFlow, which also works inside the compiled
``tf.function`` step; the core runtime on torch tensors), post-scaling, decompress.
Gradients that are None stay None (every rank must have the same ones: the tensors are named
after their variables, so a rank that differs gets a mismatch error naming the variable).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import keras

from ddl_runtime.errors import DDLInputError
from ddl_runtime.horovod.common import Average, global_process_set, size
from ddl_runtime.horovod.common.basics import reduce_op
from ddl_runtime.keras import _mix_in

from .compression import Compression

__all__ = ["DistributedOptimizer"]


def _reduce_op(op: Any, who: str) -> str:
    name = reduce_op(op, None, who)
    if name not in ("average", "sum"):
        raise DDLInputError(f"{who}: op={name} is not supported for gradients; use op=hvd.Average or hvd.Sum")
    return "avg" if name == "average" else "sum"


def _to_dense(grad: Any) -> Any:
    """TensorFlow IndexedSlices (embedding gradients) become dense tensors before the reduction."""
    if type(grad).__name__ == "IndexedSlices":
        import tensorflow as tf
        return tf.convert_to_tensor(grad)
    return grad


def _grouped_allreduce(tensors: List[Any], op: str, names: List[str]) -> List[Any]:
    """One fused allreduce of the gradients on Keras's backend; returns the reduced tensors."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import ddl_runtime.tensorflow as ddl_tf
        return list(ddl_tf.allreduce_n(tensors, op=op, names=names))
    if backend == "torch":
        import ddl_runtime as ddl
        tensors = [t.detach().contiguous().clone() for t in tensors]
        return list(ddl.allreduce_n(tensors, op=op, names=names))
    raise DDLInputError(f"DistributedOptimizer: the {backend!r} Keras backend is not supported; "
                        f"use KERAS_BACKEND=tensorflow or torch")


class _HorovodOptimizerMixin:
    """Mixed in before the optimizer's own class: ``apply`` reduces the gradients first."""

    _hvd_op = "avg"
    _hvd_compression: Any = Compression.none
    _hvd_predivide = 1.0
    _hvd_name = "DistributedOptimizer"

    def apply(self, grads, trainable_variables=None):  # type: ignore[override]
        grads = list(grads)
        if size() > 1 and grads:
            variables = list(trainable_variables) if trainable_variables is not None else list(
                self._trainable_variables)
            grads = self._hvd_reduce(grads, variables)
        return super().apply(grads, trainable_variables)  # type: ignore[misc]

    def _hvd_reduce(self, grads: List[Any], variables: Sequence[Any]) -> List[Any]:
        if len(grads) != len(variables):
            raise DDLInputError(f"{self._hvd_name}: {len(grads)} gradients for {len(variables)} variables")
        idx = [i for i, g in enumerate(grads) if g is not None]
        if not idx:
            return grads
        compression = self._hvd_compression
        sent, ctxs = [], []
        for i in idx:
            g = _to_dense(grads[i])
            if self._hvd_predivide != 1.0:
                g = g * (1.0 / self._hvd_predivide)
            c, ctx = compression.compress(g)
            sent.append(c)
            ctxs.append(ctx)
        names = [f"{self._hvd_name}/grad/{getattr(variables[i], 'path', None) or i}" for i in idx]
        op = "sum" if self._hvd_predivide != 1.0 else self._hvd_op
        reduced = _grouped_allreduce(sent, op, names)
        out = list(grads)
        post = self._hvd_predivide / size() if self._hvd_predivide != 1.0 and self._hvd_op == "avg" else None
        for i, r, ctx in zip(idx, reduced, ctxs):
            r = compression.decompress(r, ctx)
            out[i] = r * post if post is not None else r
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
    as in Horovod.  ``num_groups`` / ``groups`` only steer Horovod's fusion: here every
    gradient goes into one fused call, so they are accepted and change nothing.
    ``device_dense`` / ``device_sparse`` are accepted for compatibility.  IndexedSlices are
    always reduced as dense tensors (Horovod's ``sparse_as_dense=True``).  Changes
    ``optimizer`` in place (its class becomes a same-named subclass) and returns it.
    """
    who = "DistributedOptimizer"
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise DDLInputError(f"{who}: optimizer is a {type(optimizer).__name__}, not a keras.optimizers.Optimizer "
                            f"(Keras 3)")
    reduce_op = _reduce_op(op, who)
    if backward_passes_per_step != 1:
        raise DDLInputError(f"{who}: backward_passes_per_step={backward_passes_per_step} is not supported for "
                            f"Keras 3 optimizers; use the optimizer's own gradient_accumulation_steps="
                            f"{backward_passes_per_step} (each step's gradients are then reduced)")
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
    optimizer._hvd_op = reduce_op
    optimizer._hvd_compression = compression
    optimizer._hvd_predivide = factor
    optimizer._hvd_name = name or f"Distributed{optimizer.__class__.__name__}"
    return optimizer

