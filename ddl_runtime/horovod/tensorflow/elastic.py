"""``horovod.tensorflow.elastic`` (``hvd.elastic``): TensorFlowState, TensorFlowKerasState, ``run``.

TensorFlow 2 eager only (as Horovod's TF2 support): variables are tracked as numpy copies.  See
ddl_runtime/horovod/common/elastic.py: no workers come or go here; in a chained wml job
``commit()`` is the step boundary (save and exit 75 on a stop).
"""
from __future__ import annotations

from typing import Any, Callable, List

from ddl_runtime.errors import DDLInputError

from ..common.basics import rank
from ..common.elastic import ModelState, ObjectState, State, VariablesState, run_fn  # noqa: F401
from .functions import broadcast_object, broadcast_variables

__all__ = ["State", "ObjectState", "TensorFlowState", "TensorFlowKerasState", "run"]


class _VariablesState(VariablesState):
    """Variables (eager TensorFlow 2 or Keras 3 on TensorFlow), broadcast with horovod.tensorflow's op."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def _broadcast(self, variables: List[Any]) -> None:
        broadcast_variables(variables, root_rank=0)


class TensorFlowState(_VariablesState):
    """A list of tf.Variables plus plain values given as keyword arguments."""

    def __init__(self, variables: Any = None, session: Any = None, **kwargs: Any) -> None:
        if session is not None:
            raise DDLInputError("hvd.elastic.TensorFlowState: TensorFlow 1 sessions are not supported; pass the "
                                "variables of an eager TensorFlow 2 program")
        if variables is None:
            raise DDLInputError("hvd.elastic.TensorFlowState: TensorFlow 2 has no global variable collection; "
                                "pass variables=[...] (e.g. model.variables)")
        self.variables = list(variables)
        self.session = None
        super().__init__(**kwargs)

    def _tracked(self) -> List[Any]:
        return self.variables


class TensorFlowKerasState(_VariablesState, ModelState):
    """A built Keras model and its optimizer (Keras 3), plus plain values."""

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None, **kwargs: Any) -> None:
        super().__init__(model=model, optimizer=optimizer, backend=backend, who=type(self).__name__, **kwargs)


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Horovod's ``hvd.elastic.run`` (see horovod.torch.elastic.run)."""
    return run_fn(func, _reset)


def _reset() -> None:
    """The ranks never change here: nothing to re-initialize."""
