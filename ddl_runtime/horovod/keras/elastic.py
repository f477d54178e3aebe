"""``horovod.keras.elastic`` and ``horovod.tensorflow.keras.elastic`` on Keras 3 (any backend):
KerasState, the three state callbacks, and ``run``.

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, steps_per_epoch=steps, epochs=epochs - state.epoch, callbacks=[
            hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state),
            hvd.elastic.CommitStateCallback(state, batches_per_commit=10)])

As Horovod's (horovod/_keras/elastic.py): CommitStateCallback commits every
``batches_per_commit`` batches and at each epoch's end; UpdateBatchStateCallback keeps
``state.batch`` (0 after an epoch) and shortens the first epoch after a restore by the batches
already done; UpdateEpochStateCallback keeps ``state.epoch`` (epochs done, counted across
restores).  Keras 3 reads ``params['steps']`` for the progress bar only, so the shortened epoch
is ended by setting ``model.stop_training`` after its last batch and clearing it again at the
epoch's end.  See ddl_runtime/horovod/common/elastic.py: no workers come or go here.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import keras

import ddl_runtime as _ddl
from ddl_runtime import keras as _ddl_keras

from ..common.basics import rank
from ..common.elastic import ModelState, ObjectState, State, run_fn  # noqa: F401

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run",
           "State", "ObjectState"]


class KerasState(ModelState):
    """A built Keras 3 model and its optimizer (default: the compiled one), plus plain values
    (``batch=0, epoch=0``) exposed as attributes."""

    def __init__(self, model: Any, optimizer: Any = None, **kwargs: Any) -> None:
        super().__init__(model, optimizer, keras.backend, "KerasState", bcast_object=_bcast_object,
                         get_rank=rank, **kwargs)

    def _broadcast(self, variables) -> None:
        _ddl_keras.broadcast_variables(variables, root_rank=0, what="KerasState variable")


def _bcast_object(obj: Any) -> Any:
    return _ddl.bcast_object(obj, root=0)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits `state` every `batches_per_commit` batches and at the end of each epoch."""

    def __init__(self, state: State, batches_per_commit: int = 1) -> None:
        super().__init__()
        self.backend = keras.backend
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit  # the same count on every rank after a sync

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.commit()

    def commit(self) -> None:
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` at the last finished batch of the epoch (0 after an epoch); with a known
    number of steps, the first epoch after a restore runs only the batches not yet done."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.backend = keras.backend
        self.state = state
        self.steps_per_epoch: Optional[int] = None
        self._last_batch: Optional[int] = None  # of a shortened epoch
        self._stopped = False

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self._last_batch = None
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params["steps"]
            self.params["steps"] = self.steps_per_epoch - self.state.batch
            if self.state.batch:
                self._last_batch = self.params["steps"] - 1

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = batch
        if self._last_batch is not None and batch >= self._last_batch:
            self.model.stop_training = True  # Keras 3: ends this epoch's loop (cleared at the epoch's end)
            self._stopped = True

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0
        if self._stopped:
            self.model.stop_training = False
            self._stopped = False


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch`` at the number of epochs done, counted across restores."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.backend = keras.backend
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Horovod's ``hvd.elastic.run``: sync, call, and on HorovodInternalError restore the last commit and retry."""
    return run_fn(func, lambda: None)
