"""``horovod.tensorflow.elastic`` (``hvd.elastic``): TensorFlowState, TensorFlowKerasState, ``run``.

TensorFlow 2 eager only (as Horovod's TF2 support): variables are tracked as numpy copies.  See
ddl_runtime/horovod/common/elastic.py: no workers come or go here; in a chained wml job
``commit()`` is the step boundary (save and exit 75 on a stop).
"""
from __future__ import annotations

import abc

from typing import Any, Callable, Dict, List

from ddl_runtime.errors import DDLInputError

from ..common.basics import rank
from ..common.elastic import ObjectState, State, run_fn  # noqa: F401
from .functions import broadcast_object, broadcast_variables

__all__ = ["State", "ObjectState", "TensorFlowState", "TensorFlowKerasState", "run"]


class _VariablesState(ObjectState):
    """Tracks a list of variables (numpy copies) beside plain values."""

    def __init__(self, **kwargs: Any) -> None:
        self._save_variables()
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    @abc.abstractmethod
    def _tracked(self) -> List[Any]:
        """The variables this state tracks."""

    def _save_variables(self) -> None:
        self._values = [v.numpy() for v in self._tracked()]

    def save(self) -> None:
        self._save_variables()
        super().save()

    def restore(self) -> None:
        for var, value in zip(self._tracked(), self._values):
            var.assign(value)
        super().restore()

    def sync(self) -> None:
        tracked = self._tracked()
        if tracked:
            broadcast_variables(tracked, root_rank=0)
        self._save_variables()
        super().sync()

    def persisted(self) -> Dict[str, Any]:
        return {**super().persisted(), "variables": list(self._values)}

    def load_persisted(self, saved: Dict[str, Any]) -> None:
        tracked = self._tracked()
        if len(saved["variables"]) != len(tracked):
            raise DDLInputError(f"hvd.elastic: the checkpoint holds {len(saved['variables'])} variables, this "
                                f"state tracks {len(tracked)}")
        self._values = list(saved["variables"])
        for var, value in zip(tracked, self._values):
            var.assign(value)
        super().load_persisted(saved)


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


class TensorFlowKerasState(_VariablesState):
    """A built Keras model and its optimizer (Keras 3), plus plain values."""

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None, **kwargs: Any) -> None:
        if not getattr(model, "built", True):
            raise DDLInputError("hvd.elastic.TensorFlowKerasState: build the model first (model.build(input_shape))")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend
        super().__init__(**kwargs)

    def _tracked(self) -> List[Any]:
        opt = list(self.optimizer.variables) if self.optimizer is not None else []
        return list(self.model.variables) + opt


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Horovod's ``hvd.elastic.run`` (see horovod.torch.elastic.run)."""
    return run_fn(func, _reset)


def _reset() -> None:
    """The ranks never change here: nothing to re-initialize."""
