"""Horovod's Keras callbacks on Keras 3, for any Keras backend (TensorFlow, torch).

``horovod.keras.callbacks`` and ``horovod.tensorflow.keras.callbacks`` are this module.
Keras 3 differs from the tf.keras Horovod wrapped: the learning rate is a Variable, optimizer
state is built lazily on the first step, ``optimizer.variables`` is a list (not a method), and
SGD's / RMSprop's ``momentum`` is a plain float baked into the compiled step.  So:

- :class:`BroadcastGlobalVariablesCallback` broadcasts the root's model variables when training
  starts and, as Horovod does, model *and* optimizer variables again after the first batch
  (the optimizer state exists by then); ``local_variables`` and their optimizer slots stay
  rank-local.  On TensorFlow it and MetricAverageCallback turn XLA
  off for the train step when Keras compiled it with ``jit_compile`` (one notice line).
- :class:`MetricAverageCallback` replaces each epoch's numeric metrics by their mean over ranks.
- :class:`LearningRateScheduleCallback` / :class:`LearningRateWarmupCallback` set
  ``optimizer.learning_rate`` (a Variable, so a compiled step sees it).  Horovod's momentum
  correction multiplies the momentum by new_lr / old_lr for one batch; Keras 3 keeps the
  velocity with the learning rate folded in, so scaling the optimizer's momentum buffers by
  new_lr / old_lr before the batch has exactly that effect, and works inside a compiled step.
- :class:`WalltimeCheckpointCallback` (not Horovod's; ddl_runtime.keras.WalltimeCheckpoint):
  training that outlives a job's walltime (``wml submit --chain``): restores at train begin,
  saves and exits 75 when the ranks agree to stop.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np

import keras

import ddl_runtime as _ddl
from ddl_runtime.errors import DDLInputError
from ddl_runtime.checkpoint.keras import WalltimeCheckpoint as WalltimeCheckpointCallback  # noqa: F401
from ddl_runtime.keras import StepBoundary, _prepare_tf_train_step, broadcast_variables as _broadcast_variables

__all__ = [
    "BroadcastGlobalVariablesCallback",
    "MetricAverageCallback",
    "LearningRateScheduleCallback",
    "LearningRateWarmupCallback",
    "WalltimeCheckpointCallback",
]


def _init() -> None:
    _ddl.init()


def _prepare_train_step(model: Any) -> None:
    """TensorFlow backend: no XLA for the train step (the gradient allreduce cannot run inside it;
    one notice line) and DDL errors from the step raised as themselves -- ddl_runtime.keras's own
    preparation, shared with DDLCallback."""
    if keras.backend.backend() == "tensorflow":
        _prepare_tf_train_step(model)


# --------------------------------------------------------------------------------------------
# variables (broadcast by ddl_runtime.keras.broadcast_variables: checked across ranks, any backend)


def _optimizer_variables(optimizer: Any) -> List[Any]:
    if optimizer is None or not getattr(optimizer, "built", False):
        return []
    return list(optimizer.variables)


def _as_variables(local_variables: Any) -> List[Any]:
    """Horovod's ``local_variables``: None, one variable, or a collection of variables."""
    if local_variables is None:
        return []
    kinds: tuple = (keras.Variable,)
    if "tensorflow" in sys.modules:
        kinds += (sys.modules["tensorflow"].Variable,)
    items = [local_variables] if isinstance(local_variables, kinds) else local_variables
    try:
        items = list(items)
    except TypeError:
        items = [items]
    for v in items:
        if not isinstance(v, kinds):
            raise DDLInputError(f"BroadcastGlobalVariablesCallback: local_variables must be variables "
                                f"(keras.Variable or tf.Variable), got a {type(v).__name__}")
    return items


