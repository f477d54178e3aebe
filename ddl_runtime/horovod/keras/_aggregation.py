"""Horovod's ``backward_passes_per_step`` for Keras 3 optimizers (TensorFlow and torch backends).

Horovod's Keras semantics (horovod/tensorflow/gradient_aggregation*.py): each call of
``apply`` adds this rank's gradients to a local sum; on every N-th call the sums are exchanged
over the ranks once (the optimizer's usual reduction: Average or Sum over ranks), divided by N
when ``average_aggregated_gradients=True``, applied, and reset.  On the other calls nothing is
applied, but ``optimizer.iterations`` still advances by one, so learning-rate schedules and
Adam's bias correction count backward passes, as under Horovod.

This differs from Keras 3's own ``gradient_accumulation_steps``, which always averages over the
N steps and counts ``iterations`` in updates (and, combined with DistributedOptimizer, would
reduce at every step).  The sums are not optimizer variables: they are neither saved with the
model nor broadcast by BroadcastGlobalVariablesCallback (each rank's partial sums are its own).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

import keras

__all__ = ["LocalAggregation", "to_dense"]

Exchange = Callable[[List[Any], Sequence[Any]], List[Any]]
Apply = Callable[[List[Any], Sequence[Any]], Any]


def to_dense(grad: Any) -> Any:
    """TensorFlow IndexedSlices (embedding gradients) become dense tensors."""
    if type(grad).__name__ == "IndexedSlices":
        import tensorflow as tf
        return tf.convert_to_tensor(grad)
    return grad


class LocalAggregation:
    """Local gradient sums over ``passes`` calls of ``apply``; one exchange and one update per cycle."""

    def __init__(self, passes: int, average: bool) -> None:
        self.passes = passes
        self.average = bool(average)
        self._sums: Dict[int, Any] = {}  # id(variable) -> running sum
        self._count: Any = None

    def step(self, optimizer: Any, grads: List[Any], variables: Sequence[Any], exchange: Exchange,
             apply: Apply) -> None:
        if keras.backend.backend() == "tensorflow":
            self._step_tf(optimizer, grads, variables, exchange, apply)
        else:
            self._step_eager(optimizer, grads, variables, exchange, apply)

    def _finish(self, sums: List[Any], variables: Sequence[Any], exchange: Exchange) -> List[Any]:
        out = exchange(sums, variables)
        if self.average:
            out = [g if g is None else g / self.passes for g in out]
        return out

    def _step_tf(self, optimizer, grads, variables, exchange, apply) -> None:
        """Inside the compiled train step as well as eagerly: the decision is a tf.cond on a counter."""
        import tensorflow as tf

        present = [i for i, g in enumerate(grads) if g is not None]
        with tf.init_scope():  # created once, outside any tf.function being traced
            if self._count is None:
                self._count = tf.Variable(0, dtype=tf.int64, trainable=False, name="hvd_backward_passes")
            for i in present:
                if id(variables[i]) not in self._sums:
                    self._sums[id(variables[i])] = tf.Variable(tf.zeros(variables[i].shape, grads[i].dtype),
                                                               trainable=False, name="hvd_gradient_sum")
        sums = [self._sums[id(variables[i])] for i in present]
        for s, i in zip(sums, present):
            s.assign_add(to_dense(grads[i]))
        count = self._count.assign_add(1)

        def update():
            totals: List[Any] = [None] * len(grads)
            for s, i in zip(sums, present):
                totals[i] = s.read_value()
            apply(self._finish(totals, variables, exchange), variables)
            for s in sums:
                s.assign(tf.zeros_like(s))
            self._count.assign(0)
            return tf.constant(True)

        def skip():
            optimizer._iterations.assign_add(1)
            return tf.constant(False)

        tf.cond(tf.equal(count, self.passes), update, skip)

    def _step_eager(self, optimizer, grads, variables, exchange, apply) -> None:
        """torch backend: everything runs eagerly, so plain Python decides."""
        for v, g in zip(variables, grads):
            if g is not None:
                g = g.detach() if hasattr(g, "detach") else g
                prev = self._sums.get(id(v))
                self._sums[id(v)] = g.clone() if prev is None else prev + g
        self._count = (self._count or 0) + 1
        if self._count < self.passes:
            optimizer._iterations.assign_add(1)
            return
        totals = [self._sums.get(id(v)) if g is not None else None for v, g in zip(variables, grads)]
        self._sums.clear()
        self._count = 0
        apply(self._finish(totals, variables, exchange), variables)
