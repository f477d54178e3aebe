"""Rank-local variables (Horovod >= 0.27's model-parallel support), shared by the Keras optimizer
and TensorFlow's gradient tape.

A registered local variable's gradient is not reduced over the ranks: it stays this rank's own,
divided by the number of ranks when ``scale_local_gradients`` is true (Horovod's default; the
learning rate is usually scaled by ``size()``, see horovod pull 3695).  Every other gradient is
reduced as usual.  Variables are matched by identity, so every rank must register the variables
at the same positions (their shapes may differ between ranks).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Sequence

from ddl_runtime.errors import DDLInputError

__all__ = ["LocalVariables", "local_layer_variables"]


def local_layer_variables(local_layers: Any, who: str) -> List[Any]:
    """The trainable variables of ``local_layers`` (None, one Keras layer, or a collection of them)."""
    if local_layers is None:
        return []
    import keras

    if isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    try:
        layers = list(local_layers)
    except TypeError:
        raise DDLInputError(f"{who}: local_layers must be a Keras layer or a list of them, got "
                            f"{type(local_layers).__name__}") from None
    for layer in layers:
        if not isinstance(layer, keras.layers.Layer):
            raise DDLInputError(f"{who}: every local layer must be a keras.layers.Layer, got {type(layer).__name__}")
    return [v for layer in layers for v in layer.trainable_weights]


def _divide(grad: Any, n: int) -> Any:
    if type(grad).__name__ == "IndexedSlices":
        import tensorflow as tf
        return tf.IndexedSlices(grad.values / n, grad.indices, grad.dense_shape)
    return grad / n


class LocalVariables:
    """The variables registered as rank-local, and the gradient exchange that leaves them out."""

    def __init__(self, scale_local_gradients: bool = True) -> None:
        self.scale = bool(scale_local_gradients)
        self._vars: Dict[int, Any] = {}  # id -> variable (held, so the id stays unique)

    def register(self, variables: Iterable[Any]) -> None:
        for v in variables:
            self._vars[id(v)] = v

    def __contains__(self, variable: Any) -> bool:
        return id(variable) in self._vars

    def __bool__(self) -> bool:
        return bool(self._vars)

    def exchange(self, grads: Sequence[Any], sources: Sequence[Any], size: int,
                 reduce: Callable[[List[Any], List[Any]], List[Any]]) -> List[Any]:
        """``grads`` with the shared ones replaced by ``reduce(grads, sources)`` of the shared ones
        (None stays None) and the local ones kept, divided by ``size`` when scaling."""
        out = list(grads)
        shared = [i for i, g in enumerate(grads) if g is not None and sources[i] not in self]
        if shared:
            for i, r in zip(shared, reduce([grads[i] for i in shared], [sources[i] for i in shared])):
                out[i] = r
        if self.scale and self._vars and size > 1:
            for i, g in enumerate(grads):
                if g is not None and sources[i] in self:
                    out[i] = _divide(g, size)
        return out