def _slot_owner(slot: Any, prefixes: Dict[str, Any]) -> Optional[Any]:
    """The model variable an optimizer slot was made for: Keras 3 names a slot
    ``<variable path with '/' -> '_'>_<slot name>`` (longest matching path wins)."""
    name = str(getattr(slot, "name", ""))
    best = max((p for p in prefixes if name.startswith(p)), key=len, default=None)
    return prefixes[best] if best is not None else None


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcast the root's model (and optimizer) variables, so every rank starts the same.

    Horovod's semantics: needed when ranks start from different random weights or a checkpoint
    restored on the root only.  Broadcasts at the start of training and once more after the
    first batch (Keras 3 builds the optimizer's state on the first step).
    ``local_variables`` (one variable or a list; model parallelism, Horovod >= 0.27) are not
    broadcast: each rank keeps its own (their shapes may differ between ranks).  Unlike Horovod,
    which still broadcasts the optimizer's slots of a local variable (momentum, Adam's moments)
    after the first batch, those slots stay rank-local too: they belong to this rank's own
    variable.
    """

    def __init__(self, root_rank: int = 0, device: str = "", local_variables: Any = None) -> None:
        super().__init__()
        _init()
        if not isinstance(root_rank, int) or isinstance(root_rank, bool) or not 0 <= root_rank < _ddl.size():
            raise DDLInputError(f"BroadcastGlobalVariablesCallback: root_rank {root_rank!r} is not a rank "
                                f"of this job (0..{_ddl.size() - 1})")
        self.root_rank = root_rank
        self.device = device  # accepted for Horovod compatibility; variables stay where Keras put them
        self.broadcast_done = False
        self._steps = StepBoundary()   # its batch ends are the steps of this rank's record
        self._local: Dict[int, Any] = {}
        for v in _as_variables(local_variables):
            self.register_local_var(v)

    def register_local_var(self, var: Any) -> None:
        """Horovod's API: ``var`` (and its optimizer slots) is not broadcast."""
        self._local[id(var)] = var

    def _shared(self, variables: List[Any]) -> List[Any]:
        return [v for v in variables if id(v) not in self._local]

    def _shared_optimizer_variables(self) -> List[Any]:
        opt_vars = _optimizer_variables(self.model.optimizer)
        if not self._local:
            return opt_vars
        prefixes = {str(v.path).replace("/", "_") + "_": v for v in self.model.trainable_variables}
        return [s for s in self._shared(opt_vars) if id(_slot_owner(s, prefixes)) not in self._local]

    def _broadcast(self, with_optimizer: bool) -> None:
        _broadcast_variables(self._shared(self.model.variables), self.root_rank, "model variable")
        if with_optimizer:
            opt_vars = self._shared_optimizer_variables()
            if opt_vars:
                _broadcast_variables(opt_vars, self.root_rank, "optimizer variable")

    def on_train_begin(self, logs=None):
        _prepare_train_step(self.model)
        self._broadcast(with_optimizer=True)
        self._steps.begin(self.model)

    def on_train_batch_end(self, batch, logs=None):
        self._steps.batch_end()
        if not self.broadcast_done:
            self._broadcast(with_optimizer=True)
            self.broadcast_done = True

    def on_train_end(self, logs=None):
        self._steps.end()


# --------------------------------------------------------------------------------------------
# metrics


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float, np.integer, np.floating)):
        return True
    return getattr(v, "shape", None) == () or getattr(v, "ndim", None) == 0


class MetricAverageCallback(keras.callbacks.Callback):
    """Replace every numeric metric of the epoch by its mean over all ranks.

    Put it before callbacks that read metrics (ReduceLROnPlateau, EarlyStopping, checkpoints,
    TensorBoard): they then see the global figures, as does History.
    """

    def __init__(self, device: str = "") -> None:
        super().__init__()
        _init()
        self.device = device
        self._steps = StepBoundary()   # its batch ends are the steps of this rank's record

    def _average_metrics_in_place(self, logs: Optional[Dict[str, Any]]) -> None:
        if not logs or _ddl.size() == 1:
            return
        keys = sorted(k for k, v in logs.items() if _is_number(v))
        if not keys:
            return
        values = np.array([float(np.asarray(keras.ops.convert_to_numpy(logs[k]))) for k in keys], dtype=np.float64)
        _ddl.allreduce_n([values], op="avg", names=["metrics:" + ",".join(keys)])
        for k, v in zip(keys, values):
            logs[k] = float(v)

    def on_train_begin(self, logs=None):
        _prepare_train_step(self.model)
        self._steps.begin(self.model)

    def on_train_batch_end(self, batch, logs=None):
        self._steps.batch_end()

    def on_train_end(self, logs=None):
        self._steps.end()

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs)


# --------------------------------------------------------------------------------------------
# learning rate


def _get_lr(optimizer: Any) -> float:
    return float(np.asarray(keras.ops.convert_to_numpy(optimizer.learning_rate)))


def _lr_variable(optimizer: Any, who: str) -> Any:
    lr = getattr(optimizer, "_learning_rate", None)
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule) or callable(lr) and not hasattr(lr, "assign"):
        raise DDLInputError(f"{who}: the optimizer's learning rate is a schedule ({type(lr).__name__}); "
                            f"the callback needs a float learning rate to set")
    return lr


def _momentum_buffers(optimizer: Any) -> Optional[List[Any]]:
    for attr in ("momentums", "_momentums"):
        bufs = getattr(optimizer, attr, None)
        if isinstance(bufs, (list, tuple)):
            return list(bufs)
    return None


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Set the learning rate to ``initial_lr * multiplier(epoch)`` from ``start_epoch`` to ``end_epoch``.

    ``multiplier`` is a number (exponential decay: ``multiplier ** (epoch - start_epoch)``) or a
    function of the epoch.  ``staircase=True`` sets it at the start of each epoch; otherwise at
    every batch with a fractional epoch (``steps_per_epoch`` is taken from ``fit`` when not given).
    ``momentum_correction`` (Goyal et al., 2017) compensates a momentum optimizer for the change.
    """

    def __init__(self, initial_lr: float, multiplier: Union[float, Callable[[float], float]], start_epoch: int = 0,
                 end_epoch: Optional[int] = None, staircase: bool = True, momentum_correction: bool = True,
                 steps_per_epoch: Optional[int] = None) -> None:
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = float(initial_lr)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch: Optional[int] = None
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            factor = float(multiplier)
            self.multiplier = lambda epoch: factor ** (epoch - start_epoch)

    def _steps_per_epoch(self) -> int:
        params = self.params or {}
        if params.get("steps"):
            return int(params["steps"])
        if params.get("samples") and params.get("batch_size"):
            return int(params["samples"]) // int(params["batch_size"])
        raise ValueError(f"{type(self).__name__}: cannot tell the number of steps per epoch "
                         f"(fit was given a dataset of unknown length); pass steps_per_epoch=")

    def _set_lr(self, epoch: float) -> None:
        optimizer = self.model.optimizer
        _lr_variable(optimizer, type(self).__name__)
        old_lr = _get_lr(optimizer)
        new_lr = self.initial_lr * float(self.multiplier(epoch))
        optimizer.learning_rate = new_lr
        if self.momentum_correction and old_lr > 0 and new_lr != old_lr and getattr(optimizer, "momentum", 0):
            bufs = _momentum_buffers(optimizer)
            if bufs:
                ratio = new_lr / old_lr
                for b in bufs:
                    b.assign(b * ratio)

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def _in_scope(self) -> bool:
        e = self.current_epoch
        return e is not None and e >= self.start_epoch and (self.end_epoch is None or e < self.end_epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if not self._in_scope():
            return
        if self.staircase:
            if batch == 0:
                self._set_lr(self.current_epoch)
        else:
            self._set_lr(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramp the learning rate from ``initial_lr / size()`` to ``initial_lr`` over ``warmup_epochs``.

    Goyal et al., 2017: starting straight at the scaled rate ``lr * size()`` hurts accuracy; the
    rate grows linearly per batch and reaches ``initial_lr`` at the end of the last warmup epoch.
    """

    def __init__(self, initial_lr: float, warmup_epochs: int = 5, momentum_correction: bool = True,
                 steps_per_epoch: Optional[int] = None, verbose: int = 0) -> None:
        _init()
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

        def multiplier(epoch: float) -> float:
            # counted at the end of the batch, so the last warmup batch lands on exactly 1.0
            epoch += 1.0 / self.steps_per_epoch
            n = _ddl.size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and _ddl.rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {_get_lr(self.model.optimizer):g}.",
                  file=sys.stdout, flush=True)
